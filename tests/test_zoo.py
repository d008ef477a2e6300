"""The zoo against reference models written here in plain torch (torchvision/transformers are not
installable): parameter names, sizes and DDP order exactly; FLOPs against FlopCounterMode."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from ddpsim.errors import ScenarioError  # noqa: E402
from ddpsim.workload.zoo import ZOO_NAMES, zoo_workload  # noqa: E402


def ddp_order(model: nn.Module) -> list[tuple[str, int]]:
    """DDP's parameter list (_build_params_for_reducer): named_modules, recurse=False, dedupe shared."""
    seen, out = set(), []
    for mname, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append((f"{mname}.{pname}" if mname else pname, p.numel()))
    return out


def zoo_order(name: str, **kw) -> list[tuple[str, int]]:
    w = zoo_workload(name, kw.pop("batch_size", 2), kw.pop("precision", "fp32"), **kw)
    return [(p.name, p.numel) for p in w.params]


# ------------------------------------------------------------------ reference models (torchvision / HF style)
class Bottleneck(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        idt = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + idt)


class ResNet50(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inplanes = 64
        for i, (planes, blocks, stride) in enumerate(((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)), 1):
            down = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4))
            mods = [Bottleneck(inplanes, planes, stride, down)] + [Bottleneck(planes * 4, planes) for _ in range(blocks - 1)]
            setattr(self, f"layer{i}", nn.Sequential(*mods))
            inplanes = planes * 4
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class Conv1D(nn.Module):
    """HF GPT-2's Conv1D: weight (nx, nf)."""

    def __init__(self, nf: int, nx: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.empty(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


class GPT2Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = nn.Module()
        self.attn.c_attn, self.attn.c_proj = Conv1D(3 * d, d), Conv1D(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Module()
        self.mlp.c_fc, self.mlp.c_proj = Conv1D(4 * d, d), Conv1D(d, 4 * d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(d, -1)
        q, k, v = (z.view(b, t, 12, d // 12).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.attn.c_proj(y)
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))


class GPT2LMHead(nn.Module):
    """HF GPT2LMHeadModel's GPT2Model part plus a tied lm_head (registered, deduped by DDP)."""

    def __init__(self, d: int = 768, n_layer: int = 12, vocab: int = 50257):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(1024, d)
        self.h = nn.ModuleList([GPT2Block(d) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def bert_for_pretraining(d: int = 1024, n_layer: int = 24, ff: int = 4096, vocab: int = 30522) -> nn.Module:
    """HF BertForPreTraining's module tree: bert.(embeddings, encoder.layer[i], pooler), cls."""

    def mod(**children) -> nn.Module:
        m = nn.Module()
        for k, v in children.items():
            setattr(m, k, v)
        return m

    def layer() -> nn.Module:
        return mod(
            attention=mod(self=mod(query=nn.Linear(d, d), key=nn.Linear(d, d), value=nn.Linear(d, d)),
                          output=mod(dense=nn.Linear(d, d), LayerNorm=nn.LayerNorm(d))),
            intermediate=mod(dense=nn.Linear(d, ff)),
            output=mod(dense=nn.Linear(ff, d), LayerNorm=nn.LayerNorm(d)),
        )

    emb = mod(word_embeddings=nn.Embedding(vocab, d), position_embeddings=nn.Embedding(512, d),
              token_type_embeddings=nn.Embedding(2, d), LayerNorm=nn.LayerNorm(d))
    bert = mod(embeddings=emb, encoder=mod(layer=nn.ModuleList([layer() for _ in range(n_layer)])),
               pooler=mod(dense=nn.Linear(d, d)))
    predictions = mod(transform=mod(dense=nn.Linear(d, d), LayerNorm=nn.LayerNorm(d)),
                      decoder=nn.Linear(d, vocab, bias=False))
    predictions.bias = nn.Parameter(torch.zeros(vocab))
    predictions.decoder.bias = predictions.bias
    predictions.decoder.weight = emb.word_embeddings.weight
    return mod(bert=bert, cls=mod(predictions=predictions, seq_relationship=nn.Linear(d, 2)))


class RMSNorm(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class LlamaLayer(nn.Module):
    def __init__(self, d: int, ff: int, heads: int):
        super().__init__()
        self.heads = heads
        self.self_attn = nn.Module()
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self.self_attn, n, nn.Linear(d, d, bias=False))
        self.mlp = nn.Module()
        self.mlp.gate_proj, self.mlp.up_proj = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
        self.mlp.down_proj = nn.Linear(ff, d, bias=False)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(d), RMSNorm(d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.input_layernorm(x)
        a = self.self_attn
        q, k, v = (p(h).view(b, t, self.heads, -1).transpose(1, 2) for p in (a.q_proj, a.k_proj, a.v_proj))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + a.o_proj(y)
        h = self.post_attention_layernorm(x)
        return x + self.mlp.down_proj(F.silu(self.mlp.gate_proj(h)) * self.mlp.up_proj(h))


class LlamaForCausalLM(nn.Module):
    def __init__(self, d: int = 4096, n_layer: int = 32, ff: int = 11008, vocab: int = 32000, heads: int = 32):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, d)
        self.model.layers = nn.ModuleList([LlamaLayer(d, ff, heads) for _ in range(n_layer)])
        self.model.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))


# ------------------------------------------------------------------ parameter lists
def test_resnet50_matches_torchvision_layout():
    ref = ddp_order(ResNet50())
    assert zoo_order("resnet50") == ref
    assert len(ref) == 161 and sum(n for _, n in ref) == 25_557_032
    assert [n for n, _ in ref[:4]] == ["conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight"]
    assert [n for n, _ in ref[-2:]] == ["fc.weight", "fc.bias"]


def test_gpt2_matches_hf_layout_with_tied_head():
    ref = ddp_order(GPT2LMHead())
    assert zoo_order("gpt2-124m") == ref
    assert sum(n for _, n in ref) == 124_439_808
    assert "lm_head.weight" not in dict(ref)


def test_bert_large_matches_hf_bert_for_pretraining():
    ref = ddp_order(bert_for_pretraining())
    assert zoo_order("bert-large", seq_len=128) == ref
    assert sum(n for _, n in ref) == 336_226_108  # BertModel (335,141,888) + MLM and NSP heads


def test_llama_7b_matches_hf_layout_on_meta():
    with torch.device("meta"):
        ref = ddp_order(LlamaForCausalLM())
    assert zoo_order("llama-7b", batch_size=1, seq_len=16) == ref
    assert sum(n for _, n in ref) == 6_738_415_616


def test_mlp_heavy_matches_the_validation_harness():
    harness = pytest.importorskip("ddpsim.measure.models")
    expected = ddp_order(harness.mlp_heavy())
    assert zoo_order("mlp-heavy") == expected
    assert [n for n, _ in expected[:3]] == ["0.weight", "0.bias", "2.weight"]
    ref = nn.Sequential(*[m for i in range(4) for m in (nn.Linear(4096, 4096), nn.ReLU())][:-1])
    assert zoo_order("mlp") == ddp_order(ref)


def test_harness_gpt_and_resnet_share_the_zoo_layout():
    harness = pytest.importorskip("ddpsim.measure.models")
    with torch.device("meta"):
        assert zoo_order("gpt2-124m") == ddp_order(harness.gpt2_124m())
        assert zoo_order("resnet50") == ddp_order(harness.resnet50())


# ------------------------------------------------------------------ FLOPs
def _flops(model: nn.Module, x) -> tuple[dict[str, float], dict[str, float]]:
    """Per-module forward and backward FLOPs from FlopCounterMode (keys without the root class)."""
    counter = FlopCounterMode(display=False)
    root = type(model).__name__
    with counter:
        out = model(x)
        fwd = {k: float(sum(v.values())) for k, v in counter.get_flop_counts().items()}
        out.float().sum().backward()
        tot = {k: float(sum(v.values())) for k, v in counter.get_flop_counts().items()}

    def strip(d):
        return {("" if k in ("Global", root) else k.removeprefix(root + ".")): v for k, v in d.items()}

    fwd, tot = strip(fwd), strip(tot)
    return fwd, {k: tot[k] - fwd.get(k, 0.0) for k in tot}


def test_resnet50_flops_match_flop_counter():
    with torch.device("meta"):
        model, x = ResNet50(), torch.randn(2, 3, 224, 224)
    fwd, bwd = _flops(model, x)
    layers = {layer.name: layer for layer in zoo_workload("resnet50", 2, "fp32").layers}
    for name in ("conv1", "layer1.0.conv2", "layer2.0.downsample.0", "layer4.2.conv3", "fc"):
        assert layers[name].forward_flops == fwd[name], name
    # FlopCounterMode also charges a downsample conv with its sibling branch's backward (both read the
    # block input), so per-module backward is compared on the main path only; the total is exact.
    for name in ("conv1", "layer1.0.conv2", "layer4.2.conv3", "fc"):
        assert layers[name].backward_flops == bwd[name], name
    assert sum(layer.forward_flops for layer in layers.values()) == fwd[""]
    assert sum(layer.backward_flops for layer in layers.values()) == bwd[""]


@pytest.mark.parametrize("name, model_cls, seq, layers, d", [("gpt2-124m", GPT2LMHead, 64, 12, 768),
                                                             ("llama-7b", LlamaForCausalLM, 16, 32, 4096)])
def test_language_model_flops_match_flop_counter(name, model_cls, seq, layers, d):
    """FlopCounterMode counts a causal attention's full T x T products (4 B T^2 d per layer forward); the fused
    kernel skips the half above the diagonal, which the zoo leaves out (twice as much in backward)."""
    with torch.device("meta"):
        model, x = model_cls(), torch.zeros(2, seq, dtype=torch.long)
    fwd, bwd = _flops(model, x)
    skipped = layers * 2 * 2 * seq * seq * d
    w = zoo_workload(name, 2, "bf16-amp", seq_len=seq)
    assert sum(layer.forward_flops for layer in w.layers) == pytest.approx(fwd[""] - skipped, rel=1e-12)
    assert sum(layer.backward_flops for layer in w.layers) == pytest.approx(bwd[""] - 2 * skipped, rel=1e-12)


def test_bert_linear_flops():
    with torch.device("meta"):
        lin, x = nn.Linear(1024, 4096), torch.randn(2, 128, 1024)
    fwd, bwd = _flops(nn.Sequential(lin), x)
    layer = next(la for la in zoo_workload("bert-large", 2, "fp32", 128).layers
                 if la.name == "bert.encoder.layer.3.intermediate.dense")
    assert layer.forward_flops == fwd["0"]
    assert layer.backward_flops == 2 * fwd["0"]


@pytest.mark.parametrize("name", ["gpt2-124m", "bert-large", "llama-7b"])
def test_lm_flops_per_token_are_6n_plus_attention(name):
    w = zoo_workload(name, 4, "bf16-amp")
    tokens = w.batch_size * w.seq_len
    total = sum(la.forward_flops + la.backward_flops for la in w.layers) / tokens
    d, n_layer = {"gpt2-124m": (768, 12), "bert-large": (1024, 24), "llama-7b": (4096, 32)}[name]
    # attention's products: 12 L T d per token over the full T x T (Kaplan et al.), half where causal (the
    # decoders: the fused kernel skips the masked half); BERT attends both ways
    attention = (6 if name != "bert-large" else 12) * n_layer * w.seq_len * d
    expected = 6 * w.n_params + attention
    # Embedding tables other than the (tied or untied) output projection do no matmul: a few % off.
    assert total == pytest.approx(expected, rel=0.03)


# ------------------------------------------------------------------ behaviour
def test_llama_backward_follows_execution_not_registration():
    w = zoo_workload("llama-7b", 1, "bf16-amp", 128)
    names = [w.layers[i].name for i in w.execution_order]
    assert names.index("model.layers.0.input_layernorm") < names.index("model.layers.0.self_attn.q_proj")
    assert sorted(w.execution_order) == list(range(len(w.layers)))


def test_costs_scale_with_batch_and_precision():
    small, big = zoo_workload("resnet50", 8, "fp32"), zoo_workload("resnet50", 16, "fp32")
    assert sum(la.forward_flops for la in big.layers) == 2 * sum(la.forward_flops for la in small.layers)
    assert big.activation_bytes == pytest.approx(2 * small.activation_bytes)
    half = zoo_workload("resnet50", 8, "bf16-amp")
    assert half.activation_bytes == pytest.approx(small.activation_bytes / 2)
    assert all(p.dtype == "float32" for p in half.params)  # AMP keeps fp32 parameters and gradients


def test_every_zoo_model_builds():
    for name in ZOO_NAMES:
        w = zoo_workload(name, 2, "bf16-amp")
        assert w.n_params > 0 and w.activation_bytes > 0
        assert all(la.forward_bytes > 0 or not la.params for la in w.layers)


def test_unknown_model_suggests_nearest():
    with pytest.raises(ScenarioError) as err:
        zoo_workload("resnet-5O", 8, "fp32")
    assert err.value.field == "workload.model" and "resnet50" in str(err.value)
    with pytest.raises(ScenarioError, match="seq_len"):
        zoo_workload("gpt2-124m", 8, "fp32", seq_len=4096)
    with pytest.raises(ScenarioError, match="precision"):
        zoo_workload("gpt2-124m", 8, "fp8")
