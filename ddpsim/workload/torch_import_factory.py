"""A model factory of the harness's convention as a Workload: ``build(batch_size=..., **kw) -> (model,
make_batch[, loss_fn])``, the same file ``ddpsim measure --model file.py:build`` takes.

The model is built on the meta device and its training step (``loss_fn(model, batch)``, else
cross-entropy of ``model(x)`` against ``y``) runs under the torch importer's counters
(``torch.utils.flop_counter.FlopCounterMode`` for FLOPs, a dispatch mode for bytes and kernels), so an
unprofiled model's layers carry the real graph's work. Imports torch inside functions only.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from ddpsim.errors import ScenarioError
from ddpsim.workload.model import Workload

FIELD = "workload.model"


def load_factory_file(spec: str) -> Any:
    """``path/file.py:build`` or ``module:build`` -> the callable."""
    target, _, name = spec.rpartition(":")
    if not target or not name:
        raise ScenarioError(f"expected 'file.py:build' or 'module:build', got {spec!r}", field=FIELD)
    if target.endswith(".py"):
        if not os.path.isfile(target):
            raise ScenarioError(f"factory file {target!r} not found", field=FIELD)
        module_name = "_ddpsim_factory_" + os.path.splitext(os.path.basename(target))[0]
        loader_spec = importlib.util.spec_from_file_location(module_name, target)
        assert loader_spec is not None and loader_spec.loader is not None
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        loader_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ScenarioError(f"{target} has no callable {name!r}", field=FIELD)
    return factory


def import_factory_model(spec: str, batch_size: int, precision: str, seq_len: int | None = None,
                         **kwargs: Any) -> Workload:
    """The Workload of ``spec`` (``file.py:build``) at ``batch_size`` and ``precision``: parameters,
    per-layer FLOPs, bytes, kernels and kinds, as the torch importer describes a module."""
    import torch

    from ddpsim.workload.torch_autocast import autocast_on_cpu

    with autocast_on_cpu(torch):
        return _import_factory_model(torch, spec, batch_size, precision, seq_len, **kwargs)


def _import_factory_model(torch: Any, spec: str, batch_size: int, precision: str, seq_len: int | None,
                          **kwargs: Any) -> Workload:
    from ddpsim.workload.torch_import import _describe

    factory = load_factory_file(spec)
    # the batch is made on the CPU (factories draw it from a CPU generator), then moved to meta
    with torch.device("meta"):
        try:
            built = factory(batch_size=batch_size, **kwargs)
        except TypeError:
            if kwargs:
                raise
            built = factory()  # a factory without options: make_batch takes the batch size
    if not isinstance(built, tuple) or len(built) not in (2, 3):
        raise ScenarioError(f"{spec} returned {type(built).__name__}; expected (model, make_batch[, loss_fn])",
                            field=FIELD)
    model, make_batch = built[0], built[1]
    loss_fn = built[2] if len(built) == 3 else None
    built_cpu_batch = make_batch(batch_size, device="cpu", seed=0)
    batch = _to_meta(torch, built_cpu_batch)

    class _Step(torch.nn.Module):
        """One training step's forward and loss, as the harness runs it."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, batch: Any) -> Any:
            if loss_fn is not None:
                return loss_fn(self.model, batch)
            x, y = batch
            out = self.model(x)
            return torch.nn.functional.cross_entropy(out.flatten(0, -2) if out.dim() > 2 else out,
                                                     y.flatten() if out.dim() > 2 else y)

    step = _Step()
    workload = _describe(torch, step, ((batch,), {}), spec, spec, batch_size, precision, seq_len,
                         f"make_batch({batch_size})", "")
    return workload


def _to_meta(torch: Any, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, tuple | list):
        return type(value)(_to_meta(torch, v) for v in value)
    if isinstance(value, dict):
        return {k: _to_meta(torch, v) for k, v in value.items()}
    return value
