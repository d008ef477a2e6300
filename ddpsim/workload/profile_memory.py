"""The optional ``memory`` object of a measured profile or trace capture (the record contract of
``ddpsim measure``): the step's peak, its model states and the activations autograd kept.

    "memory": {"peak_allocated_bytes", "peak_reserved_bytes", "parameter_bytes", "gradient_bytes",
               "optimizer_state_bytes", "buffer_bytes", "activation_bytes", "activation_bytes_by_layer"?,
               "activation_method", "optimizer", "precision", "batch_size"}

Older files lack it: the workload then has no activation figure, and the memory report says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ddpsim.workload.model import PeakMemory

INT_FIELDS = ("peak_allocated_bytes", "peak_reserved_bytes", "parameter_bytes", "gradient_bytes",
              "optimizer_state_bytes", "buffer_bytes", "activation_bytes")
# the harness's names (ddpsim measure's @optimizer=sgd trains with momentum 0.9) -> workload.optimizer's
HARNESS_OPTIMIZERS = {"sgd": "sgd_momentum"}


class Fields(Protocol):
    path: str

    def error(self, key: str, message: str) -> Exception: ...

    def get(self, key: str, types: tuple[type, ...], what: str, optional: bool = False) -> Any: ...


@dataclass(frozen=True)
class MeasuredMemory:
    peak: PeakMemory
    activation_bytes: float
    activation_bytes_by_layer: dict[str, float]
    activation_source: str
    optimizer: str


def optimizer_name(harness_name: str | None) -> str:
    """A record's optimizer in workload.optimizer's names ("" where the record does not say)."""
    if not harness_name:
        return ""
    return HARNESS_OPTIMIZERS.get(harness_name, harness_name)


def read_memory(root: Fields, sub_fields: Any) -> MeasuredMemory | None:
    """The record's ``memory`` object, checked field by field; None where the record has none.
    ``sub_fields(block, prefix)`` gives the typed accessor of a nested object."""
    block = root.get("memory", (dict,), "an object with the step's measured memory", optional=True)
    if block is None or block.get("peak_allocated_bytes", 0) is None:
        # a record measured on the CPU (the harness's dry run) has no device peak: nothing measured to carry
        return None
    sub = sub_fields(block, "memory.")
    values: dict[str, int] = {}
    for key in INT_FIELDS:
        value = sub.get(key, (int,), "a number of bytes >= 0")
        if value < 0:
            raise sub.error(key, f"expected a number of bytes >= 0, got {value}")
        values[key] = value
    by_layer_raw = sub.get("activation_bytes_by_layer", (dict,), "an object of module name -> bytes", optional=True)
    by_layer: dict[str, float] = {}
    for name, value in (by_layer_raw or {}).items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise sub.error(f"activation_bytes_by_layer.{name}", f"expected a number of bytes >= 0, got {value!r}")
        by_layer[str(name)] = float(value)
    method = sub.get("activation_method", (str,), "how the activations were measured", optional=True) or "measured"
    optimizer = optimizer_name(sub.get("optimizer", (str,), "the optimizer's name", optional=True)
                               or root.get("optimizer", (str,), "the optimizer's name", optional=True))
    peak = float(values["peak_allocated_bytes"])
    states = float(values["optimizer_state_bytes"])
    params = float(values["parameter_bytes"] + values["buffer_bytes"])
    activations, gradients = float(values["activation_bytes"]), float(values["gradient_bytes"])
    # The record gives the peak and its parts' full sizes, not what was live at the peak: the rest after
    # parameters and states is read as the activations, then the gradients, then "other" (temporaries,
    # workspaces), so the parts add up to the peak and the end of backward (every gradient) never exceeds it.
    rest = max(peak - params - states, 0.0)
    live_activations = min(activations, rest)
    live_gradients = min(gradients, rest - live_activations)
    other = rest - live_activations - live_gradients
    parts = {"parameters": params, "gradients": live_gradients, "optimizer_states": states,
             "activations": live_activations, "other": other}
    source = f"measured in {root.path} (torch.cuda.max_memory_allocated over its steps)"
    return MeasuredMemory(
        peak=PeakMemory(peak_bytes=peak, parts=parts, optimizer=optimizer, source=source,
                        reserved_bytes=float(values["peak_reserved_bytes"])),
        activation_bytes=activations, activation_bytes_by_layer=by_layer,
        activation_source=f"measured in {root.path} ({method})", optimizer=optimizer)
