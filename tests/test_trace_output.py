"""ddpsim's trace output: Kineto-shaped events that Holistic Trace Analysis (HTA) and Perfetto read,
flows from each bucket's ready to its all-reduce, per-rank files for ``--trace DIR/``."""

import json
import os
import re
from collections import defaultdict

import pytest

from ddpsim import load_scenario, simulate
from ddpsim import simulation as simulation_module
from ddpsim.cli import main
from ddpsim.intervals import union_length
from ddpsim.report.trace import kineto_traces, perfetto_trace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, "scenarios", "quickstart.yaml")
# four ranks, three steps, jitter so that the ranks differ, and the fp16 hook's casts and thread work
OVERRIDES = ["cluster.nodes=1", "cluster.gpus_per_node=4", "simulation.iterations=3", "simulation.jitter_cv=0.05",
             "ddp.comm_hook=fp16"]


@pytest.fixture(scope="module")
def run():
    """The result, and what the engine itself recorded per rank and step (RankTrace.bucket_ready_s):
    the truth the trace's ready times are checked against, which the Result keeps for rank 0's last
    step only."""
    engine = {}
    real = simulation_module._timelines

    def spy(prep, traces, members):
        for rank, rank_traces in traces.items():
            for member in (members or {}).get(rank, (rank,)):
                engine[member] = rank_traces
        return real(prep, traces, members)

    simulation_module._timelines = spy
    try:
        result = simulate(load_scenario(QUICKSTART, OVERRIDES))
    finally:
        simulation_module._timelines = real
    return result, engine


def _us(seconds):
    return seconds * 1e6


def test_flows_pair_up_and_start_at_each_buckets_ready(run):
    result, engine = run
    traces = kineto_traces(result)
    assert sorted(traces) == sorted(result.rank_timelines)
    seen = set()
    for rank, trace in traces.items():
        events = trace["traceEvents"]
        starts = {e["id"]: e for e in events if e["ph"] == "s"}
        ends = {e["id"]: e for e in events if e["ph"] == "f"}
        assert len(starts) == len([e for e in events if e["ph"] == "s"])  # ids unique
        assert starts.keys() == ends.keys()
        kernels = {e["args"]["correlation"]: e for e in events
                   if e["ph"] == "X" and e["name"].startswith("ncclDevKernel_AllReduce")}
        for flow_id, start in starts.items():
            kernel = kernels[flow_id]
            bucket, step = kernel["args"]["bucket"], kernel["args"]["step"]
            ready_s = engine[rank][step].bucket_ready_s[bucket]
            assert start["ts"] == pytest.approx(_us(ready_s), abs=1e-3)
            assert ends[flow_id]["ts"] == kernel["ts"]  # the flow ends on its all-reduce ...
            assert kernel["ts"] >= start["ts"]  # ... which starts after the bucket's ready
            assert kernel["ts"] == pytest.approx(_us(engine[rank][step].bucket_start_s[bucket]), abs=1e-3)
            seen.add((rank, step, bucket))
    # every bucket of every step of every rank has its flow
    assert seen == {(r, s, b.index) for r in traces for s in range(3) for b in result.buckets}


def test_rank_zero_last_step_matches_the_bucket_records(run):
    """The Result's BucketRecords (rank 0's last step, from the step's start) and the trace agree."""
    result, _ = run
    events = kineto_traces(result)[0]["traceEvents"]
    last = {e["args"]["bucket"]: e for e in events if e["ph"] == "X" and e["args"].get("step") == 2}
    for record in result.buckets:
        kernel = last[record.index]
        assert kernel["args"]["bucket bytes"] == record.bytes and kernel["args"]["parameters"] == record.n_params
        # 2(n-1)/n of the bucket per rank (nccl-tests' bus bytes), n = 4
        assert kernel["args"]["bytes moved per rank"] == round(record.bytes * 2 * 3 / 4)
        ready_from_records = kernel["ts"] - _us(record.start_s - record.ready_s)
        assert kernel["args"]["ready ts"] == pytest.approx(ready_from_records, abs=1e-3)


def _nested(events):
    """Complete events on one thread nest or follow each other, as Perfetto requires."""
    stack = []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and e["ts"] >= stack[-1] - 1e-6:
            stack.pop()
        if stack and e["ts"] + e["dur"] > stack[-1] + 1e-6:
            return False
        stack.append(e["ts"] + e["dur"])
    return True


def test_fields_hta_reads(run):
    """What HolisticTraceAnalysis 0.5.0 reads from a trace, from its source:
    hta/common/trace_file.py takes a file's rank from the first '"rank": N' in it;
    hta/common/trace_parser.py (_compress_df) drops events without ``dur`` or ``cat`` and keeps
    ``stream``, ``correlation``, ``External id``, ``device`` from args (configs/default_event_args.py);
    hta/common/trace_filter.py counts an event as a GPU kernel when stream >= 0 and correlation >= 0,
    and hta/common/trace.py joins each to its launch by correlation and numbers iterations by the host's
    ``ProfilerStep#N``; hta/utils/utils.py sorts kernels by name: ^nccl.*Kernel is communication,
    ^Memcpy memory, the rest computation."""
    result, _ = run
    for rank, trace in kineto_traces(result).items():
        text = json.dumps(trace)
        assert re.search(r'"rank":\s+(\d+)', text).group(1) == str(rank)
        assert trace["distributedInfo"]["world_size"] == 4 and trace["schemaVersion"] == 1
        complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        assert all({"cat", "name", "ts", "dur", "pid", "tid"} <= e.keys() and e["dur"] >= 0 for e in complete)
        gpu = [e for e in complete if "stream" in e["args"]]
        host = [e for e in complete if "stream" not in e["args"]]
        launches = defaultdict(list)
        for e in host:
            if "correlation" in e["args"]:
                launches[e["args"]["correlation"]].append(e)
        for kernel in gpu:
            assert kernel["args"]["correlation"] >= 0 and kernel["args"]["device"] == rank
            assert len(launches[kernel["args"]["correlation"]]) == 1
        names = [e["name"] for e in gpu]
        assert sum(bool(re.match(r"^nccl.*Kernel", n)) for n in names) == 3 * len(result.buckets)
        copies = sum(1 for *_, label in result.rank_timelines[rank] if label.startswith("copy"))
        assert sum(bool(re.match(r"^Memcpy", n)) for n in names) == copies
        steps = sorted(e["name"] for e in host if e["name"].startswith("ProfilerStep#"))
        assert steps == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
        by_thread = defaultdict(list)
        for e in complete:
            by_thread[(e["pid"], e["tid"])].append(e)
        assert all(_nested(events) for events in by_thread.values())


def test_counter_track_is_the_bus_bandwidth(run):
    result, _ = run
    events = kineto_traces(result)[0]["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    kernels = [e for e in events if e["ph"] == "X" and e["name"].startswith("ncclDevKernel")]
    assert len(counters) == 2 * len(kernels)
    by_ts = {e["ts"]: e["args"]["busbw"] for e in counters if e["args"]["busbw"] > 0}
    for kernel in kernels:
        # nccl-tests' busbw: bytes / time x 2(n-1)/n, in GB/s
        expected = kernel["args"]["bucket bytes"] / (kernel["dur"] * 1e-6) * 1.5 / 1e9
        assert by_ts[kernel["ts"]] == pytest.approx(expected, rel=1e-3)


def test_one_file_holds_every_rank_with_unique_ids(run):
    result, _ = run
    trace = perfetto_trace(result)
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    ranks = sorted(result.rank_timelines)  # jitter: the ranks never the slowest are not simulated
    assert len(ranks) > 1
    assert sorted(processes.values()) == sorted(f"rank {r} {side}" for r in ranks for side in ("GPU", "host"))
    flow_ids = [e["id"] for e in events if e["ph"] == "s"]
    assert len(flow_ids) == len(set(flow_ids)) == len(ranks) * 3 * len(result.buckets)
    assert "rank" not in trace["distributedInfo"]


def test_trace_dir_writes_a_file_per_rank(tmp_path, capsys):
    out = tmp_path / "traces"
    out.mkdir()
    (out / "rank9.trace.json").write_text("{}")  # a larger earlier run's: HTA would read it as a rank
    (out / "notes.txt").write_text("mine")
    assert main(["run", QUICKSTART, "--set", "cluster.nodes=1", "--set", "cluster.gpus_per_node=2",
                 "--trace", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["notes.txt", "rank0.trace.json", "rank1.trace.json"]
    ranks = [json.loads((out / f"rank{r}.trace.json").read_text())["distributedInfo"]["rank"] for r in (0, 1)]
    assert ranks == [0, 1]


@pytest.mark.parametrize("gpus", [1, 2])
def test_hta_loads_and_analyses_the_trace(tmp_path, gpus):
    """HTA itself, where it is installed (it is not in the test extra: it pulls jupyterlab, pandas and
    plotly). Its overlap and compute time are checked against the Result's own intervals."""
    pytest.importorskip("hta")
    from hta.trace_analysis import TraceAnalysis

    from ddpsim.report.trace import write_trace

    # one step: HTA leaves out the last ProfilerStep of several as possibly incomplete
    # one GPU: a trace small enough for HTA to store its ids in int8 (ddpsim.report.trace.FIRST_ID)
    result = simulate(load_scenario(QUICKSTART, ["cluster.nodes=1", f"cluster.gpus_per_node={gpus}"]))
    write_trace(result, str(tmp_path) + "/")
    analysis = TraceAnalysis(trace_dir=str(tmp_path))
    breakdown = analysis.get_temporal_breakdown(visualize=False)
    assert list(breakdown["rank"]) == list(range(gpus))
    if gpus == 1:
        return  # no communication to overlap
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    for rank, intervals in result.rank_timelines.items():
        compute = [(a, b) for a, b, label in intervals if label in ("forward", "backward", "optimizer")]
        comm = [(a, b) for a, b, label in intervals if label.startswith("all-reduce")]
        compute_us = _us(union_length(compute))
        # HTA rounds each kernel to whole microseconds inwards: up to 2 us less per kernel
        row = breakdown[breakdown["rank"] == rank].iloc[0]
        assert compute_us - 2 * len(compute) <= row["compute_time(us)"] <= compute_us
        overlapped = union_length(compute) + union_length(comm) - union_length(compute + comm)
        expected_pct = 100 * overlapped / union_length(comm)
        assert overlap[overlap["rank"] == rank].iloc[0]["comp_comm_overlap_pctg"] == pytest.approx(expected_pct, abs=1)
