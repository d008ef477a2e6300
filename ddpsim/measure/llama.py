"""A LLaMA-style decoder for the sharded plan (FSDP2's usual subject), torch only."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------- a LLaMA-style decoder
class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype) * self.weight


class LlamaAttention(nn.Module):
    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (p(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))


class LlamaMLP(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    def __init__(self, d: int, n_head: int, hidden: int):
        super().__init__()
        self.self_attn = LlamaAttention(d, n_head)
        self.mlp = LlamaMLP(d, hidden)
        self.input_layernorm = RMSNorm(d)
        self.post_attention_layernorm = RMSNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    """Llama's ``model``: embed_tokens, layers, norm (a module of its own, so the names match LLaMA's)."""

    def __init__(self, n_layer: int, d: int, n_head: int, hidden: int, vocab: int):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([LlamaBlock(d, n_head, hidden) for _ in range(n_layer)])
        self.norm = RMSNorm(d)


class Llama(nn.Module):
    """LLaMA's parameter layout (model.embed_tokens, model.layers.{i}.(self_attn|mlp|norms), model.norm, an untied
    lm_head); positions are left out (no rotary embedding: it has no parameters and little compute)."""

    def __init__(self, n_layer: int, d: int, n_head: int, hidden: int, vocab: int):
        super().__init__()
        self.model = LlamaModel(n_layer, d, n_head, hidden, vocab)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02 / (math.sqrt(2 * n_layer) if name.endswith(("o_proj.weight",
                                                                                           "down_proj.weight")) else 1))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.model.embed_tokens(idx)
        for block in self.model.layers:
            x = block(x)
        return self.lm_head(self.model.norm(x))


def llama_1b() -> Llama:
    """About 1.2 B parameters: 16 blocks of width 2048 (MLP 5504), vocabulary 32000."""
    return Llama(16, 2048, 16, 5504, 32000)


def llama_tiny() -> Llama:
    """For CPU tests: 2 blocks of width 64."""
    return Llama(2, 64, 4, 160, 128)


def llama_tiny_meta() -> Llama:
    """``torch:ddpsim.measure.llama:llama_tiny_meta`` for ddpsim's importer (the same model)."""
    return llama_tiny()
