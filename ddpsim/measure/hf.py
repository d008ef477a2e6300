"""Hugging Face models built from their config (random weights, nothing downloaded but the config).

``hf:GPT2Config`` (a config class of transformers, its defaults), ``hf:path/to/config.json`` (a config
file with its ``model_type``) or ``hf:org/name`` (the hub's config, or the local cache's). The model is
the config's causal-LM head where transformers has one, else its masked-LM head, else the bare model;
the batch is random token ids of ``@seq`` tokens (default: the shorter of 512 and the model's positions),
the loss the model's own LM loss. Defaults: batch 8, bf16 autocast, AdamW (``@batch``, ``@precision``,
``@optimizer`` change them).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch

from .models import ModelArgError, ModelSpec

DEFAULT_SEQ = 512


def load_config(what: str):
    """The transformers config that ``what`` names (class name, JSON file or hub name)."""
    try:
        import transformers
    except ImportError as e:
        raise ModelArgError(f"model hf:{what}: transformers is not importable ({e}); pip install transformers") from e
    if what.endswith("Config") and hasattr(transformers, what):
        return getattr(transformers, what)()
    if os.path.isfile(what):
        with open(what) as f:
            fields = json.load(f)
        if not isinstance(fields, dict) or "model_type" not in fields:
            raise ModelArgError(f"model hf:{what}: the config file has no 'model_type'")
        model_type = fields.pop("model_type")
        return transformers.AutoConfig.for_model(model_type, **fields)
    try:
        return transformers.AutoConfig.from_pretrained(what)
    except Exception as e:  # noqa: BLE001 - offline, unknown name, bad file: one message
        raise ModelArgError(f"model hf:{what}: no config found ({type(e).__name__}: {str(e)[:200]}); give a "
                            "config class (hf:GPT2Config) or a config.json path on a host without the hub") from e


def _auto_model(config):
    import transformers

    for auto in (transformers.AutoModelForCausalLM, transformers.AutoModelForMaskedLM):
        try:
            return auto.from_config(config), True
        except ValueError:  # this architecture has no such head
            continue
    return transformers.AutoModel.from_config(config), False


def _positions(config) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


@dataclass
class _HFModel:
    config: object
    vocab: int
    seq_len: int = DEFAULT_SEQ
    has_head: bool = True  # learnt at build: a bare model takes no labels

    def build(self):
        model, self.has_head = _auto_model(self.config)
        return model

    def make_batch(self, batch_size, device, seed):
        g = torch.Generator(device="cpu").manual_seed(seed)
        return torch.randint(0, self.vocab, (batch_size, self.seq_len), generator=g).to(device)

    def loss(self, model, batch):
        out = model(input_ids=batch, labels=batch) if self.has_head else model(input_ids=batch)
        if getattr(out, "loss", None) is not None:
            return out.loss
        return out.last_hidden_state.float().pow(2).mean()


def hf_spec(name: str, what: str, opts: dict[str, str]) -> ModelSpec:
    config = load_config(what)
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 1:
        raise ModelArgError(f"model {name!r}: the config has no vocab_size (token models only)")
    positions = _positions(config)
    seq = int(opts["seq"]) if opts.get("seq", "").isdigit() else min(DEFAULT_SEQ, positions or DEFAULT_SEQ)
    if seq < 1 or (positions is not None and seq > positions):
        raise ModelArgError(f"model {name!r}: seq {seq} is not within 1..{positions}")
    holder = _HFModel(config, vocab, seq)
    return ModelSpec(name, holder.build, 8, "bf16-amp", seq, "adamw", "hf", vocab=vocab, requires="transformers",
                     batch_fn=holder.make_batch, loss_fn=holder.loss, source=f"hf:{what}")
