"""One model, one answer: LLaMA named as a zoo model, an hf: config and a torch: factory goes through the same
accounting. Expected values are closed forms of what autograd saves per op (derived by hand in the zoo's
``_llama_7b`` docstring) and torch's own saved-tensor hooks on transformers' LLaMA on the CPU, never ddpsim's
output."""

from __future__ import annotations

import json
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ddpsim.sharded.memory import Precision, sharded_memory  # noqa: E402
from ddpsim.sharded.units import shard_units  # noqa: E402
from ddpsim.workload.torch_import import import_hf_model, import_torch_model  # noqa: E402
from ddpsim.workload.torch_import_memory import torch_version_ok  # noqa: E402
from ddpsim.workload.zoo import llama_workload  # noqa: E402

# rows (batch x seq) differ from every weight's dimensions, so a weight's 16-bit copy is told from an activation
B, T, D, HEADS, FF, V = 2, 96, 64, 4, 176, 300


def _hf_llama(d=D, ff=FF, vocab=V, layers=1):
    config = transformers.AutoConfig.for_model("llama", num_hidden_layers=layers, hidden_size=d,
                                               num_attention_heads=HEADS, num_key_value_heads=HEADS,
                                               intermediate_size=ff, vocab_size=vocab, max_position_embeddings=512,
                                               tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config)


def _block_saved_bytes(amp: bool, bf16_params: bool = False) -> float:
    """Real torch on the CPU: the unique storages one decoder layer saves for backward, less the parameters and
    autocast's 16-bit copies of them (shaped as a weight: the memory model counts those as parameters' copies).
    ``bf16_params``: the model itself in bf16, no autocast (what FSDP2 computes with under param_dtype bf16)."""
    model = _hf_llama()
    if bf16_params:
        model = model.to(torch.bfloat16)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    weight_shapes = {tuple(p.shape) for p in model.parameters()} | {tuple(p.shape)[::-1] for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in params and not (t.dtype == torch.bfloat16 and tuple(t.shape) in weight_shapes):
            seen[ptr] = storage.nbytes()
        return t

    ids = torch.zeros(B, T, dtype=torch.long)
    with torch.autocast("cpu", torch.bfloat16, enabled=amp):
        x = model.model.embed_tokens(ids)
        positions = model.model.rotary_emb(x, torch.arange(T)[None])
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model.model.layers[0](x, position_embeddings=positions, attention_mask=None)
    return float(sum(seen.values()))


@pytest.mark.parametrize("precision", ["bf16-amp", "fp32"])
def test_the_zoos_llama_block_saves_what_transformers_llama_block_saves(precision):
    zoo = llama_workload(B, precision, T, 1, D, FF, V)
    block = sum(v for k, v in zoo.activation_bytes_by_layer.items() if k.startswith("model.layers.0."))
    # the closed form itself, per token: 34 d + 8 ff bytes (bf16 AMP), 40 d + 16 ff (fp32)
    per_token = 34 * D + 8 * FF if precision == "bf16-amp" else 40 * D + 16 * FF
    assert block == pytest.approx(B * T * per_token, rel=1e-9)
    # torch's hooks also see the small tensors (RMSNorm's rsqrt, SDPA's logsumexp, RoPE's cos and sin)
    assert block == pytest.approx(_block_saved_bytes(precision == "bf16-amp"), rel=0.03)


def test_the_zoos_llama_block_computing_in_bf16_saves_what_transformers_llama_in_bf16_saves():
    zoo = llama_workload(B, "bf16-amp", T, 1, D, FF, V, compute="bf16")
    block = sum(v for k, v in zoo.activation_bytes_by_layer.items() if k.startswith("model.layers.0."))
    assert block == pytest.approx(B * T * (24 * D + 8 * FF), rel=1e-9)
    assert block == pytest.approx(_block_saved_bytes(False, bf16_params=True), rel=0.03)


# A LLaMA shaped as Llama 2 7B's ratios (ff / d = 2.69, vocab / d = 7.8) at a size the CPU runs in seconds
SMALL = {"n_layer": 2, "d": 512, "heads": 8, "ff": 1376, "vocab": 4000, "batch": 2, "seq": 256}


@pytest.fixture
def three_names(tmp_path, monkeypatch):
    s = SMALL
    config = {"model_type": "llama", "num_hidden_layers": s["n_layer"], "hidden_size": s["d"],
              "num_attention_heads": s["heads"], "num_key_value_heads": s["heads"], "intermediate_size": s["ff"],
              "vocab_size": s["vocab"], "max_position_embeddings": 1024, "tie_word_embeddings": False}
    (tmp_path / "llama.json").write_text(json.dumps(config))
    # the user's own LLaMA trained as transformers trains its own: cross-entropy of the fp32 logits
    (tmp_path / "user_llama.py").write_text(
        "import torch\nimport torch.nn.functional as F\nfrom ddpsim.measure.llama import Llama\n\n\n"
        "def build():\n"
        f"    model = Llama({s['n_layer']}, {s['d']}, {s['heads']}, {s['ff']}, {s['vocab']})\n\n"
        "    def make_batch(batch_size, device, seed):\n"
        f"        return torch.zeros(batch_size, {s['seq']}, dtype=torch.long, device=device)\n\n"
        "    def loss_fn(m, ids):\n"
        f"        return F.cross_entropy(m(ids).float().view(-1, {s['vocab']}), ids.view(-1))\n\n"
        "    return model, make_batch, loss_fn\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("user_llama", None)
    zoo = llama_workload(s["batch"], "bf16-amp", s["seq"], s["n_layer"], s["d"], s["ff"], s["vocab"])
    hf = import_hf_model(str(tmp_path / "llama.json"), s["batch"], "bf16-amp", s["seq"], str(tmp_path), "adamw")
    factory = import_torch_model("user_llama:build", s["batch"], "bf16-amp", s["seq"], "adamw")
    yield {"zoo": zoo, "hf": hf, "torch": factory}
    sys.modules.pop("user_llama", None)


def _closed_form_activations() -> float:
    """Blocks (34 d + 8 ff bytes per token) and the head (final norm 8 d, lm_head's 16-bit input 2 d, log-softmax's
    fp32 output 4 vocab), plus autocast's 16-bit copies of every matmul weight (2 bytes per parameter)."""
    s = SMALL
    tokens = s["batch"] * s["seq"]
    d, ff, vocab = s["d"], s["ff"], s["vocab"]
    block_params = 4 * d * d + 3 * d * ff
    blocks = s["n_layer"] * (tokens * (34 * d + 8 * ff) + 2 * block_params)
    return float(blocks + tokens * (8 * d + 2 * d + 4 * vocab) + 2 * vocab * d)


@pytest.mark.skipif(not torch_version_ok(torch)[0], reason="MemTracker is used on the tested torch versions only")
def test_one_llama_named_three_ways_has_one_answer(three_names):
    s = SMALL
    n_params = s["vocab"] * s["d"] * 2 + s["n_layer"] * (4 * s["d"] ** 2 + 3 * s["d"] * s["ff"] + 2 * s["d"]) + s["d"]
    for name, w in three_names.items():
        assert w.n_params == n_params, name
    # the blocks' kept activations: MemTracker's (hf, torch) and the zoo's, against the closed form (the zoo's
    # block figure leaves out autocast's weight copies, which MemTracker's includes)
    block_params = 4 * s["d"] ** 2 + 3 * s["d"] * s["ff"]
    tokens = s["batch"] * s["seq"]
    block = tokens * (34 * s["d"] + 8 * s["ff"])
    for name in ("hf", "torch"):
        kept = three_names[name].activation_bytes_by_layer["model.layers.0"]
        # MemTracker's block figure also holds the block's output (the next block's input, 4 d per token)
        assert kept == pytest.approx(block + 2 * block_params, rel=0.06), name
    zoo_block = sum(v for k, v in three_names["zoo"].activation_bytes_by_layer.items()
                    if k.startswith("model.layers.0."))
    assert zoo_block == pytest.approx(block, rel=1e-9)
    # the step's peak per GPU under ZeRO-3 (FSDP2) over 8 GPUs: the same within 5% whatever the name
    totals = {}
    for name, w in three_names.items():
        totals[name] = sharded_memory(w, "zero3", 8, shard_units(w), Precision("bf16", "bf16"), True, "adamw")
    values = [t["total"] for t in totals.values()]
    assert max(values) / min(values) - 1 < 0.05, {k: v["total"] for k, v in totals.items()}
    # and against the closed form: 16 bytes of model state per parameter over 8 GPUs; the root (embedding,
    # final norm, lm_head) and two blocks gathered in bf16 and the root's and one block's bf16 gradients; the
    # activations less autocast's copies (FSDP2 computes with the bf16 parameters it gathered); log-softmax's
    # fp32 gradient in and out over the logits
    s, d, ff = SMALL, SMALL["d"], SMALL["ff"]
    root = 2 * s["vocab"] * d + d
    block = 4 * d * d + 3 * d * ff + 2 * d
    states = 16 * n_params / 8
    gathered = (root + 2 * block) * 2 + (root + block) * 2
    activations = _closed_form_activations() - 2 * (s["n_layer"] * (4 * d * d + 3 * d * ff) + s["vocab"] * d)
    loss = 8 * s["batch"] * s["seq"] * s["vocab"]
    assert min(values) <= states + gathered + activations + loss <= max(values) * 1.05


@pytest.mark.skipif(not torch_version_ok(torch)[0], reason="MemTracker is used on the tested torch versions only")
def test_an_hf_models_memory_row_says_where_its_activations_come_from(tmp_path):
    from ddpsim.loader import scenario_from_dict
    from ddpsim.simulation import simulate

    config = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": D, "num_attention_heads": HEADS,
              "intermediate_size": FF, "vocab_size": V, "max_position_embeddings": 512}
    (tmp_path / "llama.json").write_text(json.dumps(config))
    result = simulate(scenario_from_dict({
        "workload": {"model": f"hf:{tmp_path / 'llama.json'}", "batch_size": B, "precision": "bf16-amp", "seq_len": T},
        "cluster": {"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": 2},
        "simulation": {"mode": "fast", "iterations": 1}}))
    text = result.value_sources["memory"]
    assert "NOT KNOWN" not in text and "MemTracker" in text
    assert result.memory_bytes["activations"] > 0
