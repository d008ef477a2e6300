"""The command line a user sees: few options per subcommand, two examples that run as printed, the
research switches gone from it, and no file written where none was asked for."""

from __future__ import annotations

import argparse
import os
import shlex

import pytest

from ddpsim.cli.main import build_parser, main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, "scenarios", "quickstart.yaml")
# switches whose experiments lost (docs/model.md, "Switches that lost their experiment"): library parameters only
REMOVED = {
    "validate": ["--fix-measured-stretch", "--idle-start-wait", "--prune-undetermined",
                 "--comm-terms-fitted-models-only", "--jitter-from-profile", "--normalise-launches"],
    "calibrate": ["--fix-measured-stretch", "--idle-start-wait", "--prune-undetermined",
                  "--comm-terms-fitted-models-only"],
}


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """The optional flags a user reads in --help (argparse's own -h/--help left out; --allow-other-gpu, the
    one answer to a refusal that names it, is every calibration-reading command's and not counted)."""
    return [a.option_strings[-1] for a in parser._actions
            if a.option_strings and not isinstance(a, argparse._HelpAction) and a.dest != "allow_other_gpu"]


def test_validate_shows_at_most_ten_options_and_none_of_the_lost_switches():
    options = _options(_subcommands()["validate"])
    assert len(options) <= 10, options
    assert not set(options) & set(REMOVED["validate"])


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_subcommand_is_small_and_ends_with_two_examples_that_parse(name):
    parser = _subcommands()[name]
    assert len(_options(parser)) <= 10
    help_text = parser.format_help().rstrip()
    assert "examples:" in help_text
    examples = help_text.split("examples:\n")[-1].splitlines()
    assert len(examples) == 2 and help_text.endswith(examples[-1])
    for line in examples:
        argv = shlex.split(line)
        assert argv[:2] == ["ddpsim", name]
        build_parser().parse_args(argv[1:])  # a usage error exits 2 here, failing the test
        # the shipped files an example names exist (scenarios, campaigns, calibrations)
        for word in argv[2:]:
            if word.startswith(("scenarios/", "validation/")):
                assert os.path.exists(os.path.join(ROOT, word)), word


@pytest.mark.parametrize("command, flag", [(c, f) for c, flags in REMOVED.items() for f in flags])
def test_a_removed_switch_is_a_usage_error(command, flag, tmp_path, capsys):
    argv = [command, os.path.join(ROOT, "validation", "data", "h200x4-2026-11-26"), flag]
    if command == "calibrate":
        argv += ["--out", str(tmp_path / "c.json")]
    assert main(argv) == 2
    assert f"unrecognized arguments: {flag}" in capsys.readouterr().err
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("argv", [
    ["scale", QUICKSTART, "--nodes", "1,2"],
    ["tune-buckets", QUICKSTART, "--candidates", "5,25"],
    ["variability", QUICKSTART, "--iterations", "3", "--jitter-cv", "0.05"],
])
def test_without_out_nothing_is_written(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    assert os.listdir(tmp_path) == []
    assert "pass --out DIR to write" in capsys.readouterr().out


def test_with_out_the_plot_is_written_and_named(tmp_path, capsys):
    out = tmp_path / "scale"
    assert main(["scale", QUICKSTART, "--nodes", "1,2", "--out", str(out)]) == 0
    assert (out / "scaling_efficiency.png").stat().st_size > 0
    assert f"plot: {out / 'scaling_efficiency.png'}" in capsys.readouterr().out
