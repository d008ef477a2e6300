"""Hugging Face models built from their config (random weights, nothing downloaded but the config).

``hf:GPT2Config`` (a config class of transformers, its defaults), ``hf:GPT2LMHeadModel`` (a model class:
that class, on its config class's defaults), ``hf:path/to/config.json`` (a config file with its
``model_type``) or ``hf:org/name`` (the hub's config, or the local cache's). The model is the named class,
else the config's causal-LM head where transformers has one, else its masked-LM head, else the bare model;
the batch is random token ids of ``@seq`` tokens (default: the shorter of 512 and the model's positions),
the loss the model's own LM loss. Defaults: batch 8, bf16 autocast, AdamW (``@batch``, ``@precision``,
``@optimizer`` change them).

The simulator's ``hf:`` workloads (ddpsim/workload/torch_import.py) build the same model from the same
names through ``load_model_source``, ``build_model`` and ``checked_seq``: this module imports torch and
the standard library only, so it is the one both can import.
"""
from __future__ import annotations

import difflib
import inspect
import json
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from .spec import ModelArgError, ModelSpec

DEFAULT_SEQ = 512


def load_model_source(what: str, local_files_only: bool = False) -> tuple[Any, type | None]:
    """(config, model class or None) that ``what`` names: a config class, a model class (with its
    config class's defaults), a config.json, or a hub name (``local_files_only``: the local cache's
    copy only, never the network)."""
    if not os.path.isfile(what) and (what.endswith(".json") or what.startswith((".", "/", "~"))):
        # a path, not a hub name: asking the hub would retry for half a minute without network
        raise ModelArgError(f"model hf:{what}: no such file")
    try:
        import transformers
    except ImportError as e:
        raise ModelArgError(f"model hf:{what}: transformers is not importable ({e}); pip install transformers") from e
    named = getattr(transformers, what, None) if what.isidentifier() else None
    if isinstance(named, type) and what.endswith("Config"):
        return named(), None
    config_class = getattr(named, "config_class", None)
    if isinstance(named, type) and isinstance(config_class, type):
        return config_class(), named
    if named is None and _looks_like_a_class(what):
        # GPT2Config or LlamaForCausalLM spelt wrong: no hub repository is named so; asking would retry for
        # half a minute without a network
        near = difflib.get_close_matches(what, [n for n in dir(transformers) if n[:1].isupper()], n=3)
        hint = f" (close: {', '.join(near)})" if near else ""
        raise ModelArgError(f"model hf:{what}: transformers {transformers.__version__} has no class {what!r}{hint}")
    if os.path.isfile(what):
        try:
            with open(what) as f:
                fields = json.load(f)
        except ValueError as e:
            raise ModelArgError(f"model hf:{what}: not a JSON config ({e})") from e
        if not isinstance(fields, dict) or "model_type" not in fields:
            raise ModelArgError(f"model hf:{what}: the config file has no 'model_type'")
        model_type = fields.pop("model_type")
        try:
            return transformers.AutoConfig.for_model(model_type, **fields), None
        except ValueError as e:  # a model_type this transformers does not know
            raise ModelArgError(f"model hf:{what}: {str(e).splitlines()[0][:200]}") from e
    # the local cache first; the hub only when it answers (offline, huggingface_hub retries 5 times, ~30 s)
    offline = local_files_only or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    try:
        return transformers.AutoConfig.from_pretrained(what, local_files_only=True), None
    except Exception as e:  # noqa: BLE001 - not cached: the hub, where it may be asked
        if offline:
            where = (" in the local Hugging Face cache (the simulator never downloads)" if local_files_only
                     else " in the local Hugging Face cache (HF_HUB_OFFLINE is set)")
            raise ModelArgError(f"model hf:{what}: no config found{where}; give a config class (hf:GPT2Config), a "
                                "model class (hf:GPT2LMHeadModel) or a config.json path") from e
    if not _hub_reachable():
        raise ModelArgError(f"model hf:{what}: not in the local Hugging Face cache, and huggingface.co cannot be "
                            "reached from here; give a config class (hf:GPT2Config), a model class "
                            "(hf:GPT2LMHeadModel) or a config.json path")
    try:
        return transformers.AutoConfig.from_pretrained(what), None
    except Exception as e:  # noqa: BLE001 - unknown name, bad file: one message
        where = ""
        raise ModelArgError(f"model hf:{what}: no config found{where} ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:200] if str(e) else ''}); give a config class "
                            "(hf:GPT2Config), a model class (hf:GPT2LMHeadModel) or a config.json path") from e


def _looks_like_a_class(what: str) -> bool:
    """A transformers class name (``GPT2Config``, ``LlamaForCausalLM``), not a hub name (``gpt2``, ``org/name``)."""
    return what.isidentifier() and what[:1].isupper() and what.endswith(("Config", "Model", "LMHeadModel")) or \
        what.isidentifier() and "For" in what and what[:1].isupper()


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether huggingface.co's name resolves and its port answers within ``timeout_s``."""
    import socket
    import threading

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").split("://")[-1].split("/")[0]
    host, _, port = endpoint.partition(":")
    answered: list[bool] = []

    def connect() -> None:  # the name's lookup ignores socket timeouts: bounded by the join below
        try:
            with socket.create_connection((host, int(port or 443)), timeout=timeout_s):
                answered.append(True)
        except (OSError, ValueError):
            answered.append(False)

    probe = threading.Thread(target=connect, daemon=True)
    probe.start()
    probe.join(timeout_s)
    return bool(answered and answered[0])


def build_model(config: Any, model_class: type | None = None) -> tuple[nn.Module, bool]:
    """(model, whether it has an LM head that takes labels): ``model_class`` if given, else the
    config's causal-LM head, else its masked-LM head, else the bare model."""
    import transformers

    if model_class is not None:
        forward = getattr(model_class, "forward", None)
        takes_labels = forward is not None and "labels" in inspect.signature(forward).parameters
        return _named_loss(model_class(config)), takes_labels
    # An encoder-decoder (T5, BART) is trained as sequence-to-sequence: its LM head builds the decoder's inputs from
    # the labels (shifted right). Where that head takes no token ids (Whisper's takes audio features), the
    # decoder-only head below is the one token ids can train.
    seq2seq = (transformers.AutoModelForSeq2SeqLM,) if getattr(config, "is_encoder_decoder", False) else ()
    if seq2seq and getattr(config, "decoder_start_token_id", None) is None:
        # a bare config class (hf:T5Config) leaves it unset where every released T5 config starts the decoder at
        # its padding token; the labels cannot be shifted right without it
        config.decoder_start_token_id = getattr(config, "pad_token_id", None) or 0
    for auto in (*seq2seq, transformers.AutoModelForCausalLM, transformers.AutoModelForMaskedLM):
        try:
            model = auto.from_config(config)
        except ValueError:  # this architecture has no such head
            continue
        if auto in seq2seq and "input_ids" not in inspect.signature(model.forward).parameters:
            continue
        return (model if auto in seq2seq else _named_loss(model)), True  # a seq2seq head computes its own loss
    return _named_loss(transformers.AutoModel.from_config(config)), False


def _named_loss(model: nn.Module) -> nn.Module:
    """The model with the loss transformers falls back to named: a head whose class name matches none of its
    losses (GPT2LMHeadModel) has ``loss_type`` None, and transformers then uses ``ForCausalLM`` and warns
    on every run (``loss_type=None ... unrecognized``). Naming it changes no number, only the warning."""
    if hasattr(model, "loss_type") and model.loss_type is None:
        model.loss_type = "ForCausalLM"
    return model


def token_inputs(model: nn.Module, ids: torch.Tensor, has_head: bool) -> dict[str, torch.Tensor]:
    """The keywords a model trains on from token ids: the ids as labels too where it has an LM head; a bare
    encoder-decoder (hf:T5Model) reads them as its decoder's inputs as well (nothing builds those without labels)."""
    if has_head:
        return {"input_ids": ids, "labels": ids}
    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in inspect.signature(model.forward).parameters:
        return {"input_ids": ids, "decoder_input_ids": ids}
    return {"input_ids": ids}


def checked_seq(config: Any, seq: int | None, name: str) -> int:
    """Tokens per sample: ``seq``, or when None the shorter of DEFAULT_SEQ and the model's positions;
    more than the model has positions for is refused (on the meta device nothing would notice)."""
    positions = _positions(config)
    seq = min(DEFAULT_SEQ, positions or DEFAULT_SEQ) if seq is None else seq
    if seq < 1 or (positions is not None and seq > positions):
        raise ModelArgError(f"model {name!r}: seq {seq} is not within 1..{positions}")
    return seq


def _positions(config: Any) -> int | None:
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
    model_class: type | None = None
    has_head: bool = True  # learnt at build: a bare model takes no labels

    def build(self) -> nn.Module:
        model, self.has_head = build_model(self.config, self.model_class)
        return model

    def make_batch(self, batch_size: int, device: torch.device | str, seed: int) -> torch.Tensor:
        g = torch.Generator(device="cpu").manual_seed(seed)
        return torch.randint(0, self.vocab, (batch_size, self.seq_len), generator=g).to(device)

    def loss(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        out = model(**token_inputs(model, batch, self.has_head))
        if getattr(out, "loss", None) is not None:
            return out.loss
        return out.last_hidden_state.float().pow(2).mean()


def hf_spec(name: str, what: str, opts: dict[str, str]) -> ModelSpec:
    if "seq" in opts and not opts["seq"].isdigit():  # before the config: loading one can take seconds
        raise ModelArgError(f"model {name!r}: seq must be a positive integer, got {opts['seq']!r}")
    config, model_class = load_model_source(what)
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 1:
        raise ModelArgError(f"model {name!r}: the config has no vocab_size (token models only)")
    seq = checked_seq(config, int(opts["seq"]) if "seq" in opts else None, name)
    holder = _HFModel(config, vocab, seq, model_class)
    return ModelSpec(name, holder.build, 8, "bf16-amp", seq, "adamw", "hf", vocab=vocab, requires="transformers",
                     batch_fn=holder.make_batch, loss_fn=holder.loss, source=f"hf:{what}")
