"""Fit per-kernel-class efficiencies on the project's own world-size-1 profiles, and check them.

Every ``ddpsim.profile/1`` file under ``validation/data`` measured one model's step on one GPU alone
(files of a launch that profiled every GPU at once, ``concurrent``, are left out). Per (model, batch,
precision, GPU kind) the median forward + backward + optimizer step over the campaigns is the
measurement. Each model is described by the torch importer on the meta device (per-layer FLOPs from
``torch.utils.flop_counter.FlopCounterMode``, bytes and kernels from a dispatch mode, the layer's
class from its module type), and ``ddpsim.hardware.kernel_classes`` prices it with one efficiency per
class and one cost per kernel. The fit (scipy ``least_squares`` on log(estimated / measured), with a
weak prior towards the catalog defaults so that a class no fit model exercises stays where it was)
uses the FIT models only, on both GPU kinds; every other model is held out.

    PYTHONPATH=. .venv/bin/python benchmarks/fit_compute_classes.py            # fit, print, check
    PYTHONPATH=. .venv/bin/python benchmarks/fit_compute_classes.py --write    # and rewrite the package data
    ... --measured /work/campaigns/models-2026-11-28/profiles   # also check the factory models measured there
                                                                # (held out; the output file has that table)

Checks printed (nothing of them is fitted):
- transfer: a profile of one kind carried to the other (H100 -> H200 and back) with the class split of a
  fit made on the SOURCE kind's profiles only, against the target kind's median step;
- unprofiled: the held-out models' estimated step against their measured one, and whether the fit's
  p10..p90 interval holds it.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ddpsim.hardware.catalog import GPUSpec, get_gpu  # noqa: E402
from ddpsim.hardware.compute import optimizer_work  # noqa: E402
from ddpsim.hardware.kernel_classes import (  # noqa: E402
    CLASSES,
    CUDA_CORE_CLASSES,
    ClassFit,
    optimizer_times,
    pass_times,
    transfer_factors,
)
from ddpsim.workload.model import Workload  # noqa: E402
from ddpsim.workload.zoo import ZOO_NAMES, zoo_workload  # noqa: E402

OUT = os.path.join(ROOT, "ddpsim", "hardware", "data", "compute_classes.json")
# the models the fit sees (on every GPU kind they were profiled on); every other model is held out
FIT_MODELS = ("resnet50", "gpt2-124m", "mlp-heavy", "mlp-ln-64", "bert-large", "vit-b16")
# one factory model of the 1 x H200 campaign (validation/data/models-2026-11-28), all four of its runs: BERT at fp32
# and bf16, batches 32 and 64; the only large fp32 matmuls (CUDA cores) the fit sees besides the two small MLPs.
# The campaign's other nine models stay held out.
FIT_FACTORY_MODELS = ("bert:build",)


def in_fit(model: str) -> bool:
    return model in FIT_MODELS or model.split("@")[0] in FIT_FACTORY_MODELS
PRIOR = {"conv": 0.5, "matmul": 0.5, "attention": 0.4, "depthwise": 0.5, "embedding": 0.5, "norm": 0.5,
         "elementwise": 0.7}
# cuBLAS SGEMM reaches 80-90% of the fp32 peak on large shapes; cuDNN's Winograd F(2x2, 3x3) does 2.25x fewer
# multiplies than the direct 3x3 stride-1 convolution whose FLOPs are counted (about half of ResNet-50's):
# 0.8 / (0.5 + 0.5 / 2.25) = 1.1 of the fp32 peak in counted FLOPs
PRIOR_CUDA = {"conv": 1.1, "matmul": 0.8}
PRIOR_LAUNCH_S = 6e-6
PRIOR_HALF_S = 5e-6
# residual units (log-ratio) per e-fold away from the prior: ten values on six models need one; at 1.0 an
# efficiency twice or half its prior weighs as a 70% miss of one profile group
PRIOR_WEIGHT = 1.0
# the kernel ramp's prior (5 us) is a guess: a quarter of the weight lets the kernels' sizes across GPU kinds set it
PRIOR_WEIGHT_OF = {"half_s": 0.25}
FACTORIES = os.path.join(ROOT, "validation", "data", "models-2026-11-28", "factories")  # the ten models of a user's own
LAB = os.path.join(ROOT, "validation", "campaigns", "lab_models.py")


def gpu_of(device_name: str) -> str:
    """Catalog name of a CUDA device name ("NVIDIA H100 80GB HBM3" -> "H100")."""
    from ddpsim.hardware.catalog import gpu_from_device_name

    kind = gpu_from_device_name(device_name)
    if kind is None:
        raise SystemExit(f"no catalog GPU for device {device_name!r}")
    return kind


# Published single-GPU training steps of other GPU kinds the fit sees beside the project's profiles, each as
# (model, batch, precision, GPU, step seconds, source). Every other published figure (the stage
# validation/evidence/stages/published_throughput.py) is held out. The rows are NCHW runs: NVIDIA's
# mixed-precision ResNet-50 rows run channels-last, which ddpsim does not model, so none of them is here.
PUBLISHED_FIT = (
    ("resnet50", 128, "fp32", "V100", 0.34237,
     "sandeepkumar-skb/pytorch_experiments torchvision_exp/README.md (ResNet50 training, batch 128, Tesla "
     "V100-SXM2, FP32 NCHW: 342.37 ms per iteration)"),
    ("resnet50", 128, "fp16-amp", "V100", 0.15220,
     "sandeepkumar-skb/pytorch_experiments torchvision_exp/README.md (AMP NCHW: 152.20 ms per iteration)"),
    # a whole FSDP step of 64 A100 taken as its compute (communication overlapped, the sharded optimizer's
    # step negligible): 2 x 4096 tokens per GPU at 2162 tokens/s
    ("hf:validation/data/published-throughput/llama2-13b-config.json", 2, "bf16-amp", "A100", 2 * 4096 / 2162,
     "pytorch/torchtitan docs/performance.md at 0413364 (Llama 2 13B, 64 A100 80GB, FSDP2, local batch 2, seq "
     "4096, no activation checkpointing: 2162 WPS, 61.1% MFU)"),
    ("resnet50", 256, "fp32", "A100", 256 / 938,
     "NVIDIA DeepLearningExamples PyTorch/Classification/ConvNets/resnet50v1.5/README.md (DGX A100 80GB, 1 GPU, "
     "TF32, batch 256 from ConvNets/configs.yml, NCHW: 938 img/s)"),
)


@dataclass
class Group:
    model: str
    batch: int
    precision: str
    seq: int | None
    optimizer: str
    gpu: str
    steps: list[float]
    files: list[str]

    @property
    def key(self) -> str:
        return f"{self.model} b{self.batch} {self.precision} on {self.gpu}"

    @property
    def step_s(self) -> float:
        return statistics.median(self.steps)


def read_profiles(folders: list[str]) -> list[Group]:
    groups: dict[tuple[Any, ...], Group] = {}
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(folder, "**", "*.json"), recursive=True)):
            try:
                with open(path) as f:
                    data = json.load(f)
            except (OSError, ValueError):
                continue
            if not isinstance(data, dict) or data.get("schema") != "ddpsim.profile/1" or data.get("concurrent"):
                continue
            if data.get("status", "ok") != "ok" or "/ranks/" in path:
                continue
            fingerprint = data.get("fingerprint") or {}
            gpu = gpu_of(str(fingerprint.get("gpu_name", "")))
            step = data["forward_s"] + data["backward_s"] + data["optimizer_s"]
            key = (data["model"], data["batch_size"], data["precision"], data.get("seq_len"), data.get("optimizer"), gpu)
            group = groups.setdefault(key, Group(*key, [], []))  # type: ignore[arg-type]
            group.steps.append(step)
            group.files.append(os.path.relpath(path, ROOT))
    return sorted(groups.values(), key=lambda g: (g.model, g.gpu))


_ESTIMATES: dict[tuple[Any, ...], Workload] = {}


def estimate(model: str, batch: int, precision: str, seq: int | None, factories: str) -> Workload | None:
    """The model's Workload from the importer (None: not importable here)."""
    key = (model, batch, precision, seq)
    if key in _ESTIMATES:
        return _ESTIMATES[key]
    from ddpsim.workload.torch_import import import_hf_model, import_torch_model
    from ddpsim.workload.torch_import_factory import import_factory_model

    base = model.split("@")[0]
    harness = {"resnet50": "resnet50", "gpt2-124m": "gpt2_124m", "mlp-heavy": "mlp_heavy", "mlp-ln-64": "mlp_ln_64",
               "mlp-wide": "mlp_wide", "bert-large": "bert_large"}
    if base in harness:
        workload = import_torch_model(f"ddpsim.measure.models:{harness[base]}", batch, precision, seq)
    elif base == "llama-1b":
        workload = import_torch_model("ddpsim.measure.llama:llama_1b", batch, precision, seq)
    elif base == "vit-b16":
        # torchvision's vit_b_16 (not installed here): the same shapes from the ViT factory
        workload = import_factory_model(os.path.join(factories, "vit_s16.py:build"), batch, precision, seq,
                                        dim=768, heads=12, mlp_dim=3072)
    elif base.startswith("hf:"):
        workload = import_hf_model(base[3:], batch, precision, seq, ROOT)
    elif base == "lab_models:decoder":
        workload = import_factory_model(f"{LAB}:decoder", batch, precision, seq)
    elif os.path.isfile(os.path.join(factories, base.split(":")[0] + ".py")):
        name, _, fn = base.partition(":")
        workload = import_factory_model(os.path.join(factories, f"{name}.py:{fn or 'build'}"), batch, precision, seq)
    else:
        return None
    _ESTIMATES[key] = workload
    return workload


def estimated_step(workload: Workload, optimizer: str, gpu: GPUSpec, fit: ClassFit) -> float:
    n_bytes, kernels = optimizer_work(workload, optimizer)
    return (pass_times(workload, gpu, fit, False).total_s + pass_times(workload, gpu, fit, True).total_s
            + optimizer_times(n_bytes, kernels, gpu, fit).total_s)


# every class has its own efficiency; a class no fit model exercises (depthwise) stays at its prior
GROUPS = {c: c for c in CLASSES}
CUDA_PARAMS = tuple(f"cuda_{c}" for c in CUDA_CORE_CLASSES)
PARAMS = (*CLASSES, *CUDA_PARAMS, "launch_s", "half_s", "module_s", "nchw_transpose")
# a transpose reads and writes the convolution's input and output once more: 2 passes over its bytes
PRIOR_PARAMS = {**PRIOR, **{f"cuda_{c}": v for c, v in PRIOR_CUDA.items()}, "launch_s": PRIOR_LAUNCH_S,
                "half_s": PRIOR_HALF_S, "module_s": 10e-6, "nchw_transpose": 2.0}
# Winograd convolutions do fewer multiplies than the direct FLOPs counted: up to 2.25x for 3x3
BOUNDS = {**{c: (0.02, 1.0) for c in CLASSES}, "cuda_conv": (0.05, 2.25), "cuda_matmul": (0.05, 1.0),
          "launch_s": (0.5e-6, 60e-6), "half_s": (0.1e-6, 100e-6), "module_s": (0.1e-6, 200e-6),
          "nchw_transpose": (0.05, 4.0)}


def _fit_from(theta: np.ndarray, fitted_on: tuple[str, ...] = (), p10: float = 1.0, p90: float = 1.0,
              support: dict[str, tuple[str, ...]] | None = None) -> ClassFit:
    value = {name: float(math.exp(theta[i])) for i, name in enumerate(PARAMS)}
    eff = {c: value[GROUPS[c]] for c in CLASSES}
    return ClassFit(eff, value["launch_s"], value["half_s"], value["module_s"], p10, p90, fitted_on,
                    "benchmarks/fit_compute_classes.py --write",
                    cuda_efficiency={c: value[f"cuda_{c}"] for c in CUDA_CORE_CLASSES}, support=support or {},
                    nchw_transpose=value["nchw_transpose"])


def support_of(groups: list[tuple[Group, Workload]]) -> dict[str, tuple[str, ...]]:
    """The GPU kinds whose fitted groups exercise each unit: tensor cores, CUDA-core convolutions and matmuls
    (a group counts where that unit's layers carry at least a tenth of its estimated step), memory."""
    from ddpsim.hardware.kernel_classes import compute_path, layer_class

    kinds: dict[str, set[str]] = {"tensor": set(), "cuda-conv": set(), "cuda-matmul": set(), "memory": set()}
    for g, w in groups:
        gpu = get_gpu(g.gpu)
        flops = {"tensor": 0.0, "cuda-conv": 0.0, "cuda-matmul": 0.0}
        for layer in w.layers:
            cls = layer_class(layer)
            if layer.forward_flops <= 0 or cls not in ("conv", "matmul", "attention"):
                continue
            _, unit = compute_path(gpu, g.precision, cls)
            rest = "tensor" if unit == "tensor" else ("cuda-conv" if cls == "conv" else "cuda-matmul")
            flops[rest] += layer.forward_flops / gpu.peak_flops_per_s[compute_path(gpu, g.precision, cls)[0]]
        total = sum(flops.values())
        for rest, seconds in flops.items():
            if total > 0 and seconds / total >= 0.1:
                kinds[rest].add(g.gpu)
        kinds["memory"].add(g.gpu)
    return {k: tuple(sorted(v)) for k, v in kinds.items()}


def fit(groups: list[tuple[Group, Workload]]) -> ClassFit:
    theta0 = np.array([math.log(PRIOR_PARAMS[name]) for name in PARAMS])

    def residuals(theta: np.ndarray) -> np.ndarray:
        f = _fit_from(theta)
        data = [math.log(estimated_step(w, g.optimizer, get_gpu(g.gpu), f) / g.step_s) for g, w in groups]
        weights = np.array([PRIOR_WEIGHT_OF.get(name, PRIOR_WEIGHT) for name in PARAMS])
        return np.array(data + list(weights * (theta - theta0)))

    lower = np.array([math.log(BOUNDS[name][0]) for name in PARAMS])
    upper = np.array([math.log(BOUNDS[name][1]) for name in PARAMS])
    result = least_squares(residuals, theta0, bounds=(lower, upper))
    return _fit_from(result.x, tuple(dict.fromkeys(g.key for g, _ in groups)), support=support_of(groups))


def with_spread(base: ClassFit, groups: list[tuple[Group, Workload]]) -> ClassFit:
    """The interval: measured / estimated over the fit's models, each estimated by a fit without it
    (leave one model out), at p10 and p90."""
    ratios = []
    for model in sorted({g.model.split("@")[0] for g, _ in groups}):  # a factory model's runs leave together
        rest = [(g, w) for g, w in groups if g.model.split("@")[0] != model]
        f = fit(rest)
        ratios += [g.step_s / estimated_step(w, g.optimizer, get_gpu(g.gpu), f) for g, w in groups
                   if g.model.split("@")[0] == model]
    ratios.sort()
    p10 = float(np.percentile(ratios, 10))
    p90 = float(np.percentile(ratios, 90))
    return replace(base, ratio_p10=p10, ratio_p90=p90)


def write(fit_: ClassFit, groups: list[tuple[Group, Workload]]) -> None:
    rows = [{"profile_group": g.key, "description": w.notes[0] if w.notes else w.name, "profiles": len(g.steps), "measured_step_s": round(g.step_s, 6),
             "estimated_step_s": round(estimated_step(w, g.optimizer, get_gpu(g.gpu), fit_), 6)} for g, w in groups]
    data = {"schema": "ddpsim.compute-classes/1", "source": fit_.source,
            "efficiency": {c: round(fit_.efficiency[c], 4) for c in CLASSES},
            "cuda_efficiency": {c: round(fit_.cuda_efficiency[c], 4) for c in CUDA_CORE_CLASSES},
            "support": {k: list(v) for k, v in fit_.support.items()},
            "published_fit_rows": [row[5] for row in PUBLISHED_FIT],
            "launch_s": round(fit_.launch_s, 9),
            "half_s": float(f"{fit_.half_s:.4g}"), "module_s": float(f"{fit_.module_s:.4g}"),
            "nchw_transpose": round(fit_.nchw_transpose, 4),
            "ratio_p10": round(fit_.ratio_p10, 4), "ratio_p90": round(fit_.ratio_p90, 4),
            "fitted_on": list(fit_.fitted_on), "rows": rows}
    with open(OUT, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def _table(title: str, header: list[str], rows: list[list[str]]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def check_transfer(pairs: list[tuple[Group, Group, Workload]], fits: dict[str, ClassFit]) -> list[float]:
    rows, errors = [], []
    for a, b, w in pairs:
        for src, dst in ((a, b), (b, a)):
            source, target = get_gpu(src.gpu), get_gpu(dst.gpu)
            f = fits[src.gpu]
            n_bytes, kernels = optimizer_work(w, src.optimizer)
            t = transfer_factors(w, optimizer_times(n_bytes, kernels, source, f), source, target, f)
            # the step's passes in the measured proportions: medians of each pass of the source's files
            fwd, bwd, opt = _passes(src)
            predicted = fwd * t.forward + bwd * t.backward + opt * t.optimizer
            err = predicted / dst.step_s - 1
            errors.append(err)
            rows.append([src.model, f"{src.gpu} -> {dst.gpu}", f"{src.step_s * 1e3:.2f}", f"{predicted * 1e3:.2f}",
                         f"{dst.step_s * 1e3:.2f}", f"{err * 100:+.1f}%", f"{src.step_s / dst.step_s - 1:+.1%}",
                         f"{t.ratios['tensor']:.2f}/{t.ratios['memory']:.2f}/{t.ratios['launch']:.2f}",
                         f"{len(src.steps)}/{len(dst.steps)}"])
    _table("A profile carried to the other GPU kind (class split fitted on the source kind only)",
           ["model", "carried", "source median ms", "predicted ms", "target median ms", "error",
            "error if used as is", "ratio tensor/memory/launch", "profiles src/dst"], rows)
    print(f"\nmean |error| {np.mean(np.abs(errors)) * 100:.1f}%, max {np.max(np.abs(errors)) * 100:.1f}%, "
          f"n {len(errors)}")
    return errors


def _passes(group: Group) -> tuple[float, float, float]:
    fwd, bwd, opt = [], [], []
    for path in group.files:
        with open(os.path.join(ROOT, path)) as f:
            d = json.load(f)
        fwd.append(d["forward_s"])
        bwd.append(d["backward_s"])
        opt.append(d["optimizer_s"])
    scale = group.step_s / (statistics.median(fwd) + statistics.median(bwd) + statistics.median(opt))
    return statistics.median(fwd) * scale, statistics.median(bwd) * scale, statistics.median(opt) * scale


def check_unprofiled(held: list[tuple[Group, Workload]], f: ClassFit, title: str) -> None:
    rows, errors, inside = [], [], 0
    for g, w in held:
        est = estimated_step(w, g.optimizer, get_gpu(g.gpu), f)
        err = est / g.step_s - 1
        errors.append(err)
        low, high = est * f.ratio_p10, est * f.ratio_p90
        held_in = low <= g.step_s <= high
        inside += held_in
        rows.append([g.key, f"{g.step_s * 1e3:.2f}", f"{est * 1e3:.2f}", f"{err * 100:+.1f}%",
                     f"{low * 1e3:.2f}..{high * 1e3:.2f}", "yes" if held_in else "no", str(len(g.steps))])
    _table(title, ["held-out model", "measured ms", "estimated ms", "error", "interval ms", "inside", "profiles"], rows)
    if errors:
        print(f"\nmean |error| {np.mean(np.abs(errors)) * 100:.1f}%, max {np.max(np.abs(errors)) * 100:.1f}%, "
              f"mean signed {np.mean(errors) * 100:+.1f}%, interval holds {inside} of {len(errors)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite ddpsim/hardware/data/compute_classes.json")
    parser.add_argument("--factories", default=FACTORIES, help="the factory files (vit-b16's shapes, held-out models)")
    parser.add_argument("--measured", action="append", default=[],
                        help="more campaign folders of profiles (held out: never fitted)")
    args = parser.parse_args()
    groups = read_profiles([os.path.join(ROOT, "validation", "data")])
    described: list[tuple[Group, Workload]] = []
    for g in groups:
        w = estimate(g.model, g.batch, g.precision, g.seq, args.factories)
        if w is None:
            print(f"skipped (not importable here): {g.key}")
            continue
        described.append((g, w))
    fit_set = [(g, w) for g, w in described if in_fit(g.model)]
    # the zoo describes some of them too (without torch), and the simulator prices those descriptions:
    # the fit sees both, so that a zoo name and an imported model are priced alike
    fit_set += [(g, zoo_workload(g.model, g.batch, g.precision, g.seq)) for g, _ in list(fit_set) if g.model in ZOO_NAMES]
    held = [(g, w) for g, w in described if not in_fit(g.model)]
    # published single-GPU steps of V100 and A100 (the zoo's description of the model)
    for model, batch, precision, gpu, step, _ in PUBLISHED_FIT:
        seq = 4096 if model.startswith("hf:") else None
        workload = estimate(model, batch, precision, seq, args.factories) if model.startswith("hf:") else \
            zoo_workload(model, batch, precision)
        assert workload is not None
        fit_set.append((Group(model, batch, precision, seq, "none" if seq else "sgd_momentum", gpu, [step], []),
                        workload))
    shipped = with_spread(fit(fit_set), fit_set)
    print("fit:", shipped.describe(), f"interval x{shipped.ratio_p10:.3f}..x{shipped.ratio_p90:.3f}")
    _table("The fit's own models (in-sample)", ["profile group", "measured ms", "estimated ms", "error"],
           [[g.key, f"{g.step_s * 1e3:.2f}", f"{estimated_step(w, g.optimizer, get_gpu(g.gpu), shipped) * 1e3:.2f}",
             f"{estimated_step(w, g.optimizer, get_gpu(g.gpu), shipped) / g.step_s - 1:+.1%}"] for g, w in fit_set])
    if args.write:
        write(shipped, fit_set)
        print(f"wrote {os.path.relpath(OUT, ROOT)}")
    # transfer: pairs of the same setting on two kinds; split fitted on the source kind's profiles only
    kinds = sorted({g.gpu for g, _ in fit_set})
    fits = {k: fit([(g, w) for g, w in fit_set if g.gpu == k]) for k in kinds}
    by_setting: dict[tuple[Any, ...], list[tuple[Group, Workload]]] = {}
    for g, w in described:
        by_setting.setdefault((g.model, g.batch, g.precision, g.seq), []).append((g, w))
    pairs = [(v[0][0], v[1][0], v[0][1]) for v in by_setting.values() if len(v) == 2 and v[0][0].gpu in fits
             and v[1][0].gpu in fits and v[0][0].gpu != v[1][0].gpu]
    check_transfer(pairs, fits)
    check_unprofiled(held, shipped, "Unprofiled models the fit never saw (committed profiles)")
    extra = read_profiles(args.measured) if args.measured else []
    extra_described = []
    for g in extra:
        if g.model.split("@")[0] in FIT_MODELS or in_fit(g.model):
            continue  # a model the fit saw (on other allocations): not a held-out model
        w = estimate(g.model, g.batch, g.precision, g.seq, args.factories)
        if w is None:
            print(f"skipped (no factory here): {g.key}")
            continue
        extra_described.append((g, w))
    if extra_described:
        check_unprofiled(extra_described, shipped, "Unprofiled models the fit never saw (" + ", ".join(args.measured) + ")")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
