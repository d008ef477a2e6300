"""Values the docs write load as the docs mean them (issue 34: "documented values refused").

``cluster.intra_node.nvls: auto | on | off`` (README, docs/nvls.md): YAML 1.1 reads a bare ``on`` / ``off``
as a boolean, which was refused ("got 'false'"). It must load as the quoted text does, in a file and
through ``--set``; other booleans-as-choices stay refused.
"""

from __future__ import annotations

import pytest

from ddpsim.errors import ScenarioError
from ddpsim.loader import load_scenario

SCENARIO = ("workload: {{model: mlp, batch_size: 4}}\n"
            "cluster:\n  gpu: H100-SXM\n  nodes: 1\n  gpus_per_node: 8\n"
            "  intra_node: {{type: nvswitch, bandwidth: 450GB/s, latency: 3us, nvls: {nvls}}}\n")


@pytest.mark.parametrize("bare, quoted", [("off", "'off'"), ("on", "'on'"), ("no", "'off'"), ("yes", "'on'")])
def test_bare_on_and_off_load_as_the_quoted_text(tmp_path, bare, quoted):
    (tmp_path / "bare.yaml").write_text(SCENARIO.format(nvls=bare))
    (tmp_path / "quoted.yaml").write_text(SCENARIO.format(nvls=quoted))
    assert load_scenario(str(tmp_path / "bare.yaml")).cluster == load_scenario(str(tmp_path / "quoted.yaml")).cluster
    assert load_scenario(str(tmp_path / "bare.yaml")).cluster.intra_node.nvls == quoted.strip("'")


@pytest.mark.parametrize("value", ["off", "on"])
def test_set_on_and_off(tmp_path, value):
    (tmp_path / "s.yaml").write_text(SCENARIO.format(nvls="auto"))
    scenario = load_scenario(str(tmp_path / "s.yaml"), [f"cluster.intra_node.nvls={value}"])
    assert scenario.cluster.intra_node.nvls == value


def test_off_changes_the_prediction_as_the_quoted_off_does(tmp_path):
    """NVLS on 8 x H100 NVSwitch is NCCL's default (auto = on): bare off must give the quoted off's step."""
    from ddpsim.simulation import simulate

    (tmp_path / "s.yaml").write_text(SCENARIO.format(nvls="auto"))
    bare = simulate(load_scenario(str(tmp_path / "s.yaml"), ["cluster.intra_node.nvls=off"])).step_time_s
    quoted = simulate(load_scenario(str(tmp_path / "s.yaml"), ["cluster.intra_node.nvls='off'"])).step_time_s
    auto = simulate(load_scenario(str(tmp_path / "s.yaml"))).step_time_s
    assert bare == quoted != auto


def test_a_boolean_is_still_refused_where_on_and_off_are_not_the_choices(tmp_path):
    (tmp_path / "s.yaml").write_text(SCENARIO.format(nvls="auto"))
    with pytest.raises(ScenarioError, match="collective.algorithm"):
        load_scenario(str(tmp_path / "s.yaml"), ["collective.algorithm=off"])
