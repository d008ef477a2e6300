"""Hugging Face models as workloads (``model: hf:...``), built from their config on the meta device,
against transformers' own models built on the CPU; a mixture of experts; errors that name their cause."""

from __future__ import annotations

import json
import textwrap

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ddpsim.cli import main  # noqa: E402
from ddpsim.errors import ScenarioError  # noqa: E402
from ddpsim.scenario.schema import WorkloadSpec  # noqa: E402
from ddpsim.workload.resolve import load_workload  # noqa: E402
from ddpsim.workload.torch_import import import_hf_model, import_torch_model  # noqa: E402

SMALL = {
    "gpt2": {"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 97, "n_positions": 40},
    "bert": {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64,
             "vocab_size": 101, "max_position_embeddings": 48},
    "llama": {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 48, "vocab_size": 89, "max_position_embeddings": 64},
}
MIXTRAL = {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 48, "vocab_size": 64, "max_position_embeddings": 64, "num_local_experts": 4,
           "num_experts_per_tok": 2}


def _config_file(tmp_path, model_type: str, fields: dict) -> str:
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps({"model_type": model_type, **fields}))
    return str(path)


def _cpu_model(head, model_type: str, fields: dict):
    torch.manual_seed(0)
    return head.from_config(transformers.AutoConfig.for_model(model_type, **fields))


def _ddp_params(model) -> dict[str, int]:
    # parameters() lists a tied weight once, as DDP does; all of these require grad
    return {name: p.numel() for name, p in model.named_parameters()}


@pytest.mark.parametrize("model_type, head", [
    ("gpt2", transformers.AutoModelForCausalLM),
    ("llama", transformers.AutoModelForCausalLM),
    ("bert", transformers.AutoModelForMaskedLM),  # no causal head: its masked-LM head, as ddpsim measure
])
def test_parameters_match_transformers_own_model(tmp_path, model_type, head):
    w = import_hf_model(_config_file(tmp_path, model_type, SMALL[model_type]), 2, "bf16-amp", 16, str(tmp_path))
    expected = _ddp_params(_cpu_model(head, model_type, SMALL[model_type]))
    assert {p.name: p.numel for p in w.params} == expected
    assert w.seq_len == 16 and w.grad_ready_order  # the LM loss ran backward
    assert sorted(w.grad_ready_order) == list(range(len(expected)))


@pytest.mark.parametrize("what", ["GPT2Config", "GPT2LMHeadModel", "GPT2Model"])  # GPT2Model: no head, no labels
def test_a_config_or_model_class_gives_gpt2_small(tmp_path, what):
    # GPT-2 small from GPT2Config's defaults, counted by hand: 12 blocks of ln_1, c_attn (768 x 2304 + bias),
    # c_proj, ln_2, c_fc (768 x 3072 + bias), mlp c_proj; token and position embeddings; ln_f; the LM head
    # is tied to the token embedding
    d, layers, vocab, positions = 768, 12, 50257, 1024
    block = 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d)
    expected = layers * block + vocab * d + positions * d + 2 * d
    w = import_hf_model(what, 1, "bf16-amp", 8, str(tmp_path))
    assert sum(p.numel for p in w.params) == expected == 124_439_808
    assert w.name == f"hf:{what}" and w.grad_ready_order


def test_a_mixture_of_experts_imports_with_fp32_weights(tmp_path):
    # Mixtral's experts run one grouped matmul per projection, whose meta kernel takes bf16 only
    batch, seq = 2, 16
    w = import_hf_model(_config_file(tmp_path, "mixtral", MIXTRAL), batch, "fp32", seq, str(tmp_path))
    model = _cpu_model(transformers.AutoModelForCausalLM, "mixtral", MIXTRAL)
    assert {p.name: p.numel for p in w.params} == _ddp_params(model)
    assert {p.dtype for p in w.params} == {"float32"}
    # each token meets top-k experts: gate and up (hidden -> 2 x intermediate), down (intermediate -> hidden)
    h, i, k = MIXTRAL["hidden_size"], MIXTRAL["intermediate_size"], MIXTRAL["num_experts_per_tok"]
    experts = [la for la in w.layers if la.name.endswith("mlp.experts")]
    assert len(experts) == MIXTRAL["num_hidden_layers"]
    for la in experts:
        assert la.forward_flops == 2 * batch * seq * k * (h * 2 * i + i * h)
        assert la.backward_flops == 2 * la.forward_flops
        assert la.forward_bytes >= sum(p.numel for p in la.params) * 4  # every expert's weights read
    expert_params = {p.name for la in experts for p in la.params}
    ready = {w.params[i].name for i in w.grad_ready_order}
    assert expert_params <= ready  # the experts' gradients reach DDP


def test_a_scenario_names_a_config_beside_it(tmp_path, capsys):
    _config_file(tmp_path, "gpt2", SMALL["gpt2"])
    scenario = tmp_path / "s.yaml"
    scenario.write_text("workload: {model: 'hf:gpt2.json', batch_size: 4, precision: bf16-amp, seq_len: 32}\n"
                        "cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}\n")
    assert main(["run", str(scenario), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == "hf:gpt2.json" and result["step_time_s"] > 0
    w = load_workload(WorkloadSpec(model="hf:gpt2.json", batch_size=4, precision="bf16-amp", seq_len=None),
                      str(tmp_path))
    assert w.seq_len == SMALL["gpt2"]["n_positions"]  # no seq_len: the model's positions (under 512)
    with pytest.raises(ScenarioError, match="seq 41 is not within 1..40") as err:
        load_workload(WorkloadSpec(model="hf:gpt2.json", batch_size=4, seq_len=41), str(tmp_path))
    assert err.value.field == "workload.seq_len"


@pytest.mark.parametrize("what, message", [
    ("no-such-org/no-such-model-xyz", "in the local Hugging Face cache"),
    ("NoSuchConfig", "has no class 'NoSuchConfig'"),  # a class name: answered without the hub
])
def test_unknown_names_are_one_line_and_never_download(tmp_path, monkeypatch, what, message):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a download attempt would fail differently
    with pytest.raises(ScenarioError, match=message) as err:
        import_hf_model(what, 2, "fp32", 8, str(tmp_path))
    assert err.value.field == "workload.model" and "\n" not in str(err.value)


def test_a_model_class_through_torch_prefix_points_to_hf():
    with pytest.raises(ScenarioError, match=r"hf:GPT2Config"):
        import_torch_model("transformers:GPT2LMHeadModel", 2, "fp32")


_FAILING = textwrap.dedent(
    """
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = torch.nn.Linear(16, 8)
            self.second = torch.nn.Linear(4, 2)   # wrong width: every input fails here

        def forward(self, x):
            return self.second(self.first(x))

    def build():
        return Net()

    def build_with_input():
        net = Net()
        net.example_input = lambda batch_size, seq_len: {"x": torch.zeros(batch_size, 16)}
        return net
    """
)


def test_a_failing_forward_names_the_input_it_was_given_and_the_module(tmp_path, monkeypatch):
    (tmp_path / "failing_net.py").write_text(_FAILING)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ScenarioError) as err:
        import_torch_model("failing_net:build_with_input", 3, "fp32")
    text = str(err.value)
    assert "the input example_input(3, None) returned" in text and "guessed" not in text
    assert "in second (Linear)" in text and "RuntimeError" in text
    assert "give the module" not in text  # it has an example_input already
    with pytest.raises(ScenarioError) as err:
        import_torch_model("failing_net:build", 3, "fp32")
    text = str(err.value)
    assert "a guessed input ((3, 16) float32)" in text and "in second (Linear)" in text
    assert "example_input(batch_size, seq_len)" in text  # the way out when the guess was wrong


def test_a_sweep_takes_an_hf_model_and_re_simulates_when_its_config_changes(tmp_path, capsys):
    config = _config_file(tmp_path, "gpt2", SMALL["gpt2"])
    scenario = tmp_path / "s.yaml"
    scenario.write_text("workload: {model: 'hf:gpt2.json', batch_size: 4, precision: bf16-amp, seq_len: 32}\n"
                        "cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}\n")
    args = ["sweep", str(scenario), "--grid", "ddp.bucket_cap_mb=5,25", "--out", str(tmp_path / "sw"), "--workers", "1"]

    def sweep() -> str:
        assert main(args) == 0
        done = capsys.readouterr()
        return done.out + done.err

    assert "2 simulated, 0 reused" in sweep()
    assert "0 simulated, 2 reused" in sweep()
    with open(config, "w") as handle:
        json.dump({"model_type": "gpt2", **SMALL["gpt2"], "n_layer": 3}, handle)
    assert "2 simulated, 0 reused" in sweep()


def test_a_hub_name_is_read_from_the_local_cache_offline(tmp_path, monkeypatch):
    # the layout huggingface_hub keeps: models--ORG--NAME/refs/main names a snapshot holding config.json
    from huggingface_hub import constants

    repo = tmp_path / "hub" / "models--some-org--tiny-gpt2"
    revision = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    (repo / "snapshots" / revision).mkdir(parents=True)
    (repo / "snapshots" / revision / "config.json").write_text(json.dumps({"model_type": "gpt2", **SMALL["gpt2"]}))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # read at each call
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    w = import_hf_model("some-org/tiny-gpt2", 2, "fp32", 8, str(tmp_path))
    expected = _ddp_params(_cpu_model(transformers.AutoModelForCausalLM, "gpt2", SMALL["gpt2"]))
    assert {p.name: p.numel for p in w.params} == expected


def test_an_encoder_decoder_config_trains_as_sequence_to_sequence(tmp_path):
    """hf:T5Config (a bare config: no decoder_start_token_id) builds T5ForConditionalGeneration, whose decoder
    reads the labels shifted right: every parameter of the encoder and the decoder gets a gradient."""
    fields = {"num_layers": 2, "num_decoder_layers": 2, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_heads": 4,
              "vocab_size": 97}
    w = import_hf_model(_config_file(tmp_path, "t5", fields), 2, "bf16-amp", 16, str(tmp_path))
    expected = _ddp_params(_cpu_model(transformers.AutoModelForSeq2SeqLM, "t5", fields))
    assert {p.name: p.numel for p in w.params} == expected
    assert any(".decoder." in p.name or p.name.startswith("decoder.") for p in w.params)
    assert sorted(w.grad_ready_order) == list(range(len(expected)))
