"""Issue 45's bad inputs: each is refused with exit 2 and one line naming the file or field, leaving
nothing written; the valid neighbour of each still answers. A CPU dry run becomes no calibration.

Everything runs in-process (``ddpsim.cli.main.main``) on small files: seconds, no GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
import time

import pytest

from ddpsim.cli.main import main
from ddpsim.errors import ScenarioError
from ddpsim.jsonfile import open_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "validation", "data")
SHIPPED = os.path.join(ROOT, "ddpsim", "calibration", "shipped")
PROBE = os.path.join(DATA, "h200x2-probe-2026-11-28")  # a 2 x H200 probe: sweeps, DDP steps, plan.json
FSDP = os.path.join(DATA, "h200x2-fsdp-2026-11-28", "fsdp_runs.jsonl")  # gpt2-124m DDP / ZeRO on 2 x H200
SCENARIO = textwrap.dedent("""
    workload: {model: mlp, batch_size: 4}
    cluster:
      gpu: H200
      nodes: 1
      gpus_per_node: 2
      intra_node: {type: nvswitch, bandwidth: 450GB/s, latency: 3us}
    """)


def refused(capsys, argv, *words) -> str:
    """``argv`` exits 2 with one line on stderr holding every one of ``words``; the line."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


# --- measure --model: a user's module that raises or does not parse -------------------------------

@pytest.mark.parametrize("source, kind", [("raise RuntimeError('boom at import')\n", "RuntimeError"),
                                          ("def build(:\n", "SyntaxError")])
def test_a_user_module_that_fails_to_import_is_one_line(tmp_path, monkeypatch, capsys, source, kind):
    name = f"user_mod_{kind.lower()}_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    refused(capsys, ["measure", "--model", f"{name}:build", "--cpu-slots", "2", "--out", str(out)], "--model", kind,
            name)
    assert not out.exists()


def test_a_loss_fn_returning_a_float_is_named():
    torch = pytest.importorskip("torch")
    from ddpsim.measure.models import _Factory
    from ddpsim.measure.spec import ModelArgError

    module = type(os)("floss_mod")
    model = torch.nn.Linear(4, 2)
    module.build = lambda: (model, lambda bs, dev, seed: torch.ones(bs, 4),
                            lambda m, batch: float(m(batch).sum().detach()))
    module.good = lambda: (model, lambda bs, dev, seed: torch.ones(bs, 4), lambda m, batch: m(batch).sum())
    import sys

    sys.modules["floss_mod"] = module
    try:
        with pytest.raises(ModelArgError, match="loss_fn returned float"):
            _Factory("floss_mod:build").loss(model, torch.ones(2, 4))
        loss = _Factory("floss_mod:good").loss(model, torch.ones(2, 4))
        assert loss.requires_grad and loss.numel() == 1
    finally:
        del sys.modules["floss_mod"]


# --- validate-fsdp -----------------------------------------------------------------------------------

def _fsdp_first() -> dict:
    with open_data(FSDP) as handle:
        return json.loads(handle.readline())


@pytest.mark.parametrize("change, field", [
    ({"world_size": "two"}, "line 1.world_size"),
    ({"world_size": True}, "line 1.world_size"),
    ({"batch_size": 0}, "line 1.batch_size"),
    ({"peak_memory_bytes": -5}, "line 1.peak_memory_bytes"),
    ({"peak_memory_bytes_per_rank": [6e9, -1]}, "line 1.peak_memory_bytes_per_rank[1]"),
    ({"step_s_median": 0}, "line 1.step_s_median"),
    ({"nodes": 3}, "line 1.nodes"),
    ({"fingerprint": {"gpu_name": "cpu"}}, "line 1.fingerprint.gpu_name"),
])
def test_validate_fsdp_refuses_a_bad_run_field(tmp_path, capsys, change, field):
    path = tmp_path / "fsdp_runs.jsonl"
    path.write_text(json.dumps(dict(_fsdp_first(), **change)) + "\n")
    refused(capsys, ["validate-fsdp", str(path)], str(path), field)


def test_validate_fsdp_refuses_a_file_without_a_run(tmp_path, capsys):
    path = tmp_path / "fsdp_runs.jsonl"
    path.write_text("")
    refused(capsys, ["validate-fsdp", str(path)], str(path), "no run")
    path.write_text(json.dumps(dict(_fsdp_first(), status="failed")) + "\n")
    refused(capsys, ["validate-fsdp", str(path)], str(path), "no run")


def test_validate_fsdp_still_compares_a_valid_run(tmp_path, capsys):
    path = tmp_path / "fsdp_runs.jsonl"
    run = _fsdp_first()
    path.write_text(json.dumps(run) + "\n")
    assert main(["validate-fsdp", str(path), "--json"]) in (0, 1)
    rows = json.loads(capsys.readouterr().out)["runs"]
    assert len(rows) == 1 and rows[0]["measured_step_s"] == run["step_s_median"]
    assert rows[0]["measured_peak_bytes"] == max(run["peak_memory_bytes_per_rank"])


# --- a failed profile fails the measurement; its error's last line whole ------------------------------

def test_a_failed_profile_counts_as_a_failure_and_its_error_line_is_whole(tmp_path):
    from ddpsim.measure.campaign import failures_of
    from ddpsim.measure.cli import summary_lines

    traceback_text = "Traceback (most recent call last):\n" + "  File \"x.py\", line 1, in build\n" * 40 + \
        "ValueError: factory broke\n"
    (tmp_path / "launches.jsonl").write_text(json.dumps({"launch_id": "profile_w1_0", "status": "ok"}) + "\n")
    (tmp_path / "profile_failures.jsonl").write_text(json.dumps(
        {"model": "m:build", "status": "failed", "error": traceback_text, "launch_id": "profile_w1_0"}) + "\n")
    assert failures_of(str(tmp_path), {"profile_w1_0"}) == 1
    assert failures_of(str(tmp_path), {"another_launch"}) == 0
    line = next(x for x in summary_lines(str(tmp_path), ["m:build"], dry_run=True) if "profile of" in x)
    assert "ValueError: factory broke" in line and "line 1, in build" not in line


# --- calibrations ------------------------------------------------------------------------------------

def _shipped(name: str) -> dict:
    with open(os.path.join(SHIPPED, name), encoding="utf-8") as handle:
        return json.load(handle)


def _run_with(tmp_path, capsys, calibration: dict, gpu: str = "H200") -> tuple[int, str, str]:
    (tmp_path / "cal.json").write_text(json.dumps(calibration))
    (tmp_path / "s.yaml").write_text(SCENARIO.replace("gpu: H200", f"gpu: {gpu}"))
    code = main(["run", str(tmp_path / "s.yaml"), "--set", f"calibration={tmp_path / 'cal.json'}"])
    captured = capsys.readouterr()
    return code, " ".join(captured.out.split()), captured.err  # the from: rows wrap their text


def test_a_calibration_without_measured_on_says_so_where_it_is_applied(tmp_path, capsys):
    data = _shipped("x2-h200.json")
    code, out, _ = _run_with(tmp_path, capsys, data)
    assert code == 0 and "does not record the GPU" not in out
    del data["measured_on"]
    code, out, _ = _run_with(tmp_path, capsys, data, gpu="H100")
    assert code == 0 and "does not record the GPU it was measured on" in out and "H100" in out


def test_a_calibration_re_centred_on_another_kind_says_so(tmp_path, capsys):
    data = _shipped("x2-h200.json")
    data["probed_from"] = {"folders": ["p"], "base": "pooled:H200", "parts": [], "other_gpu": ["H100"]}
    code, out, _ = _run_with(tmp_path, capsys, data)
    assert code == 0 and "re-centred on a probe of H100" in out


def test_a_sibling_kind_is_not_told_to_use_the_calibration_it_was_refused(capsys):
    err = refused(capsys, ["run", os.path.join(ROOT, "scenarios", "quickstart.yaml"), "--set", "cluster.gpu=H100-PCIe",
                           "--set", "calibration=pooled:H100"], "measured_on.gpu", "H100-PCIe")
    assert "use --set calibration=pooled:H100" not in err
    err = refused(capsys, ["run", os.path.join(ROOT, "scenarios", "quickstart.yaml"), "--set", "cluster.gpu=H100",
                           "--set", "calibration=pooled:H200"], "measured_on.gpu")
    assert "use --set calibration=pooled:H100" in err  # the shipped one of the kind itself


def _mutate_link(data: dict, path: list, value) -> None:
    target = data["link_classes"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


@pytest.mark.parametrize("path, value, field", [
    (["nvlink", "bandwith_Bps"], 4e11, "link_classes.nvlink.bandwith_Bps"),
    (["nvlink", "by_world_size", "2", "latncy_s"], 1e-6, "link_classes.nvlink.by_world_size.2.latncy_s"),
    (["nvlink", "protocol_fits", "simple", "bus_bandwidth_Bps"], 0, "protocol_fits.simple.bus_bandwidth_Bps"),
    (["nvlink", "by_world_size", "2", "protocol_fits", "ll", "bus_bandwidth_Bps"], 0,
     "by_world_size.2.protocol_fits.ll.bus_bandwidth_Bps"),
    (["nvlink", "protocol_table", "base_latency_s"], {"ring/simple": -1e-6}, "base_latency_s.ring/simple"),
])
def test_a_calibration_link_entry_is_checked_when_read(tmp_path, capsys, path, value, field):
    data = _shipped("x4-h200.json")
    _mutate_link(data, path, value)
    code, _, err = _run_with(tmp_path, capsys, data)
    assert code == 2 and field in err and "cal.json" in err and err.count("\n") == 1, err


def test_a_network_shape_fit_is_checked_when_read(tmp_path):
    from ddpsim.calibration.file import read_calibration

    data = _shipped("x4-multinode-h200.json")
    shape = next(iter(data["link_classes"]["net"]["by_shape"]))
    data["link_classes"]["net"]["by_shape"][shape]["bandwidth_Bps"] = 0
    (tmp_path / "cal.json").write_text(json.dumps(data))
    with pytest.raises(ScenarioError, match=f"by_shape.{shape}.bandwidth_Bps"):
        read_calibration(str(tmp_path / "cal.json"))


# --- scenarios: a custom GPU, a custom topology, a profile ---------------------------------------------

def test_a_custom_gpu_with_nvlink_bandwidth_0_is_refused(tmp_path, capsys):
    text = textwrap.dedent("""
        workload: {model: mlp, batch_size: 4}
        cluster:
          gpu: {name: MyGPU45, peak_tflops: {bf16: 989, fp32: 67}, memory_bandwidth: 3TB/s, memory: 80GB,
                nvlink_bandwidth: NVLINK}
          nodes: 1
          gpus_per_node: 2
        """)
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("NVLINK", "0"))
    refused(capsys, ["run", str(path)], "s.yaml", "cluster.gpu.nvlink_bandwidth")
    path.write_text(text.replace("NVLINK", "300GB/s"))
    assert main(["run", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert "300" in json.dumps(document)


def test_a_link_to_a_vertex_nothing_else_reaches_is_refused(tmp_path, capsys):
    text = textwrap.dedent("""
        workload: {model: mlp, batch_size: 4}
        cluster:
          gpu: H100
          topology:
            gpus: [g0, g1]
            gpus_per_node: 2
            links:
              - {a: g0, b: sw, bandwidth: 450GB/s, latency: 1us}
              - {a: g1, b: SW_END, bandwidth: 450GB/s, latency: 1us}
        """)
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("SW_END", "sw0"))  # sw0 for sw: two switches of one link each
    refused(capsys, ["run", str(path)], "s.yaml", "cluster.topology.links[0].b", "'sw'")
    path.write_text(text.replace("SW_END", "sw"))
    assert main(["run", str(path)]) == 0


def _profile(tmp_path) -> str:
    src = os.path.join(PROBE, "profiles", "resnet50.json")
    with open(src, encoding="utf-8") as handle:
        data = json.load(handle)
    data["params"][0]["numel"] = 10**15
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_profile_parameter_larger_than_any_gpu_is_refused(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("model: mlp", f"model: 'profile:{_profile(tmp_path)}'"))
    refused(capsys, ["run", str(path)], "p.json", "params[0].numel")


# --- nccl-tests: the harness's launch names its nodes ---------------------------------------------------

def test_a_harness_sweep_given_other_nodes_than_its_launch_ran_is_refused(tmp_path, capsys):
    folder = os.path.join(DATA, "h200x4-multinode-2026-11-27c")
    out = tmp_path / "c.json"
    refused(capsys, ["calibrate", "--nccl-tests", f"{folder}/allreduce_nvlink_w4.txt:nvlink:4:2", "--links-only",
                     "--out", str(out)], "allreduce_nvlink_w4.txt", "NODES", "1 node")
    refused(capsys, ["calibrate", "--nccl-tests", f"{folder}/allreduce_socket_w2_2x1_default.txt:net:2:1",
                     "--links-only", "--out", str(out)], "NODES", "2 node")
    assert not out.exists()


# --- options given empty; a damaged record file in a measurement folder ---------------------------------

def test_an_empty_recentre_is_refused_not_ignored(tmp_path, capsys):
    out = tmp_path / "c.json"
    refused(capsys, ["calibrate", PROBE, "--recentre", "", "--out", str(out)], "--recentre")
    assert not out.exists()


def test_a_damaged_launches_file_is_named(tmp_path, capsys):
    folder = tmp_path / "probe"
    shutil.copytree(PROBE, folder)
    (folder / "launches.jsonl").write_bytes(bytes(range(256)) * 8)
    refused(capsys, ["validate", str(folder), "--calibration", "pooled:H200"], "launches.jsonl")


# --- a CPU dry run is no GPU's calibration --------------------------------------------------------------

def _dry_run_copy(tmp_path, plan_says: bool, records_say: bool) -> str:
    folder = tmp_path / "dry"
    shutil.copytree(PROBE, folder)
    if plan_says:
        plan = json.loads((folder / "plan.json").read_text())
        (folder / "plan.json").write_text(json.dumps(dict(plan, cpu_dry_run=True)))
    if records_say:
        for name in ("allreduce.jsonl", "ddp_runs.jsonl"):
            lines = [json.loads(x) for x in open_data(folder / name).read().splitlines() if x.strip()]
            for record in lines:
                record["fingerprint"] = dict(record.get("fingerprint") or {}, gpu_name="cpu")
            (folder / name).write_text("".join(json.dumps(r) + "\n" for r in lines))
    return str(folder)


@pytest.mark.parametrize("plan_says, records_say", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("flags", [["--recentre", "pooled:H200", "--allow-other-gpu"], ["--recentre", "pooled:H200"],
                                   ["--links-only"]])
def test_a_cpu_dry_run_becomes_no_calibration_whatever_the_flags(tmp_path, capsys, plan_says, records_say, flags):
    folder = _dry_run_copy(tmp_path, plan_says, records_say)
    out = tmp_path / "cal.json"
    refused(capsys, ["calibrate", folder, *flags, "--out", str(out)], "CPU dry run")
    assert not out.exists()


def test_a_cpu_dry_run_is_not_validated(tmp_path, capsys):
    folder = _dry_run_copy(tmp_path, True, False)
    refused(capsys, ["validate", folder, "--calibration", "pooled:H200", "--allow-other-gpu"], "CPU dry run")


def test_a_cpu_dry_run_sweep_text_is_not_fitted(tmp_path, capsys):
    text = open(os.path.join(PROBE, "allreduce_shm_w2.txt"), encoding="utf-8").read()
    assert " gpu NVIDIA H200 " in text
    path = tmp_path / "allreduce_shm_w2.txt"
    path.write_text(text.replace(" gpu NVIDIA H200 ", " gpu cpu "))
    out = tmp_path / "c.json"
    refused(capsys, ["calibrate", "--nccl-tests", f"{path}:shm:2", "--links-only", "--out", str(out)], "CPU dry run")
    assert not out.exists()


# --- hf: names -----------------------------------------------------------------------------------------

def test_a_misspelt_transformers_class_is_answered_at_once():
    pytest.importorskip("transformers")
    from ddpsim.measure.hf import load_model_source
    from ddpsim.measure.spec import ModelArgError

    start = time.perf_counter()
    with pytest.raises(ModelArgError, match="no class 'NoSuchConfig'"):
        load_model_source("NoSuchConfig")
    with pytest.raises(ModelArgError, match="close: GPT2Config"):
        load_model_source("GTP2Config")
    assert time.perf_counter() - start < 10  # the hub is never asked (it retried for 28 s offline)


def test_a_hub_name_offline_is_answered_from_the_cache(monkeypatch):
    pytest.importorskip("transformers")
    from ddpsim.measure import hf
    from ddpsim.measure.spec import ModelArgError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf, "_hub_reachable", lambda: pytest.fail("asked the hub with HF_HUB_OFFLINE set"))
    with pytest.raises(ModelArgError, match="HF_HUB_OFFLINE"):
        hf.load_model_source("no-such-org/no-such-model")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hf, "_hub_reachable", lambda: False)
    with pytest.raises(ModelArgError, match="cannot be reached"):
        hf.load_model_source("no-such-org/no-such-model")
