"""nccl-tests output as real runs print it: the binary's name, -C (CPU time), -d all, reduce_scatter_perf,
all_gather_perf, the -J JSON report, in-place columns, files cut short.

The fixtures are written here in nccl-tests' layout from a known curve, T = 20 us + S f / B on 4 ranks,
with algbw = S / T and busbw = algbw x f computed here, f the bus factor derived in the docstring of
``ddpsim/fitting/nccl_tests.py`` (all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n) and
checked below against rows nccl-tests itself printed.
"""

from __future__ import annotations

import json
import os

import pytest

from ddpsim.cli import main
from ddpsim.errors import ScenarioError
from ddpsim.fitting.nccl_tests import bus_factor, read_nccl_tests, read_nccl_tests_sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLREDUCE_W4 = os.path.join(ROOT, "validation", "data", "h200x4-2026-11-26", "allreduce_nvlink_w4.txt")
RANKS = 4
BASE_US = 20.0
LINK_BPS = 300e9  # the bus bandwidth the fixtures' links carry
SIZES = [4096 * 2 ** k for k in range(19)]  # 4 KiB .. 1 GiB
ELEMENT = {"float": 4, "half": 2, "int8": 1}
# per collective: (bus factor on 4 ranks, size column over count x element bytes, reduction printed)
SHAPES = {"all_reduce": (2 * 3 / 4, 1, "sum"), "reduce_scatter": (3 / 4, RANKS, "sum"), "all_gather": (3 / 4, RANKS, "none")}


def _time_us(collective: str, size: int, slower: float = 1.0) -> float:
    factor = SHAPES[collective][0]
    return (BASE_US + size * factor / LINK_BPS * 1e6) * slower


def _time_text(us: float) -> str:
    # nccl-tests prints 2 decimals below 100 us, 1 below 10 ms, none above
    return f"{us:7.2f}" if us < 100 else f"{us:7.1f}" if us < 10000 else f"{us:7.0f}"


def _group(collective: str, size: int, time_us: float) -> str:
    algbw = size / (time_us * 1e-6) / 1e9
    return f"  {_time_text(time_us)}  {algbw:6.2f}  {algbw * SHAPES[collective][0]:6.2f}  {0:5d}"


def perf_text(collective: str = "all_reduce", types: tuple[str, ...] = ("float",), cputime: bool = False,
              named: bool = True, sizes: list[int] = SIZES, max_bytes: int = SIZES[-1], agg: int = 1,
              in_place_slower: float = 1.0) -> str:
    """The stdout of ``{collective}_perf -b 4K -e 1G -f 2 -g 4`` (nccl-tests 2.17 layout)."""
    lines = ["# nccl-tests version 2.17.6 nccl-headers=22602 nccl-library=22602"]
    if named:
        lines.append(f"# Collective test starting: {collective}_perf")
    lines += [f"# nThread 1 nGpus 4 minBytes {sizes[0]} maxBytes {max_bytes} step: 2(factor) warmup iters: 5 "
              f"iters: 20 agg iters: {agg} validation: 1 graph: 0", "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid  41{r:03d} on      gpu-a device {r:2d} [0000:{r:02x}:00] NVIDIA H100 80GB HBM3"
              for r in range(RANKS)]
    name = "cputime" if cputime else "time"
    lines += ["#", "#                                                              out-of-place                       in-place",
              f"#       size         count      type   redop    root  {name:>7}   algbw   busbw #wrong  {name:>7}   algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
    _factor, per_count, redop = SHAPES[collective]
    for data_type in types:
        for size in sizes:
            gpu_us = _time_us(collective, size)
            # with -C the time column is the host's launch time; algbw and busbw stay the GPU's
            shown_us = 4.0 if cputime else gpu_us
            count = size // (ELEMENT[data_type] * per_count)
            out_of_place = _group(collective, size, gpu_us).replace(_time_text(gpu_us), _time_text(shown_us), 1)
            lines.append(f"{size:12d}  {count:12d}  {data_type:>8}  {redop:>6}  {-1:6d}{out_of_place}"
                         f"{_group(collective, size, gpu_us * in_place_slower)}")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 100.0 ", "#",
              f"# Collective test concluded: {collective}_perf" if named else "#", ""]
    return "\n".join(lines)


def perf_json(collective: str = "all_reduce", cputime: bool = False) -> dict:
    """The same run's ``-J`` report (nccl-tests' JSON_FILE_VERSION 2: util.cu writes one device per process)."""
    factor, per_count, redop = SHAPES[collective]
    results = []
    for size in SIZES:
        time_us = _time_us(collective, size)
        algbw = size / (time_us * 1e-6) / 1e9
        timed = {"cpu_time" if cputime else "time": 4.0 if cputime else time_us, "alg_bw": algbw,
                 "bus_bw": algbw * factor, "nwrong": 0.0}
        results.append({"size": size, "count": size // (4 * per_count), "type": "float", "redop": redop,
                        "root": "    -1", "out_of_place": timed, "in_place": dict(timed), "actual_iterations": 20,
                        "experiment_name": ""})
    args = [f"./build/{collective}_perf", "-b", "4K", "-e", "1G", "-f", "2", "-g", "4", "-J", "out.json"]
    return {"version": 2, "start_time": "2026-11-27 10:00:00", "args": args + (["-C", "1"] if cputime else []),
            "env": ["NCCL_DEBUG=WARN"], "nccl_version": 22602,
            "config": {"nthreads": 1, "ngpus": 4, "minimum_bytes": SIZES[0], "maximum_bytes": SIZES[-1], "step_factor": 2,
                       "warmup_iters": 5, "iterations": 20, "aggregated_iterations": 1, "validation": 1, "graph": 0,
                       "blocking_collectives": "false", "per_iter_timing": "false", "parallel_init": "false",
                       "devices": [{"rank": 0, "group": 0, "pid": 41000, "hostname": "gpu-a", "device": 0,
                                    "device_hex": "0000:00:00", "device_info": "NVIDIA H100 80GB HBM3"}]},
            "results": results, "out_of_bounds": {"count": 0, "okay": "true"},
            "average_bus_bandwidth": {"bandwidth": 100.0, "okay": "unchecked"}, "errors": [],
            "end_time": "2026-11-27 10:01:00"}


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _refused(capsys, argv: list[str], name: str, *words: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and name in err and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


def test_bus_factors_match_rows_nccl_tests_printed():
    # rows from public nccl-tests outputs: (collective, ranks, size B, time us, algbw GB/s, busbw GB/s)
    printed = [
        ("all_gather", 2, 1073741824, 27211.0, 39.46, 19.73),  # 2 x GB10, nccl-tests 2.17
        ("all_gather", 2, 1048576, 2189.16, 0.48, 0.24),  # 2 x RTX 5090
        ("reduce_scatter", 2, 1048576, 2678.52, 0.39, 0.20),  # 2 x RTX 5090, nccl-tests 2.18
        ("all_reduce", 4, 1073741824, 4517.14, 237.70, 356.56),  # the harness's 4 x H200 file, nccl-tests layout
    ]
    for collective, ranks, size, time_us, algbw, busbw in printed:
        assert size / time_us / 1e3 == pytest.approx(algbw, abs=0.006)
        assert algbw * bus_factor(collective, ranks) == pytest.approx(busbw, abs=0.011)


def test_cpu_time_is_refused(tmp_path, capsys):
    # -C 1 on 4-GPU NVLink: a 4 us "time" at 1 GiB, which was fitted as 268 TB/s
    path = _write(tmp_path, "cputime.txt", perf_text(cputime=True))
    with pytest.raises(ScenarioError, match="CPU time"):
        read_nccl_tests(path, "nvlink", RANKS)
    out = tmp_path / "c.json"
    _refused(capsys, ["calibrate", "--nccl-tests", f"{path}:nvlink:4", "--links-only", "--out", str(out)],
             "cputime.txt", "cputime", "-C")
    assert not out.exists()
    # the column header trimmed away: the time column still disagrees with nccl-tests' own algbw
    trimmed = "\n".join(line for line in perf_text(cputime=True).splitlines() if not line.startswith("#"))
    path = _write(tmp_path, "trimmed.txt", trimmed + "\n")
    _refused(capsys, ["calibrate", "--nccl-tests", f"{path}:nvlink:4", "--links-only", "--out", str(out)],
             "trimmed.txt", "algbw", "CPU time")


def test_every_data_type_needs_one_named(tmp_path, capsys):
    # -d all prints one sweep per type, one after the other, under one header
    path = _write(tmp_path, "all_types.txt", perf_text(types=("int8", "half", "float")))
    out = tmp_path / "c.json"
    _refused(capsys, ["calibrate", "--nccl-tests", f"{path}:nvlink:4", "--links-only", "--out", str(out)],
             "all_types.txt", "int8, half, float", "type=")
    floats = read_nccl_tests(path, "nvlink", RANKS, data_type="float")
    assert [s.bytes for s in floats] == SIZES
    assert [s.time_s * 1e6 for s in floats] == pytest.approx([_time_us("all_reduce", s) for s in SIZES], rel=2e-3)
    with pytest.raises(ScenarioError, match="no rows of data type 'bfloat16'"):
        read_nccl_tests(path, "nvlink", RANKS, data_type="bfloat16")
    assert main(["calibrate", "--nccl-tests", f"{path}:nvlink:4:type=float", "--links-only", "--out", str(out)]) == 0
    nvlink = json.loads(out.read_text())["link_classes"]["nvlink"]
    assert nvlink["bandwidth_Bps"] == pytest.approx(LINK_BPS, rel=0.05)


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather"])
def test_sharded_collectives_are_read_as_themselves(tmp_path, capsys, collective):
    path = _write(tmp_path, f"{collective}.txt", perf_text(collective))
    sweep = read_nccl_tests_sweep(path, "nvlink", RANKS)
    assert sweep.collective == collective and sweep.data_type == "float"
    assert list(sweep.sizes_bytes) == SIZES  # the whole buffer, 4 x the count column's shard
    # the all-reduce reader takes all_reduce_perf output only
    with pytest.raises(ScenarioError, match=f"{collective}_perf output"):
        read_nccl_tests(path, "nvlink", RANKS)
    out = tmp_path / "c.json"
    argv = ["calibrate", "--nccl-tests", f"{ALLREDUCE_W4}:nvlink:4", "--nccl-tests", f"{path}:nvlink:4",
            "--links-only", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert f"nvlink {collective} 1x4: bus bandwidth" in printed
    calibration = json.loads(out.read_text())
    entry = calibration["collectives"]["nvlink"][collective]["1x4"]
    # one pass of the ring: the links' 300 GB/s; read as an all-reduce the same times would give 600
    assert entry["bandwidth_Bps"] == pytest.approx(LINK_BPS, rel=0.05)
    assert entry["fit_mean_error_pct"] < 3
    # the all-reduce's own fit is the committed 4 x H200 sweep's (356.6 GB/s at 1 GiB), untouched by the fixture
    assert 300e9 < calibration["link_classes"]["nvlink"]["bandwidth_Bps"] < 420e9
    from ddpsim.calibration.file import read_calibration
    from ddpsim.fitting.sharded_fit import curve_time_s

    read_back = read_calibration(str(out))
    curve = read_back.collective_curve("nvlink", collective, RANKS, 1)
    assert curve is not None and read_back.collective_curve("nvlink", collective, 8, 1) is None
    # the fitted curve gives back the fixture's own times (20 us + S (3/4) / 300 GB/s) at every size
    for size in SIZES:
        assert curve_time_s(curve, size, RANKS) * 1e6 == pytest.approx(_time_us(collective, size), rel=0.05)


def test_an_unnamed_all_gather_must_be_named(tmp_path, capsys):
    # before nccl-tests 2.17 no line names the binary; all_gather_perf and alltoall_perf print the same columns
    path = _write(tmp_path, "gather.txt", perf_text("all_gather", named=False))
    with pytest.raises(ScenarioError, match="all_gather_perf and alltoall_perf"):
        read_nccl_tests_sweep(path, "nvlink", RANKS)
    assert read_nccl_tests_sweep(path, "nvlink", RANKS, collective="all_gather").collective == "all_gather"
    # an unnamed reduce-scatter's columns fit it alone (it reduces, and its size is 4 x the count)
    unnamed = _write(tmp_path, "scatter.txt", perf_text("reduce_scatter", named=False))
    assert read_nccl_tests_sweep(unnamed, "nvlink", RANKS).collective == "reduce_scatter"
    with pytest.raises(ScenarioError, match="not those of all_reduce_perf"):
        read_nccl_tests_sweep(unnamed, "nvlink", RANKS, collective="all_reduce")


def test_other_binaries_are_refused(tmp_path, capsys):
    text = perf_text("all_gather").replace("all_gather_perf", "alltoall_perf")
    path = _write(tmp_path, "alltoall.txt", text)
    _refused(capsys, ["calibrate", "--nccl-tests", f"{path}:nvlink:4", "--links-only", "--out", str(tmp_path / "c.json")],
             "alltoall.txt", "alltoall_perf output", "collective")


def test_two_runs_in_one_file_are_refused(tmp_path, capsys):
    path = _write(tmp_path, "two.txt", perf_text("all_reduce") + perf_text("all_gather"))
    _refused(capsys, ["calibrate", "--nccl-tests", f"{path}:nvlink:4", "--links-only", "--out", str(tmp_path / "c.json")],
             "two.txt", "all_gather, all_reduce")


def test_world_size_the_columns_contradict(tmp_path, capsys):
    # without its rank lines the file cannot list its ranks, but busbw / algbw is 2(n-1)/n = 1.5 on 4 GPUs
    text = "\n".join(line for line in perf_text().splitlines() if "Rank" not in line)
    path = _write(tmp_path, "no_ranks.txt", text)
    assert len(read_nccl_tests(path, "nvlink", 4)) == len(SIZES)
    _refused(capsys, ["calibrate", "--nccl-tests", f"{path}:nvlink:8", "--links-only", "--out", str(tmp_path / "c.json")],
             "no_ranks.txt", "WORLD_SIZE", "busbw/algbw 1.50", "is 1.75")


def test_json_report_reads_as_its_text(tmp_path, capsys):
    for collective in SHAPES:
        report = _write(tmp_path, f"{collective}.json", json.dumps(perf_json(collective)))
        text = _write(tmp_path, f"{collective}.txt", perf_text(collective))
        from_json = read_nccl_tests_sweep(report, "nvlink", RANKS)
        from_text = read_nccl_tests_sweep(text, "nvlink", RANKS)
        assert from_json.collective == from_text.collective == collective
        assert from_json.sizes_bytes == from_text.sizes_bytes
        assert from_json.times_s == pytest.approx(from_text.times_s, rel=1e-3)  # the text keeps 2 decimals
    cpu = _write(tmp_path, "cpu.json", json.dumps(perf_json(cputime=True)))
    _refused(capsys, ["calibrate", "--nccl-tests", f"{cpu}:nvlink:4", "--links-only", "--out", str(tmp_path / "c.json")],
             "cpu.json", "CPU time")
    # nccl-tests writes the report as it runs: a killed run leaves it unclosed
    cut = _write(tmp_path, "cut.json", json.dumps(perf_json())[:5000])
    _refused(capsys, ["calibrate", "--nccl-tests", f"{cut}:nvlink:4", "--links-only", "--out", str(tmp_path / "c.json")],
             "cut.json", "not valid JSON", "cut short")
    # the report lists one device per process: 4 GPUs of one process are 4 ranks, not 1
    with pytest.raises(ScenarioError, match="lists 4 ranks, but 8"):
        read_nccl_tests_sweep(_write(tmp_path, "r.json", json.dumps(perf_json())), "nvlink", 8)


def test_in_place_columns(tmp_path, capsys):
    # in-place 10% slower than out-of-place at every size
    path = _write(tmp_path, "places.txt", perf_text(in_place_slower=1.1))
    out_of_place = read_nccl_tests(path, "nvlink", RANKS)
    in_place = read_nccl_tests(path, "nvlink", RANKS, in_place=True)
    assert [s.time_s * 1e6 for s in out_of_place] == pytest.approx([_time_us("all_reduce", s) for s in SIZES], rel=2e-3)
    assert [s.time_s * 1e6 for s in in_place] == pytest.approx([_time_us("all_reduce", s, 1.1) for s in SIZES], rel=2e-3)
    out = tmp_path / "c.json"
    assert main(["calibrate", "--nccl-tests", f"{path}:nvlink:4:in-place", "--links-only", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["link_classes"]["nvlink"]["bandwidth_Bps"] == pytest.approx(LINK_BPS / 1.1, rel=0.05)
    _refused(capsys, ["calibrate", "--nccl-tests", f"{path}:nvlink:4:inplace", "--links-only", "--out", str(out)],
             "inplace", "--nccl-tests")


def test_truncated_files_are_refused(tmp_path, capsys):
    lines = perf_text().splitlines()
    last = max(i for i, line in enumerate(lines) if line.split() and line.split()[0].isdigit())
    # killed while printing the last row: the out-of-place half is there, the in-place half is not
    cut_row = lines[:last] + [" ".join(lines[last].split()[:9])]
    path = _write(tmp_path, "cut_row.txt", "\n".join(cut_row) + "\n")
    out = tmp_path / "c.json"
    _refused(capsys, ["calibrate", "--nccl-tests", f"{path}:nvlink:4", "--links-only", "--out", str(out)],
             "cut_row.txt", "cut short", "row")
    # the file ends after 64 MiB of a run that was to reach 1 GiB (-e 1G)
    path = _write(tmp_path, "short.txt", perf_text(sizes=SIZES[:15]))
    _refused(capsys, ["calibrate", "--nccl-tests", f"{path}:nvlink:4", "--links-only", "--out", str(out)],
             "short.txt", "maxBytes", "67108864")
    assert not out.exists()


def test_aggregated_calls_are_refused(tmp_path, capsys):
    path = _write(tmp_path, "agg.txt", perf_text(agg=8))
    _refused(capsys, ["calibrate", "--nccl-tests", f"{path}:nvlink:4", "--links-only", "--out", str(tmp_path / "c.json")],
             "agg.txt", "agg iters", "-m 1")


@pytest.mark.parametrize("edit, field", [
    (lambda c: c["collectives"]["nvlink"]["reduce_scatter"]["1x4"].update(bandwidth_Bps=0), "bandwidth_Bps"),
    (lambda c: c["collectives"]["nvlink"].update(alltoall=c["collectives"]["nvlink"].pop("reduce_scatter")),
     "collectives.nvlink.alltoall"),
    (lambda c: c["collectives"]["nvlink"]["reduce_scatter"].update({"1x4": 5}), "collectives.nvlink.reduce_scatter.1x4"),
])
def test_a_bad_collectives_section_is_refused_when_read(tmp_path, edit, field):
    path = _write(tmp_path, "rs.txt", perf_text("reduce_scatter"))
    out = tmp_path / "c.json"
    assert main(["calibrate", "--nccl-tests", f"{ALLREDUCE_W4}:nvlink:4", "--nccl-tests", f"{path}:nvlink:4",
                 "--links-only", "--out", str(out)]) == 0
    calibration = json.loads(out.read_text())
    edit(calibration)
    out.write_text(json.dumps(calibration))
    from ddpsim.calibration.file import read_calibration

    with pytest.raises(ScenarioError, match=field):
        read_calibration(str(out))


def test_an_unnamed_two_gpu_all_reduce_must_be_named(tmp_path, capsys):
    # on 2 GPUs all_reduce_perf and sendrecv_perf print the same columns (busbw = algbw x 2(n-1)/n = algbw x 1)
    source = os.path.join(ROOT, "validation", "data", "h100x2-2026-11-26", "allreduce_nvlink_w2.txt")
    with open(source, encoding="utf-8") as handle:
        text = "\n".join(line for line in handle.read().splitlines() if not line.startswith("# ddpsim harness:"))
    path = _write(tmp_path, "w2.txt", text + "\n")
    out = tmp_path / "c.json"
    _refused(capsys, ["calibrate", "--nccl-tests", f"{path}:nvlink:2", "--links-only", "--out", str(out)],
             "w2.txt", "all_reduce_perf and sendrecv_perf", "op=all_reduce")
    assert main(["calibrate", "--nccl-tests", f"{path}:nvlink:2:op=all_reduce", "--links-only", "--out", str(out)]) == 0
    # the library's all-reduce reader is asked for an all-reduce: the columns fit one
    assert len(read_nccl_tests(path, "nvlink", 2)) == len(read_nccl_tests(source, "nvlink", 2))


def test_a_sharded_step_takes_the_measured_reduce_scatter_and_all_gather_curves(tmp_path, capsys, monkeypatch):
    import ddpsim.sharded_simulation as sharded
    from ddpsim.loader import scenario_from_dict
    from ddpsim.simulation import simulate

    files = [_write(tmp_path, f"{c}.txt", perf_text(c)) for c in ("reduce_scatter", "all_gather")]
    out = tmp_path / "c.json"
    argv = ["calibrate", "--nccl-tests", f"{ALLREDUCE_W4}:nvlink:4", "--links-only", "--out", str(out)]
    for path in files:
        argv += ["--nccl-tests", f"{path}:nvlink:4"]
    assert main(argv) == 0, capsys.readouterr().err
    seen = []
    real = sharded.simulate_step
    monkeypatch.setattr(sharded, "simulate_step", lambda costs, sizes: seen.append((costs, sizes)) or real(costs, sizes))

    def step(calibration):
        spec = {"workload": {"model": "gpt2-124m", "batch_size": 4}, "parallel": {"strategy": "zero3"},
                "cluster": {"gpu": "H200", "gpus_per_node": RANKS, "intra_node": {"type": "nvswitch", "nvls": "off"}},
                "calibration": str(calibration)}
        return simulate(scenario_from_dict(spec, file=str(tmp_path / "s.yaml")))

    result = step(out)
    costs, sizes = seen[-1]
    # every unit's collective is the fixture's own closed form: 20 us + S (n-1)/n / 300 GB/s (the fit within 5%)
    for (ag_bytes, rs_bytes, _replica), ag, rs in zip(sizes, costs.all_gather, costs.reduce_scatter, strict=True):
        assert ag.seconds * 1e6 == pytest.approx(_time_us("all_gather", ag_bytes), rel=0.05)
        assert rs.seconds * 1e6 == pytest.approx(_time_us("reduce_scatter", rs_bytes), rel=0.05)
    assert "measured curves" in result.value_sources["sharded_collectives"]
    assert "collectives.nvlink.reduce_scatter.1x4" in result.value_sources["sharded_collectives"]
    # the same calibration without the curves prices them from the all-reduce model, and says so
    data = json.loads(out.read_text())
    del data["collectives"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(data))
    without = step(bare)
    assert "priced as half a ring all-reduce" in without.value_sources["sharded_collectives"]
    assert seen[-1][0].reduce_scatter[0].seconds != pytest.approx(costs.reduce_scatter[0].seconds, rel=0.01)
