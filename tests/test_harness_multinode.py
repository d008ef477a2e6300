"""Offline (CPU, gloo) checks of the harness's multi-node shapes, DDP option variants, interleaved rounds,
NCCL log parsing and micro-benchmarks.  One tiny two-rank campaign runs under torchrun (about 20 s)."""
import json
import os

import pytest

torch = pytest.importorskip("torch")

from ddpsim.measure import campaign, microbench, models, nccl_log, runner, worker  # noqa: E402

NCCL_LOG = """\
host:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
host:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>
host:1:1 [0] NCCL INFO comm 0x5 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0
host:1:1 [0] NCCL INFO Trees [0] 1/2/-1->0->-1 [1] 1/-1/-1->0->2
host:1:1 [0] NCCL INFO Channel 00/0 : 3[3] -> 0[0] [receive] via NET/Socket/0
host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
host:1:1 [0] NCCL INFO AllReduce: 4096 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..1}
host:1:1 [0] NCCL INFO AllReduce: 4096 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..1}
host:1:1 [0] NCCL INFO AllReduce: 1073741824 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..3}
host:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Ring
"""


def test_nccl_log_parsing():
    topo = nccl_log.topology(NCCL_LOG, nodes_expected=2)
    assert topo["nccl_nnodes_seen"] == 2 and topo["nccl_local_ranks_seen"] == 2 and topo["nccl_nranks_seen"] == 4
    assert topo["nccl_nnodes_verified"] is True
    assert topo["nccl_transports_seen"] == ["NET/Socket", "P2P/CUMEM"]
    assert topo["nccl_inter_node_transport_seen"] == "socket"
    assert topo["nccl_trees_lines"] and topo["nccl_socket_interface"].startswith("[0]eth0")
    assert nccl_log.topology(NCCL_LOG, nodes_expected=4)["nccl_nnodes_verified"] is False
    assert nccl_log.topology("", 2)["nccl_nnodes_verified"] is None  # gloo: nothing printed, nothing claimed
    ch = nccl_log.tuning_choices(NCCL_LOG)
    assert ch[4096] == {"algo": "TREE", "proto": "LL", "channels": 2, "calls": 2, "mixed": False}
    assert ch[1 << 30]["algo"] == "RING" and ch[1 << 30]["proto"] == "SIMPLE"
    assert nccl_log.algo_env_seen(NCCL_LOG) == ["Ring"]
    trimmed = nccl_log.trim(NCCL_LOG)
    assert "Bytes -> Algo" not in trimmed and "nNodes 2" in trimmed and "3 per-call TUNING lines cut" in trimmed


def test_variant_options_are_explicit():
    assert runner.variant_options("none") == runner.VARIANT_DEFAULTS
    assert runner.is_default_ddp(runner.variant_options("none"))
    o = runner.variant_options("gbv+bf16+accum4")
    assert o["gradient_as_bucket_view"] and o["comm_hook"] == "bf16" and o["grad_accumulation_steps"] == 4
    assert not runner.is_default_ddp(o)
    assert runner.variant_options("timing")["timing_hook"] and runner.variant_options("timing")["comm_hook"] is None
    for bad in ("fp17", "timing+fp16"):
        with pytest.raises(ValueError):
            runner.variant_options(bad)


def test_plan_runs_and_reference():
    plan = runner.plan_runs(["a", "b"], [1, 25], ["none", "fp16"], variant_caps=[25], cap_models=["b"])
    assert plan == [("a", None, 25, "none"), ("a", None, 25, "fp16"),
                    ("b", None, 1, "none"), ("b", None, 25, "none"), ("b", None, 25, "fp16")]
    assert runner.parse_reference("resnet50:25") == ("resnet50", None, 25, "none")
    assert runner.parse_reference("pkg.mod:fn:5:gbv") == ("pkg.mod:fn", None, 5, "gbv")
    assert runner.parse_reference("none") is None


def test_unseen_models_and_custom_factory():
    n = sum(p.numel() for _, p in models.ddp_param_order(models.MODELS["bert-large"].build()))
    assert 330e6 < n < 340e6  # BERT-large class, decoder tied to the word embedding
    assert len(models.ddp_param_order(models.mlp_ln_64())) == 64 * 4 + 2
    ok, why = models.MODELS["vit-b16"].available()
    assert ok or "torchvision" in why
    spec = models.resolve("ddpsim.measure.models:example_factory", 5)
    assert spec.batch_size == 5 and spec.source == "ddpsim.measure.models:example_factory"
    m1, m2 = spec.build(), spec.build()
    assert m1 is not m2
    loss = spec.loss(m1, spec.make_batch(torch.device("cpu"), seed=1))
    assert loss.dim() == 0 and models.file_stem(spec.name) == "ddpsim.measure.models_example_factory"
    with pytest.raises(models.ModelArgError, match="unknown model 'no-such-model'"):
        models.resolve("no-such-model")


def test_microbench_records_on_cpu(gloo_world1):
    dev = torch.device("cpu")
    ov = microbench.allreduce_overlap(dev, 1, sizes=(4096,), kernels=("gemm", "conv"), reps=3)
    assert [r["kernel"] for r in ov] == ["gemm", "conv"]
    for r in ov:
        assert r["allreduce_alone_us"]["n"] == 3 and r["kernel_with_allreduce_us"]["median"] > 0
        assert r["allreduce_slowdown_ratio"] > 0 and r["allreduce_series_slowdown_ratio"] > 0
        assert r["allreduce_alone_queued_us"]["n"] == 3 and r["allreduce_series_with_kernel_us"] > 0
    cpu = microbench.allreduce_launch_cpu(dev, 1, sizes=(4096,), reps=3)
    assert cpu[0]["path"] == "python" and cpu[0]["call_cpu_us"]["median"] > 0
    assert cpu[-1]["path"] == "ddp_comm_hook" and cpu[-1]["repeats"] > 0
    casts = microbench.casts(dev, sizes_mib=(1,), reps=2)
    assert {r["to_dtype"] for r in casts} == {"float16", "bfloat16"} and casts[0]["cast_down_us"]["n"] == 2
    json.dumps(ov + cpu + casts)


def test_custom_model_and_variants_in_one_runner(gloo_world1):
    dev = torch.device("cpu")
    spec = models.resolve("ddpsim.measure.models:example_factory", 4)
    for var in ("accum3", "static_graph", "gbv"):
        r = runner.Runner(spec, 25, var, dev, 1)
        r.warmup(3)
        r.measure_round(2, 1, "round", 0, 0.0)
        rec = r.record()
        r.close()
        assert rec["iterations"] == 2 and len(rec["step_wall_times_s"]) == 2 and rec["n_rounds"] == 1
        assert sum(rec["bucket_sizes_bytes"]) == rec["param_bytes"]
    r = runner.Runner(spec, 25, "find_unused", dev, 1)
    r.warmup(3)
    r.measure_round(2, 0, "round", 0, 0.0)
    rec = r.record()
    r.close()
    assert rec["ddp_logging"].get("find_unused_parameters") in (1, True, None)
    assert sum(rec["bucket_sizes_bytes"]) == rec["param_bytes"]  # no rebuild: the initial layout


def test_two_emulated_nodes_campaign_on_gloo(tmp_path, monkeypatch):
    """The campaign driver end to end with two CPU ranks as two emulated nodes (2x1): shape fields, explicit
    option fields, two interleaved rounds per configuration, the reference first and last, forced-algorithm
    sweeps recorded apart."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "camp"
    rc = campaign.main(["--out", str(out), "--cpu-slots", "2", "--shapes", "2x1", "--algos", "default,ring",
                        "--models", "tiny-mlp", "--caps", "1,25", "--variants", "none,gbv,fp16,accum2",
                        "--variant-caps", "25", "--timing-cap", "none", "--reference", "tiny-mlp:25",
                        "--rounds", "2", "--steps", "2", "--round-warmup", "1", "--no-profile", "--quick",
                        "--budget-s", "120"])
    assert rc == 0
    runs = [json.loads(x) for x in (out / "ddp_runs.jsonl").read_text().splitlines()]
    assert {(r["bucket_cap_mb"], r["variant"]) for r in runs} == {(1, "none"), (25, "none"), (25, "gbv"),
                                                                   (25, "fp16"), (25, "accum2")}
    for r in runs:
        assert r["status"] == "ok", r.get("error")
        assert (r["nodes"], r["gpus_per_node"], r["nodes_emulated"]) == (2, 1, True)
        assert r["inter_node_transport"] == "socket" and r["transport"] == "socket" and r["world_size"] == 2
        assert r["nccl_nnodes_verified"] is None  # gloo: NCCL printed nothing
        for k in runner.VARIANT_DEFAULTS:
            assert k in r
        assert r["n_rounds"] >= 2 and len(r["round_medians_s"]) == r["n_rounds"]
        assert len(r["step_times_s"]) == len(r["step_wall_times_s"]) == r["iterations"]
        assert r["step_time_source"] == "perf_counter"
    by_var = {(r["bucket_cap_mb"], r["variant"]): r for r in runs}
    assert by_var[(25, "fp16")]["comm_hook"] == "fp16" and by_var[(25, "accum2")]["grad_accumulation_steps"] == 2
    assert by_var[(25, "none")]["ddp_options_default"] and not by_var[(25, "gbv")]["ddp_options_default"]
    ref = by_var[(25, "none")]
    assert ref["is_reference"] and sum(r["is_reference"] for r in runs) == 1
    pos = [x["position"] for x in sorted(ref["rounds"], key=lambda x: x["slot"])]
    assert pos[0] == "reference_start" and pos[-1] == "reference_end" and pos.count("round") == 2
    # interleaved: the two rounds of one configuration are separated by the other configurations' rounds
    slots = sorted(x["slot"] for x in by_var[(1, "none")]["rounds"])
    assert slots[1] - slots[0] == 5
    ar = [json.loads(x) for x in (out / "allreduce.jsonl").read_text().splitlines()]
    assert [(r["algorithm_forced"], r["status"]) for r in ar] == [(None, "ok"), ("ring", "ok")]
    assert all(r["nodes"] == 2 and r["gpus_per_node"] == 1 and r["rows"] for r in ar)
    assert (out / "allreduce_socket_w2_2x1_ring.txt").exists()
    launches = [json.loads(x) for x in (out / "launches.jsonl").read_text().splitlines()]
    assert launches[0]["launch_id"] == "socket_2x1_0" and launches[0]["nccl_env"]["NCCL_NET"] == "Socket"
    assert launches[0]["nccl_env"]["NCCL_IB_DISABLE"] == "1" and launches[0]["nccl_env"]["NCCL_NVLS_ENABLE"] == "0"


def test_launch_env_for_emulated_nodes():
    env = campaign.launch_env("nvlink", ["0", "1", "2", "3"], nodes=2, nccl_debug=True)
    assert env["NCCL_NET"] == "Socket" and env["NCCL_IB_DISABLE"] == "1" and env["NCCL_DEBUG"] == "INFO"
    assert "TUNING" in env["NCCL_DEBUG_SUBSYS"] and "NCCL_P2P_DISABLE" not in env
    env = campaign.launch_env("nvlink", ["0", "1"])
    assert "NCCL_NET" not in env and "NCCL_DEBUG" not in env and env["NCCL_NVLS_ENABLE"] == "0"
    assert campaign.parse_shape("2x2") == (2, 2) and campaign.parse_shape("4X1") == (4, 1)


def test_shape_setup_sets_hostid_per_group(monkeypatch, tmp_path):
    for k in ("NCCL_HOSTID", "NCCL_DEBUG", "NCCL_DEBUG_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("NCCL_NET", "Socket")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    shape, path = worker.shape_setup(2, str(tmp_path), "lid")
    assert shape == {"nodes": 2, "gpus_per_node": 2, "nodes_emulated": True, "nccl_hostid": "ddpsim-0-node1",
                     "inter_node_transport": "socket"}
    assert os.environ["NCCL_HOSTID"] == "ddpsim-0-node1" and path.endswith("nccl_lid_r3.log")
    monkeypatch.delenv("NCCL_HOSTID")
    monkeypatch.delenv("NCCL_DEBUG_FILE")
    # a real multi-node launch (torchrun --nnodes 2, 2 GPUs each): nothing emulated, no NCCL_HOSTID
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    shape, _ = worker.shape_setup(None, str(tmp_path), "lid")
    assert (shape["nodes"], shape["gpus_per_node"], shape["nodes_emulated"]) == (2, 2, False)
    assert "NCCL_HOSTID" not in os.environ
    with pytest.raises(SystemExit):
        worker.shape_setup(3, str(tmp_path), "lid")


def test_net_probe_patterns_cross_nodes_only():
    from ddpsim.fitting.netprobe import direction
    from ddpsim.measure import netprobe

    for world, g in ((2, 1), (4, 2), (4, 1), (8, 2), (8, 4), (3, 1), (5, 1), (7, 1), (6, 2)):
        pats = netprobe.patterns(world, g)
        assert all(0 <= r < world for flows in pats.values() for f in flows for r in f)
        assert {"one_way", "two_way", "shift_all", "ring_net_hops"} <= set(pats)
        for flows in pats.values():
            assert flows and all(src // g != dst // g for src, dst in flows)
            assert len(set(flows)) == len(flows)
        # one_way: one endpoint sends, nobody answers; two_way: the same pair both ways
        assert pats["two_way"] == [pats["one_way"][0], pats["one_way"][0][::-1]]
        # NCCL's ring over ranks in order crosses the network once per node boundary
        assert len(pats["ring_net_hops"]) == world // g
        # every endpoint sends once and receives once in shift_all (two nodes: same peer both ways)
        assert sorted(s for s, _ in pats["shift_all"]) == list(range(world))
        assert sorted(d for _, d in pats["shift_all"]) == list(range(world))
        assert pats["one_way"] == [(0, g)]
        # the analysis classifies each pattern as the harness means it (ddpsim.fitting.netprobe)
        assert direction(pats["one_way"]) == "one" and direction(pats["two_way"]) == "both"
        assert direction(pats["shift_all"]) == "both"
        if "one_way_pairs" in pats:
            assert direction(pats["one_way_pairs"]) == "one"
    assert netprobe.patterns(4, 2)["ring_net_hops"] == [(1, 2), (3, 0)]
    assert netprobe.patterns(4, 1)["one_way_pairs"] == [(0, 1), (2, 3)]
    assert netprobe.patterns(4, 4) == {}


def test_net_probe_in_a_campaign_on_gloo(tmp_path, monkeypatch):
    """--net-probe: every pattern recorded once per multi-node launch, with its flows and a rate."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "camp"
    rc = campaign.main(["--out", str(out), "--cpu-slots", "4", "--shapes", "2x2", "--algos", "default",
                        "--models", "tiny-mlp", "--skip-ddp", "--no-profile", "--quick", "--net-probe",
                        "--transports", "nvlink", "--budget-s", "120"])
    assert rc == 0
    recs = [json.loads(x) for x in (out / "netprobe.jsonl").read_text().splitlines()]
    from ddpsim.measure import netprobe

    assert [r["pattern"] for r in recs] == [*netprobe.patterns(4, 2), "collective_one_way", "collective_two_way"]
    assert [r["flows"] for r in recs[:-2]] == [[list(f) for f in flows] for flows in netprobe.patterns(4, 2).values()]
    assert [r["flows"] for r in recs[-2:]] == [[[0, 2]], [[0, 2], [2, 0]]]
    for r in recs:
        assert r["status"] == "ok" and r["nodes"] == 2 and r["gpus_per_node"] == 2 and r["reps"] == 5
        assert r["flow_GBps"] == pytest.approx(r["bytes"] / r["time_s_median"] / 1e9)


def test_net_probe_rounds_and_repeat_launches_on_gloo(tmp_path, monkeypatch):
    """--net-probe-rounds 3 --repeat 1 --skip-ddp: the sweep launch probes before its sweeps and at its end
    (the round before the DDP runs is left out: no DDP follows it); the repeat launch, with neither sweeps
    nor DDP, probes once. Each round is a full set of patterns with its round number."""
    from ddpsim.measure import netprobe

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "camp"
    rc = campaign.main(["--out", str(out), "--cpu-slots", "4", "--shapes", "4x1", "--algos", "default",
                        "--models", "tiny-mlp", "--skip-ddp", "--no-profile", "--quick", "--net-probe",
                        "--net-probe-rounds", "3", "--repeat", "1", "--transports", "nvlink", "--budget-s", "160"])
    assert rc == 0
    recs = [json.loads(x) for x in (out / "netprobe.jsonl").read_text().splitlines()]
    per_round = [*netprobe.patterns(4, 1), "collective_one_way", "collective_two_way"]
    assert all(r["status"] == "ok" for r in recs)
    sweep = [r for r in recs if r["launch_id"] == "socket_4x1_0"]
    repeat = [r for r in recs if r["launch_id"] == "socket_4x1_1"]
    assert len(sweep) + len(repeat) == len(recs)
    assert [r["pattern"] for r in sweep] == per_round * 2
    assert [r["probe_round"] for r in sweep] == [0] * len(per_round) + [1] * len(per_round)
    assert [r["pattern"] for r in repeat] == per_round
    assert {r["probe_round"] for r in repeat} == {0}


def test_trimmed_log_never_ends_inside_a_communicators_init():
    """A probe's extra communicator can push its tuning table past the trim: the excerpt must stop before
    that communicator, not in its table (the reader refuses a table without its closing line)."""
    first = ["NCCL INFO comm 0x1 Init START"] + [f"NCCL INFO graph line {i}" for i in range(5)] + [
        "NCCL INFO   Algorithm   |  Tree  |  Ring  |", "NCCL INFO 2 coll channels, 2 p2p channels",
        "NCCL INFO comm 0x1 Init COMPLETE"]
    second = ["NCCL INFO comm 0x2 Init START", "NCCL INFO   Algorithm   |  Tree  |  Ring  |"] + [
        f"NCCL INFO table row {i}" for i in range(10)] + ["NCCL INFO 2 coll channels, 2 p2p channels"]
    text = "\n".join(first + second)
    trimmed = nccl_log.trim(text, max_lines=len(first) + 4).splitlines()
    assert trimmed[:len(first)] == first and "0x2" not in " ".join(trimmed)
    assert trimmed[len(first)] == f"# ddpsim: {len(second):d} more lines cut"
    assert nccl_log.trim(text, max_lines=100).splitlines()[:-1] == first + second  # nothing cut: all kept
