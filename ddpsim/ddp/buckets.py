"""Gradient buckets exactly as PyTorch DDP builds them (reducer.cpp ``compute_bucket_assignment_by_size``).

Tensors are grouped by dtype; each tensor joins its dtype's open bucket and THEN the bucket closes if
its size reached the current limit, so a bucket can exceed the cap by one tensor. After a bucket
closes, the limit moves to the next entry of the limits list and stays on the last one.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ddpsim.errors import ScenarioError
from ddpsim.scenario.schema import DDPSpec
from ddpsim.workload.model import DTYPE_BYTES, ParamTensor

# Bytes per element on the wire for the built-in compression hooks (they cast fp32 buckets to 16 bits).
_HOOK_WIRE_BYTES = {"none": None, "fp16": 2, "bf16": 2}


def assign_buckets(
    sizes_bytes: Sequence[int],
    dtypes: Sequence[str],
    limits_bytes: Sequence[int],
    order: Sequence[int] | None = None,
) -> list[list[int]]:
    """Bucket tensor indices the way PyTorch's reducer does.

    ``order`` is the order tensors are visited in (the rebuild passes gradient-ready order);
    without it tensors are visited by index and the buckets are sorted by their smallest index,
    as the reducer does for the initial assignment.
    """
    if not limits_bytes:
        raise ValueError("limits_bytes must not be empty")
    visit = list(range(len(sizes_bytes))) if order is None else list(order)
    open_buckets: dict[str, list[int]] = {}
    open_sizes: dict[str, int] = {}
    limit_index: dict[str, int] = {}
    closed: list[list[int]] = []
    for index in visit:
        dtype = dtypes[index]
        bucket = open_buckets.setdefault(dtype, [])
        bucket.append(index)
        open_sizes[dtype] = open_sizes.get(dtype, 0) + int(sizes_bytes[index])
        level = limit_index.setdefault(dtype, 0)
        if open_sizes[dtype] >= limits_bytes[level]:
            closed.append(bucket)
            open_buckets[dtype] = []
            open_sizes[dtype] = 0
            limit_index[dtype] = min(level + 1, len(limits_bytes) - 1)
    # The reducer keeps open buckets in a std::unordered_map and appends the leftovers in its iteration
    # order, which for libstdc++ is the reverse of first insertion (checked against
    # torch.distributed._compute_bucket_assignment_by_size with up to four dtypes). It shows when
    # fp32 and bf16 parameters mix: the last bf16 and fp32 buckets swap.
    closed.extend(bucket for bucket in reversed(open_buckets.values()) if bucket)
    if order is None:
        closed.sort(key=min)
    return closed


@dataclass(frozen=True)
class Bucket:
    """One gradient bucket in launch order. ``wire_bytes`` is what the all-reduce moves."""

    index: int
    param_indices: tuple[int, ...]
    grad_bytes: int
    wire_bytes: int
    n_params: int


def _limits(ddp: DDPSpec) -> list[int]:
    first, cap = ddp.first_bucket_cap_bytes, ddp.bucket_cap_bytes
    return [first, cap] if first < cap else [cap]


def bucket_layout(params: Sequence[ParamTensor], ready_order: Sequence[int], ddp: DDPSpec,
                  model: str = "") -> list[Bucket]:
    """The steady-state buckets (iteration 2 onwards) in launch order.

    Parameters missing from ``ready_order`` get no gradient (unused in forward): without
    ``find_unused_parameters`` (or ``static_graph``) real DDP raises, and so does this, naming
    ``model``.

    Default DDP (and ``static_graph``) rebuilds once in gradient-ready order with limits
    [first_cap, cap]. With ``find_unused_parameters`` there is no rebuild: the initial buckets,
    built over registration order and then reversed, stay.
    """
    sizes = [p.bytes for p in params]
    dtypes = [p.dtype for p in params]
    ready = set(ready_order)
    unused = [i for i in range(len(params)) if i not in ready]
    if unused and not ddp.find_unused_parameters and not ddp.static_graph:
        # Real DDP cannot finish the first reduction (these gradients never arrive) and raises at the
        # next forward; a step time would be a fiction.
        names = ", ".join(params[i].name for i in unused)
        raise ScenarioError(f"{model or 'the model'} has parameters unused in forward ({names}): DDP raises "
                            "without find_unused_parameters; set ddp.find_unused_parameters: true",
                            field="ddp.find_unused_parameters")
    if ddp.find_unused_parameters and not ddp.static_graph:
        groups = list(reversed(assign_buckets(sizes, dtypes, _limits(ddp))))
    else:
        # static_graph accepts unused parameters and rebuilds them last, in registration order
        # (checked against DDP in tests/test_ddp_layouts.py).
        groups = assign_buckets(sizes, dtypes, _limits(ddp), order=[*ready_order, *unused])
    return [_bucket(i, group, params, ddp.comm_hook) for i, group in enumerate(groups)]


def first_iteration_layout(params: Sequence[ParamTensor], ddp: DDPSpec) -> list[Bucket]:
    """Iteration 1 without ``find_unused_parameters``: one bucket per dtype, reduced after backward."""
    sizes = [p.bytes for p in params]
    groups = list(reversed(assign_buckets(sizes, [p.dtype for p in params], [sys.maxsize])))
    return [_bucket(i, group, params, ddp.comm_hook) for i, group in enumerate(groups)]


def _bucket(index: int, group: Sequence[int], params: Sequence[ParamTensor], comm_hook: str) -> Bucket:
    grad_bytes = sum(params[i].bytes for i in group)
    wire_element = _HOOK_WIRE_BYTES[comm_hook]
    if wire_element is None:
        wire_bytes = grad_bytes
    else:
        wire_bytes = sum(params[i].numel * min(wire_element, DTYPE_BYTES[params[i].dtype]) for i in group)
    return Bucket(
        index=index,
        param_indices=tuple(group),
        grad_bytes=grad_bytes,
        wire_bytes=wire_bytes,
        n_params=len(group),
    )
