"""Compute priced as the GPU runs it: causal attention's skipped half, cuDNN's fused recurrent kernels, the
transposes around 16-bit NCHW convolutions, and a model whose shapes depend on its data failing in one line."""

from __future__ import annotations

import pytest

from ddpsim.errors import ScenarioError
from ddpsim.hardware.catalog import get_gpu
from ddpsim.hardware.kernel_classes import layer_seconds, load_class_fit
from ddpsim.workload.model import Layer


def _attention_model(torch, causal: bool):
    class Attn(torch.nn.Module):
        def forward(self, x):
            q = x.view(2, 8, 128, 64)  # batch 2, 8 heads, 128 tokens, head dim 64
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=causal)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(512, 512)
            self.attn = Attn()

        def forward(self, x):
            return self.attn(self.proj(x))

    return Net()


@pytest.mark.parametrize("causal", [False, True])
def test_causal_attention_counts_half_the_products(causal):
    torch = pytest.importorskip("torch")
    from ddpsim.workload.torch_import import _describe

    with torch.device("meta"):
        model = _attention_model(torch, causal)
        x = torch.zeros(2, 128, 512)
    w = _describe(torch, model, ((x,), {}), "t", "t", 2, "fp32", None, "x", "")
    attn = next(layer for layer in w.layers if layer.name == "attn")
    full = 4 * 2 * 8 * 128 * 128 * 64  # Q K^T and A V: 2 x (2 x B x H x T x T x D)
    assert attn.forward_flops == pytest.approx(full / 2 if causal else full)


def _lstm_workload(torch, layers: int, steps: int, batch: int, d: int):
    from ddpsim.workload.torch_import import _describe

    with torch.device("meta"):
        model = torch.nn.LSTM(d, d, layers, batch_first=True)
        x = torch.zeros(batch, steps, d)

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = model

        def forward(self, x):
            return self.rnn(x)[0]

    return _describe(torch, Step(), ((x,), {}), "lstm", "lstm", batch, "fp32", steps, "x", "")


def test_lstm_runs_as_cudnns_fused_kernels():
    torch = pytest.importorskip("torch")
    layers, steps, batch, d = 2, 35, 20, 256
    w = _lstm_workload(torch, layers, steps, batch, d)
    rnn = next(layer for layer in w.layers if layer.name == "rnn")
    # cuDNN per layer: one input GEMM over all steps, then per step a recurrent GEMM and a pointwise kernel
    assert rnn.kernels == layers * (1 + 2 * steps)
    # the FLOPs stay the GEMMs': per layer, step and row 2 x (4d x d) for the input and as much for h
    assert rnn.forward_flops == pytest.approx(layers * steps * batch * 2 * 2 * 4 * d * d, rel=0.02)
    # per step the pointwise kernel reads both gate sets and c and writes h and c: bytes grow with the steps,
    # far below the decomposition's dozen ops per step
    assert rnn.forward_bytes < 12 * layers * steps * batch * 4 * d * 4


def test_a_model_routing_by_data_fails_in_one_line_naming_the_op():
    torch = pytest.importorskip("torch")
    from ddpsim.workload.torch_import import _describe

    class Route(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.router = torch.nn.Linear(16, 4)

        def forward(self, x):
            chosen = torch.nonzero(self.router(x).argmax(-1) == 0).squeeze(-1)
            return x[chosen].sum()

    with torch.device("meta"):
        model = Route()
        x = torch.zeros(8, 16)
    with pytest.raises(ScenarioError) as err:
        _describe(torch, model, ((x,), {}), "moe", "moe", 8, "fp32", None, "x", "")
    text = str(err.value)
    assert "nonzero" in text and "depends on the data" in text and "\n" not in text


def test_nchw_16_bit_convolutions_pay_the_transposes_channels_last_does_not():
    fit = load_class_fit()
    gpu = get_gpu("A100")
    conv = Layer("conv", forward_flops=2e10, backward_flops=4e10, forward_bytes=5e7, backward_bytes=1e8, kernels=1,
                 kind="conv")
    nchw = layer_seconds(conv, gpu, "fp16-amp", fit, False)[2]
    nhwc = layer_seconds(conv, gpu, "fp16-amp", fit, False, channels_last=True)[2]
    # the fit's passes over the layer's bytes at the elementwise efficiency (a transpose of the input and of the
    # output reads and writes each once: near 2 passes)
    assert 1.0 < fit.nchw_transpose < 3.0
    assert nchw - nhwc == pytest.approx(fit.nchw_transpose * 5e7
                                        / (gpu.memory_bandwidth_Bps * fit.efficiency["elementwise"]))
    # fp32 (TF32) convolutions are priced alike in both layouts
    assert layer_seconds(conv, gpu, "fp32", fit, False)[2] == layer_seconds(conv, gpu, "fp32", fit, False,
                                                                             channels_last=True)[2]


@pytest.mark.parametrize("intra,expected", [("nvswitch", 1.374), ("nvlink-ring", 1.374), ("pcie", 1.282),
                                            ("shm", 1.282), ("socket", 1.024)])
def test_sharded_step_slows_compute_by_the_measured_ratio_of_its_link(intra, expected):
    from ddpsim.loader import scenario_from_dict
    from ddpsim.sharded_simulation import _compute_slowdown

    base = {"workload": {"model": "llama-7b", "batch_size": 1, "precision": "bf16-amp", "seq_len": 512},
            "parallel": {"strategy": "zero3"},
            "cluster": {"gpu": "H100", "nodes": 1, "gpus_per_node": 8, "intra_node": {"type": intra}}}
    value, source = _compute_slowdown(scenario_from_dict(base, file="<t>"))
    assert value == expected and "measured" in source
    # a scenario that sets the term keeps it
    own = dict(base, overheads={"compute_slowdown": 1.5})
    assert _compute_slowdown(scenario_from_dict(own, file="<t>"))[0] == 1.5
