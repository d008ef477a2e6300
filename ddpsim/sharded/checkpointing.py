"""Activation checkpointing: which blocks recompute their forward in backward, and the activations that stay.

A block is a unit of ``sharded.units`` ("auto": everything under ``layers.3``, ``h.11``...), the module
torchtitan and the FSDP recipes wrap in ``checkpoint_wrapper``. ``full`` checkpoints every block, ``every_k``
every k-th (torchtitan's selective layer checkpointing with ``ac_freq`` k). A checkpointed block keeps only its
input from forward to backward; in backward it runs its forward again, so its whole activations are live once
more, one block at a time. Activations kept (A: total, A_i: block i's, I_i: its input, C: the checkpointed):

    A - sum_{i in C} A_i + sum_{i in C} I_i + max_{i in C} A_i

and the backward of each checkpointed block pays its forward again. A block's activations are the workload's
per-module figure where it has one (the zoo's count, PyTorch's MemTracker, a measured profile), else the
total spread over the layers in proportion to their forward traffic less their weights.
"""

from __future__ import annotations

from ddpsim.errors import ScenarioError
from ddpsim.sharded.units import ShardUnit
from ddpsim.workload.model import Workload

FIELD = "workload.activation_checkpointing"


def checkpoint_every(text: str) -> int:
    """0 for "none", 1 for "full", k for "every_k" (k >= 1)."""
    value = text.strip().lower()
    if value == "none":
        return 0
    if value == "full":
        return 1
    k = value.removeprefix("every_")
    if value.startswith("every_") and k.isdigit() and int(k) >= 1:
        return int(k)
    raise ScenarioError(f"expected none, full or every_K (K >= 1), got {text!r}", field=FIELD)


def checkpointed_units(units: list[ShardUnit], every: int) -> list[ShardUnit]:
    """The blocks that checkpoint: every ``every``-th non-root unit, from the first."""
    if every <= 0:
        return []
    blocks = [u for u in units if not u.is_root]
    return [u for i, u in enumerate(blocks) if i % every == 0]


def _spread(workload: Workload) -> list[float]:
    """Per layer, the workload's activation bytes spread over layers by forward traffic less weights."""
    weights = [max(layer.forward_bytes - sum(p.bytes for p in layer.params), 0.0) for layer in workload.layers]
    total = sum(weights)
    return [workload.activation_bytes * w / total if total > 0 else 0.0 for w in weights]


def block_activation_bytes(workload: Workload, unit: ShardUnit) -> float:
    """What autograd keeps from the block's forward: the workload's figure for the module, else the sum of its
    layers' figures, else the block's share of the total by forward traffic."""
    by_layer = workload.activation_bytes_by_layer
    if unit.name in by_layer:
        return by_layer[unit.name]
    names = [workload.layers[i].name for i in unit.layer_indices]
    if by_layer and any(n in by_layer for n in names):
        return sum(by_layer.get(n, 0.0) for n in names)
    spread = _spread(workload)
    return sum(spread[i] for i in unit.layer_indices)


def block_input_bytes(workload: Workload, unit: ShardUnit) -> float:
    """The block's input, the one tensor a checkpointed block keeps: its first layer's forward traffic less
    the layer's weights, halved (a layer reads its input and writes an output of about the same size)."""
    if not unit.layer_indices:
        return 0.0
    first = workload.layers[unit.layer_indices[0]]
    weights = sum(p.bytes for p in first.params)
    return max(first.forward_bytes - weights, 0.0) / 2.0


def checkpointed_activation_bytes(workload: Workload, units: list[ShardUnit], every: int) -> float:
    """The activations live at the start of backward under checkpointing of every ``every``-th block (see the
    module's text); the workload's own figure for ``every`` 0."""
    chosen = checkpointed_units(units, every)
    if not chosen:
        return float(workload.activation_bytes)
    blocks = [block_activation_bytes(workload, u) for u in chosen]
    inputs = sum(block_input_bytes(workload, u) for u in chosen)
    kept = float(workload.activation_bytes) - sum(blocks) + inputs + max(blocks)
    return max(kept, 0.0)


def recomputed_layers(units: list[ShardUnit], every: int) -> frozenset[int]:
    """Indices into ``workload.layers`` whose forward runs again in backward."""
    return frozenset(i for u in checkpointed_units(units, every) for i in u.layer_indices)


def check_has_blocks(workload: Workload, units: list[ShardUnit], every: int) -> None:
    """Checkpointing needs blocks: refuse a model whose modules have none (no numbered part in any name)."""
    if every and not any(not u.is_root for u in units):
        raise ScenarioError(f"{workload.name} has no blocks to checkpoint (no module named like layers.0 or h.0; "
                            "parallel.unit names them)", field=FIELD)
