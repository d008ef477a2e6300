"""Peak memory and step time of user factories on one GPU, one model per process (torch + stdlib only).

    python validation/campaigns/memory_factories.py            # every run, each in its own process; JSON under $OUT

Ten models written as users write them (``build() -> (model, make_batch, loss_fn)``, blocks in ``model.layers``):
a LLaMA-style decoder, a GPT-style decoder, a BERT-style encoder, a ConvNeXt-style and a ResNet-style CNN, a ViT,
an MLP-Mixer, a T5-style encoder-decoder, a mixture of experts (expert-choice routing: fixed shapes) and an LSTM
language model. Each runs in bf16 (``torch.autocast`` opened inside ``loss_fn`` on the batch's device, as users
write it) and fp32, and the block models in bf16 with every block checkpointed (``torch.utils.checkpoint``,
non-reentrant). A run is a plain training step (no DDP: a world-size-1 DDP step with gradient_as_bucket_view holds
the same tensors) with AdamW (foreach): two warm-up steps put the optimizer's states in place, then the peak
allocated (``torch.cuda.max_memory_allocated``) over one step and the median of five steps' time. A fresh process
per run, so no earlier model's tensors or cached blocks count. Runs stop being launched when the budget
is spent (180 s; a run may take 45 s more), so the whole stays under 4 minutes; the ones left out are listed. The same factories are what ddpsim prices
(``torch:validation.campaigns.memory_factories:<name>_<precision>``); validation/evidence/stages/memory_factories.py
compares the two.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

VOCAB = 32000
BUDGET_S = 180.0


# ------------------------------------------------------------------------------------------------ blocks
class RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * self.weight


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, causal: bool, bias: bool = False) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(d, 3 * d, bias=bias)
        self.out = nn.Linear(d, d, bias=bias)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        b, s, d = x.shape
        if memory is None:
            q, k, v = self.qkv(x).split(d, dim=-1)
        else:  # cross-attention: queries from x, keys and values from the encoder's output
            w_q, w_kv = self.qkv.weight.split([d, 2 * d])
            q = F.linear(x, w_q)
            k, v = F.linear(memory, w_kv).split(d, dim=-1)
        q, k, v = (t.reshape(b, -1, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal and memory is None)
        return self.out(a.transpose(1, 2).reshape(b, s, d))


class LlamaBlock(nn.Module):
    def __init__(self, d: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.attention_norm, self.ffn_norm = RMSNorm(d), RMSNorm(d)
        self.attention = Attention(d, heads, causal=True)
        self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class PreLNBlock(nn.Module):
    """GPT / ViT block: LayerNorm before attention and MLP (GELU)."""

    def __init__(self, d: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads, causal, bias=True)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class PostLNBlock(nn.Module):
    """BERT block: attention, add, LayerNorm; MLP, add, LayerNorm; dropout 0.1."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attn = Attention(d, heads, causal=False, bias=True)
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_1(x + self.drop(self.attn(x)))
        return self.ln_2(x + self.drop(self.proj(F.gelu(self.fc(x)))))


class ConvNeXtBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.pw1, self.pw2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.dw(x).permute(0, 2, 3, 1))
        return x + self.pw2(F.gelu(self.pw1(h))).permute(0, 3, 1, 2)


class Bottleneck(nn.Module):
    def __init__(self, c_in: int, planes: int, stride: int) -> None:
        super().__init__()
        c_out = 4 * planes
        self.conv1, self.bn1 = nn.Conv2d(c_in, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = nn.Conv2d(planes, c_out, 1, bias=False), nn.BatchNorm2d(c_out)
        self.down = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
                     if stride != 1 or c_in != c_out else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return F.relu(self.bn3(self.conv3(h)) + self.down(x))


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, d: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.tok_1, self.tok_2 = nn.Linear(tokens, 2 * tokens), nn.Linear(2 * tokens, tokens)
        self.ch_1, self.ch_2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln_1(x).transpose(1, 2)
        x = x + self.tok_2(F.gelu(self.tok_1(h))).transpose(1, 2)
        return x + self.ch_2(F.gelu(self.ch_1(self.ln_2(x))))


class ExpertChoiceMoE(nn.Module):
    """Each expert takes its top ``capacity`` tokens (expert-choice routing): every shape is fixed."""

    def __init__(self, d: int, experts: int, hidden: int) -> None:
        super().__init__()
        self.norm = RMSNorm(d)
        self.router = nn.Linear(d, experts, bias=False)
        self.w_in = nn.Parameter(torch.randn(experts, d, hidden) * d ** -0.5)
        self.w_out = nn.Parameter(torch.randn(experts, hidden, d) * hidden ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.norm(x).reshape(b * s, d)
        experts = self.w_in.shape[0]
        scores = self.router(h).float().softmax(-1).t()  # (experts, tokens)
        gate, index = scores.topk(2 * b * s // experts, dim=-1)  # each expert's capacity: 2 tokens per token / E
        picked = h[index]  # (experts, capacity, d)
        y = torch.bmm(F.silu(torch.bmm(picked, self.w_in)), self.w_out) * gate.unsqueeze(-1).to(picked.dtype)
        out = torch.zeros_like(h).index_add(0, index.reshape(-1), y.reshape(-1, d).to(h.dtype))
        return x + out.reshape(b, s, d)


class MoEBlock(nn.Module):
    def __init__(self, d: int, heads: int, experts: int, hidden: int) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(d)
        self.attention = Attention(d, heads, causal=True)
        self.moe = ExpertChoiceMoE(d, experts, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.moe(x + self.attention(self.attention_norm(x)))


class T5Block(nn.Module):
    def __init__(self, d: int, heads: int, decoder: bool) -> None:
        super().__init__()
        self.norm_1, self.norm_3 = RMSNorm(d), RMSNorm(d)
        self.self_attn = Attention(d, heads, causal=decoder)
        self.norm_2 = RMSNorm(d) if decoder else None
        self.cross = Attention(d, heads, causal=False) if decoder else None
        self.wi, self.wo = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.self_attn(self.norm_1(x))
        if self.cross is not None and self.norm_2 is not None:
            x = x + self.cross(self.norm_2(x), memory)
        return x + self.wo(F.relu(self.wi(self.norm_3(x))))


# ------------------------------------------------------------------------------------------------ models
class Stack(nn.Module):
    """A stem, ``layers`` (the blocks, each checkpointed when ``checkpointing``), a head."""

    def __init__(self, stem: nn.Module, layers: list[nn.Module], head: nn.Module) -> None:
        super().__init__()
        self.stem, self.layers, self.head = stem, nn.ModuleList(layers), head
        self.checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for block in self.layers:
            h = checkpoint(block, h, use_reentrant=False) if self.checkpointing else block(h)
        return self.head(h)


class TokenStem(nn.Module):
    def __init__(self, d: int, positions: int = 0) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(positions, d) if positions else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.tok(ids)
        return h + self.pos.weight[: ids.shape[1]] if self.pos is not None else h


class PatchStem(nn.Module):
    def __init__(self, d: int, patch: int, side: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, d, patch, patch)
        self.pos = nn.Parameter(torch.zeros((side // patch) ** 2, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2) + self.pos


class PoolHead(nn.Module):
    def __init__(self, d: int, classes: int, channels_first: bool) -> None:
        super().__init__()
        self.norm, self.fc, self.channels_first = nn.LayerNorm(d), nn.Linear(d, classes), channels_first

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        pooled = h.mean((2, 3)) if self.channels_first else h.mean(1)
        return self.fc(self.norm(pooled))


class LMHead(nn.Module):
    def __init__(self, d: int, layer_norm: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d) if layer_norm else RMSNorm(d)
        self.out = nn.Linear(d, VOCAB, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(h))


class EncoderDecoder(nn.Module):
    """T5-style: the encoder reads the source, the decoder the shifted target; blocks of both in ``layers``."""

    def __init__(self, d: int, heads: int, n: int) -> None:
        super().__init__()
        self.shared = nn.Embedding(VOCAB, d)
        self.layers = nn.ModuleList([T5Block(d, heads, False) for _ in range(n)] +
                                    [T5Block(d, heads, True) for _ in range(n)])
        self.n, self.enc_norm, self.head = n, RMSNorm(d), LMHead(d)
        self.checkpointing = False

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        source, target = ids.chunk(2, dim=1)
        h = self.shared(source)
        for block in self.layers[: self.n]:
            h = checkpoint(block, h, use_reentrant=False) if self.checkpointing else block(h)
        memory = self.enc_norm(h)
        g = self.shared(target)
        for block in self.layers[self.n:]:
            g = checkpoint(block, g, memory, use_reentrant=False) if self.checkpointing else block(g, memory)
        return self.head(g)


class LSTMLM(nn.Module):
    def __init__(self, d: int, layers: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.lstm = nn.LSTM(d, d, layers, batch_first=True)
        self.head = nn.Linear(d, VOCAB)
        self.checkpointing = False  # one cuDNN kernel: no blocks to checkpoint

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(self.tok(ids))[0])


# ------------------------------------------------------------------------------------------------ factories
# name -> (build the model, batch size, tokens per sample or image side, kind of input)
SPECS: dict[str, tuple[Any, int, int, str]] = {
    "llama": (lambda: Stack(TokenStem(1024), [LlamaBlock(1024, 16, 2816) for _ in range(8)], LMHead(1024)),
              8, 1024, "tokens"),
    "gpt": (lambda: Stack(TokenStem(768, 1024), [PreLNBlock(768, 12, True) for _ in range(12)], LMHead(768, True)),
            8, 1024, "tokens"),
    "bert": (lambda: Stack(TokenStem(1024, 512), [PostLNBlock(1024, 16) for _ in range(12)], LMHead(1024, True)),
             16, 512, "tokens"),
    "vit": (lambda: Stack(PatchStem(768, 16, 224), [PreLNBlock(768, 12, False) for _ in range(12)],
                          PoolHead(768, 1000, False)), 64, 224, "images"),
    "convnext": (lambda: Stack(nn.Conv2d(3, 256, 4, 4), [ConvNeXtBlock(256) for _ in range(12)],
                               PoolHead(256, 1000, True)), 32, 224, "images"),
    "resnet": (lambda: Stack(nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                           nn.MaxPool2d(3, 2, 1)),
                             [Bottleneck(64, 64, 1)] + [Bottleneck(256, 64, 1) for _ in range(2)]
                             + [Bottleneck(256, 128, 2)] + [Bottleneck(512, 128, 1) for _ in range(3)],
                             nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))),
               64, 224, "images"),
    "mixer": (lambda: Stack(PatchStem(512, 16, 224), [MixerBlock(196, 512) for _ in range(12)],
                            PoolHead(512, 1000, False)), 64, 224, "images"),
    "t5": (lambda: EncoderDecoder(768, 12, 6), 16, 1024, "tokens"),  # 512 source + 512 target tokens
    "moe": (lambda: Stack(TokenStem(768), [MoEBlock(768, 12, 8, 1536) for _ in range(6)], LMHead(768)),
            8, 1024, "tokens"),
    "lstm": (lambda: LSTMLM(1024, 2), 32, 256, "tokens"),
}
BLOCKLESS = ("lstm",)


def _factory(name: str, precision: str) -> Any:
    make_model, _batch, size, kind = SPECS[name]

    def make_batch(batch_size: int, device: Any, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        if kind == "images":
            return (torch.randn(batch_size, 3, size, size, generator=g).to(device),
                    torch.randint(0, 1000, (batch_size,), generator=g).to(device))
        ids = torch.randint(0, VOCAB, (batch_size, size), generator=g).to(device)
        return ids, ids

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = model(x)
        if kind == "tokens":
            target = y[:, y.shape[1] // 2:] if name == "t5" else y
            return F.cross_entropy(out.float().reshape(-1, VOCAB), target.reshape(-1))
        return F.cross_entropy(out.float(), y)

    def build() -> tuple[nn.Module, Any, Any]:
        return make_model(), make_batch, loss_fn

    return build


# ``torch:validation.campaigns.memory_factories:llama_bf16`` and the like, for ddpsim's importer
for _name in SPECS:
    for _precision in ("bf16", "fp32"):
        globals()[f"{_name}_{_precision}"] = _factory(_name, _precision)


def runs() -> list[tuple[str, str, bool]]:
    """(model, precision, checkpointing) in the order they run: bf16 first, then bf16 checkpointed, then fp32."""
    out = [(n, "bf16", False) for n in SPECS]
    out += [(n, "bf16", True) for n in SPECS if n not in BLOCKLESS]
    return out + [(n, "fp32", False) for n in SPECS]


def measure_one(name: str, precision: str, checkpointing: bool) -> dict[str, Any]:
    """In this process: the peak allocated over one step with the optimizer's states in place, and step times."""
    torch.manual_seed(0)
    device = torch.device("cuda")
    model, make_batch, loss_fn = _factory(name, precision)()
    model.checkpointing = checkpointing
    model.to(device).train()
    batch_size = SPECS[name][1]
    batch = make_batch(batch_size, device, 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)

    def step() -> None:
        loss_fn(model, batch).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize()
    peak, reserved = torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return {"model": name, "precision": precision, "checkpointing": "full" if checkpointing else "none",
            "factory": f"validation.campaigns.memory_factories:{name}_{precision}", "batch_size": batch_size,
            "seq_len": SPECS[name][2] if SPECS[name][3] == "tokens" else None,
            "peak_allocated_bytes": peak, "peak_reserved_bytes": reserved, "step_s": statistics.median(times),
            "step_s_all": times, "n_params": sum(p.numel() for p in model.parameters()),
            "gpu": torch.cuda.get_device_name(device), "torch": torch.__version__}


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--one":
        print(json.dumps(measure_one(sys.argv[2], sys.argv[3], sys.argv[4] == "full")))
        return 0
    out_dir = os.environ.get("OUT", ".")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "memory_factories.jsonl")
    start, left_out = time.monotonic(), []
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(path, "w") as f:
        for name, precision, ckpt in runs():
            if time.monotonic() - start > BUDGET_S:
                left_out.append(f"{name} {precision} {'full' if ckpt else 'none'}")
                continue
            try:
                proc = subprocess.run([sys.executable, "-m", "validation.campaigns.memory_factories", "--one", name,
                                       precision, "full" if ckpt else "none"], capture_output=True, text=True,
                                      env=env, cwd=root, timeout=45)
            except subprocess.TimeoutExpired:
                record = {"model": name, "precision": precision, "checkpointing": "full" if ckpt else "none",
                          "error": "timed out after 45 s"}
                f.write(json.dumps(record) + "\n")
                continue
            lines = proc.stdout.strip().splitlines()
            if proc.returncode != 0 or not lines:
                record: dict[str, Any] = {"model": name, "precision": precision,
                                          "checkpointing": "full" if ckpt else "none",
                                          "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
            else:
                record = json.loads(lines[-1])
            f.write(json.dumps(record) + "\n")
            f.flush()
            print(json.dumps({k: record.get(k) for k in ("model", "precision", "checkpointing",
                                                          "peak_allocated_bytes", "step_s", "error")}), flush=True)
    print(f"wrote {path} in {time.monotonic() - start:.0f} s" + (f"; left out: {', '.join(left_out)}" if left_out
                                                                   else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
