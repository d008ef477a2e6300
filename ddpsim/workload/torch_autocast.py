"""Autocast as a user's factory opens it, on a machine that prices the step without its GPU.

Users write ``torch.autocast(device_type=batch.device.type, dtype=torch.bfloat16)`` or
``torch.autocast("cuda", ...)`` inside their ``loss_fn``. The importer runs that code on the meta device (where
autocast refuses the device type ``meta``) and PyTorch's MemTracker runs it on fake CPU tensors (where autocast
on "cuda" is disabled with a warning when CUDA is absent, so the step would be priced in fp32). While
``autocast_on_cpu`` is open, an autocast on a device this process cannot run is opened on the CPU instead, with
the dtype the user asked for: the CPU's lower-precision list holds the same matrix products, convolutions and
scaled-dot-product attention as CUDA's. On meta tensors a CPU autocast changes nothing (the meta device has no
autocast key); the importer's trace takes the element width from ``workload.precision`` there.

Imports torch inside functions only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

# device types a user's step may name that this process may not have; "meta" has no autocast at all
_MAPPED = ("cuda", "meta", "xpu", "mps", "hpu", "xla")


def _available(torch: Any, device_type: str) -> bool:
    if device_type == "meta":
        return False
    module = getattr(torch, device_type, None)
    is_available = getattr(module, "is_available", None)
    return bool(is_available()) if callable(is_available) else False


@contextlib.contextmanager
def autocast_on_cpu(torch: Any) -> Iterator[list[str]]:
    """Within the block, ``torch.autocast(device_type=D, ...)`` for a D this process cannot run opens on the CPU.
    Yields the list of device types it mapped (for the source text), filled as the block runs."""
    autocast_class = torch.amp.autocast_mode.autocast
    original = autocast_class.__init__
    mapped: list[str] = []

    def init(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        if isinstance(device_type, str) and device_type in _MAPPED and not _available(torch, device_type):
            if device_type not in mapped:
                mapped.append(device_type)
            device_type = "cpu"
            dtype = kwargs.get("dtype", args[0] if args else None)
            if dtype is None:
                # CUDA's default autocast dtype is fp16 and the CPU's bf16: keep what the user's device meant
                kwargs["dtype"] = torch.float16
                args = args[1:] if args else ()
        original(self, device_type, *args, **kwargs)

    autocast_class.__init__ = init
    try:
        yield mapped
    finally:
        autocast_class.__init__ = original
