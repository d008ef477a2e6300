"""The units ``fully_shard`` is applied to, read off the workload's modules.

FSDP2 groups the parameters of each module it wraps into one all-gather and one reduce-scatter; the
parameters of no wrapped unit belong to the root (``fully_shard(model)`` last), as the usual recipe
wraps every transformer block and then the model. "auto" takes a block to be everything under the
first numbered part of a module name (``model.layers.3``, ``h.11``, ``layer1.0``), which is where
PyTorch's ``ModuleList`` / ``Sequential`` puts its children.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ddpsim.errors import ScenarioError
from ddpsim.workload.model import Workload

ROOT = "<root>"


@dataclass(frozen=True)
class ShardUnit:
    """One fully_shard unit: its layers (indices into ``workload.layers``) and parameters (into ``params``)."""

    name: str
    layer_indices: tuple[int, ...]
    param_indices: tuple[int, ...]
    numel: int

    @property
    def is_root(self) -> bool:
        return self.name == ROOT


def _auto_key(name: str) -> str | None:
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return None


def _pattern_key(pattern: re.Pattern[str]) -> Callable[[str], str | None]:
    def key(name: str) -> str | None:
        match = pattern.search(name)
        return name[: match.end()] if match else None

    return key


def shard_units(workload: Workload, unit: str = "auto") -> list[ShardUnit]:
    """The units in forward execution order (the root unit, which runs first and last, first).

    Shared parameters are counted once, in the first unit that registers them, as the workload's
    parameter list already does.
    """
    key: Callable[[str], str | None] = _auto_key
    if unit != "auto":
        try:
            key = _pattern_key(re.compile(unit))
        except re.error as exc:
            raise ScenarioError(f"not a regular expression: {exc}", field="parallel.unit") from None
    first_param = []
    offset = 0
    for layer in workload.layers:
        first_param.append(offset)
        offset += len(layer.params)
    layers_of: dict[str, list[int]] = {}
    for li in workload.execution_order:
        name = key(workload.layers[li].name) or ROOT
        layers_of.setdefault(name, []).append(li)
    if unit != "auto" and set(layers_of) == {ROOT}:
        raise ScenarioError(f"matches no module of {workload.name!r} (e.g. {workload.layers[0].name!r})",
                            field="parallel.unit")
    names = [ROOT] + [n for n in layers_of if n != ROOT] if ROOT in layers_of else list(layers_of)
    params = workload.params
    units = []
    for name in names:
        layer_indices = tuple(layers_of[name])
        param_indices = tuple(i for li in sorted(layer_indices)
                              for i in range(first_param[li], first_param[li] + len(workload.layers[li].params)))
        units.append(ShardUnit(name, layer_indices, param_indices, sum(params[i].numel for i in param_indices)))
    return units
