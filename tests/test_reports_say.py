"""Issue 45: plots and reports that say what they show, and decisions that agree across commands."""

from __future__ import annotations

import os

import pytest

from ddpsim.cli.main import main
from ddpsim.loader import load_scenario
from ddpsim.units import ordinal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, "scenarios", "quickstart.yaml")  # 2 x 8 H100, ResNet-50, bucket_cap_mb 25


@pytest.mark.parametrize("n, text", [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"),
                                     (13, "13th"), (21, "21st"), (22, "22nd"), (101, "101st"), (111, "111th")])
def test_ordinals(n, text):
    assert ordinal(n) == text


def test_the_memory_row_says_every_2nd_block(capsys):
    assert main(["run", "h100-16x8-ib400-llama7b-zero3", "--set", "workload.activation_checkpointing=every_2",
                 "--set", "cluster.nodes=1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "every 2nd block" in out and "2th" not in out


def test_ranks_drawn_names_them():
    from ddpsim.report.plots import ranks_drawn

    assert ranks_drawn(list(range(8)), 16) == "ranks 0-7 of 16"
    assert ranks_drawn([*range(8), 12], 16) == "ranks 0-7 and 12 of 16"
    assert ranks_drawn([0, 1], 2) == "all 2 ranks"
    assert ranks_drawn([0], 16) == "rank 0 of 16"


def test_the_timeline_title_says_which_ranks_it_draws(tmp_path):
    from ddpsim.report.plots import timeline_png, timeline_ranks
    from ddpsim.simulation import simulate

    result = simulate(load_scenario(QUICKSTART, ["simulation.mode=detailed"]))
    drawn = timeline_ranks(result)
    assert len(drawn) < result.world_size == 16  # the picture leaves ranks out: the title must say so
    fig = timeline_png(result, str(tmp_path / "t.png"))
    title = fig.axes[0].get_title()
    assert f"ranks {drawn[0]}-{drawn[-1]} of 16" in title, title


def test_the_sweep_step_time_axis_starts_at_zero_and_says_the_spread(tmp_path, monkeypatch):
    import ddpsim.report.plots as plots

    drawn = {}
    real = plots.line_plot

    def spy(*args, **kwargs):
        fig = real(*args, **kwargs)
        drawn[os.path.basename(args[0])] = (fig.axes[0].get_ylim(), fig.axes[0].get_title(), args[2])
        return fig

    monkeypatch.setattr(plots, "line_plot", spy)
    assert main(["sweep", QUICKSTART, "--grid", "ddp.bucket_cap_mb=5,25,100", "--out", str(tmp_path / "s"),
                 "--workers", "1", "--json"]) == 0
    (low, high), title, series = drawn["step_time.png"]
    assert low == 0 and high > 0
    steps = [y for ys in series.values() for y in ys]
    assert f"max/min {100 * (max(steps) / min(steps) - 1):.1f}% apart" in title


def test_one_tie_rule_for_strategy_and_buckets():
    from ddpsim.planning.advisor import pick_cap
    from ddpsim.planning.strategy import advise_strategy
    from ddpsim.planning.ties import MIN_GAIN_REL, pick_simplest

    advice = advise_strategy(load_scenario(QUICKSTART))
    steps = {o.strategy: o.step_time_s for o in advice.options if o.fits}
    order = ["ddp", "zero1", "zero2", "zero3"]
    # the advice is the simplest strategy within the tie threshold of the fastest, on its own numbers
    within = [s for s in order if s in steps and steps[s] <= min(steps.values()) * (1 + MIN_GAIN_REL)]
    assert advice.recommended == within[0]
    # the case: ZeRO-1 a quarter of a percent faster than DDP is a tie in both commands, and the simplest
    # (DDP; as caps, the default) wins it
    tie = {"ddp": 1.0025, "zero1": 1.0}
    assert pick_simplest(tie, order.index) == "ddp"
    assert pick_cap({None: tie["ddp"], 5.0: tie["zero1"]}) is None
    # past the threshold the faster one wins in both
    assert pick_cap({None: 1.0, 5.0: 1.0 / (1 + 2 * MIN_GAIN_REL)}) == 5.0


def test_tune_buckets_and_run_agree_on_the_bucket_count(capsys):
    assert main(["run", QUICKSTART]) == 0
    run_out = capsys.readouterr().out
    buckets = next(line.split()[-1] for line in run_out.splitlines() if line.startswith("buckets "))
    assert main(["tune-buckets", QUICKSTART, "--candidates", "5,25,default"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("your scenario's bucket_cap_mb: 25"))
    assert f": {buckets} buckets," in line
    # the default's count differs by its 1 MiB first bucket, and says so
    assert "bucket_cap_mb unset: a 1 MiB first bucket" in out


def test_hf_models_name_their_loss_so_transformers_does_not_warn():
    transformers = pytest.importorskip("transformers")
    from transformers.loss.loss_utils import LOSS_MAPPING

    from ddpsim.measure.hf import build_model

    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=16)
    model, takes_labels = build_model(config)
    assert takes_labels and type(model).__name__ == "GPT2LMHeadModel"
    # the loss transformers itself falls back to, now named: no warning, the same function
    assert model.loss_type == "ForCausalLM" and model.loss_function is LOSS_MAPPING["ForCausalLM"]


def test_a_long_simulation_says_what_sets_its_time_once(monkeypatch):
    import io

    import ddpsim.simulation as simulation

    monkeypatch.setattr(simulation, "PROGRESS_EVERY_S", 0.0)  # a line every step instead of every 5 s
    stream = io.StringIO()
    simulation.simulate(load_scenario(QUICKSTART, ["simulation.iterations=3"]), progress=stream)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "simulation.iterations sets this" in lines[0]
    assert "simulation.iterations" not in lines[1]
