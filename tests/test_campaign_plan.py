"""The campaign driver's plan, read without launching anything (standard library only: no torch needed):
which launches a set of options asks for, their ids and command lines, as campaign.py's docstring states."""

from __future__ import annotations

from ddpsim.measure import campaign


def _plan(tmp_path, *extra: str) -> tuple:
    a = campaign.build_parser().parse_args(["--out", str(tmp_path), "--cpu-slots", "2", "--models", "tiny-mlp",
                                            "--shapes", "1x2,2x1", "--transports", "nvlink,socket", *extra])
    return a, campaign.plan_campaign(a, str(tmp_path))


def test_a_shape_of_one_gpu_per_node_has_one_launch_over_the_network(tmp_path):
    _a, plan = _plan(tmp_path)
    assert [(x.kind, x.transport, x.shape) for x in plan.launches] == [
        ("profile", "none", (1, 1)), ("sweep", "nvlink", (1, 2)), ("sweep", "socket", (1, 2)),
        ("sweep", "socket", (2, 1))]
    assert plan.gpus == ["cpu", "cpu"] and plan.steps == 30 and plan.caps == "1,5,10,25,50,200"


def test_shapes_larger_than_the_host_are_skipped_and_repeats_follow_the_sweeps(tmp_path):
    _a, plan = _plan(tmp_path, "--shapes", "1x2,1x4", "--repeat", "1", "--no-profile", "--quick")
    assert [(x.kind, x.transport, x.shape, x.index) for x in plan.launches] == [
        ("sweep", "nvlink", (1, 2), 0), ("sweep", "socket", (1, 2), 0),
        ("repeat", "nvlink", (1, 2), 1), ("repeat", "socket", (1, 2), 1)]
    assert plan.steps == 3 and plan.caps == "5,25"


def test_launch_ids_count_past_earlier_ones(tmp_path):
    _a, plan = _plan(tmp_path)
    used = {"socket_w2_0"}
    ids = [campaign._launch_id(x, used) for x in plan.launches]
    assert ids == ["profile_w1_0", "nvlink_w2_0", "socket_w2_1", "socket_2x1_0"]


def test_an_emulated_two_node_launch_runs_the_worker_with_its_node_size(tmp_path):
    a, plan = _plan(tmp_path)
    two_nodes = plan.launches[-1]
    cmd, env = campaign.launch_command(a, plan, two_nodes, "socket_2x1_0", 100.0)
    assert cmd[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    i = cmd.index("--gpus-per-node")
    assert cmd[i + 1] == "1" and cmd[cmd.index("--mode") + 1] == "sweep"
    assert env["NCCL_NET"] == "Socket" and env["CUDA_VISIBLE_DEVICES"] == ""  # a CPU dry run: gloo


def _four_gpu_plan(tmp_path, budget_s: float) -> tuple:
    a = campaign.build_parser().parse_args(["--out", str(tmp_path), "--cpu-slots", "4", "--models", "resnet50",
                                            "--shapes", "1x4,2x2", "--transports", "nvlink,shm,socket",
                                            "--budget-s", str(budget_s)])
    plan = campaign.plan_campaign(a, str(tmp_path))
    return campaign.select_launches(plan.launches, budget_s, len(plan.models))


def test_a_short_budget_keeps_the_links_nccl_picks_itself_and_drops_the_forced_classes(tmp_path):
    # 85 s on 4 GPUs (h200x4-fresh-2026-11-28): the profile's share is 25 s a model + 10 s = 35 s, so 50 s are
    # left, one 30-s sweep launch: NVLink on one node, not the socket launch the weighted shares ran before
    kept, dropped = _four_gpu_plan(tmp_path, 85.0)
    assert [(x.kind, x.transport, x.shape) for x in kept] == [("profile", "none", (1, 1)), ("sweep", "nvlink", (1, 4))]
    assert {(x.transport, x.shape) for x in dropped} == {
        ("shm", (1, 4)), ("socket", (1, 4)), ("nvlink", (2, 2)), ("shm", (2, 2)), ("socket", (2, 2))}
    # 125 s: 90 s left, three sweep launches: both NVLink shapes first, then shared memory on one node (plan order)
    kept, _ = _four_gpu_plan(tmp_path, 125.0)
    assert [(x.transport, x.shape) for x in kept if x.kind == "sweep"] == [
        ("nvlink", (1, 4)), ("shm", (1, 4)), ("nvlink", (2, 2))]


def test_a_budget_that_covers_every_launch_drops_none(tmp_path):
    kept, dropped = _four_gpu_plan(tmp_path, 600.0)
    assert dropped == [] and len(kept) == 7


def test_no_sweep_launch_is_starved_below_its_floor_by_heavier_weights():
    # the weighted share of the first of six launches was 61 s x 1.3 / 11.8 = 7 s; the floor gives it an equal
    # share of what is left, up to the 30 s a launch needs
    assert campaign.sweep_floor_s(61.0, 6) == 61.0 / 6
    assert campaign.sweep_floor_s(200.0, 2) == campaign.MIN_SWEEP_LAUNCH_S
