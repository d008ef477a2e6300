"""PyTorch's MemTracker through ddpsim (torch on the CPU), and one factory file of the user's own through
`ddpsim measure` (a CPU dry run), the trace capture and a scenario's torch:, profile: and trace: workloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from ddpsim.loader import scenario_from_dict  # noqa: E402
from ddpsim.simulation import simulate  # noqa: E402
from ddpsim.workload.torch_import import import_torch_model  # noqa: E402
from ddpsim.workload.torch_import_memory import step_memory, torch_version_ok  # noqa: E402

FACTORY = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self, d=64, classes=10):
        super().__init__()
        self.inp = nn.Linear(32, d)
        self.layers = nn.ModuleList(Block(d) for _ in range(3))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.inp(x)
        for block in self.layers:
            h = block(h)
        return self.head(h)


def make_batch(batch_size, device, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, 32, generator=g).to(device)
    return x, torch.randint(0, 10, (batch_size,), generator=g).to(device)


def build():
    return Net(), make_batch
'''


@pytest.fixture
def factory_file(tmp_path, monkeypatch):
    """The user's file, outside the repository."""
    (tmp_path / "user_net.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("user_net", None)
    yield tmp_path
    sys.modules.pop("user_net", None)


def _real_saved_and_output_bytes(model, x):
    """Real torch on the CPU: the unique storages autograd saves (parameters aside) plus the output's."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    seen[out.untyped_storage().data_ptr()] = out.untyped_storage().nbytes()
    return sum(seen.values())


@pytest.mark.skipif(not torch_version_ok(torch)[0], reason="MemTracker is used on the tested torch versions only")
def test_memtracker_activations_match_what_autograd_saves(factory_file):
    import user_net

    batch_size = 64
    model = user_net.Net()
    x, _y = user_net.make_batch(batch_size, "cpu", 0)
    expected = _real_saved_and_output_bytes(model, x)
    n = sum(p.numel() for p in model.parameters())

    def build():
        net = user_net.Net()
        xb = torch.randn(batch_size, 32)
        return net, lambda m: m(xb).pow(2).mean()

    estimate = step_memory(torch, build, "fp32", "adamw", ["layers.0", "layers.1"])
    assert estimate.activation_bytes == pytest.approx(expected, rel=0.02)
    assert estimate.peak.parts["parameters"] == 4 * n
    assert estimate.peak.peak_bytes == pytest.approx(sum(estimate.peak.parts.values()))
    # every block keeps the same: its input to the norm, the norm's, fc1's and gelu's outputs
    assert estimate.activation_bytes_by_layer["layers.0"] == pytest.approx(
        estimate.activation_bytes_by_layer["layers.1"])


@pytest.mark.skipif(not torch_version_ok(torch)[0], reason="MemTracker is used on the tested torch versions only")
def test_a_torch_scenario_uses_memtracker_and_adds_ddps_buckets(factory_file):
    w = import_torch_model("user_net:build", 64, "fp32", None, "adamw")
    assert w.peak_memory is not None and "MemTracker" in w.activation_source
    scenario = {"workload": {"model": "torch:user_net:build", "batch_size": 64, "optimizer": "adamw"},
                "cluster": {"gpu": "H200", "nodes": 1, "gpus_per_node": 1}, "simulation": {"iterations": 1}}
    result = simulate(scenario_from_dict(scenario, base_dir=str(factory_file)))
    assert result.memory_bytes["ddp_buckets"] == 4 * w.n_params
    assert "MemTracker" in result.value_sources["memory"]


def test_one_factory_file_through_measure_the_trace_capture_and_a_scenario(factory_file, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(factory_file), os.environ.get("PYTHONPATH", "")]))
    spec = "user_net:build@batch=8"
    trace = tmp_path / "step.json"
    # the trace capture runs beside the measurement (neither reads the other's output): most of the
    # measurement's time is its launches starting up, so the two together take about as long as it alone
    tracing = subprocess.Popen([sys.executable, "-m", "ddpsim.measure.trace", "--model", spec, "--out", str(trace),
                                "--device", "cpu", "--steps", "2", "--warmup", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        measured = subprocess.run([sys.executable, "-m", "ddpsim.measure", "--out", str(tmp_path / "m"),
                                   "--cpu-slots", "2", "--link-classes", "socket", "--plan", "quick", "--model", spec,
                                   "--budget", "300s"], capture_output=True, text=True, timeout=600, env=env)
        _, trace_err = tracing.communicate(timeout=600)
    finally:
        if tracing.poll() is None:
            tracing.kill()
            tracing.wait()
    assert measured.returncode == 0, measured.stdout[-2000:] + measured.stderr[-2000:]
    profile = next((tmp_path / "m" / "profiles").glob("*.json"))
    assert tracing.returncode == 0, trace_err[-2000:]
    n_params = sum(p.numel() for p in __import__("user_net").Net().parameters())
    for model in ("torch:user_net:build", f"profile:{profile}", f"trace:{trace}@cpu"):
        scenario = {"workload": {"model": model, "batch_size": 8},
                    "cluster": {"gpu": "H200", "nodes": 1, "gpus_per_node": 1}, "simulation": {"iterations": 1}}
        result = simulate(scenario_from_dict(scenario, base_dir=str(factory_file)))
        assert result.memory_bytes["ddp_buckets"] == 4 * n_params, model
        record = json.loads(profile.read_text())
        assert sum(p["numel"] for p in record["params"]) == n_params


TWO_INPUTS = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 4)
        self.b = nn.Embedding(100, 4)

    def forward(self, dense, ids):
        return self.a(dense) + self.b(ids).sum(1)


def build():
    def make_batch(batch_size, device, seed):
        g = torch.Generator().manual_seed(seed)
        dense = torch.randn(batch_size, 8, generator=g).to(device)
        return dense, torch.randint(0, 100, (batch_size, 3), generator=g).to(device), torch.randn(batch_size, 4).to(device)

    def loss_fn(model, batch):
        dense, ids, target = batch
        return F.mse_loss(model(dense, ids), target)

    return Pair(), make_batch, loss_fn
'''


def test_a_factorys_loss_fn_gives_the_models_inputs(tmp_path, monkeypatch):
    (tmp_path / "pair_net.py").write_text(TWO_INPUTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("pair_net", None)
    w = import_torch_model("pair_net:build", 16, "fp32")
    assert w.n_params == 8 * 4 + 4 + 100 * 4
    # the linear's forward: 2 x batch x in x out FLOPs, on the batch the loss function passed
    assert sum(layer.forward_flops for layer in w.layers if layer.name == "a") == 2 * 16 * 8 * 4
    sys.modules.pop("pair_net", None)


@pytest.mark.skipif(not torch_version_ok(torch)[0], reason="MemTracker is used on the tested torch versions only")
def test_the_zoos_gpt2_activations_agree_with_memtracker_on_the_harness_model():
    from ddpsim.workload.zoo import zoo_workload

    tracked = import_torch_model("ddpsim.measure.models:gpt2_124m", 2, "fp32", 128, "adamw")
    counted = zoo_workload("gpt2-124m", 2, "fp32", 128)
    assert "MemTracker" in tracked.activation_source
    assert counted.activation_bytes == pytest.approx(tracked.activation_bytes, rel=0.10)


@pytest.mark.skipif(not torch_version_ok(torch)[0], reason="MemTracker is used on the tested torch versions only")
def test_attention_dropout_is_tracked_as_cudas_fused_kernels_keep_it_no_mask():
    class Attention(torch.nn.Module):
        def __init__(self, dropout):
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(64, 4, dropout=dropout, batch_first=True)

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]

    x = torch.randn(8, 256, 64)
    # real torch, no dropout: the fused path, which saves no attention matrix (as CUDA's kernels with dropout)
    expected = _real_saved_and_output_bytes(Attention(0.0), x)

    def build():
        xb = torch.randn(8, 256, 64)
        return Attention(0.1), lambda m: m(xb).pow(2).mean()

    estimate = step_memory(torch, build, "fp32", "sgd", [])
    assert estimate.activation_bytes == pytest.approx(expected, rel=0.05)
