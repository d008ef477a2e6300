"""Activation checkpointing as PyTorch runs it (torch.utils.checkpoint, non-reentrant, per block), tracked by
PyTorch's MemTracker over the step on fake tensors, against the same tracker over real tensors on the CPU and
against a closed form of what each block keeps."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ddpsim.workload.torch_import_memory import step_memory, torch_version_ok  # noqa: E402

pytestmark = pytest.mark.skipif(not torch_version_ok(torch)[0], reason="MemTracker: tested torch versions only")

ROWS, D, BLOCKS, CLASSES = 512, 256, 4, 10


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(D)
        self.fc1, self.fc2 = torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Linear(32, D)
        self.layers = torch.nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = torch.nn.Linear(D, CLASSES)

    def forward(self, x):
        h = self.stem(x)
        for block in self.layers:
            h = block(h)
        return self.head(h)


def _build():
    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(ROWS, 32), torch.randint(0, CLASSES, (ROWS,))
    return model, lambda m: torch.nn.functional.cross_entropy(m(x), y)


CHECKPOINTED = tuple(f"layers.{i}" for i in range(BLOCKS))


def _real_peak() -> float:
    """The same two steps on real CPU tensors under MemTracker, every block wrapped by torch.utils.checkpoint."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.utils.checkpoint import checkpoint

    model, loss_of = _build()
    for block in model.layers:
        forward = block.forward
        block.forward = lambda *a, f=forward: checkpoint(f, *a, use_reentrant=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        for step in range(2):
            loss_of(model).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step == 0:
                tracker.reset_mod_stats()  # MemTracker's module figures are per iteration
    return float(tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"])


def test_the_checkpointed_step_on_fake_tensors_peaks_as_on_real_ones():
    fake = step_memory(torch, _build, "fp32", "adamw", [], CHECKPOINTED).peak.peak_bytes
    assert fake == pytest.approx(_real_peak(), rel=0.02)


def test_checkpointing_every_block_frees_what_three_blocks_keep():
    """A plain step peaks at the start of backward, holding every block's saved tensors. Checkpointed, each block
    keeps its input only; the last block's are made again for its backward, and the step peaks inside that backward,
    where the gradients of fc1's output and of GELU's output (4 d + 4 d floats per row) live beside them. So the peak
    falls by what the other three blocks keep beyond their input (the LayerNorm's output, fc1's and GELU's outputs:
    9 d floats per row each), less that one block's backward temporaries: the recompute's peak inside one block."""
    plain = step_memory(torch, _build, "fp32", "adamw", []).peak.backward_parts
    checkpointed = step_memory(torch, _build, "fp32", "adamw", [], CHECKPOINTED).peak.backward_parts
    assert plain is not None and checkpointed is not None
    saved_beyond_input = 4 * ROWS * (D + 4 * D + 4 * D)
    block_backward_temporaries = 4 * ROWS * (4 * D + 4 * D)
    drop = sum(plain.values()) - sum(checkpointed.values())
    assert drop == pytest.approx((BLOCKS - 1) * saved_beyond_input - block_backward_temporaries, rel=0.10)


def test_a_torch_scenario_with_checkpointing_takes_the_tracked_checkpointed_step(tmp_path, monkeypatch):
    from ddpsim.loader import scenario_from_dict
    from ddpsim.simulation import simulate

    (tmp_path / "ckpt_net.py").write_text(
        "import torch\nfrom tests.test_checkpointing_tracked import Net, ROWS, CLASSES\n\n\n"
        "def build():\n    def make_batch(b, device, seed):\n"
        "        return torch.randn(b, 32).to(device), torch.randint(0, CLASSES, (b,)).to(device)\n"
        "    return Net(), make_batch\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def run(checkpointing):
        return simulate(scenario_from_dict({
            "workload": {"model": "torch:ckpt_net:build", "batch_size": ROWS, "precision": "fp32",
                         "optimizer": "adamw", "activation_checkpointing": checkpointing},
            "cluster": {"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": 1},
            "ddp": {"gradient_as_bucket_view": True}, "simulation": {"mode": "fast", "iterations": 1}}))

    plain, full = run("none"), run("full")
    assert "torch.utils.checkpoint" in full.value_sources["memory"]
    tracked = step_memory(torch, _build, "fp32", "adamw", [], CHECKPOINTED).peak
    # world size 1 with gradient_as_bucket_view: the tracked step's own peak, nothing added
    assert full.memory_bytes["total"] == pytest.approx(tracked.peak_bytes, rel=0.02)
    assert full.memory_bytes["total"] < plain.memory_bytes["total"]
