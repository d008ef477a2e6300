"""Benchmark models: plain torch (torchvision only for vit-b16, skipped with a reason without it).

Each model is described by a ModelSpec: how to build it, the synthetic batch, the loss,
the optimizer, the precision.  Parameter names/shapes/registration order follow the
reference implementations (torchvision resnet50, HF GPT-2) so DDP bucket layouts match.

Besides the built-in names, ``resolve("package.module:factory")`` accepts any model: ``factory()``
returns ``(model, make_batch)`` or ``(model, make_batch, loss_fn)`` where ``make_batch(batch_size,
device, seed)`` returns the batch and ``loss_fn(model, batch)`` the scalar loss (default: for a batch
``(x, y)`` cross-entropy of ``model(x)`` against an integer ``y``, MSE against a float ``y``; for any
other batch ``model(batch).float().pow(2).mean()``).  Such models train in fp32 with SGD at batch 8 unless
the argument says otherwise: ``package.module:factory@batch=16@precision=bf16@optimizer=adamw``.
"""
from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from .llama import llama_1b, llama_tiny
from .spec import OPTIMIZERS, PRECISIONS, ModelArgError, ModelSpec, default_custom_loss, parse_model_arg


# ----------------------------------------------------------------------------- ResNet-50
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        width = planes
        # Registration order as torchvision: conv1, bn1, conv2, bn2, conv3, bn3, relu, downsample
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision.models.resnet50 parameter structure (v1.5: stride on the 3x3 conv)."""

    def __init__(self, layers: tuple[int, int, int, int] = (3, 4, 6, 3), num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * Bottleneck.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * Bottleneck.expansion),
            )
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * Bottleneck.expansion
        for _ in range(1, blocks):
            layers.append(Bottleneck(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet50() -> nn.Module:
    return ResNet((3, 4, 6, 3))


# ----------------------------------------------------------------------------- GPT-2
class Attention(nn.Module):
    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = Attention(d, n_head)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2 small class: names wte, wpe, h.{i}.(ln_1|attn.c_attn|attn.c_proj|ln_2|mlp.c_fc|mlp.c_proj), ln_f;
    lm_head tied to wte (counted once by DDP)."""

    def __init__(self, n_layer: int = 12, d: int = 768, n_head: int = 12, vocab: int = 50257, n_positions: int = 1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(n_positions, d)
        self.h = nn.ModuleList([Block(d, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def gpt2_124m() -> nn.Module:
    return GPT()


# ----------------------------------------------------------------------------- MLP-heavy
def _linear_stack(width: int, depth: int, activation: Callable[[], nn.Module]) -> nn.Sequential:
    """nn.Sequential(Linear, act, Linear, ..., Linear): parameters "0.weight", "0.bias", "2.weight", ..."""
    mods: list[nn.Module] = []
    for i in range(depth):
        mods.append(nn.Linear(width, width))
        if i < depth - 1:
            mods.append(activation())
    return nn.Sequential(*mods)


def mlp_heavy(width: int = 4096, depth: int = 8) -> nn.Module:
    return _linear_stack(width, depth, nn.ReLU)


def mlp_wide(width: int = 8192, depth: int = 3) -> nn.Module:
    """A communication-bound model no shipped calibration was fitted on: three 8192-wide layers (805 MB
    of fp32 parameters, each larger than any bucket cap) with GELU, little compute per byte."""
    return _linear_stack(width, depth, nn.GELU)


def tiny_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8))


# ----------------------------------------------------------------------------- unseen models
class BertLarge(nn.Module):
    """BERT-large-like encoder on nn.TransformerEncoder: 24 post-LN layers, d=1024, 16 heads, FFN 4096,
    word/position/type embeddings, MLM head (dense + LayerNorm, decoder tied to the word embedding)."""

    def __init__(self, n_layer: int = 24, d: int = 1024, n_head: int = 16, vocab: int = 30522, n_positions: int = 512):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(n_positions, d)
        self.token_type_embeddings = nn.Embedding(2, d)
        self.emb_norm = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, n_head, dim_feedforward=4 * d, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=False)
        # enable_nested_tensor only matters for padded inference; off keeps training on the plain path
        self.encoder = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.head_dense = nn.Linear(d, d)
        self.head_norm = nn.LayerNorm(d)
        self.decoder = nn.Linear(d, vocab)
        self.decoder.weight = self.word_embeddings.weight  # tied, as in BERT's MLM head

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.word_embeddings(idx) + self.position_embeddings(pos) + self.token_type_embeddings(
            torch.zeros_like(idx))
        x = self.encoder(self.emb_norm(x))
        x = self.head_norm(F.gelu(self.head_dense(x)))
        return self.decoder(x)


def bert_large() -> nn.Module:
    return BertLarge()


def vit_b16() -> nn.Module:
    import torchvision  # optional dependency: the spec is skipped with the import error when missing

    return torchvision.models.vit_b_16(weights=None)


def mlp_ln_64(width: int = 1024, depth: int = 64) -> nn.Module:
    """64 x (Linear, LayerNorm, GELU): many small gradient tensors (192), launch-bound."""
    mods: list[nn.Module] = []
    for _ in range(depth):
        mods += [nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()]
    mods.append(nn.Linear(width, width))
    return nn.Sequential(*mods)


MODELS = {
    "resnet50": ModelSpec("resnet50", resnet50, 64, "fp32", None, "sgd", "cnn", (3, 224, 224), 1000),
    "gpt2-124m": ModelSpec("gpt2-124m", gpt2_124m, 8, "bf16-amp", 512, "adamw", "gpt", vocab=50257),
    "mlp-heavy": ModelSpec("mlp-heavy", mlp_heavy, 32, "fp32", None, "sgd", "mlp", (4096,), 4096),
    # unseen by ddpsim's calibration (issue: any model, any DDP option)
    "bert-large": ModelSpec("bert-large", bert_large, 32, "bf16-amp", 128, "adamw", "mlm", vocab=30522),
    "vit-b16": ModelSpec("vit-b16", vit_b16, 32, "bf16-amp", None, "adamw", "cnn", (3, 224, 224), 1000,
                         requires="torchvision"),
    "mlp-ln-64": ModelSpec("mlp-ln-64", mlp_ln_64, 256, "fp32", None, "sgd", "mlp", (1024,), 1024),
    "mlp-wide": ModelSpec("mlp-wide", mlp_wide, 16, "fp32", None, "sgd", "mlp", (8192,), 8192),
    # for offline tests / smoke runs
    "tiny-mlp": ModelSpec("tiny-mlp", tiny_mlp, 4, "fp32", None, "sgd", "mlp", (16,), 8),
}


class _Factory:
    """A user's ``module:factory``: every build() calls it again (one fresh model per DDP instance), so
    the model is created inside the caller's device context; its batch and loss functions come from the
    first call."""

    def __init__(self, target: str):
        mod_name, _, fn_name = target.partition(":")
        try:
            module = importlib.import_module(mod_name)
        except Exception as e:  # any error in the user's module (SyntaxError, a raise at import) is theirs
            raise ModelArgError(f"model {target!r}: module {mod_name!r} does not import "
                                f"({type(e).__name__}: {e})") from e
        self.target = target
        factory = getattr(module, fn_name, None)
        if not callable(factory):
            raise ModelArgError(f"model {target!r}: {mod_name!r} has no callable {fn_name!r}")
        self.factory: Callable[[], Any] = factory
        self.batch_fn: Callable | None = None
        self.loss_fn: Callable | None = None

    def _call(self) -> nn.Module:
        made = self.factory()
        if not isinstance(made, (tuple, list)) or len(made) not in (2, 3) or not isinstance(made[0], nn.Module):
            raise ModelArgError(f"model {self.target!r}: factory() must return (model, make_batch) or "
                                "(model, make_batch, loss_fn)")
        if self.batch_fn is None:
            self.batch_fn = made[1]
            self.loss_fn = made[2] if len(made) > 2 else None
        return made[0]

    def build(self) -> nn.Module:
        return self._call()

    def make_batch(self, batch_size: int, device: torch.device | str, seed: int) -> Any:
        if self.batch_fn is None:
            self._call()  # a batch asked for before any model: learn the batch function first
        assert self.batch_fn is not None  # _call sets it
        return self.batch_fn(batch_size, device, seed)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        if self.batch_fn is None:
            self._call()
        loss = (self.loss_fn or default_custom_loss)(model, batch)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or (torch.is_grad_enabled() and not loss.requires_grad):
            # a float (loss.item()) or a detached tensor has no backward: the step would time the forward only
            what = type(loss).__name__ if not isinstance(loss, torch.Tensor) else \
                f"a tensor of shape {tuple(loss.shape)}{'' if loss.requires_grad else ' without grad'}"
            raise ModelArgError(f"model {self.target!r}: loss_fn returned {what}; expected the scalar loss tensor "
                                "that backward() runs from")
        return loss


def gpt_tiny() -> nn.Module:
    """For CPU tests: GPT-2's layout (a tied lm_head) at 2 blocks of width 32."""
    return GPT(n_layer=2, d=32, n_head=2, vocab=64, n_positions=32)


# The sharded plan's models (llama-1b; llama-tiny and gpt-tiny for CPU tests), resolved by every mode. Their
# source names a factory: the loss is then spec.default_custom_loss (logits flattened against the tokens
# whatever the precision), the batch the "gpt" kind's random tokens
SHARDING_MODELS = {
    "llama-1b": ModelSpec("llama-1b", llama_1b, 4, "bf16-amp", 1024, "adamw", "gpt", vocab=32000,
                          source="ddpsim.measure.llama:llama_1b"),
    "llama-tiny": ModelSpec("llama-tiny", llama_tiny, 2, "fp32", 16, "adamw", "gpt", vocab=128,
                            source="ddpsim.measure.llama:llama_tiny"),
    "gpt-tiny": ModelSpec("gpt-tiny", gpt_tiny, 2, "fp32", 16, "adamw", "gpt", vocab=64,
                          source="ddpsim.measure.models:gpt_tiny"),
}


def resolve(name: str, batch_size: int | None = None) -> ModelSpec:
    """A model argument -> ModelSpec.

    ``name`` is a built-in name, ``module:factory``, or ``hf:CONFIG`` (a Hugging Face model built from its
    config, no weights: see hf.py), optionally followed by ``@batch=B``, ``@precision=fp32|bf16``,
    ``@optimizer=sgd|adamw`` and (hf) ``@seq=S``. ``batch_size`` (the old --batch-sizes) overrides ``@batch``.
    The spec keeps the whole argument as its name: records and profile files carry it as given."""
    base, opts = parse_model_arg(name)
    if base in MODELS:
        spec = replace(MODELS[base], name=name)
    elif base in SHARDING_MODELS:
        spec = replace(SHARDING_MODELS[base], name=name)
    elif base.startswith("hf:"):
        from .hf import hf_spec

        spec = hf_spec(name, base[3:], opts)
    elif ":" in base:
        fac = _Factory(base)
        spec = ModelSpec(name, fac.build, 8, "fp32", None, "sgd", "custom", batch_fn=fac.make_batch,
                         loss_fn=fac.loss, source=base)
    else:
        raise ModelArgError(f"unknown model {name!r} (built-in: {', '.join(MODELS)}; or module:factory, hf:CONFIG)")
    changes: dict = {}
    if "batch" in opts:
        if not opts["batch"].isdigit() or int(opts["batch"]) < 1:
            raise ModelArgError(f"model {name!r}: batch must be a positive integer, got {opts['batch']!r}")
        changes["batch_size"] = int(opts["batch"])
    if "precision" in opts:
        if opts["precision"] not in PRECISIONS:
            raise ModelArgError(f"model {name!r}: precision must be fp32 or bf16, got {opts['precision']!r}")
        changes["precision"] = PRECISIONS[opts["precision"]]
    if "optimizer" in opts:
        if opts["optimizer"] not in OPTIMIZERS:
            raise ModelArgError(f"model {name!r}: optimizer must be sgd or adamw, got {opts['optimizer']!r}")
        changes["optimizer"] = opts["optimizer"]
    if "seq" in opts and spec.kind not in ("hf", "gpt", "mlm"):
        raise ModelArgError(f"model {name!r}: seq applies to sequence models only")
    if "seq" in opts and spec.kind != "hf":  # hf_spec reads it itself
        if not opts["seq"].isdigit() or int(opts["seq"]) < 1:
            raise ModelArgError(f"model {name!r}: seq must be a positive integer, got {opts['seq']!r}")
        changes["seq_len"] = int(opts["seq"])
    if batch_size is not None:
        changes["batch_size"] = int(batch_size)
    return replace(spec, **changes) if changes else spec


def file_stem(name: str, batch_size: int | None = None, default_bs: int | None = None) -> str:
    """A file-name-safe stem for a model (module:factory names hold ':'), -bs<B> for a non-default batch."""
    stem = "".join(c if (c.isalnum() or c in "._-") else "_" for c in name)
    if batch_size is not None and default_bs is not None and batch_size != default_bs:
        stem += f"-bs{batch_size:d}"
    return stem


def ddp_param_order(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, param) in DDP's registration order: named_modules() walk, each module's own
    parameters (recurse=False), requires_grad only, shared parameters once."""
    seen: set[int] = set()
    out: list[tuple[str, nn.Parameter]] = []
    for mname, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            out.append(((mname + "." + pname) if mname else pname, p))
    return out


def buffers_bytes(model: nn.Module) -> int:
    return sum(b.numel() * b.element_size() for b in model.buffers())


def example_factory() -> tuple[nn.Module, Callable[[int, torch.device | str, int], Any]]:
    """The ``module:factory`` convention, as used by tests: ``--models ddpsim.measure.models:example_factory``."""

    def make_batch(batch_size: int, device: torch.device | str, seed: int) -> Any:
        g = torch.Generator(device="cpu").manual_seed(seed)
        x = torch.randn(batch_size, 12, generator=g).to(device)
        return x, torch.randint(0, 3, (batch_size,), generator=g).to(device)

    return nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 3)), make_batch
