"""A fuzzer over the scenario schema itself: every field the FieldSpecs declare (fields added later
included) gets valid values, values at and past its bounds, and the usual mistakes (text for a number,
NaN, a list, a YAML boolean). Every generated scenario either runs (exit 0, a report on stdout) or is
refused with exit 2 and one line naming the file; never a traceback, never another exit code.

Derandomized (a fixed example sequence), so it is deterministic in CI. Sizes that set the simulation's
cost (nodes, GPUs, iterations, batch) are drawn small or invalid, never large and valid.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpsim.cli.main import main
from ddpsim.scenario.fields import FieldSpec, field_specs
from ddpsim.scenario.schema import Scenario, section_class

# fields filled by hand below (a name lookup, a file, a custom graph) or left out
SKIPPED = {"workload.model", "cluster.gpu", "calibration", "cluster.topology", "cluster.node_groups", "parallel.unit"}
# fields whose valid values set the simulation's cost: small valid values only
SMALL = {"cluster.nodes": 2, "cluster.gpus_per_node": 4, "workload.batch_size": 8, "workload.seq_len": 64,
         "simulation.iterations": 3, "ddp.grad_accumulation_steps": 3, "simulation.straggler_rank": 8,
         "cluster.inter_node.nodes_per_leaf": 4, "cluster.inter_node.nics_per_node": 8,
         "overheads.max_inflight_buckets": 8}
MISTAKES = st.sampled_from([None, "", "fast", ".nan", "-1", [1, 2], {"a": 1}, True, False, float("nan"),
                            float("inf"), -1, 0, 2.5, 10**30])


def _bounded(fs: FieldSpec, name: str) -> st.SearchStrategy:
    low = fs.minimum if fs.minimum is not None else (fs.above if fs.above is not None else -10.0)
    high = fs.maximum if fs.maximum is not None else 1e6
    if fs.kind == "int":
        top = min(int(high), SMALL.get(name, 16))
        return st.integers(int(math.ceil(low)), max(int(math.ceil(low)), top))
    return st.floats(low, high, allow_nan=False)


def _value(fs: FieldSpec, name: str) -> st.SearchStrategy:
    """One in 12 values a plain mistake, else the kind's values (valid ones, edges, typed mistakes): enough
    runs get through to check the simulation, not only the loader."""
    return st.integers(0, 11).flatmap(lambda k: MISTAKES if k == 0 else _typed(fs, name))


def _typed(fs: FieldSpec, name: str) -> st.SearchStrategy:
    kind = fs.kind
    if kind in ("int", "number"):
        edges = [v for v in (fs.minimum, fs.above, fs.maximum) if v is not None and (kind != "int" or name not in SMALL)]
        return st.one_of(_bounded(fs, name), _bounded(fs, name), st.sampled_from(edges or [1]))
    if kind == "bool":
        return st.booleans()
    if kind == "choice":
        return st.one_of(st.sampled_from(fs.choices), st.sampled_from(fs.choices),
                         st.sampled_from(["on", "off", "yes", "none", "Auto"]))
    if kind == "bandwidth":
        return st.one_of(st.sampled_from(["450GB/s", "400Gbps", "1kB/s", "1PB/s", "2PB/s", "0GB/s", "450 GB/s",
                                          "450GX/s", "1e400GB/s", 5e9]))
    if kind == "time":
        return st.sampled_from(["3us", "0us", "1.5ms", "40us", "1h", "2h", "-3us", "3 parsecs", 1e-6])
    if kind == "mib":
        return st.sampled_from(["default", 25, 0.5, "25MB", "25MiB", 1e-7, 2e6])
    return st.text(max_size=8)


def _section(cls: type, prefix: str) -> st.SearchStrategy:
    parts = {}
    for _attr, fs in field_specs(cls):
        name = prefix + fs.key
        if name in SKIPPED:
            continue
        if fs.kind == "section":
            parts[fs.key] = _section(section_class(fs.key), name + ".")
        else:
            parts[fs.key] = _value(fs, name)
    # each field present or absent; a whole section sometimes not a mapping
    return st.fixed_dictionaries({}, optional=parts)


@st.composite
def scenarios(draw) -> dict:
    data = draw(_section(Scenario, ""))
    workload = data.get("workload") if isinstance(data.get("workload"), dict) else {}
    cluster = data.get("cluster") if isinstance(data.get("cluster"), dict) else {}
    workload = {**workload, "model": draw(st.sampled_from(["mlp", "mlp", "resnet50", "nosuch"]))}
    workload.setdefault("batch_size", 4)
    cluster = {**cluster, "gpu": draw(st.sampled_from(["H100-SXM", "A100", "H900"]))}
    cluster.setdefault("nodes", 1)
    cluster.setdefault("gpus_per_node", 2)
    data = {**data, "workload": workload, "cluster": cluster}
    if draw(st.integers(0, 9)) == 0:  # now and then a section that is not a mapping
        data[draw(st.sampled_from(["ddp", "simulation", "overheads"]))] = draw(MISTAKES)
    return data


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=scenarios())
def test_every_generated_scenario_runs_or_is_refused_in_one_line(tmp_path, capsys, data):
    import yaml

    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    code = main(["run", str(path)])
    out, err = capsys.readouterr()
    assert code in (0, 2), (code, err, data)
    assert "Traceback" not in err + out, err
    if code == 0:
        assert "step time" in out and not err.startswith("ddpsim: error"), err
    else:
        assert err.startswith("ddpsim: error: ") and err.count("\n") == 1, err
        assert str(path) in err, err
        # "ddpsim: error: FILE: FIELD: message": the field after the file
        assert err.split(str(path), 1)[1].count(": ") >= 2, err
