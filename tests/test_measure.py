"""``ddpsim measure`` on the CPU: a user's model reaches the rank's device, model options, Hugging Face
models from a config, the plan's folder (resume, refusals), and a whole dry run that calibrate can read."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from ddpsim.measure import cli, models, plans, profile  # noqa: E402
from ddpsim.measure.spec import parameters_off_device  # noqa: E402

USER_MODULE = textwrap.dedent('''
    import torch
    import torch.nn as nn

    def make_batch(batch_size, device, seed):
        g = torch.Generator(device="cpu").manual_seed(seed)
        return (torch.randn(batch_size, 6, generator=g).to(device),
                torch.randint(0, 3, (batch_size,), generator=g).to(device))

    def on_context_device():
        return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)), make_batch

    def on_cpu_always():
        # ignores the caller's device context, as many user factories do
        return nn.Sequential(nn.Linear(6, 8, device="cpu"), nn.Linear(8, 3, device="cpu")), make_batch

    def on_meta():
        return nn.Sequential(nn.Linear(6, 8, device="meta"), nn.Linear(8, 3, device="meta")), make_batch

    seen = {}

    def autocast_probe():
        def loss(model, batch):
            seen["autocast"] = torch.is_autocast_enabled("cpu")
            seen["dtype"] = model(batch[0]).dtype
            return model(batch[0]).float().sum()
        return nn.Sequential(nn.Linear(6, 3)), make_batch, loss
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module of the user's own, written outside the repository, as a factory's home would be."""
    (tmp_path / "usermod_measure.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("usermod_measure", None)
    yield "usermod_measure"
    sys.modules.pop("usermod_measure", None)


def test_each_build_of_a_factory_model_honours_the_device_context(user_module):
    # the first model used to be built once at resolve time (on the CPU) and handed out as is: on a GPU
    # the profile and the first DDP instance then ran a CPU model. Meta stands in for the GPU here.
    spec = models.resolve(f"{user_module}:on_context_device")
    for _ in range(2):
        with torch.device("meta"):
            model = spec.build()
        assert {p.device.type for p in model.parameters()} == {"meta"}


def test_build_on_moves_a_model_built_elsewhere_and_checks_every_tensor(user_module):
    spec = models.resolve(f"{user_module}:on_cpu_always")
    model = spec.build_on("meta")
    assert parameters_off_device(model, "meta") == []
    assert parameters_off_device(model, "cpu") == ["0.weight", "0.bias", "1.weight", "1.bias"]


def test_a_model_that_cannot_reach_the_device_is_refused_before_profile_and_ddp(user_module):
    spec = models.resolve(f"{user_module}:on_meta")
    with pytest.raises(RuntimeError, match=r"usermod_measure:on_meta: its parameters cannot be moved to cpu"):
        spec.build_on("cpu")
    with pytest.raises(RuntimeError, match="meta device"):
        profile.profile_model(spec, torch.device("cpu"), iters=1, warmup=0)


def test_model_options_set_batch_precision_and_optimizer(user_module):
    spec = models.resolve(f"{user_module}:on_context_device@batch=5@precision=bf16@optimizer=adamw")
    assert (spec.batch_size, spec.precision, spec.optimizer) == (5, "bf16-amp", "adamw")
    assert spec.name == f"{user_module}:on_context_device@batch=5@precision=bf16@optimizer=adamw"
    model = spec.build_on("cpu")
    assert isinstance(spec.make_optimizer(model.parameters()), torch.optim.AdamW)
    assert spec.make_batch(torch.device("cpu"))[0].shape == (5, 6)
    plain = models.resolve(f"{user_module}:on_context_device")
    assert (plain.batch_size, plain.precision, plain.optimizer) == (8, "fp32", "sgd")
    assert models.resolve("gpt2-124m@seq=128").seq_len == 128


def test_a_user_model_in_bf16_runs_its_loss_under_autocast(user_module):
    spec = models.resolve(f"{user_module}:autocast_probe@precision=bf16")
    model = spec.build_on("cpu")
    spec.loss(model, spec.make_batch(torch.device("cpu")))
    seen = sys.modules[user_module].seen
    assert seen == {"autocast": True, "dtype": torch.bfloat16}
    spec32 = models.resolve(f"{user_module}:autocast_probe")
    spec32.loss(model, spec32.make_batch(torch.device("cpu")))
    assert seen == {"autocast": False, "dtype": torch.float32}


@pytest.mark.parametrize("arg, message", [
    ("tiny-mlp@batch=0", "batch must be a positive integer"),
    ("tiny-mlp@precision=fp8", "precision must be fp32 or bf16"),
    ("tiny-mlp@optimizer=lamb", "optimizer must be sgd or adamw"),
    ("tiny-mlp@colour=red", "is not one of batch=..., precision=..."),
    ("tiny-mlp@batch=2@batch=3", "given twice"),
    ("tiny-mlp@seq=64", "seq applies to sequence models only"),
    ("no_such_module_xyz:build", "module 'no_such_module_xyz' does not import"),
    ("nothing-like-this", "unknown model 'nothing-like-this'"),
])
def test_bad_model_arguments_are_named(arg, message):
    with pytest.raises(models.ModelArgError, match=message):
        models.resolve(arg)


def test_a_hugging_face_model_is_built_from_its_config_file(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 97, "n_positions": 40}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = models.resolve(f"hf:{path}@batch=3")
    assert (spec.batch_size, spec.precision, spec.optimizer, spec.seq_len) == (3, "bf16-amp", "adamw", 40)
    model = spec.build_on("cpu")
    reference = transformers.GPT2LMHeadModel(transformers.GPT2Config(**{k: v for k, v in config.items()
                                                                         if k != "model_type"}))
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())
    batch = spec.make_batch(torch.device("cpu"))
    assert batch.shape == (3, 40) and int(batch.max()) < 97
    loss = spec.loss(model, batch)
    # untrained: the LM loss is near log(vocabulary)
    assert loss.dim() == 0 and abs(float(loss.detach()) - torch.log(torch.tensor(97.0)).item()) < 1.0
    with pytest.raises(models.ModelArgError, match="seq 41 is not within 1..40"):
        models.resolve(f"hf:{path}@seq=41")


def test_budget_durations():
    assert cli.parse_budget_s("10m") == 600 and cli.parse_budget_s("90") == 90 and cli.parse_budget_s("1.5h") == 5400
    for bad in ("ten", "-5m", "10 parsecs", "5s"):
        with pytest.raises(cli.MeasureArgError):
            cli.parse_budget_s(bad)


def test_the_default_shapes_follow_the_host():
    assert plans.shapes_for(1) == [] and plans.shapes_for(2) == ["1x2"] and plans.shapes_for(8) == ["1x8"]


def _measure(tmp_path, *extra, env_path=None):
    cmd = [sys.executable, "-m", "ddpsim.measure", "--out", str(tmp_path / "m"), "--cpu-slots", "2",
           "--link-classes", "socket", *extra]
    env = None
    if env_path is not None:
        import os

        env = dict(os.environ, PYTHONPATH=os.pathsep.join([env_path, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.parametrize("extra, message", [
    (["--model", "tiny-mlp,resnet50"], "one model per --model"),
    (["--budget", "ten minutes"], "--budget 'ten minutes'"),
    (["--shapes", "2x2"], "--shapes 2x2: needs 4 GPUs, this host has 2"),
    (["--link-classes", "nvlink,infiniband"], "--link-classes"),
    (["--plan", "nope"], "argument --plan: invalid choice: 'nope'"),
])
def test_bad_measure_arguments_exit_2_and_write_nothing(tmp_path, extra, message):
    done = _measure(tmp_path, *extra)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_a_dry_run_measures_a_user_model_resumes_and_refuses_another_plan(tmp_path, user_module):
    spec = f"{user_module}:on_cpu_always@batch=4"
    args = ("--plan", "quick", "--model", spec, "--budget", "300s")
    first = _measure(tmp_path, *args, env_path=str(tmp_path))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    out = tmp_path / "m"
    runs = [json.loads(x) for x in (out / "ddp_runs.jsonl").read_text().splitlines()]
    assert runs and all(r["model"] == spec for r in runs)
    assert all(r["status"] == "ok" for r in runs), [r.get("error") for r in runs]
    profile_json = json.loads(next((out / "profiles").glob("*.json")).read_text())
    assert profile_json["model"] == spec and profile_json["batch_size"] == 4
    assert f"{spec}: profile ok; socket" in first.stdout and "a dry run on CPU slots" in first.stdout
    launches = [json.loads(x) for x in (out / "launches.jsonl").read_text().splitlines()]
    ended_ok = {(r["kind"], r["transport"]) for r in launches if r["status"] == "ok"}
    assert ended_ok == {("profile", "none"), ("sweep", "socket")}

    again = _measure(tmp_path, *args, env_path=str(tmp_path))
    assert again.returncode == 0 and "resuming" in again.stdout and "done in an earlier run, skipped" in again.stdout
    rerun = [json.loads(x) for x in (out / "launches.jsonl").read_text().splitlines()][len(launches):]
    assert not [r for r in rerun if (r["kind"], r["transport"]) in ended_ok]  # nothing that ended ok ran twice

    other = _measure(tmp_path, "--plan", "probe", "--model", spec, "--budget", "300s", env_path=str(tmp_path))
    assert other.returncode == 2 and "an earlier run of another plan (plan differ)" in other.stderr


def test_the_torchrun_nnodes_way_across_hosts_records_two_nodes(tmp_path, free_port):
    # two torchrun agents, as two hosts would start them (here both on localhost, CPU and gloo): the
    # command docs/measure-harness.md gives for several hosts, with nothing emulated
    import os

    out = tmp_path / "two-hosts"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    agents = []
    for node_rank in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--node-rank", str(node_rank), "--rdzv-backend", "static", "--master-addr", "127.0.0.1",
               "--master-port", str(free_port), "-m", "ddpsim.measure.worker", "--mode", "sweep", "--out", str(out),
               "--transport", "socket", "--models", "tiny-mlp", "--caps", "25", "--no-timing-run", "--steps", "2",
               "--warmup", "1", "--nosync-steps", "1", "--round-warmup", "1", "--allreduce-max-bytes", "65536",
               "--allreduce-budget-s", "5", "--quick"]
        agents.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = [a.communicate(timeout=300)[0] for a in agents]
    assert [a.returncode for a in agents] == [0, 0], logs[0][-2000:] + logs[1][-2000:]
    runs = [json.loads(x) for x in (out / "ddp_runs.jsonl").read_text().splitlines()]
    assert runs and all(r["status"] == "ok" for r in runs)
    assert {(r["world_size"], r["nodes"], r["gpus_per_node"], r["nodes_emulated"]) for r in runs} == {(2, 2, 1, False)}
    sweeps = [json.loads(x) for x in (out / "allreduce.jsonl").read_text().splitlines()]
    assert sweeps and sweeps[0]["nodes"] == 2 and sweeps[0]["rows"]


def test_a_built_in_sequence_model_trains_in_fp32_too():
    # its logits are (batch, tokens, vocab): the fp32 loss flattens them as the bf16 one does
    spec = models.resolve("gpt2-124m@precision=fp32@batch=1@seq=8")
    model = spec.build_on("cpu")
    loss = spec.loss(model, spec.make_batch(torch.device("cpu")))
    assert loss.dim() == 0 and abs(float(loss.detach()) - torch.log(torch.tensor(50257.0)).item()) < 1.5


def test_the_sharded_plan_measures_every_strategy_and_resumes(tmp_path):
    done = _measure(tmp_path, "--plan", "sharded", "--model", "llama-tiny", "--budget", "150s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "m"
    runs = [json.loads(x) for x in (out / "fsdp_runs.jsonl").read_text().splitlines()]
    assert sorted(r["strategy"] for r in runs) == ["ddp", "zero2", "zero3"]
    assert all(r["status"] == "ok" and r["transport"] == "socket" and r["world_size"] == 2 for r in runs)
    # llama-tiny trains in fp32: its FSDP runs keep fp32 parameters (a bf16 policy is for bf16 models)
    assert "llama-tiny socket zero3 (fp32 params):" in done.stdout and "ddpsim validate-fsdp" in done.stdout
    # the model's world-size-1 profile, which validate-fsdp predicts compute from
    from ddpsim.fitting.sharded_validate import measured_profile

    assert json.loads((out / "profiles" / "llama-tiny.json").read_text())["model"] == "llama-tiny"
    assert measured_profile(dict(runs[0], _source=str(out / "fsdp_runs.jsonl"))) == str(out / "profiles" / "llama-tiny.json")
    again = _measure(tmp_path, "--plan", "sharded", "--model", "llama-tiny", "--budget", "150s")
    assert again.returncode == 0 and "socket: done in an earlier run, skipped" in again.stdout
    assert len((out / "fsdp_runs.jsonl").read_text().splitlines()) == 3 and "profiles of" not in again.stdout


def test_failures_of_counts_this_invocations_failed_launches_and_configurations(tmp_path):
    # what the campaign's exit code is made of: 1 when this count is not 0 (it said 0 "done" with every
    # configuration failed)
    from ddpsim.measure import campaign

    out = tmp_path / "c"
    (out).mkdir()
    campaign.append_jsonl(str(out / "launches.jsonl"), {"launch_id": "socket_w2_0", "status": "ok"})
    campaign.append_jsonl(str(out / "ddp_runs.jsonl"), {"launch_id": "socket_w2_0", "status": "failed"})
    campaign.append_jsonl(str(out / "ddp_runs.jsonl"), {"launch_id": "socket_w2_0", "status": "ok"})
    campaign.append_jsonl(str(out / "ddp_runs.jsonl"), {"launch_id": "older_w2_0", "status": "failed"})
    assert campaign.failures_of(str(out), {"socket_w2_0"}) == 1
    campaign.append_jsonl(str(out / "launches.jsonl"), {"launch_id": "shm_w2_0", "status": "timeout"})
    assert campaign.failures_of(str(out), {"socket_w2_0", "shm_w2_0"}) == 2
    assert campaign.failures_of(str(out), set()) == 0


@pytest.mark.parametrize("node_gpus, local_rank, node", [([3, 1], 2, 0), ([3, 1], 3, 1), ([2, 1, 1], 2, 1),
                                                          ([2, 1, 1], 3, 2)])
def test_uneven_emulated_nodes_group_ranks_in_order(tmp_path, monkeypatch, node_gpus, local_rank, node):
    from ddpsim.measure.worker import shape_label, shape_setup

    for key, value in {"RANK": local_rank, "WORLD_SIZE": 4, "LOCAL_RANK": local_rank, "LOCAL_WORLD_SIZE": 4}.items():
        monkeypatch.setenv(key, str(value))
    monkeypatch.delenv("NCCL_HOSTID", raising=False)
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    shape, _ = shape_setup(None, str(tmp_path), "x", "socket", node_gpus)
    # ranks fill the nodes in order: with 3+1, local ranks 0-2 on node 0 and 3 alone on node 1
    assert os.environ["NCCL_HOSTID"].endswith(f"-node{node}")
    assert shape["nodes"] == len(node_gpus) and shape["node_gpus"] == node_gpus
    # uneven nodes have no single GPUs-per-node number: readers that need one must refuse the record
    assert shape["gpus_per_node"] is None
    assert shape_label(shape) == "+".join(map(str, node_gpus))


def test_uneven_nodes_must_cover_the_host(tmp_path, monkeypatch):
    from ddpsim.measure.worker import shape_setup

    for key, value in {"RANK": 0, "WORLD_SIZE": 4, "LOCAL_RANK": 0, "LOCAL_WORLD_SIZE": 4}.items():
        monkeypatch.setenv(key, str(value))
    with pytest.raises(SystemExit, match="must sum to the world"):
        shape_setup(None, str(tmp_path), "x", None, [2, 1])


def test_a_dry_run_of_the_probe_runs_ddp_steps_at_one_cap_beside_the_sweep(tmp_path):
    # issue #39: the probe's DDP steps are what re-centres the pooled overhead terms (fitting/probe_overheads.py)
    done = _measure(tmp_path, "--plan", "probe", "--model", "tiny-mlp", "--budget", "120s")
    # not the exit code: on a loaded CPU the profile launch can outrun its 35 s (it did once here, 65 s for
    # tiny-mlp); the profile is the default plan's and tested there. What the probe adds is below.
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "m"
    runs = [json.loads(x) for x in (out / "ddp_runs.jsonl").read_text().splitlines()]
    assert runs and all(r["status"] == "ok" and float(r["bucket_cap_mb"]) == 25 for r in runs)
    assert not [r for r in runs if r.get("timing_hook")]  # no per-bucket timing run in the probe
    assert (out / "allreduce.jsonl").read_text().strip()
    campaign_args = json.loads((out / "campaign_args.json").read_text())["args"]
    assert campaign_args["steps"] == 10 and campaign_args["flat_weights"]
    # what the folder is good for: re-centring a pooled calibration, not a calibration of its own
    nxt = "\n".join(cli._next_commands(str(out), have_runs=True, have_sweeps=True, profiled=["tiny-mlp"]))
    assert "--recentre" in nxt and "ddpsim validate" not in nxt
