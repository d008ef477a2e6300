"""Measured profiles (``ddpsim.profile/1``, written by ``ddpsim/measure/worker.py``) as Workloads.

A profile is one GPU's measured step: forward, backward, optimizer seconds and, per parameter in
registration order, when its gradient became ready and in which order the hooks fired. Those
measurements override every estimate in ``hardware.compute``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from statistics import median
from typing import Any

from ddpsim.errors import ScenarioError
from ddpsim.jsonfile import read_json_object
from ddpsim.spread import sigma_from_p10_p90
from ddpsim.workload.model import DTYPE_BYTES, Layer, MeasuredTimes, ParamTensor, Workload
from ddpsim.workload.profile_memory import optimizer_name, read_memory

SCHEMA = "ddpsim.profile/1"
PRECISIONS = ("fp32", "bf16-amp", "fp16-amp")


class _Fields:
    """Typed access to a JSON object that names the offending field in every error."""

    def __init__(self, path: str, data: dict[str, Any], prefix: str = "") -> None:
        self.path, self.data, self.prefix = path, data, prefix

    def error(self, key: str, message: str) -> ScenarioError:
        return ScenarioError(message, file=self.path, field=f"{self.prefix}{key}")

    def get(self, key: str, types: tuple[type, ...], what: str, optional: bool = False) -> Any:
        if key not in self.data:
            if optional:
                return None
            raise self.error(key, f"missing required field ({what})")
        value = self.data[key]
        if value is None and optional:
            return None
        # bool is an int in Python; a profile saying "numel": true is wrong, not 1.
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            raise self.error(key, f"expected {what}, got {json.dumps(value)[:60]}")
        return value

    def seconds(self, key: str, optional: bool = False) -> float | None:
        value = self.get(key, (int, float), "seconds as a number >= 0", optional)
        if value is None:
            return None
        if not math.isfinite(value) or value < 0:
            raise self.error(key, f"expected seconds as a number >= 0, got {value!r}")
        return float(value)


def _module_of(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


WORLD1_VARIANTS = ("none", "gbv", "fp16", "bf16")  # plain DDP, gradient_as_bucket_view, the compress hooks


@dataclass(frozen=True)
class _World1:
    """What the profile's world-size-1 DDP rows measured (see ``_ddp_world1``)."""

    extra_s: dict[str, float]
    cap_mb: float | None
    lead_s: float | None


def _ddp_world1(root: _Fields, plain_step_s: float) -> _World1:
    """What DDP at world size 1 adds to the plain step, per variant (``WORLD1_VARIANTS``; from steps
    alternated with plain ones where the row has them), the bucket cap it was measured at, and the backward thread's lead over the GPU under plain DDP: the
    harness's ``ddp_world1`` rows (medians over their caps), against the profile's own step.
    Optional: nothing measured without rows."""
    rows = root.get("ddp_world1", (list,), "a list of {bucket_cap_mb, variant, step_s}", optional=True) or []
    step_s = root.get("step_s", (int, float), "seconds", optional=True) or plain_step_s
    by_variant: dict[str, list[float]] = {}
    caps: list[float] = []
    leads: list[float] = []
    for i, raw in enumerate(rows):
        if not isinstance(raw, dict):
            raise root.error(f"ddp_world1[{i}]", "expected an object with bucket_cap_mb, variant, step_s")
        rec = _Fields(root.path, raw, prefix=f"ddp_world1[{i}].")
        if raw.get("status", "ok") != "ok":
            continue  # a variant that failed on the profiled machine measured nothing (its row says why)
        variant = rec.get("variant", (str,), f"one of {', '.join(WORLD1_VARIANTS)}")
        if variant not in WORLD1_VARIANTS:
            raise rec.error("variant", f"expected one of {', '.join(WORLD1_VARIANTS)}, got {variant!r}")
        seconds = rec.seconds("step_s")
        assert seconds is not None
        # rows that alternated DDP and plain steps carry the median of each pair's difference: both sides
        # then saw the same moments of the host; older rows are set against the profile's own step
        paired = rec.get("ddp_minus_plain_s", (int, float), "seconds (a difference, may be < 0)", optional=True)
        if paired is not None and not math.isfinite(paired):
            raise rec.error("ddp_minus_plain_s", f"expected a finite number of seconds, got {paired!r}")
        by_variant.setdefault(variant, []).append(paired if paired is not None else seconds - step_s)
        cap_mb = float(rec.get("bucket_cap_mb", (int, float), "MB"))
        if not (math.isfinite(cap_mb) and cap_mb > 0):
            raise rec.error("bucket_cap_mb", f"expected a number of MB > 0, got {cap_mb!r}")
        caps.append(cap_mb)
        lead = rec.seconds("backward_host_lead_s", optional=True)
        if lead is not None and variant == "none":
            leads.append(lead)
    # never negative: a world-size-1 DDP step faster than the plain one is the profile's noise, not a gain
    extra = {variant: max(0.0, float(median(extras))) for variant, extras in by_variant.items()}
    return _World1(extra, float(median(caps)) if caps else None, float(median(leads)) if leads else None)


def _step_jitter_cv(root: _Fields) -> float | None:
    """The coefficient of variation of the profile's step time, read as a lognormal from its p10 and p90:
    sigma = ln(p90 / p10) / (2 z90), cv = sqrt(exp(sigma^2) - 1). None where either is missing."""
    p10 = root.seconds("step_s_p10", optional=True)
    p90 = root.seconds("step_s_p90", optional=True)
    if p10 is None or p90 is None:
        return None
    if not 0 < p10 <= p90:
        raise root.error("step_s_p90", f"expected 0 < step_s_p10 <= step_s_p90, got {p10!r} and {p90!r}")
    sigma = sigma_from_p10_p90(p10, p90)
    return math.sqrt(math.expm1(sigma * sigma))


def _concurrent_how(root: _Fields) -> str:
    """Where every GPU of the host profiled at once (the harness's profile launch under torchrun), which
    rank's times these are: the slowest's, what a DDP step waits for. Empty for a one-GPU profile."""
    block = root.get("concurrent", (dict,), "an object with ranks and profiled_rank", optional=True)
    if block is None:
        return ""
    sub = _Fields(root.path, block, prefix="concurrent.")
    ranks = sub.get("ranks", (int,), "the number of GPUs profiled at once")
    rank = sub.get("profiled_rank", (int,), "the rank whose times these are")
    if ranks < 1 or not 0 <= rank < ranks:
        raise sub.error("profiled_rank", f"expected a rank in 0..{ranks - 1}, got {rank}")
    return f"rank {rank} of {ranks} GPUs profiled at once, the slowest"


# how far past backward_s a gradient may be ready before the file is refused: every committed profile ends
# at or before it (the largest ratio over them is 0.99993)
READY_SLACK = 1.25
READY_SLACK_S = 1e-3


# the largest GPU memory of any GPU a profile could have been measured on, rounded up (B200: 192 GB)
MAX_PARAM_BYTES = 256 * 2**30


def load_profile(path: str) -> Workload:
    """Read a ``ddpsim.profile/1`` file; any missing or ill-typed field raises ScenarioError naming it
    (``file=path``, ``field="params[3].numel"``)."""
    return profile_workload(read_json_object(path, "profile"), path)


def profile_workload(data: dict[str, Any], path: str) -> Workload:
    """The Workload of a ``ddpsim.profile/1`` record read from ``path`` (a profile file, or a trace that
    ``ddpsim.workload.trace`` turned into the record)."""
    root = _Fields(path, data)
    schema = root.get("schema", (str,), f"the string {SCHEMA!r}")
    if schema != SCHEMA:
        raise root.error("schema", f"expected {SCHEMA!r}, got {schema!r}")
    model = root.get("model", (str,), "the model name")
    batch_size = root.get("batch_size", (int,), "a positive integer")
    if batch_size < 1:
        raise root.error("batch_size", f"expected a positive integer, got {batch_size}")
    precision = root.get("precision", (str,), f"one of {', '.join(PRECISIONS)}")
    if precision not in PRECISIONS:
        raise root.error("precision", f"expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    seq_len = root.get("seq_len", (int,), "an integer or null", optional=True)
    if seq_len is not None and seq_len < 1:
        raise root.error("seq_len", f"expected a positive integer or null, got {seq_len}")
    forward_s = root.seconds("forward_s")
    backward_s = root.seconds("backward_s")
    optimizer_s = root.seconds("optimizer_s")
    assert forward_s is not None and backward_s is not None and optimizer_s is not None
    buffers = root.get("buffers_bytes", (int,), "an integer number of bytes", optional=True) or 0
    if buffers < 0:
        raise root.error("buffers_bytes", f"expected an integer number of bytes >= 0, got {buffers}")
    raw_params = root.get("params", (list,), "a list of parameter records")
    if not raw_params:
        raise root.error("params", "expected at least one parameter record")

    tensors: list[ParamTensor] = []
    ready_s: dict[str, float] = {}
    fired: list[tuple[int, str]] = []
    seen_rank: dict[int, int] = {}
    for i, raw in enumerate(raw_params):
        if not isinstance(raw, dict):
            raise root.error(f"params[{i}]", "expected an object with name, numel, dtype, grad_ready_s, ready_order")
        rec = _Fields(path, raw, prefix=f"params[{i}].")
        name = rec.get("name", (str,), "the parameter's name")
        numel = rec.get("numel", (int,), "a positive integer")
        if numel < 1:
            raise rec.error("numel", f"expected a positive integer, got {numel}")
        dtype = rec.get("dtype", (str,), "a dtype name like 'float32'", optional=True) or "float32"
        dtype = dtype.removeprefix("torch.")
        if dtype not in DTYPE_BYTES:
            raise rec.error("dtype", f"expected one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
        if numel * DTYPE_BYTES[dtype] > MAX_PARAM_BYTES:
            # a profile is measured on one GPU: no tensor it held is larger than a GPU's memory
            raise rec.error("numel", f"{numel} elements of {dtype} is {numel * DTYPE_BYTES[dtype] / 2**40:.3g} TiB, "
                            f"more than any GPU holds ({MAX_PARAM_BYTES / 2**30:.0f} GiB): a broken profile")
        # null readiness: the parameter got no gradient in the profiled run (unused); the compute model
        # then treats it as ready when backward ends.
        t = rec.seconds("grad_ready_s", optional=True)
        rank = rec.get("ready_order", (int,), "an integer or null", optional=True)
        if rank is not None:
            if rank in seen_rank:
                raise rec.error("ready_order", f"{rank} is also the ready_order of params[{seen_rank[rank]}]")
            seen_rank[rank] = i
            fired.append((rank, name))
        if t is not None:
            # the harness scales readiness to end where the clean backward ends; well past it is a broken file
            if t > READY_SLACK * backward_s + READY_SLACK_S:
                raise rec.error("grad_ready_s", f"{t:g} s is after the backward ends (backward_s {backward_s:g} s): "
                                "a gradient is ready during its backward; re-measure the profile")
            ready_s[name] = t
        tensors.append(ParamTensor(name, numel, dtype))

    if len({p.name for p in tensors}) != len(tensors):
        dup = next(p.name for k, p in enumerate(tensors) if p.name in {q.name for q in tensors[:k]})
        raise root.error("params", f"parameter {dup!r} is listed twice")
    # One layer per module (consecutive parameters sharing a name prefix): the shape every other
    # source gives, and the unit the Chrome trace shows.
    layers: list[Layer] = []
    group: list[ParamTensor] = []
    for tensor in tensors:
        if group and _module_of(group[-1].name) != _module_of(tensor.name):
            layers.append(Layer(_module_of(group[0].name), tuple(group)))
            group = []
        group.append(tensor)
    layers.append(Layer(_module_of(group[0].name), tuple(group)))

    measured = MeasuredTimes(
        forward_s=forward_s,
        backward_s=backward_s,
        optimizer_s=optimizer_s,
        grad_ready_s=ready_s,
        ready_order=tuple(name for _, name in sorted(fired)),
        source=path,
        how=_concurrent_how(root),
        gpu_device=_gpu_device(root),
    )
    notes = [f"profile:{path}"]
    fingerprint = raw_params and root.data.get("fingerprint")
    if isinstance(fingerprint, dict):
        notes += [f"{k}={v}" for k, v in sorted(fingerprint.items()) if isinstance(v, str | int | float)]
    # optional: what find_unused_parameters' graph walk visits and its _DDPSink clones
    nodes = root.get("autograd_nodes", (int,), "an integer >= 0", optional=True)
    if nodes is not None and nodes < 0:
        raise root.error("autograd_nodes", f"expected an integer >= 0, got {nodes}")
    output_bytes = root.get("output_bytes", (int,), "an integer >= 0", optional=True)
    if output_bytes is not None and output_bytes < 0:
        raise root.error("output_bytes", f"expected an integer >= 0, got {output_bytes}")
    world1 = _ddp_world1(root, forward_s + backward_s + optimizer_s)
    step_jitter_cv = _step_jitter_cv(root)
    backward_accumulate_s = root.seconds("backward_accumulate_s", optional=True)
    memory = read_memory(root, lambda block, prefix: _Fields(path, block, prefix))
    optimizer = memory.optimizer if memory else optimizer_name(root.get("optimizer", (str,), "the optimizer's name",
                                                                        optional=True))
    workload = Workload(
        name=model,
        layers=tuple(layers),
        batch_size=batch_size,
        precision=precision,
        seq_len=seq_len,
        buffer_bytes=int(buffers),
        measured=measured,
        ddp_world1_extra_s=world1.extra_s,
        ddp_world1_cap_mb=world1.cap_mb,
        ddp_world1_lead_s=world1.lead_s,
        step_jitter_cv=step_jitter_cv,
        backward_accumulate_s=backward_accumulate_s,
        notes=tuple(notes),
        autograd_nodes=nodes,
        autograd_nodes_source=f"profile {path}" if nodes is not None else "",
        output_bytes=output_bytes,
        optimizer=optimizer,
        model_source=root.get("model_source", (str,), "text", optional=True) or "",
    )
    if memory is None:
        return workload
    return replace(workload, peak_memory=memory.peak, activation_bytes=memory.activation_bytes,
                   activation_bytes_by_layer=memory.activation_bytes_by_layer,
                   activation_source=memory.activation_source)


def _gpu_device(root: _Fields) -> str:
    """The GPU the profile was measured on (``fingerprint.gpu_name``), empty where the file has none."""
    fingerprint = root.get("fingerprint", (dict,), "an object", optional=True) or {}
    name = fingerprint.get("gpu_name")
    if name is not None and not isinstance(name, str):
        raise root.error("fingerprint.gpu_name", f"expected the GPU's name as text, got {json.dumps(name)[:60]}")
    return name or ""
