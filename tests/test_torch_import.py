"""The torch importer against torch itself: DDP's parameter order, FlopCounterMode FLOPs, errors."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

import fixtures_models as fm  # noqa: E402  (pytest puts tests/ on sys.path)
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from ddpsim.errors import ScenarioError  # noqa: E402
from ddpsim.scenario.schema import WorkloadSpec  # noqa: E402
from ddpsim.workload.resolve import load_workload  # noqa: E402
from ddpsim.workload.torch_import import import_torch_model  # noqa: E402
from tests.test_zoo import ddp_order  # noqa: E402


def total_flops(model, x):
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(x)
        fwd = counter.get_total_flops()
        out.float().sum().backward()
    return fwd, counter.get_total_flops() - fwd


def test_mlp_params_and_flops_match_torch():
    w = import_torch_model("fixtures_models:tiny_mlp", 4, "fp32")
    model = fm.tiny_mlp()
    assert [(p.name, p.numel) for p in w.params] == ddp_order(model)
    fwd, bwd = total_flops(model, torch.randn(4, 16))
    assert sum(la.forward_flops for la in w.layers) == fwd
    assert sum(la.backward_flops for la in w.layers) == bwd
    first = next(la for la in w.layers if la.name == "0")
    assert first.backward_flops == first.forward_flops == 2 * 4 * 16 * 32  # no input grad for the first layer
    relu = next(la for la in w.layers if la.name == "1")
    assert relu.params == () and relu.kernels >= 1 and relu.forward_bytes > 0


def test_lm_order_tied_frozen_and_execution_order():
    w = import_torch_model("fixtures_models:tiny_lm", 2, "bf16-amp", seq_len=8)
    model = fm.tiny_lm()
    assert [(p.name, p.numel) for p in w.params] == ddp_order(model)
    names = [p.name for p in w.params]
    assert "head.weight" not in names and "frozen.weight" not in names
    executed = [w.layers[i].name for i in w.execution_order]
    assert executed.index("norm") < executed.index("qkv") < executed.index("proj")
    by_name = {la.name: la for la in w.layers}
    assert by_name["qkv"].forward_flops == 2 * 16 * 32 * 96
    assert by_name["head"].params == () and by_name["head"].forward_flops == 2 * 16 * 32 * 100
    # the root module's own work (causal attention: half of the 4 x B x T^2 x d products, the masked half skipped)
    # becomes a layer without parameters
    root = next(la for la in w.layers if la.name == "")
    assert root.params == () and root.kind == "attention" and root.forward_flops == 4 * 2 * 8 * 8 * 32 / 2


def test_example_input_is_used_and_its_absence_reported():
    w = import_torch_model("fixtures_models:with_example", 3, "fp32")
    assert w.layers[0].forward_flops == 2 * 3 * 4 * 4
    with pytest.raises(ScenarioError, match="example_input") as err:
        import_torch_model("fixtures_models:needs_input", 3, "fp32")
    assert err.value.field == "workload.model"


@pytest.mark.parametrize("spec, message", [
    ("no_such_module_xyz:f", "cannot import module"),
    ("fixtures_models:missing", "has no attribute"),
    ("fixtures_models", "expected 'torch:package.module:factory'"),
    ("fixtures_models:not_a_module", "expected a torch.nn.Module"),
])
def test_bad_specs_name_the_field(spec, message):
    with pytest.raises(ScenarioError, match=message) as err:
        import_torch_model(spec, 2, "fp32")
    assert err.value.field == "workload.model"


def test_missing_torch_is_a_scenario_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(ScenarioError, match=r"pip install 'ddpsim\[torch\]'") as err:
        import_torch_model("fixtures_models:tiny_mlp", 2, "fp32")
    assert err.value.field == "workload.model"


def test_resolve_imports_from_the_scenario_folder(tmp_path):
    (tmp_path / "my_net.py").write_text(
        "import torch.nn as nn\n\ndef build():\n    return nn.Sequential(nn.Linear(8, 4))\n")
    w = load_workload(WorkloadSpec(model="torch:my_net:build", batch_size=2), str(tmp_path))
    assert [(p.name, p.numel) for p in w.params] == [("0.weight", 32), ("0.bias", 4)]
    assert str(tmp_path) not in sys.path


@pytest.mark.parametrize("factory, zoo_name, batch, precision, seq", [
    ("gpt2_124m", "gpt2-124m", 2, "bf16-amp", 128),
    ("resnet50", "resnet50", 2, "fp32", None),
    ("mlp_heavy", "mlp-heavy", 4, "fp32", None),
])
def test_importing_the_harness_models_agrees_with_the_zoo(factory, zoo_name, batch, precision, seq):
    """Two independent descriptions of the same model: identical parameters and FLOPs, close bytes."""
    pytest.importorskip("ddpsim.measure.models")
    from ddpsim.workload.zoo import zoo_workload

    imported = import_torch_model(f"ddpsim.measure.models:{factory}", batch, precision, seq)
    zoo = zoo_workload(zoo_name, batch, precision, seq)
    assert [(p.name, p.numel) for p in imported.params] == [(p.name, p.numel) for p in zoo.params]
    for attr in ("forward_flops", "backward_flops"):
        assert sum(getattr(la, attr) for la in imported.layers) == sum(getattr(la, attr) for la in zoo.layers)
    # The zoo also costs the loss, which runs outside the module the importer sees.
    fwd_bytes = [sum(la.forward_bytes for la in w.layers) for w in (imported, zoo)]
    assert fwd_bytes[0] == pytest.approx(fwd_bytes[1], rel=0.15)


def test_missing_torch_names_the_extra(tmp_path, monkeypatch, capsys):
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "workload: {model: 'torch:tests.fixtures_models:tiny_mlp', batch_size: 2}\ncluster: {gpu: H100-SXM}\n"
    )
    from ddpsim.cli import main

    assert main(["run", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert "pip install 'ddpsim[torch]'" in err and "workload.model" in err and str(scenario) in err


def _scenario(tmp_path, model, ddp=""):
    path = tmp_path / "s.yaml"
    path.write_text(f"workload: {{model: 'torch:{model}', batch_size: 2}}\n"
                    "cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2, intra_node: {type: nvswitch}}\n"
                    + (f"ddp: {{{ddp}}}\n" if ddp else ""))
    return path


def test_unused_parameters_need_find_unused_parameters(tmp_path, capsys):
    """Real DDP raises for parameters unused in forward (tests/test_ddp_layouts.py shows it): so does
    ddpsim, on one line naming the scenario and the parameters; with find_unused_parameters it runs."""
    from ddpsim.cli import main

    scenario = _scenario(tmp_path, "tests.fixtures_models:with_unused")
    assert main(["run", str(scenario)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(scenario) in err and "(extra, unused.weight, unused.bias)" in err
    assert "find_unused_parameters: true" in err
    scenario = _scenario(tmp_path, "tests.fixtures_models:with_unused", "find_unused_parameters: true")
    assert main(["run", str(scenario)]) == 0


def test_weight_gradients_before_bias_for_norms_and_convs_as_autograd_gives_them():
    w = import_torch_model("fixtures_models:bn_convnet", 2, "fp32")
    names = [w.params[i].name for i in w.grad_ready_order]
    assert names[:4] == ["fc.bias", "fc.weight", "bn3.weight", "bn3.bias"]
    assert names.index("conv3.weight") < names.index("conv3.bias")
    assert sorted(w.grad_ready_order) == list(range(len(w.params)))


def test_recorded_order_keeps_the_backward_time():
    """Following the recorded order moves no gradient earlier than its layer's backward ends, and the
    backward lasts as long as the layers' costs add up to."""
    from dataclasses import replace

    from ddpsim.hardware.catalog import get_gpu
    from ddpsim.hardware.compute import step_compute

    w = import_torch_model("fixtures_models:mha_vit", 4, "bf16-amp")
    recorded = step_compute(w, get_gpu("H100-SXM"))
    derived = step_compute(replace(w, grad_ready_order=()), get_gpu("H100-SXM"))
    assert recorded.backward_s == pytest.approx(derived.backward_s)
    assert recorded.ready_order == w.grad_ready_order != derived.ready_order


def test_lazy_modules_are_materialised_or_refused_in_one_line():
    w = import_torch_model("fixtures_models:lazy_mlp", 2, "fp32")
    assert [(p.name, p.numel) for p in w.params] == [
        ("body.0.weight", 512 * 300), ("body.0.bias", 512), ("body.2.weight", 512 * 512), ("body.2.bias", 512),
        ("body.4.weight", 10 * 512), ("body.4.bias", 10)]
    with pytest.raises(ScenarioError, match=r"lazy modules: 0\).*example_input") as err:
        import_torch_model("fixtures_models:lazy_no_input", 2, "fp32")
    assert "\n" not in str(err.value)


def test_factory_beside_the_user_imports_without_pythonpath(tmp_path, monkeypatch):
    """The ddpsim console script does not put the current folder on sys.path; the importer does."""
    (tmp_path / "here_net.py").write_text(
        "import torch.nn as nn\n\ndef build():\n    return nn.Sequential(nn.Linear(8, 4))\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    w = import_torch_model("here_net:build", 2, "fp32")
    assert [(p.name, p.numel) for p in w.params] == [("0.weight", 32), ("0.bias", 4)]
    assert str(tmp_path) not in sys.path
    with pytest.raises(ScenarioError, match="cannot import module 'not_here_net'"):
        import_torch_model("not_here_net:build", 2, "fp32")
