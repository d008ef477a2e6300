"""Small models the torch importer tests build through 'torch:tests.fixtures_models:<factory>'."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def tiny_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8))


class TinyLM(nn.Module):
    """Embedding, one attention block whose softmax runs in the block itself, tied output head;
    registers its norm after the projections but runs it first (as LLaMA does)."""

    def __init__(self, vocab: int = 100, d: int = 32) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight
        self.frozen = nn.Linear(d, d)
        self.frozen.requires_grad_(False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.emb(idx))
        q, k, v = self.qkv(x).split(x.shape[-1], -1)
        y = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], is_causal=True)[:, 0]
        return self.head(x + self.proj(y))


def tiny_lm() -> nn.Module:
    return TinyLM()


class NeedsInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(4, 4))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a @ self.w) * b


def needs_input() -> nn.Module:
    return NeedsInput()


class WithExample(NeedsInput):
    def example_input(self, batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(batch_size, 4), torch.randn(batch_size, 4)


def with_example() -> nn.Module:
    return WithExample()


def not_a_module() -> int:
    return 3


# --- Models whose bucket layouts tests/test_ddp_layouts.py compares with real DDP on gloo. ---
# Each builds on the default device (meta under ddpsim, CPU in the test) and has an
# example_input(batch_size, seq_len). They are small enough for CPU, yet several MiB, so that
# bucket caps of 1, 5 and 25 MiB split them differently.


class BNConvNet(nn.Module):
    """ResNet-like: conv-BN stem, a residual stage with a 1x1 downsample branch, a conv with a bias,
    pooled linear head. Autograd gives a conv's and a BN's weight before its bias."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(64)
        self.conv1 = nn.Conv2d(64, 128, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(128)
        self.conv2 = nn.Conv2d(128, 128, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(128)
        self.down = nn.Sequential(nn.Conv2d(64, 128, 1, stride=2, bias=False), nn.BatchNorm2d(128))
        self.conv3 = nn.Conv2d(128, 256, 3, stride=2, padding=1)
        self.bn3 = nn.BatchNorm2d(256)
        self.fc = nn.Linear(256, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn0(self.stem(x)))
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        x = F.relu(y + self.down(x))
        x = F.relu(self.bn3(self.conv3(x)))
        return self.fc(x.mean((2, 3)))

    def example_input(self, batch_size: int, seq_len: int | None) -> torch.Tensor:
        return torch.randn(batch_size, 3, 16, 16)


def bn_convnet() -> nn.Module:
    return BNConvNet()


def frozen_convnet() -> nn.Module:
    """The same net with its stem, a BN weight in the middle and the head's bias frozen: DDP
    leaves them out, and no gradient hook fires for them."""
    model = BNConvNet()
    model.stem.requires_grad_(False)
    model.bn0.requires_grad_(False)
    model.bn2.weight.requires_grad_(False)
    model.fc.bias.requires_grad_(False)
    return model


class EncoderLM(nn.Module):
    """Token embedding, nn.TransformerEncoder (MultiheadAttention inside), norm, head."""

    def __init__(self, vocab: int = 1000, d: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.encoder(self.emb(idx))))

    def example_input(self, batch_size: int, seq_len: int | None) -> torch.Tensor:
        return torch.randint(0, self.emb.num_embeddings, (batch_size, seq_len or 16))


def transformer_encoder() -> nn.Module:
    return EncoderLM()


class ViTBlock(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 3, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyViT(nn.Module):
    """ViT-style, calling nn.MultiheadAttention directly (its out_proj is never called as a module),
    with a class token and position embedding registered on the root."""

    def __init__(self, d: int = 192, depth: int = 3, classes: int = 100) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embed = nn.Parameter(torch.zeros(1, 17, d))
        self.patch = nn.Conv2d(3, d, 4, stride=4)
        self.blocks = nn.ModuleList(ViTBlock(d) for _ in range(depth))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])

    def example_input(self, batch_size: int, seq_len: int | None) -> torch.Tensor:
        return torch.randn(batch_size, 3, 16, 16)


def mha_vit() -> nn.Module:
    return TinyViT()


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.c_attn(x).split(d, -1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class GPTBlock(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """GPT-2 layout: token and position embeddings, pre-norm blocks, final norm, head tied to the
    token embedding (one parameter, registered as wte.weight). 29 MiB of fp32 parameters."""

    def __init__(self, vocab: int = 16384, ctx: int = 64, d: int = 256, depth: int = 4) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.h = nn.ModuleList(GPTBlock(d, 4) for _ in range(depth))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def example_input(self, batch_size: int, seq_len: int | None) -> torch.Tensor:
        return torch.randint(0, self.wte.num_embeddings, (batch_size, seq_len or 16))


def gpt_decoder() -> nn.Module:
    return TinyGPT()


class TiedNet(nn.Module):
    """Weights shared three ways: a block registered twice and run three times, a decoder that
    reuses the encoder's weight transposed, and a head whose weight is another head's."""

    def __init__(self, d_in: int = 64, d: int = 512) -> None:
        super().__init__()
        self.enc = nn.Linear(d_in, d)
        self.shared = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))
        self.again = self.shared
        self.dec_bias = nn.Parameter(torch.zeros(d_in))
        self.head_a = nn.Linear(d_in, d_in)
        self.head_b = nn.Linear(d_in, d_in)
        self.head_b.weight = self.head_a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.again(self.shared(self.shared(self.enc(x))))
        y = F.linear(h, self.enc.weight.t(), self.dec_bias)
        return self.head_b(y) + self.head_a(x)

    def example_input(self, batch_size: int, seq_len: int | None) -> torch.Tensor:
        return torch.randn(batch_size, self.enc.in_features)


def tied_weights() -> nn.Module:
    return TiedNet()


class MixedDtype(nn.Module):
    """fp32 and bf16 parameters interleaved: DDP buckets each dtype apart."""

    def __init__(self, d: int = 512) -> None:
        super().__init__()
        self.inp = nn.Linear(64, d)
        self.mid = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)).to(torch.bfloat16)
        self.norm = nn.LayerNorm(d)
        self.mid2 = nn.Linear(d, d).to(torch.bfloat16)
        self.out = nn.Linear(d, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.mid(self.inp(x).bfloat16()).float()
        x = self.mid2(self.norm(x).bfloat16()).float()
        return self.out(x)

    def example_input(self, batch_size: int, seq_len: int | None) -> torch.Tensor:
        return torch.randn(batch_size, 64)


def mixed_dtype() -> nn.Module:
    return MixedDtype()


class LazyNet(nn.Module):
    """LazyLinear layers: parameters get their size from the first forward."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.LazyLinear(512), nn.ReLU(), nn.LazyLinear(512), nn.ReLU(), nn.LazyLinear(10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def example_input(self, batch_size: int, seq_len: int | None) -> torch.Tensor:
        return torch.randn(batch_size, 300)


def lazy_mlp() -> nn.Module:
    return LazyNet()


def lazy_no_input() -> nn.Module:
    return nn.Sequential(nn.LazyLinear(8))


class WithUnused(nn.Module):
    """A Linear and a bare parameter that forward never touches (left over from a refactor)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(128, 512)
        self.unused = nn.Linear(512, 512)
        self.b = nn.Linear(512, 128)
        self.extra = nn.Parameter(torch.zeros(1000))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.relu(self.a(x)))

    def example_input(self, batch_size: int, seq_len: int | None) -> torch.Tensor:
        return torch.randn(batch_size, 128)


def with_unused() -> nn.Module:
    return WithUnused()
