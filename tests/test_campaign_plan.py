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
