"""Factories as users write them: autocast opened inside loss_fn on the batch's device or on "cuda" is priced
at bf16 on a CPU-only machine (ddpsim/workload/torch_autocast.py), never refused, never silently fp32."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from ddpsim.workload.torch_import import import_torch_model  # noqa: E402
from ddpsim.workload.torch_import_memory import torch_version_ok  # noqa: E402

D_IN, D_HID, CLASSES, BATCH = 256, 1024, 10, 4096

FACTORY = f'''
import torch, torch.nn as nn, torch.nn.functional as F


def _build(device_type):
    model = nn.Sequential(nn.Linear({D_IN}, {D_HID}), nn.GELU(), nn.Linear({D_HID}, {D_IN}), nn.GELU(),
                          nn.Linear({D_IN}, {CLASSES}))

    def make_batch(batch_size, device, seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(batch_size, {D_IN}, generator=g).to(device),
                torch.randint(0, {CLASSES}, (batch_size,), generator=g).to(device))

    def loss_fn(m, batch):
        x, y = batch
        with torch.autocast(device_type=device_type or x.device.type, dtype=torch.bfloat16):
            out = m(x)
        return F.cross_entropy(out.float(), y)

    return model, make_batch, loss_fn


def on_batch_device():
    return _build(None)


def on_cuda():
    return _build("cuda")


def plain():
    model, make_batch, _ = _build(None)
    return model, make_batch
'''


def _saved_bytes(elt: int) -> float:
    """What the model's forward leaves alive, by hand: each Linear's input (at bf16 autocast's 16-bit cast of it,
    made in forward; in fp32 the first is the batch itself, which the step did not create), each GELU's input,
    the output, and at bf16 the cached 16-bit copies of the three weights (biases are added in the matmul)."""
    rows = BATCH
    inputs = rows * ((D_IN if elt == 2 else 0) + D_HID + D_IN)  # linear 1, 2, 3
    gelu = rows * (D_HID + D_IN)
    output = rows * CLASSES
    weights = (D_IN * D_HID + D_HID * D_IN + D_IN * CLASSES) if elt == 2 else 0
    return float((inputs + gelu + output) * elt + 2 * weights)


@pytest.fixture
def factory(tmp_path, monkeypatch):
    (tmp_path / "amp_net.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("amp_net", None)
    yield "amp_net"
    sys.modules.pop("amp_net", None)


@pytest.mark.skipif(not torch_version_ok(torch)[0], reason="MemTracker is used on the tested torch versions only")
@pytest.mark.parametrize("name", ["on_batch_device", "on_cuda"])
@pytest.mark.parametrize("precision", ["bf16-amp", "fp32"])
def test_autocast_inside_loss_fn_is_priced_at_bf16(factory, name, precision):
    """Whatever workload.precision says, the user's own autocast is what the step runs."""
    assert not torch.cuda.is_available()  # the case at hand: a CPU-only machine
    w = import_torch_model(f"{factory}:{name}", BATCH, precision, None, "adamw")
    assert "MemTracker" in w.activation_source
    assert w.activation_bytes == pytest.approx(_saved_bytes(2), rel=0.005)


@pytest.mark.skipif(not torch_version_ok(torch)[0], reason="MemTracker is used on the tested torch versions only")
def test_the_same_model_without_autocast_keeps_fp32_activations(factory):
    w = import_torch_model(f"{factory}:plain", BATCH, "fp32", None, "adamw")
    assert w.activation_bytes == pytest.approx(_saved_bytes(4), rel=0.005)


def test_autocast_on_cpu_restores_torch_autocast(factory):
    from ddpsim.workload.torch_autocast import autocast_on_cpu

    before = torch.amp.autocast_mode.autocast.__init__
    with autocast_on_cpu(torch) as mapped:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert torch.is_autocast_enabled("cpu")
            assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert mapped == ["cuda"]
    assert torch.amp.autocast_mode.autocast.__init__ is before
    with pytest.raises(RuntimeError, match="meta"):
        with torch.autocast("meta", dtype=torch.bfloat16):
            pass


MOE = '''
import torch, torch.nn as nn


class MoE(nn.Module):
    def __init__(self, d=32, experts=4):
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(experts))

    def forward(self, x):
        choice = self.router(x).argmax(-1)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            rows = torch.nonzero(choice == i).squeeze(-1)  # how many rows: known from the data only
            out[rows] = expert(x[rows])
        return out


def build():
    def make_batch(batch_size, device, seed):
        return torch.randn(batch_size, 32).to(device), torch.randn(batch_size, 32).to(device)
    return nn.Sequential(nn.Linear(32, 32), MoE()), make_batch
'''


def test_a_data_dependent_route_fails_in_one_line_naming_the_op_and_the_way_out(tmp_path, monkeypatch, capsys):
    from ddpsim.cli import main

    (tmp_path / "user_moe.py").write_text(MOE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("user_moe", None)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("workload: {model: 'torch:user_moe:build', batch_size: 8, precision: bf16-amp}\n"
                        "cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}\n")
    assert main(["run", str(scenario)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "torch.nonzero" in err and "profile:" in err and "ddpsim measure --model user_moe:build" in err
    sys.modules.pop("user_moe", None)
