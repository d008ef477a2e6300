"""Built-in models as ``Workload``s, without torch.

Parameter tensors (name, numel, order) match the reference implementations exactly, because DDP's
buckets are cut from that list: a wrong order or size moves every bucket boundary.

Cost conventions (the same for every model, so the zoo and the torch importer agree):
- ``forward_flops`` counts matrix products only, 2 FLOPs per multiply-add, exactly as
  ``torch.utils.flop_counter.FlopCounterMode`` does; attention counts QK^T and AV in full (no causal
  halving), as FlopCounterMode counts ``scaled_dot_product_attention``.
- ``backward_flops`` = 2 x forward (input grad + weight grad), except the model's first layer whose
  input needs no gradient (1 x). Elementwise work (norms, activations, residual adds, softmax) has no
  FLOPs here: it is memory bound, so it is costed through ``*_bytes``.
- ``forward_bytes`` = parameters read at fp32 (+ the bf16 copy autocast writes and reads for
  matrix-product weights) + activations in and out at the precision's element size, plus extra
  passes of folded elementwise ops. ``backward_bytes`` = 2 x forward (read grad-out and saved input,
  write grad-in and weight grad) unless stated.
- ``kernels`` counts forward kernels; the compute model charges backward twice as many.
- Modules without parameters (ReLU, pooling, attention core, the loss) are either folded into the
  neighbouring layer (extra bytes and kernels) or kept as a layer with no parameters.
- ``activation_bytes`` sums what autograd saves for backward (layer inputs, activation outputs,
  attention outputs, log-softmax of the logits).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import replace

from ddpsim.errors import ScenarioError
from ddpsim.workload.model import Layer, ParamTensor, Workload

ZOO_NAMES: tuple[str, ...] = ("resnet50", "gpt2-124m", "bert-large", "llama-7b", "llama3-8b", "mlp", "mlp-heavy")
LANGUAGE_MODELS: frozenset[str] = frozenset({"gpt2-124m", "bert-large", "llama-7b", "llama3-8b"})
_ALIASES = {"gpt2": "gpt2-124m", "bert": "bert-large", "llama2-7b": "llama-7b", "resnet-50": "resnet50"}
DEFAULT_SEQ_LEN: dict[str, int] = {"gpt2-124m": 1024, "bert-large": 512, "llama-7b": 2048, "llama3-8b": 8192}
# Element size of activations and matmul operands: autocast runs matmuls in 16 bits while
# parameters and gradients stay fp32 (PyTorch AMP), so ParamTensor.dtype is always float32.
ACTIVATION_BYTES = {"fp32": 4, "bf16-amp": 2, "fp16-amp": 2}

_Params = Sequence[tuple[str, int]]


class _Builder:
    """Collects layers in forward execution order and reorders them into registration order."""

    def __init__(self, batch_size: int, precision: str) -> None:
        self.elt = ACTIVATION_BYTES[precision]
        self.amp = precision != "fp32"
        self.batch = batch_size
        self.layers: list[Layer] = []
        self.activation_bytes = 0.0
        self.saved_by_layer: dict[str, float] = {}
        self.transient_bytes = 0.0

    def add(
        self,
        name: str,
        params: _Params = (),
        *,
        flops: float = 0.0,
        in_elems: float = 0.0,
        out_elems: float = 0.0,
        extra_elems: float = 0.0,
        kernels: int = 1,
        matmul_weight: int | None = None,
        first: bool = False,
        saved_elems: float | None = None,
        fwd_bytes: float | None = None,
        bwd_bytes: float | None = None,
        kind: str | None = None,
    ) -> None:
        """One layer; ``matmul_weight`` is the numel of the weight a matrix product reads (default:
        all params when ``flops`` > 0), ``extra_elems`` the element passes of folded elementwise ops."""
        own = sum(n for _, n in params)
        weight = matmul_weight if matmul_weight is not None else (own if flops else 0)
        # fp32 parameters are read once (a tied weight, as lm_head's, is read here too); under
        # autocast the matmul weight is also cast: 2 bytes written, 2 read back by the matmul.
        weight_bytes = max(own, weight) * 4.0
        if weight and self.amp:
            weight_bytes += weight * 4.0
            kernels += 1  # autocast's cast of the fp32 weight to 16 bits
        act = (in_elems + out_elems + extra_elems) * self.elt
        forward = fwd_bytes if fwd_bytes is not None else weight_bytes + act
        backward = bwd_bytes if bwd_bytes is not None else 2.0 * forward
        prefix = f"{name}." if name else ""
        tensors = tuple(ParamTensor(f"{prefix}{local}", numel) for local, numel in params)
        self.layers.append(
            Layer(
                name=name,
                params=tensors,
                forward_flops=float(flops),
                backward_flops=float(flops) * (1.0 if first else 2.0),
                forward_bytes=float(forward),
                backward_bytes=float(backward),
                kernels=kernels,
                kind=kind if kind is not None else ("matmul" if flops else ""),
            )
        )
        saved = (in_elems if saved_elems is None else saved_elems) * self.elt
        self.activation_bytes += saved
        self.saved_by_layer[name] = self.saved_by_layer.get(name, 0.0) + saved

    def build(
        self, name: str, precision: str, seq_len: int | None, registration: Sequence[str] | None = None
    ) -> Workload:
        """``registration``: module names with parameters in registration order, when it differs
        from execution order. Layers with parameters are re-sorted into it (so ``Workload.params``
        is DDP's order); ``forward_order`` keeps the execution order."""
        layers = list(self.layers)
        forward_order: tuple[int, ...] = ()
        if registration is not None:
            rank = {n: i for i, n in enumerate(registration)}
            slots = [i for i, layer in enumerate(layers) if layer.params]
            ordered = sorted((layers[i] for i in slots), key=lambda layer: rank[layer.name])
            new_layers = list(layers)
            for slot, layer in zip(slots, ordered, strict=True):
                new_layers[slot] = layer
            position = {id(layer): i for i, layer in enumerate(new_layers)}
            forward_order = tuple(position[id(layer)] for layer in layers)
            layers = new_layers
        return Workload(
            name=name,
            layers=tuple(layers),
            batch_size=self.batch,
            precision=precision,
            seq_len=seq_len,
            activation_bytes=self.activation_bytes,
            activation_source="the zoo's count of what autograd saves per layer",
            activation_bytes_by_layer=dict(self.saved_by_layer),
            transient_bytes=self.transient_bytes,
            forward_order=forward_order,
        )


def _conv(b: _Builder, name: str, cin: int, cout: int, k: int, stride: int, h: int, first: bool = False) -> int:
    h_out = (h + 2 * (k // 2) - k) // stride + 1
    n = b.batch
    b.add(
        name,
        [("weight", cout * cin * k * k)],
        flops=2.0 * n * cout * h_out * h_out * cin * k * k,
        in_elems=n * cin * h * h,
        out_elems=n * cout * h_out * h_out,
        first=first,
        kind="conv",
    )
    return h_out


def _bn(b: _Builder, name: str, c: int, h: int, relu: bool, residual: bool = False) -> None:
    """BatchNorm (reads x twice: statistics, then normalise) with ReLU and residual add folded in."""
    elems = b.batch * c * h * h
    extra, kernels, saved = elems, 1, elems
    if residual:
        extra, kernels = extra + 3 * elems, kernels + 1
    if relu:
        extra, kernels, saved = extra + 2 * elems, kernels + 1, saved + elems
    b.add(name, [("weight", c), ("bias", c)], in_elems=elems, out_elems=elems, extra_elems=extra,
          kernels=kernels, saved_elems=saved)


def _resnet50(b: _Builder) -> None:
    """torchvision.models.resnet50 (v1.5: stride on the 3x3 conv), 224x224 input, 1000 classes."""
    n = b.batch
    h = _conv(b, "conv1", 3, 64, 7, 2, 224, first=True)
    _bn(b, "bn1", 64, h, relu=True)
    b.add("maxpool", in_elems=n * 64 * h * h, out_elems=n * 64 * (h // 2) ** 2)
    h //= 2
    inplanes = 64
    for stage, (planes, blocks, stride) in enumerate(((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)), 1):
        for j in range(blocks):
            p = f"layer{stage}.{j}"
            s = stride if j == 0 else 1
            _conv(b, f"{p}.conv1", inplanes, planes, 1, 1, h)
            _bn(b, f"{p}.bn1", planes, h, relu=True)
            h2 = _conv(b, f"{p}.conv2", planes, planes, 3, s, h)
            _bn(b, f"{p}.bn2", planes, h2, relu=True)
            _conv(b, f"{p}.conv3", planes, planes * 4, 1, 1, h2)
            # The residual add and final ReLU run after the downsample branch: fold them into the
            # block's last executed layer.
            _bn(b, f"{p}.bn3", planes * 4, h2, relu=j > 0, residual=j > 0)
            if j == 0:
                _conv(b, f"{p}.downsample.0", inplanes, planes * 4, 1, s, h)
                _bn(b, f"{p}.downsample.1", planes * 4, h2, relu=True, residual=True)
            inplanes, h = planes * 4, h2
    b.add("avgpool", in_elems=n * 2048 * h * h, out_elems=n * 2048)
    b.add("fc", [("weight", 1000 * 2048), ("bias", 1000)], flops=2.0 * n * 2048 * 1000,
          in_elems=n * 2048, out_elems=n * 1000)
    b.add("loss", in_elems=n * 1000, extra_elems=2 * n * 1000, kernels=3)


def _linear(b: _Builder, name: str, n_tokens: int, d_in: int, d_out: int, bias: bool = True,
            extra_out_passes: float = 0.0, extra_kernels: int = 0, save_out: bool = False, saved_in: float = 1.0,
            saved_extra: float = 0.0) -> None:
    """nn.Linear over ``n_tokens`` rows; folded elementwise ops add passes over the output. Saved for backward:
    ``saved_in`` copies of its input (0 where another op's saved tensor is the same one), its output where
    ``save_out`` (the next op saves it), and ``saved_extra`` elements of folded ops."""
    params = [("weight", d_out * d_in)] + ([("bias", d_out)] if bias else [])
    out = n_tokens * d_out
    b.add(name, params, flops=2.0 * n_tokens * d_in * d_out, in_elems=n_tokens * d_in, out_elems=out,
          extra_elems=extra_out_passes * out, kernels=1 + extra_kernels, matmul_weight=d_out * d_in,
          saved_elems=saved_in * n_tokens * d_in + (out if save_out else 0) + saved_extra)


def _norm(b: _Builder, name: str, n_tokens: int, d: int, bias: bool = True, kernels: int = 1,
          residual: bool = False, saved_elems: float | None = None) -> None:
    elems = n_tokens * d
    params = [("weight", d)] + ([("bias", d)] if bias else [])
    extra = (3 * elems if residual else 0) + (3 * elems if kernels > 1 else 0)
    b.add(name, params, in_elems=elems, out_elems=elems, extra_elems=extra,
          kernels=kernels + (1 if residual else 0), saved_elems=saved_elems)


def _embedding(b: _Builder, name: str, rows: int, d: int, n_lookups: int, add_passes: int = 0) -> None:
    """Embedding: forward gathers ``n_lookups`` rows (fp32); backward zero-fills a dense fp32 gradient
    of the whole table, then scatter-adds into it."""
    out = n_lookups * d
    fwd = out * 4.0 * 2 + add_passes * out * b.elt
    bwd = rows * d * 4.0 * 2 + out * 4.0 * 2
    b.add(name, [("weight", rows * d)], in_elems=n_lookups, fwd_bytes=fwd, bwd_bytes=bwd,
          kernels=1 + (1 if add_passes else 0), saved_elems=0)


def _attention_core(b: _Builder, name: str, batch: int, seq: int, d: int, kernels: int, causal: bool = False) -> None:
    """QK^T, softmax, AV (SDPA): 4*B*T^2*d FLOPs, half of it where causal (the fused kernel skips the tiles
    above the diagonal); q, k, v in, one output, saved with logsumexp."""
    tokens = batch * seq
    b.add(name, flops=(2.0 if causal else 4.0) * batch * seq * seq * d, in_elems=3 * tokens * d, out_elems=tokens * d,
          extra_elems=2 * tokens * d, kernels=kernels, saved_elems=4 * tokens * d, matmul_weight=0,
          kind="attention")


def _lm_head(b: _Builder, name: str, n_tokens: int, d: int, vocab: int, params: _Params = ()) -> None:
    """Vocabulary projection plus cross-entropy in fp32 (autocast runs log_softmax in fp32): the
    logits are written, cast, read by log_softmax, which writes and saves its fp32 output."""
    logits = n_tokens * vocab
    loss_passes = 4.0 * 4 / b.elt  # 4 fp32 passes over the logits, expressed in element passes
    # backward starts with log-softmax's: its fp32 gradient in and out over the logits live beside every activation
    b.transient_bytes = max(b.transient_bytes, 8.0 * logits)
    b.add(name, params, flops=2.0 * n_tokens * d * vocab, in_elems=n_tokens * d, out_elems=logits,
          extra_elems=loss_passes * logits, kernels=4, matmul_weight=vocab * d,
          saved_elems=n_tokens * d + logits * 4 / b.elt)


def _gpt2(b: _Builder, seq: int, n_layer: int = 12, d: int = 768, vocab: int = 50257, n_pos: int = 1024) -> None:
    """HF GPT2Model parameter names (and the validation harness's GPT), lm_head tied to wte."""
    if seq > n_pos:
        raise ScenarioError(f"gpt2-124m supports seq_len up to {n_pos}, got {seq}", field="workload.seq_len")
    bt = b.batch * seq
    _embedding(b, "wte", vocab, d, bt)
    _embedding(b, "wpe", n_pos, d, seq, add_passes=3)
    for i in range(n_layer):
        p = f"h.{i}"
        _norm(b, f"{p}.ln_1", bt, d)
        _linear(b, f"{p}.attn.c_attn", bt, d, 3 * d)
        _attention_core(b, f"{p}.attn.core", b.batch, seq, d, kernels=3, causal=True)
        _linear(b, f"{p}.attn.c_proj", bt, d, d, extra_out_passes=3, extra_kernels=1)
        _norm(b, f"{p}.ln_2", bt, d)
        _linear(b, f"{p}.mlp.c_fc", bt, d, 4 * d, extra_out_passes=2, extra_kernels=1, save_out=True)
        _linear(b, f"{p}.mlp.c_proj", bt, 4 * d, d, extra_out_passes=3, extra_kernels=1)
    _norm(b, "ln_f", bt, d)
    _lm_head(b, "lm_head", bt, d, vocab)


def _bert_large(b: _Builder, seq: int, n_layer: int = 24, d: int = 1024, ff: int = 4096,
                vocab: int = 30522, n_pos: int = 512) -> list[str]:
    """HF BertForPreTraining (bert-large-uncased): MLM head decoder tied to word_embeddings, its bias
    registered on cls.predictions; NSP head; dropout 0.1 folded as extra passes."""
    if seq > n_pos:
        raise ScenarioError(f"bert-large supports seq_len up to {n_pos}, got {seq}", field="workload.seq_len")
    bt = b.batch * seq
    e = "bert.embeddings"
    _embedding(b, f"{e}.word_embeddings", vocab, d, bt)
    _embedding(b, f"{e}.token_type_embeddings", 2, d, bt, add_passes=3)
    _embedding(b, f"{e}.position_embeddings", n_pos, d, seq, add_passes=3)
    _norm(b, f"{e}.LayerNorm", bt, d, kernels=2)  # + dropout
    registration = [f"{e}.word_embeddings", f"{e}.position_embeddings", f"{e}.token_type_embeddings",
                    f"{e}.LayerNorm"]
    for i in range(n_layer):
        p = f"bert.encoder.layer.{i}"
        for proj in ("query", "key", "value"):
            _linear(b, f"{p}.attention.self.{proj}", bt, d, d)
        _attention_core(b, f"{p}.attention.self.core", b.batch, seq, d, kernels=4)
        _linear(b, f"{p}.attention.output.dense", bt, d, d, extra_out_passes=2, extra_kernels=1)
        _norm(b, f"{p}.attention.output.LayerNorm", bt, d, residual=True)
        _linear(b, f"{p}.intermediate.dense", bt, d, ff, extra_out_passes=2, extra_kernels=1, save_out=True)
        _linear(b, f"{p}.output.dense", bt, ff, d, extra_out_passes=2, extra_kernels=1)
        _norm(b, f"{p}.output.LayerNorm", bt, d, residual=True)
        registration += [f"{p}.attention.self.query", f"{p}.attention.self.key", f"{p}.attention.self.value",
                         f"{p}.attention.output.dense", f"{p}.attention.output.LayerNorm",
                         f"{p}.intermediate.dense", f"{p}.output.dense", f"{p}.output.LayerNorm"]
    _linear(b, "bert.pooler.dense", b.batch, d, d, extra_out_passes=2, extra_kernels=1)
    _linear(b, "cls.predictions.transform.dense", bt, d, d, extra_out_passes=2, extra_kernels=1)
    _norm(b, "cls.predictions.transform.LayerNorm", bt, d)
    _lm_head(b, "cls.predictions.decoder", bt, d, vocab)
    # The decoder's bias is cls.predictions' own parameter: ready when the decoder's backward ends.
    b.add("cls.predictions", [("bias", vocab)], kernels=0)
    _linear(b, "cls.seq_relationship", b.batch, d, 2, extra_out_passes=4, extra_kernels=3)
    registration += ["bert.pooler.dense", "cls.predictions", "cls.predictions.transform.dense",
                     "cls.predictions.transform.LayerNorm", "cls.seq_relationship"]
    return registration


def _llama_7b(b: _Builder, seq: int, n_layer: int = 32, d: int = 4096, ff: int = 11008,
              vocab: int = 32000, kv: int | None = None, compute: str = "autocast", norm: str = "eager") -> list[str]:
    """HF LlamaForCausalLM (LLaMA-7B; Llama 3 8B with ``ff`` 14336, ``vocab`` 128256 and grouped-query
    attention: ``kv`` = 8 key/value heads of 128 = 1024): no biases, RMSNorm weights, lm_head untied.
    Registered per decoder layer: self_attn (q, k, v, o), mlp (gate, up, down), input_layernorm,
    post_attention_layernorm; executed with the norms first.

    What autograd keeps, per op, with fp32 parameters (DDP's, so the residual stream is fp32: the embedding's
    output is, and adding a 16-bit projection to it stays fp32), e = the autocast element size (2 under AMP, 4 in
    fp32), per token: each RMSNorm its fp32 input and its fp32 normalised output (8d bytes, whatever e); each
    projection its input, which autocast casts to 16 bits once per projection (q, k and v: three copies of d;
    gate and up: two), where in fp32 they share one tensor; SDPA q, k, v and its output (4de; the output is o_proj's
    input, a view of it); SiLU its input, the gate-times-up product both operands, down its input (4 ff e). Per
    block 34 d + 8 ff bytes per token under bf16 AMP, 40 d + 16 ff in fp32 (tests/test_one_model.py checks it with
    torch's saved-tensor hooks on transformers' own LLaMA). The head: the final norm 8d, lm_head's input d e and
    log-softmax's fp32 output 4 vocab.

    ``compute`` "bf16": the parameters themselves are 16-bit while they compute (FSDP2's MixedPrecisionPolicy with
    param_dtype bf16, no autocast): the residual stream is bf16, each projection reads the norm's bf16 output as it
    is (one tensor shared by q, k and v, one by gate and up), and an eager RMSNorm saves its fp32 upcast (4d) and its
    bf16 normalised output (2d): 24 d + 8 ff per token. ``norm`` "fused" (torchtitan's fused_rmsnorm): a norm saves
    its input and a per-token rstd only (2d at bf16): 16 d + 8 ff."""
    if compute not in ("autocast", "bf16") or norm not in ("eager", "fused"):
        raise ValueError(f"compute {compute!r}, norm {norm!r}")
    bt = b.batch * seq
    bf16_params = compute == "bf16"
    # a projection's own cast of its input (autocast over fp32 parameters), else the one shared input
    amp_copies = 1.0 if b.amp and not bf16_params else 0.0
    norm_bytes = (2.0 if norm == "fused" else 6.0) if bf16_params else 8.0
    norm_saved = norm_bytes / b.elt * bt * d  # in elements of b.elt
    _embedding(b, "model.embed_tokens", vocab, d, bt)
    registration = ["model.embed_tokens"]
    for i in range(n_layer):
        p = f"model.layers.{i}"
        # HF's eager RMSNorm: cast to fp32, pow, mean, rsqrt, mul, cast, mul: ~6 kernels.
        _norm(b, f"{p}.input_layernorm", bt, d, bias=False, kernels=6, saved_elems=norm_saved)
        for proj in ("q_proj", "k_proj", "v_proj"):
            _linear(b, f"{p}.self_attn.{proj}", bt, d, d if proj == "q_proj" or kv is None else kv, bias=False,
                    saved_in=1.0 if proj == "q_proj" else amp_copies)
        # rotary embedding on q and k (~10 elementwise kernels) + SDPA
        _attention_core(b, f"{p}.self_attn.core", b.batch, seq, d, kernels=12, causal=True)
        _linear(b, f"{p}.self_attn.o_proj", bt, d, d, bias=False, extra_out_passes=3, extra_kernels=1, saved_in=0.0)
        _norm(b, f"{p}.post_attention_layernorm", bt, d, bias=False, kernels=6, saved_elems=norm_saved)
        _linear(b, f"{p}.mlp.gate_proj", bt, d, ff, bias=False, extra_out_passes=2, extra_kernels=1,
                save_out=True)
        # the product saves both operands: up's output and SiLU's output (counted here)
        _linear(b, f"{p}.mlp.up_proj", bt, d, ff, bias=False, extra_out_passes=3, extra_kernels=1,
                save_out=True, saved_in=amp_copies, saved_extra=bt * ff)
        _linear(b, f"{p}.mlp.down_proj", bt, ff, d, bias=False, extra_out_passes=3, extra_kernels=1)
        registration += [f"{p}.self_attn.{x}" for x in ("q_proj", "k_proj", "v_proj", "o_proj")]
        registration += [f"{p}.mlp.{x}" for x in ("gate_proj", "up_proj", "down_proj")]
        registration += [f"{p}.input_layernorm", f"{p}.post_attention_layernorm"]
    _norm(b, "model.norm", bt, d, bias=False, kernels=6, saved_elems=norm_saved)
    _lm_head(b, "lm_head", bt, d, vocab, params=[("weight", vocab * d)])
    registration += ["model.norm", "lm_head"]
    return registration


def llama_workload(batch_size: int, precision: str, seq_len: int, n_layer: int, d: int, ff: int, vocab: int,
                   kv: int | None = None, name: str = "llama", compute: str = "autocast",
                   norm: str = "eager") -> Workload:
    """The zoo's LLaMA (HF LlamaForCausalLM's layout and saved tensors) at any size: ``llama-7b`` is
    (32, 4096, 11008, 32000), ``llama3-8b`` (32, 4096, 14336, 128256, kv 1024). ``compute`` and ``norm``: see
    ``_llama_7b`` (FSDP2's bf16 compute; torchtitan's fused RMSNorm)."""
    b = _Builder(batch_size, precision)
    registration = _llama_7b(b, seq_len, n_layer, d, ff, vocab, kv, compute, norm)
    workload = b.build(name, precision, seq_len, registration)
    if compute == "bf16":
        return replace(workload, activation_source="the zoo's count of what autograd saves per layer, the parameters "
                       f"computing in bf16{' with a fused RMSNorm' if norm == 'fused' else ''}")
    return workload


def _mlp(b: _Builder, depth: int, width: int, n_rows: int) -> None:
    """nn.Sequential(Linear, ReLU, Linear, ..., Linear) with bias, as the validation harness's
    ``mlp_heavy``: parameters named "0.weight", "0.bias", "2.weight", ...; ReLUs are layers "1", "3", ...;
    cross-entropy over ``width`` classes."""
    for i in range(depth):
        b.add(str(2 * i), [("weight", width * width), ("bias", width)], flops=2.0 * n_rows * width * width,
              in_elems=n_rows * width, out_elems=n_rows * width, first=i == 0,
              saved_elems=0 if i == 0 else n_rows * width)
        if i < depth - 1:
            b.add(str(2 * i + 1), in_elems=n_rows * width, out_elems=n_rows * width, saved_elems=n_rows * width)
    b.add("loss", in_elems=n_rows * width, extra_elems=2 * n_rows * width, kernels=3)


def mlp_workload(depth: int, width: int, batch_size: int, precision: str = "fp32",
                 seq_len: int | None = None, name: str | None = None) -> Workload:
    """A plain MLP of ``depth`` Linear(width, width) layers with ReLU between (the zoo's "mlp" is
    depth 4, "mlp-heavy" depth 8, both width 4096); rows = batch_size * (seq_len or 1)."""
    if depth < 1 or width < 1:
        raise ScenarioError(f"expected depth and width >= 1, got {depth} and {width}", field="workload.model")
    if precision not in ACTIVATION_BYTES:
        raise ScenarioError(f"expected one of {', '.join(ACTIVATION_BYTES)}, got {precision!r}",
                            field="workload.precision")
    b = _Builder(batch_size, precision)
    _mlp(b, depth, width, batch_size * (seq_len or 1))
    label = name or f"mlp-{depth}x{width}"
    return replace(b.build(label, precision, seq_len), notes=(f"mlp:{depth}x{width}",))


def resolve_zoo_name(name: str) -> str:
    """Canonical zoo name, or ScenarioError suggesting the nearest one (field ``workload.model``)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key in ZOO_NAMES:
        return key
    near = difflib.get_close_matches(key, list(ZOO_NAMES) + list(_ALIASES), n=1, cutoff=0.5)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise ScenarioError(
        f"unknown model {name!r}{hint} Built-in models: {', '.join(ZOO_NAMES)}; or use "
        "'torch:package.module:factory' or 'profile:path.json'",
        field="workload.model",
    )


def zoo_workload(name: str, batch_size: int, precision: str, seq_len: int | None = None) -> Workload:
    """A built-in model for ``batch_size`` samples per GPU at ``precision`` (fp32 | bf16-amp | fp16-amp).

    ``seq_len`` applies to language models (default: GPT-2 1024, BERT 512, LLaMA 2048) and to the MLPs
    (rows = batch_size * seq_len); ResNet-50 ignores it.
    """
    key = resolve_zoo_name(name)
    if precision not in ACTIVATION_BYTES:
        raise ScenarioError(f"expected one of {', '.join(ACTIVATION_BYTES)}, got {precision!r}",
                            field="workload.precision")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ScenarioError(f"expected a positive integer, got {batch_size!r}", field="workload.batch_size")
    if seq_len is not None and seq_len < 1:
        raise ScenarioError(f"expected a positive integer, got {seq_len!r}", field="workload.seq_len")
    b = _Builder(batch_size, precision)
    registration: list[str] | None = None
    seq: int | None = seq_len if seq_len is not None else DEFAULT_SEQ_LEN.get(key)
    if key == "resnet50":
        _resnet50(b)
        seq = None
    elif key == "gpt2-124m":
        assert seq is not None
        _gpt2(b, seq)
    elif key == "bert-large":
        assert seq is not None
        registration = _bert_large(b, seq)
    elif key == "llama-7b":
        assert seq is not None
        registration = _llama_7b(b, seq)
    elif key == "llama3-8b":
        assert seq is not None
        registration = _llama_7b(b, seq, ff=14336, vocab=128256, kv=1024)
    else:
        _mlp(b, 4 if key == "mlp" else 8, 4096, batch_size * (seq or 1))
    workload = b.build(key, precision, seq, registration)
    return replace(workload, notes=(f"zoo:{key}",))
