"""The GPU self-check's plan and validators on the CPU, with fakes: which checks a host runs, and that each
validator names a wrong shape, a wrong device or a missing field (the GPU run itself: validation/data/selfcheck-*)."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from ddpsim.measure import profile, selfcheck  # noqa: E402
from ddpsim.measure.models import resolve  # noqa: E402


def test_the_plan_follows_the_hosts_gpus():
    assert [c.name for c in selfcheck.plan_checks(1)] == ["peak", "profile", "trace"]
    two = selfcheck.plan_checks(2)
    assert [c.name for c in two] == ["peak", "profile", "trace", "ddp:nvlink", "ddp:shm", "ddp:socket", "fsdp"]
    assert all(c.gpus == 2 for c in two if c.name.startswith(("ddp", "fsdp")))
    assert [c.name for c in selfcheck.plan_checks(4, ("socket",))][3:] == ["ddp:socket", "fsdp"]
    with pytest.raises(ValueError, match="no GPU"):
        selfcheck.plan_checks(0)


def test_a_host_without_a_gpu_is_refused_with_exit_2(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    assert selfcheck.main(["--out", str(tmp_path / "s")]) == 2
    assert "no GPU" in capsys.readouterr().err
    assert selfcheck.main(["--out", str(tmp_path / "s"), "--link-classes", "ib"]) == 2


@pytest.fixture(scope="module")
def gpu_like_profile():
    """A real profile (CPU) given what a GPU adds: its device and the allocator's peaks."""
    prof = profile.profile_model(resolve("tiny-mlp"), torch.device("cpu"), iters=1, warmup=0)
    mem = prof["memory"]
    live = mem["parameter_bytes"] + mem["optimizer_state_bytes"] + mem["buffer_bytes"] + mem["activation_bytes"]
    mem.update(peak_allocated_bytes=live + mem["gradient_bytes"], peak_reserved_bytes=2 << 20)
    prof.update(gpu="cuda:0", status="ok", fingerprint={"gpu_name": "fake"},
                ddp_world1=[{"variant": "none", "status": "ok"}])
    return prof


def test_a_good_profile_passes(gpu_like_profile):
    assert selfcheck.check_profile(gpu_like_profile, "p") == []


@pytest.mark.parametrize("mutate,problem", [
    (lambda p: p.pop("memory"), "field memory missing"),
    (lambda p: p.update(gpu="cpu"), "not a GPU"),
    (lambda p: p["memory"].update(peak_allocated_bytes=None), "peak_allocated_bytes is None"),
    (lambda p: p["memory"].update(peak_allocated_bytes=10), "alive together after the forward"),
    (lambda p: p["memory"].update(activation_bytes=p["memory"]["activation_bytes"] + 4), "does not sum"),
    (lambda p: p["memory"].update(batch_size=3), "memory.batch_size 3"),
    (lambda p: p["params"][0].update(grad_ready_s=None), "gradient ready times"),
    (lambda p: p.update(ddp_world1=[{"variant": "bf16", "status": "failed", "error": "boom"}]), "bf16 failed"),
])
def test_each_defect_of_a_profile_is_named(gpu_like_profile, mutate, problem):
    prof = copy.deepcopy(gpu_like_profile)
    mutate(prof)
    problems = selfcheck.check_profile(prof, "p")
    assert any(problem in p for p in problems), problems


def _ddp_run(**kw):
    run = {"model": "m", "bucket_cap_mb": 1, "variant": "none", "status": "ok", "step_s_median": 0.01,
           "bucket_sizes_bytes": [600, 400], "param_bytes": 1000, "fingerprint": {}, "per_rank_s": {},
           "world_size": 2, "transport": "shm", "nccl_transports_seen": ["SHM/direct"],
           "memory": {"peak_allocated_bytes": 9, "peak_reserved_bytes": 12,
                      "per_rank": [{"peak_allocated_bytes": 9, "peak_reserved_bytes": 10},
                                   {"peak_allocated_bytes": 8, "peak_reserved_bytes": 12}]}}
    run.update(kw)
    return run


def test_ddp_runs_are_checked_for_world_link_buckets_and_memory():
    assert selfcheck.check_ddp_runs([_ddp_run()], 2, "shm", "d") == []
    assert selfcheck.check_ddp_runs([], 2, "shm", "d") == ["d: no DDP run recorded"]
    cases = [
        (_ddp_run(world_size=1), "world_size 1, expected 2"),
        (_ddp_run(nccl_transports_seen=["P2P/CUMEM"]), "expected SHM"),
        (_ddp_run(bucket_sizes_bytes=[600]), "buckets hold 600 bytes"),
        (_ddp_run(variant="timing", per_bucket=None), "no per-bucket times"),
        (_ddp_run(memory={"peak_allocated_bytes": 9, "peak_reserved_bytes": 12, "per_rank": []}), "0 rows"),
        (_ddp_run(memory=None), "memory missing"),
        (_ddp_run(status="failed", error="Traceback\nRuntimeError: NCCL error"), "NCCL error"),
    ]
    for run, problem in cases:
        problems = selfcheck.check_ddp_runs([run], 2, "shm", "d")
        assert any(problem in p for p in problems), (problem, problems)
    bad_max = _ddp_run()
    bad_max["memory"]["peak_allocated_bytes"] = 8  # not the max over the ranks
    assert any("not the max" in p for p in selfcheck.check_ddp_runs([bad_max], 2, "shm", "d"))


def test_fsdp_runs_must_keep_the_fp32_model_in_fp32():
    good = {"status": "ok", "world_size": 2, "peak_memory_bytes": 5, "units": [{"name": "<root>"}],
            "memory": {"peak_allocated_bytes": 5, "peak_reserved_bytes": 6,
                       "per_rank": [{"peak_allocated_bytes": 5, "peak_reserved_bytes": 6}] * 2}}
    runs = [dict(good, model="cnn", strategy="zero2", param_dtype="fp32"),
            dict(good, model="cnn", strategy="zero3", param_dtype="bf16")]
    expected = {("cnn", "zero2"): "fp32", ("cnn", "zero3"): "fp32", ("cnn", "ddp"): "fp32"}
    problems = selfcheck.check_fsdp_runs(runs, 2, expected, "f")
    assert problems == ["f cnn zero3: parameters in bf16, expected fp32", "f cnn ddp: not recorded"]


def test_a_trace_needs_its_capture_kernels_and_steps(gpu_like_profile):
    capture = {"model": "m", "params": [1], "ready_order": ["a"], "unprofiled_step_s": 0.1, "gpu": "H200",
               "device": "cuda:0", "memory": gpu_like_profile["memory"]}
    events = [{"cat": "kernel", "name": "k"}, {"name": "ProfilerStep#1"}, {"name": "ProfilerStep#2"}]
    assert selfcheck.check_trace({"ddpsim_capture": capture, "traceEvents": events}, 2, "t") == []
    problems = selfcheck.check_trace({"ddpsim_capture": dict(capture, device="cpu"), "traceEvents": events[1:]},
                                     3, "t")
    assert [p.split(": ", 1)[1] for p in problems] == [
        "captured on 'cpu', not a GPU", "no GPU kernel events", "2 ProfilerStep spans, expected 3"]
    assert selfcheck.check_trace({"traceEvents": events}, 2, "t") == ["t: no ddpsim_capture metadata"]
