"""GPU catalog and the compute model against closed forms on hand-made workloads."""

from __future__ import annotations

import pytest

from ddpsim.errors import ScenarioError
from ddpsim.hardware.catalog import GPUS, get_gpu
from ddpsim.hardware.compute import StepCompute, memory_per_gpu, optimizer_s, step_compute
from ddpsim.workload.model import Layer, MeasuredTimes, ParamTensor, Workload
from ddpsim.workload.zoo import zoo_workload

H100 = get_gpu("H100-SXM")


def one_layer(flops: float, n_bytes: float, kernels: int = 1, precision: str = "fp32", kind: str = "matmul") -> Workload:
    layer = Layer("lin", (ParamTensor("lin.weight", 1000), ParamTensor("lin.bias", 10)), forward_flops=flops,
                  backward_flops=2 * flops, forward_bytes=n_bytes, backward_bytes=2 * n_bytes, kernels=kernels,
                  kind=kind)
    return Workload("toy", (layer,), batch_size=1, precision=precision)


def test_catalog_has_the_datasheet_gpus_and_aliases():
    for name in ("V100", "A100", "H100", "H200", "B200"):
        assert name in GPUS
    assert get_gpu("h100_sxm") is GPUS["H100"] and get_gpu("A100-80GB") is GPUS["A100"]
    assert GPUS["H100"].peak_flops_per_s["bf16"] == pytest.approx(989.4e12)
    assert GPUS["H200"].memory_bandwidth_Bps == 4.8e12


def test_unknown_gpu_suggests_nearest():
    with pytest.raises(ScenarioError, match="did you mean 'H100'") as err:
        get_gpu("H10")
    assert err.value.field == "cluster.gpu"


def test_compute_bound_layer_is_exact():
    flops = 1e12
    sc = step_compute(one_layer(flops, 1.0), H100, efficiency=0.5, optimizer="none")
    expected_fwd = flops / (67e12 * 0.5) + 1 * H100.kernel_launch_s
    expected_bwd = 2 * flops / (67e12 * 0.5) + 2 * H100.kernel_launch_s
    assert sc.forward_s == pytest.approx(expected_fwd, rel=1e-12)
    assert sc.backward_segments == ((pytest.approx(expected_bwd, rel=1e-12), (1, 0)),)
    assert sc.ready_order == (1, 0) and sc.optimizer_s == 0.0


def test_memory_bound_layer_and_precision_peaks():
    sc = step_compute(one_layer(1.0, 8e9, kernels=3), H100, optimizer="none")
    bw = H100.memory_bandwidth_Bps * H100.memory_efficiency
    assert sc.forward_s == pytest.approx(8e9 / bw + 3 * H100.kernel_launch_s, rel=1e-12)
    bf16 = step_compute(one_layer(1e12, 1.0, precision="bf16-amp"), H100, efficiency=1.0, optimizer="none")
    assert bf16.forward_s == pytest.approx(1e12 / 989.4e12 + H100.kernel_launch_s, rel=1e-12)
    # fp32 convolutions run on TF32 tensor cores by default (cudnn.allow_tf32), fp32 matmuls do not
    conv = step_compute(one_layer(1e12, 1.0, kind="conv"), H100, efficiency=1.0, optimizer="none")
    assert conv.forward_s == pytest.approx(1e12 / 494.7e12 + H100.kernel_launch_s, rel=1e-12)
    strict = step_compute(one_layer(1e12, 1.0, kind="conv"), H100, efficiency=1.0, optimizer="none", cudnn_tf32=False)
    assert strict.forward_s == pytest.approx(1e12 / 67e12 + H100.kernel_launch_s, rel=1e-12)


def test_backward_runs_in_reverse_execution_order_with_paramless_layers_merged():
    layers = (
        Layer("a", (ParamTensor("a.w", 4),), forward_bytes=1e6, backward_bytes=1e6),
        Layer("act", (), forward_bytes=2e6, backward_bytes=2e6),
        Layer("b", (ParamTensor("b.w", 4), ParamTensor("b.b", 2)), forward_bytes=3e6, backward_bytes=3e6),
        Layer("loss", (), forward_bytes=4e6, backward_bytes=4e6),
    )
    w = Workload("toy", layers, batch_size=1)
    sc = step_compute(w, H100, optimizer="none")
    t = [n / (H100.memory_bandwidth_Bps * H100.memory_efficiency) + 2 * H100.kernel_launch_s
         for n in (1e6, 2e6, 3e6, 4e6)]
    assert [r for _, r in sc.backward_segments] == [(2, 1), (0,)]
    assert sc.backward_segments[0][0] == pytest.approx(t[3] + t[2])
    assert sc.backward_segments[1][0] == pytest.approx(t[1] + t[0])
    # execution order a, b, act: b's gradient is ready first, then act and a together
    swapped = Workload("toy", layers, batch_size=1, forward_order=(0, 2, 1, 3))
    sc2 = step_compute(swapped, H100, optimizer="none")
    assert sc2.ready_order == (2, 1, 0)


def test_measured_profile_segments():
    params = (ParamTensor("a.w", 10), ParamTensor("a.b", 1), ParamTensor("b.w", 10), ParamTensor("c.w", 5))
    measured = MeasuredTimes(
        forward_s=0.010, backward_s=0.030, optimizer_s=0.002,
        grad_ready_s={"c.w": 0.005, "b.w": 0.012, "a.b": 0.020, "a.w": 0.020},
        ready_order=("c.w", "b.w", "a.b", "a.w"),
    )
    w = Workload("m", (Layer("all", params),), batch_size=1, measured=measured)
    sc = step_compute(w, H100)
    assert isinstance(sc, StepCompute)
    assert sc.forward_s == 0.010 and sc.optimizer_s == 0.002
    durations = [d for d, _ in sc.backward_segments]
    assert [r for _, r in sc.backward_segments] == [(3,), (2,), (1, 0), ()]
    assert durations == pytest.approx([0.005, 0.007, 0.008, 0.010])
    assert sc.backward_s == pytest.approx(0.030)


def test_measured_segments_never_go_backwards_and_unready_params_finish_last():
    params = (ParamTensor("x", 1), ParamTensor("y", 1), ParamTensor("z", 1))
    measured = MeasuredTimes(0.0, 0.010, 0.0, {"y": 0.004, "x": 0.003}, ("y", "x"))
    sc = step_compute(Workload("m", (Layer("l", params),), 1, measured=measured), H100)
    assert sc.backward_segments == ((pytest.approx(0.004), (1, 0)), (pytest.approx(0.006), (2,)))


def test_optimizer_closed_form():
    w = one_layer(1.0, 1.0)
    bw = H100.memory_bandwidth_Bps * H100.memory_efficiency
    assert optimizer_s(w, H100, "sgd-fused") == pytest.approx(5 * 4 * 1010 / bw + H100.kernel_launch_s)
    assert optimizer_s(w, H100, "adam-fused") == pytest.approx(7 * 4 * 1010 / bw + H100.kernel_launch_s)
    with pytest.raises(ScenarioError, match="unknown optimizer"):
        optimizer_s(w, H100, "lion")


def test_memory_per_gpu():
    llama = zoo_workload("llama-7b", 1, "bf16-amp", 2048)
    mem = memory_per_gpu(llama)  # auto: AdamW for language models
    n = llama.n_params
    assert mem["parameters"] + mem["gradients"] + mem["optimizer_states"] == 16 * n  # facts §5
    assert mem["ddp_buckets"] == 4 * n
    assert mem["total"] == pytest.approx(sum(v for k, v in mem.items() if k != "total"))
    assert mem["total"] > 80e9 and mem["total"] > H100.memory_bytes
    view = memory_per_gpu(llama, gradient_as_bucket_view=True)
    assert view["ddp_buckets"] == 0 and view["total"] == mem["total"] - 4 * n
    resnet = memory_per_gpu(zoo_workload("resnet50", 64, "fp32"))  # auto: SGD momentum
    assert resnet["optimizer_states"] == 4 * 25_557_032 and resnet["total"] < H100.memory_bytes


def test_zoo_models_have_plausible_step_times():
    # Ordering sanity, not accuracy: bigger models are slower, bf16 is faster than fp32.
    g = get_gpu("A100")
    r32 = step_compute(zoo_workload("resnet50", 64, "fp32"), g)
    r16 = step_compute(zoo_workload("resnet50", 64, "bf16-amp"), g)
    assert 0 < r16.forward_s < r32.forward_s
    assert r32.backward_s > r32.forward_s
    llama = step_compute(zoo_workload("llama-7b", 1, "bf16-amp", 2048), g)
    gpt = step_compute(zoo_workload("gpt2-124m", 1, "bf16-amp", 2048 // 2), g)
    assert llama.backward_s > 10 * gpt.backward_s
    assert len(llama.ready_order) == len(set(llama.ready_order)) == 291


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ddpsim.workload.zoo import mlp_workload  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(depth=st.integers(1, 6), width=st.sampled_from([64, 512, 4096]), batch=st.integers(1, 64),
       eff=st.floats(0.05, 1.0), precision=st.sampled_from(["fp32", "bf16-amp"]))
def test_more_work_never_runs_faster(depth, width, batch, eff, precision):
    gpu = get_gpu("A100")
    base = step_compute(mlp_workload(depth, width, batch, precision), gpu, efficiency=eff)
    bigger = step_compute(mlp_workload(depth, width, batch + 1, precision), gpu, efficiency=eff)
    faster_gpu = step_compute(mlp_workload(depth, width, batch, precision), gpu, efficiency=min(1.0, eff * 1.5))
    assert bigger.forward_s >= base.forward_s and bigger.backward_s >= base.backward_s
    assert faster_gpu.forward_s <= base.forward_s and faster_gpu.backward_s <= base.backward_s
    assert len(base.ready_order) == 2 * depth and sorted(base.ready_order) == list(range(2 * depth))
    assert all(d >= 0 for d, _ in base.backward_segments)
