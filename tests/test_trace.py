"""``model: trace:PATH``: torch.profiler traces read as the compute profile.

Real traces are taken here with torch.profiler on the CPU (no kernels: read with ``@cpu``) and checked against
the model's own parameters and the order ``register_post_accumulate_grad_hook`` fires in; the GPU reading
(kernels placed at their launches, segmented by AccumulateGrad) is checked on a hand-built trace whose
times are worked out below by hand."""
from __future__ import annotations

import gzip
import json

import pytest

from ddpsim.cli import main
from ddpsim.errors import ScenarioError
from ddpsim.scenario.schema import WorkloadSpec
from ddpsim.workload.resolve import load_workload
from ddpsim.workload.trace import load_trace, read_trace

torch = pytest.importorskip("torch")
nn = torch.nn
ProfilerActivity = torch.profiler.ProfilerActivity


def _model():
    torch.manual_seed(0)
    # LayerNorm gets its weight's gradient before its bias's, the reverse of the Linears': the ready order is
    # autograd's, not registration's reversed
    return nn.Sequential(nn.Linear(12, 24), nn.LayerNorm(24), nn.ReLU(), nn.Linear(24, 3))


def _step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def _trace(path, steps=2, record_shapes=True, step_spans=True, backward=True):
    """A user's own loop under torch.profiler: no ddpsim metadata in it."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(5, 12), torch.randint(0, 3, (5,))
    sched = torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1) if step_spans else None
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes, schedule=sched,
                                on_trace_ready=(lambda p: p.export_chrome_trace(str(path))) if step_spans else None) as p:
        for _ in range(steps + 1):
            if backward:
                _step(model, opt, x, y)
            else:
                with torch.no_grad():
                    model(x)
            p.step()
    if not step_spans:
        p.export_chrome_trace(str(path))
    return model


def _hook_order(model):
    """Parameter shapes in the order their post-accumulate-grad hooks fire: the truth for the ready order."""
    fired = []
    handles = [p.register_post_accumulate_grad_hook(lambda q: fired.append(tuple(q.shape))) for p in model.parameters()]
    _step(model, torch.optim.SGD(model.parameters(), lr=0.0), torch.randn(5, 12), torch.randint(0, 3, (5,)))
    for h in handles:
        h.remove()
    return fired


@pytest.fixture(scope="module")
def user_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "user.json"
    model = _trace(path)
    return path, model


def test_a_users_cpu_trace_gives_the_models_parameters_and_autograds_ready_order(user_trace):
    path, model = user_trace
    workload = load_trace(str(path), cpu_times=True)
    params = list(model.parameters())
    assert workload.n_params == sum(p.numel() for p in params) == 12 * 24 + 24 + 24 + 24 + 24 * 3 + 3
    assert workload.grad_bytes == sum(p.numel() * p.element_size() for p in params)
    measured = workload.measured
    assert measured is not None
    by_name = {p.name: p for p in workload.params}
    ready_shapes = [by_name[n].numel for n in measured.ready_order]
    truth = _hook_order(model)
    assert ready_shapes == [int(torch.Size(s).numel()) for s in truth]
    assert [n.split(".", 1)[1] for n in measured.ready_order] == ["x".join(map(str, s)) for s in truth]
    summary = read_trace(str(path), cpu_times=True)
    assert summary.profile["iterations"] == len(summary.steps) == 2
    assert summary.profile["batch_size"] == 5 and workload.batch_size == 5
    assert workload.precision == "fp32"
    # every gradient is ready inside its backward, and the phases add up to no more than the step
    assert all(0 <= measured.grad_ready_s[n] <= measured.backward_s for n in measured.ready_order)
    for st in summary.steps:
        assert st.forward_s > 0 and st.backward_s > 0 and st.optimizer_s > 0
        assert st.forward_s + st.backward_s + st.optimizer_s <= st.step_s * (1 + 1e-9)


def test_a_cpu_trace_needs_the_explicit_cpu_flag(user_trace, tmp_path):
    path, _ = user_trace
    with pytest.raises(ScenarioError, match="no GPU kernels.*trace:PATH@cpu"):
        load_trace(str(path))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"workload: {{model: 'trace:{path}', batch_size: 5}}\n"
                        "cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}\n")
    assert main(["run", str(scenario)]) == 2
    scenario.write_text(f"workload: {{model: 'trace:{path}@cpu', batch_size: 5}}\n"
                        "cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}\n")
    assert main(["run", str(scenario)]) == 0


def test_the_scenario_must_ask_for_the_traced_batch_and_precision(user_trace):
    path, _ = user_trace
    folder, name = str(path.parent), path.name
    w = load_workload(WorkloadSpec(model=f"trace:{name}@cpu", batch_size=5), folder)
    assert w.measured is not None and "torch.profiler trace" in w.measured.how
    with pytest.raises(ScenarioError) as err:
        load_workload(WorkloadSpec(model=f"trace:{name}@cpu", batch_size=8), folder)
    assert err.value.field == "workload.batch_size"
    with pytest.raises(ScenarioError) as err:
        load_workload(WorkloadSpec(model=f"trace:{name}@cpu", batch_size=5, precision="bf16-amp"), folder)
    assert err.value.field == "workload.precision"


def test_the_capture_script_names_parameters_and_reads_gzip(tmp_path):
    from ddpsim.measure.models import ddp_param_order, resolve
    from ddpsim.measure.trace import capture

    model_arg = "ddpsim.measure.models:example_factory@batch=6"
    path = capture(model_arg, str(tmp_path / "t.json.gz"), steps=2, warmup=1, device_name="cpu")
    with gzip.open(path, "rt") as handle:
        assert "ddpsim_capture" in json.load(handle)
    workload = load_trace(path, cpu_times=True)
    spec = resolve(model_arg)
    model = spec.build_on("cpu")
    named = ddp_param_order(model)
    assert [p.name for p in workload.params] == [n for n, _ in named]  # registration order, the model's names
    assert workload.batch_size == 6 and workload.name == model_arg
    fired: list[str] = []
    for n, p in named:
        p.register_post_accumulate_grad_hook(lambda _p, n=n: fired.append(n))
    spec.loss(model, spec.make_batch("cpu")).backward()
    assert workload.measured is not None and list(workload.measured.ready_order) == fired


def _x(name, ts, dur, tid, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _gpu_trace():
    """One step, times in microseconds. Main thread 1 launches forward kernels at 10 and 20 (running 15-40 and
    40-70); the autograd thread 2 runs backward from 100 to 210, launching at 110 (kernel 110-150) and 160
    (kernel 160-200) and an NCCL all-reduce at 170 (kernel 175-260, on its own stream); gradient A's
    AccumulateGrad ends at 145, B's at 208; the optimizer's kernel is launched at 300 (300-350)."""
    ev = [_x("ProfilerStep#7", 0, 400, 1, cat="user_annotation"),
          _x("ProfilerStep#7", 15, 335, 7, cat="gpu_user_annotation"),  # Kineto's copy on the GPU's timeline
          _x("aten::linear", 5, 30, 1, **{"Input Dims": [[4, 8], [3, 8], [3]], "Input type": ["float"] * 3}),
          _x("autograd::engine::evaluate_function: AddmmBackward0", 100, 40, 2),
          _x("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 140, 6, 2),
          _x("torch::autograd::AccumulateGrad", 141, 4, 2, **{"Input Dims": [[3, 8]], "Input type": ["float"]}),
          _x("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 205, 5, 2),
          _x("torch::autograd::AccumulateGrad", 206, 2, 2, **{"Input Dims": [[3]], "Input type": ["c10::BFloat16"]}),
          _x("Optimizer.step#SGD.step", 290, 70, 1, cat="user_annotation")]
    for corr, (launch, tid, start, end) in enumerate([(10, 1, 15, 40), (20, 1, 40, 70), (110, 2, 110, 150),
                                                      (160, 2, 160, 200), (300, 1, 300, 350)]):
        ev.append(_x("cudaLaunchKernel", launch, 2, tid, cat="cuda_runtime", correlation=corr))
        ev.append(_x("void gemm<float>", start, end - start, 7, cat="kernel", correlation=corr, stream=7))
    ev.append(_x("cudaLaunchKernel", 170, 2, 2, cat="cuda_runtime", correlation=99))
    ev.append(_x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 175, 85, 20, cat="kernel", correlation=99,
                 **{"In msg nelems": 27}))
    ev.append({"ph": "s", "id": 99, "pid": 1, "tid": 2, "ts": 170, "cat": "ac2g", "name": "ac2g"})
    return {"schemaVersion": 1, "traceEvents": ev, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}}


def test_gpu_kernels_are_segmented_at_each_accumulate_grad(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(_gpu_trace()))
    prof = read_trace(str(path)).profile
    us = 1e-6
    assert prof["forward_s"] == pytest.approx(70 * us)  # the step starts at 0, the last forward kernel ends at 70
    # backward starts when the CPU began it (100, after the forward kernels); gradient A waits for the kernel
    # launched before its AccumulateGrad ended (done at 150), B for the one launched at 160 (done at 200)
    assert prof["backward_s"] == pytest.approx(100 * us)
    by_shape = {tuple(p["shape"]): p for p in prof["params"]}
    assert by_shape[(3, 8)]["grad_ready_s"] == pytest.approx(50 * us)
    assert by_shape[(3,)]["grad_ready_s"] == pytest.approx(100 * us)
    assert by_shape[(3,)]["dtype"] == "bfloat16" and by_shape[(3, 8)]["numel"] == 24
    # the optimizer starts when backward returned on the CPU (210) and ends with its kernel at 350
    assert prof["optimizer_s"] == pytest.approx(140 * us)
    assert prof["step_s"] == pytest.approx(350 * us)
    # the all-reduce (175-260) is neither backward nor the step's end: it is the DDP check
    check = prof["ddp_check"]
    assert check["nccl_kernels_per_step"] == 1 and check["nccl_kernel_s_per_step"] == pytest.approx(85 * us)
    assert check["nccl_elements_per_step"] == 27 == check["gradient_elements"]
    assert prof["batch_size"] == 4 and prof["distributed"]["world_size"] == 2
    measured = load_trace(str(path)).measured
    assert measured is not None and "1 NCCL kernels per step took 0.085 ms (a check, not the prediction)" in measured.how


def test_the_profilers_overhead_is_removed_where_the_capture_timed_the_step_without_it(tmp_path):
    us = 1e-6
    plain = _gpu_trace()
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(plain))
    # a trace of the user's own loop: nothing to scale by, and the profile says so
    unscaled = read_trace(str(path)).profile
    assert unscaled["profiler_overhead"]["scale"] == 1.0
    assert "not measured" in unscaled["profiler_overhead"]["why"]
    # the capture timed the same steps untraced at 280 us against the traced 350 us: every time x 0.8
    captured = dict(plain, ddpsim_capture={"unprofiled_step_s": 280 * us, "unprofiled_steps": 10})
    path = tmp_path / "captured.json"
    path.write_text(json.dumps(captured))
    prof = read_trace(str(path)).profile
    assert prof["profiler_overhead"]["scale"] == pytest.approx(0.8)
    assert prof["step_s"] == pytest.approx(280 * us)
    assert prof["forward_s"] == pytest.approx(0.8 * 70 * us)
    assert prof["backward_s"] == pytest.approx(0.8 * 100 * us)
    assert prof["optimizer_s"] == pytest.approx(0.8 * 140 * us)
    by_shape = {tuple(p["shape"]): p for p in prof["params"]}
    assert by_shape[(3, 8)]["grad_ready_s"] == pytest.approx(0.8 * 50 * us)
    measured = load_trace(str(path)).measured
    assert measured is not None and "the profiler's overhead removed: x0.800" in measured.how
    # an untraced step that was not faster removes nothing
    slower = dict(plain, ddpsim_capture={"unprofiled_step_s": 400 * us, "unprofiled_steps": 10})
    path.write_text(json.dumps(slower))
    assert read_trace(str(path)).profile["step_s"] == pytest.approx(350 * us)


def test_a_kernel_without_its_launch_is_placed_by_its_cpu_ops_external_id(tmp_path):
    data = _gpu_trace()
    events = [e for e in data["traceEvents"] if e.get("cat") != "cuda_runtime"]
    for e in events:  # every kernel names the CPU op around its launch instead
        if e.get("cat") == "kernel":
            e["args"] = {"External id": 1000 + e["args"]["correlation"]}
    launches = {0: (10, 1), 1: (20, 1), 2: (110, 2), 3: (160, 2), 4: (300, 1), 99: (170, 2)}
    events += [_x("aten::mm", ts, 3, tid, **{"External id": 1000 + c}) for c, (ts, tid) in launches.items()]
    path = tmp_path / "ext.json"
    path.write_text(json.dumps({"traceEvents": events}))
    prof = read_trace(str(path)).profile
    assert prof["backward_s"] == pytest.approx(100e-6) and prof["optimizer_s"] == pytest.approx(140e-6)


@pytest.mark.parametrize("case, message", [
    ("truncated", "not valid JSON"),
    ("no_backward", "no torch::autograd::AccumulateGrad"),
    ("no_steps", "no ProfilerStep#N spans"),
    ("no_shapes", "record_shapes=True"),
])
def test_a_trace_that_cannot_give_a_profile_is_refused_in_one_line(user_trace, tmp_path, case, message):
    path = tmp_path / f"{case}.json"
    if case == "truncated":
        text = user_trace[0].read_text()
        path.write_text(text[: len(text) // 2])
    else:
        _trace(path, record_shapes=case != "no_shapes", step_spans=case != "no_steps", backward=case != "no_backward")
    with pytest.raises(ScenarioError, match=message) as err:
        load_trace(str(path), cpu_times=True)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_the_profile_file_written_from_a_trace_is_what_validate_reads(user_trace, tmp_path):
    from ddpsim.workload.profile import load_profile
    from ddpsim.workload.trace import main as trace_main

    path, model = user_trace
    out = tmp_path / "profiles" / "mine.json"
    assert trace_main([str(path), "--cpu", "--model", "mine", "--profile-out", str(out)]) == 0
    written = load_profile(str(out))
    assert written.name == "mine" and written.n_params == sum(p.numel() for p in model.parameters())
    direct = load_trace(str(path), cpu_times=True)
    assert written.measured is not None and direct.measured is not None
    assert written.measured.ready_order == direct.measured.ready_order
    assert written.measured.backward_s == direct.measured.backward_s
    assert trace_main([str(tmp_path / "missing.json")]) == 2


def test_a_sweep_takes_a_trace_and_keys_its_points_by_the_traces_content(user_trace, tmp_path):
    import shutil

    from ddpsim.loader import load_scenario
    from ddpsim.planning.sweep import scenario_hash

    shutil.copy(user_trace[0], tmp_path / "t.json")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("workload: {model: 'trace:t.json@cpu', batch_size: 5}\n"
                        "cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}\n")
    assert main(["sweep", str(scenario), "--grid", "ddp.bucket_cap_mb=1,25", "--out", str(tmp_path / "sweep")]) == 0
    before = scenario_hash(load_scenario(str(scenario)))
    (tmp_path / "t.json").write_text((tmp_path / "t.json").read_text().replace('"dur": 1', '"dur": 2'))
    assert scenario_hash(load_scenario(str(scenario))) != before
