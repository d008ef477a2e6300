"""BERT-base style encoder for masked-LM (Devlin et al. 2019): token + position + segment embeddings,
LayerNorm, 12 post-norm nn.TransformerEncoderLayer blocks (GELU), an MLM head tied to the word embeddings.
Plain torch. ~110 M parameters. Loss over every position (synthetic targets).

build(batch_size=32, seq_len=128, hidden=768, layers=12, heads=12, vocab=30522)
make_batch(batch_size=None, device="cpu", seed=0) -> (tokens [B,S], targets [B,S])
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH_SIZES = (32, 64)


class Bert(nn.Module):
    def __init__(self, vocab: int = 30522, hidden: int = 768, layers: int = 12, heads: int = 12,
                 max_seq: int = 512):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_seq, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.embed_norm = nn.LayerNorm(hidden, eps=1e-12)
        layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.1, activation="gelu",
                                           batch_first=True, layer_norm_eps=1e-12)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.mlm_dense = nn.Linear(hidden, hidden)
        self.mlm_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab))
        for emb in (self.word_embeddings, self.position_embeddings, self.token_type_embeddings):
            nn.init.normal_(emb.weight, std=0.02)  # BERT's init: unit-variance logits, not ~100

    def forward(self, tokens):
        s = tokens.shape[1]
        pos = torch.arange(s, device=tokens.device)
        x = self.word_embeddings(tokens) + self.position_embeddings(pos) + self.token_type_embeddings.weight[0]
        x = self.encoder(self.embed_norm(x))
        x = self.mlm_norm(F.gelu(self.mlm_dense(x)))
        return F.linear(x, self.word_embeddings.weight, self.mlm_bias)


def build(batch_size: int = 32, seq_len: int = 128, hidden: int = 768, layers: int = 12, heads: int = 12,
          vocab: int = 30522, **kw):
    model = Bert(vocab, hidden, layers, heads, max(512, seq_len))

    def make_batch(batch_size: int | None = batch_size, device="cpu", seed: int = 0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        tok = torch.randint(0, vocab, (2, batch_size or 32, seq_len), generator=g).to(device)
        return tok[0].contiguous(), tok[1].contiguous()

    return model, make_batch
