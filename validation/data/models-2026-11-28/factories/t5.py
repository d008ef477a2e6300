"""T5-small style encoder-decoder: a shared token embedding, nn.Transformer (6+6 pre-norm layers, 512 wide,
8 heads, FFN 2048, ReLU), causal decoder self-attention, an LM head tied to the embedding. Plain torch.
~60 M parameters. make_batch gives both inputs: the source and the shifted target.

build(batch_size=32, src_len=256, tgt_len=128, d_model=512, layers=6, heads=8, ffn=2048, vocab=32128)
make_batch(batch_size=None, device="cpu", seed=0) -> (src [B,Ls], tgt_in [B,Lt], tgt_out [B,Lt])
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH_SIZES = (32, 64)


class T5Like(nn.Module):
    def __init__(self, vocab: int = 32128, d_model: int = 512, layers: int = 6, heads: int = 8, ffn: int = 2048,
                 max_len: int = 512):
        super().__init__()
        self.shared = nn.Embedding(vocab, d_model)
        self.src_pos = nn.Embedding(max_len, d_model)
        self.tgt_pos = nn.Embedding(max_len, d_model)
        self.transformer = nn.Transformer(d_model, heads, layers, layers, ffn, dropout=0.1, batch_first=True,
                                          norm_first=True)
        for emb in (self.shared, self.src_pos, self.tgt_pos):
            nn.init.normal_(emb.weight, std=0.02)  # tied head: keeps the initial logits near unit scale

    def forward(self, src, tgt):
        ls, lt = src.shape[1], tgt.shape[1]
        s = self.shared(src) + self.src_pos(torch.arange(ls, device=src.device))
        t = self.shared(tgt) + self.tgt_pos(torch.arange(lt, device=tgt.device))
        mask = nn.Transformer.generate_square_subsequent_mask(lt, device=tgt.device, dtype=s.dtype)
        y = self.transformer(s, t, tgt_mask=mask, tgt_is_causal=True)
        return F.linear(y, self.shared.weight)


def build(batch_size: int = 32, src_len: int = 256, tgt_len: int = 128, d_model: int = 512, layers: int = 6,
          heads: int = 8, ffn: int = 2048, vocab: int = 32128, **kw):
    model = T5Like(vocab, d_model, layers, heads, ffn, max(512, src_len, tgt_len + 1))

    def make_batch(batch_size: int | None = batch_size, device="cpu", seed: int = 0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        b = batch_size or 32
        src = torch.randint(0, vocab, (b, src_len), generator=g)
        tgt = torch.randint(0, vocab, (b, tgt_len + 1), generator=g)
        return src.to(device), tgt[:, :-1].contiguous().to(device), tgt[:, 1:].contiguous().to(device)

    def loss_fn(model, batch):
        src, tgt_in, tgt_out = batch
        logits = model(src, tgt_in)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tgt_out.reshape(-1))

    return model, make_batch, loss_fn
