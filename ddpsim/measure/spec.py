"""What a benchmark model is to the harness: its ModelSpec (how to build it, the synthetic batch, the loss,
the optimizer, the precision) and the ``name@key=value`` model argument. Below models.py and hf.py, which
both build specs (torch + stdlib only)."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------- specs
PRECISIONS = {"fp32": "fp32", "bf16": "bf16-amp", "bf16-amp": "bf16-amp"}
OPTIMIZERS = ("sgd", "adamw")
# the options a model argument may carry after its name: ``name@batch=16@precision=bf16@optimizer=adamw``
MODEL_OPTIONS = ("batch", "precision", "optimizer", "seq")


class ModelArgError(ValueError):
    """A model argument that cannot be used; the message names the argument and what was expected."""


def parse_model_arg(text: str) -> tuple[str, dict[str, str]]:
    """``name@key=value@key=value`` -> (name, {key: value}); the keys are MODEL_OPTIONS."""
    name, *opts = text.strip().split("@")
    if not name:
        raise ModelArgError(f"model {text!r}: no name before '@'")
    options: dict[str, str] = {}
    for opt in opts:
        key, sep, value = opt.partition("=")
        if not sep or key not in MODEL_OPTIONS or not value:
            raise ModelArgError(f"model {text!r}: option {opt!r} is not one of "
                                f"{', '.join(k + '=...' for k in MODEL_OPTIONS)}")
        if key in options:
            raise ModelArgError(f"model {text!r}: option {key!r} given twice")
        options[key] = value
    return name, options


def parameters_off_device(model: nn.Module, device: torch.device | str) -> list[str]:
    """Names of the parameters and buffers of ``model`` that are not on ``device`` (empty: all there)."""
    want = torch.device(device)

    def off(t: torch.Tensor) -> bool:
        return t.device.type != want.type or (want.index is not None and t.device.index != want.index)

    names = [n for n, p in model.named_parameters() if off(p)]
    return names + [n for n, b in model.named_buffers() if off(b)]


@dataclass
class ModelSpec:
    name: str
    build: Callable[[], nn.Module]
    batch_size: int
    precision: str  # "fp32" | "bf16-amp"
    seq_len: int | None
    optimizer: str  # "sgd" | "adamw"
    kind: str  # "cnn" | "gpt" | "mlm" | "mlp" | "custom" | "hf"
    in_shape: tuple = ()
    num_classes: int = 0
    vocab: int = 0
    requires: str | None = None  # an optional module the model needs (checked by available())
    batch_fn: Callable | None = None  # custom models: make_batch(batch_size, device, seed)
    loss_fn: Callable | None = None  # custom models: loss_fn(model, batch)
    source: str = "builtin"

    def available(self) -> tuple[bool, str | None]:
        """(True, None), or (False, why) when an optional dependency does not import."""
        if self.requires:
            try:
                importlib.import_module(self.requires)
            except Exception as e:  # noqa: BLE001 - any import failure means: skip with the reason
                return False, f"{self.requires} not importable: {e!r}"
        return True, None

    def build_on(self, device: torch.device | str) -> nn.Module:
        """A fresh model whose every parameter and buffer lives on ``device``.

        A factory may ignore the device context and build on the CPU: the model is moved. One whose
        tensors cannot be moved (built on the meta device) is refused here, naming the model, instead
        of failing later inside DDP or the first forward with a device mismatch."""
        with torch.device(device):
            model = self.build()
        if parameters_off_device(model, device):
            try:
                model = model.to(device)
            except (NotImplementedError, RuntimeError) as e:
                raise RuntimeError(f"model {self.name}: its parameters cannot be moved to {device} ({e}); "
                                   "the factory must build real tensors (not on the meta device)") from e
        off = parameters_off_device(model, device)
        if off:
            raise RuntimeError(f"model {self.name}: {len(off):d} parameters/buffers are not on {device} after "
                               f"moving it there (first: {off[0]})")
        return model

    def make_batch(self, device: torch.device | str, seed: int = 1234) -> Any:
        if self.batch_fn is not None:
            return self.batch_fn(self.batch_size, device, seed)
        g = torch.Generator(device="cpu").manual_seed(seed)
        seq_len = self.seq_len or 0  # sequence kinds always name theirs
        if self.kind == "gpt":
            tok = torch.randint(0, self.vocab, (self.batch_size, seq_len + 1), generator=g)
            tok = tok.to(device)
            return tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
        if self.kind == "mlm":  # synthetic masked-LM: predict random tokens at every position
            tok = torch.randint(0, self.vocab, (2, self.batch_size, seq_len), generator=g).to(device)
            return tok[0].contiguous(), tok[1].contiguous()
        x = torch.randn((self.batch_size,) + tuple(self.in_shape), generator=g).to(device)
        y = torch.randint(0, self.num_classes, (self.batch_size,), generator=g).to(device)
        return x, y

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        if self.source != "builtin":
            # a user's model: its loss (or the default one), under bf16 autocast when asked for
            fn = self.loss_fn or default_custom_loss
            if self.precision == "bf16-amp":
                with torch.autocast(device_type=_batch_device_type(batch), dtype=torch.bfloat16):
                    return fn(model, batch).float()
            return fn(model, batch)
        x, y = batch
        if self.precision == "bf16-amp":
            dev_type = x.device.type
            with torch.autocast(device_type=dev_type, dtype=torch.bfloat16):
                out = model(x)
                return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        out = model(x)
        # sequence models give (batch, tokens, vocab) logits: flattened, as under autocast above
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    def make_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        if self.optimizer == "adamw":
            return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def _batch_device_type(batch: Any) -> str:
    if isinstance(batch, torch.Tensor):
        return batch.device.type
    if isinstance(batch, dict):
        return _batch_device_type(next(iter(batch.values())))
    if isinstance(batch, (tuple, list)) and batch:
        return _batch_device_type(batch[0])
    return "cpu"


def default_custom_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        x, y = batch
        out = model(x)
        if not torch.is_floating_point(y):
            return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        return F.mse_loss(out.float(), y.float())
    if isinstance(batch, dict):
        return model(**batch).float().pow(2).mean()
    return model(batch).float().pow(2).mean()
