"""Import any ``nn.Module`` factory as a Workload, on the meta device (no weights, no GPU).

The only module of ddpsim that imports torch, and only inside functions, so the simulator imports
without it. Parameters are listed exactly as DDP lists them; FLOPs per module come from
``torch.utils.flop_counter.FlopCounterMode`` over one forward and backward on meta tensors; bytes and
kernel counts from a dispatch mode that sees every aten op each module runs.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from ddpsim.errors import ScenarioError
from ddpsim.workload.model import DTYPE_BYTES, Layer, ParamTensor, Workload
from ddpsim.workload.torch_import_ops import data_dependent_message, fused_rnn_work, is_data_dependent
from ddpsim.workload.zoo import ACTIVATION_BYTES

FIELD = "workload.model"
_IMAGE_SIDE = 224
_DEFAULT_TOKENS = 128


def _require_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ScenarioError("torch is not installed; install the extra: pip install 'ddpsim[torch]'",
                            field=FIELD) from None
    return torch


def _load_factory(spec: str) -> tuple[Callable[..., Any], Any]:
    module_name, sep, factory_name = spec.partition(":")
    if not sep or not module_name or not factory_name:
        raise ScenarioError(f"expected 'torch:package.module:factory', got 'torch:{spec}'", field=FIELD)
    try:
        module = _import_module(module_name)
    except Exception as err:  # any error while importing user code is a scenario problem
        raise ScenarioError(f"cannot import module {module_name!r}: {type(err).__name__}: {err}",
                            field=FIELD) from None
    factory = module
    for part in factory_name.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise ScenarioError(f"module {module_name!r} has no attribute {factory_name!r}", field=FIELD)
    if not callable(factory):
        raise ScenarioError(f"{module_name}:{factory_name} is not callable", field=FIELD)
    return factory, module


def _import_module(module_name: str) -> Any:
    """Import ``module_name``; if its top-level package is not on ``sys.path``, retry from the current
    directory. The ``ddpsim`` console script's ``sys.path[0]`` is its bin folder, not the folder the
    user runs it from, so ``torch:my_net:build`` beside the user would need PYTHONPATH otherwise."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        top = module_name.split(".")[0]
        cwd = os.getcwd()
        if err.name != top or cwd in sys.path or "" in sys.path:
            raise
        sys.path.insert(0, cwd)
        try:
            importlib.invalidate_caches()  # the finder may have listed the folder before the file existed
            return importlib.import_module(module_name)
        finally:
            sys.path.remove(cwd)


def ddp_parameters(model: Any) -> list[tuple[str, str, Any]]:
    """(module name, parameter name, parameter) in DDP's order: ``named_modules()`` walk, each module's
    own parameters (``recurse=False``), ``requires_grad`` only, shared parameters once
    (``_build_params_for_reducer`` in torch/nn/parallel/distributed.py)."""
    seen: set[int] = set()
    out = []
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            if param.requires_grad and id(param) not in seen:
                seen.add(id(param))
                out.append((module_name, param_name, param))
    return out


def _guess_inputs(torch: Any, model: Any, batch_size: int, seq_len: int | None) -> list[Any]:
    """Candidate inputs from the first module with parameters: image for a Conv2d, token ids for an
    Embedding, features for a Linear."""
    nn = torch.nn
    for module in model.modules():
        if _is_lazy(torch, module):
            return []  # a lazy module's in_features is 0 until it has seen an input
        if isinstance(module, nn.Conv2d):
            return [torch.randn(batch_size, module.in_channels, _IMAGE_SIDE, _IMAGE_SIDE)]
        if isinstance(module, nn.Conv1d):
            return [torch.randn(batch_size, module.in_channels, seq_len or _DEFAULT_TOKENS)]
        if isinstance(module, nn.Embedding):
            return [torch.zeros(batch_size, seq_len or _DEFAULT_TOKENS, dtype=torch.long)]
        if isinstance(module, nn.Linear):
            rows = [batch_size, seq_len] if seq_len else [batch_size]
            return [torch.randn(*rows, module.in_features)]
    return []


def _is_lazy(torch: Any, module: Any) -> bool:
    from torch.nn.modules.lazy import LazyModuleMixin

    return isinstance(module, LazyModuleMixin) and bool(module.has_uninitialized_params())  # type: ignore[misc]


def _materialise_lazy(torch: Any, model: Any, inputs: tuple[tuple[Any, ...], dict[str, Any]], spec: str,
                      hint: str) -> None:
    """Lazy modules (LazyLinear, ...) have zero-size parameters until their first forward, and DDP
    refuses them until then; users run one forward first, so do the same here, on meta tensors."""
    args, kwargs = inputs
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    except Exception as err:
        raise ScenarioError(f"the forward that initialises the lazy modules of {spec} failed "
                            f"({type(err).__name__}: {err}); {hint}", field=FIELD) from None
    left = [name for name, module in model.named_modules() if _is_lazy(torch, module)]
    if left:
        raise ScenarioError(f"lazy modules of {spec} never ran in forward, so their parameters have no "
                            f"size: {', '.join(left)}", field=FIELD)


def _example_input(torch: Any, model: Any, py_module: Any, batch_size: int,
                   seq_len: int | None) -> tuple[tuple[tuple[Any, ...], dict[str, Any]] | None, str]:
    """(positional and keyword inputs, or None where none can be guessed; where they came from)."""
    provider = getattr(model, "example_input", None) or getattr(py_module, "example_input", None)
    if provider is None:
        with torch.device("meta"):
            guess = _guess_inputs(torch, model, batch_size, seq_len)
        shapes = ", ".join(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in guess)
        return ((tuple(guess), {}) if guess else None), f"a guessed input ({shapes})"
    source = f"the input example_input({batch_size}, {seq_len}) returned"
    try:
        with torch.device("meta"):
            value = provider(batch_size, seq_len)
    except Exception as err:
        raise ScenarioError(f"example_input({batch_size}, {seq_len}) failed: {type(err).__name__}: {err}",
                            field=FIELD) from None
    if isinstance(value, dict):
        return ((), value), source
    if isinstance(value, tuple | list):
        return (tuple(value), {}), source
    return ((value,), {}), source


def _output_tensors(torch: Any, out: Any) -> list[Any]:
    """The tensors a training loss would be built from: the output, its ``.loss`` (else ``.logits``),
    or every tensor inside a tuple, list or dict. All of them, not the first: a parameter that only
    reaches the second output still gets a gradient from a loss over both, and DDP's unused-parameter
    check must not flag it."""
    if isinstance(out, torch.Tensor):
        return [out]
    for attr in ("loss", "logits"):
        value = getattr(out, attr, None)
        if isinstance(value, torch.Tensor):
            return [value]
    items = out.values() if isinstance(out, dict) else out if isinstance(out, tuple | list) else []
    return [t for item in items for t in _output_tensors(torch, item)]


class _Trace:
    """Per-module forward order, aten kernels and bytes touched, attributed to the innermost module."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.order: list[str] = []  # modules by first forward call
        self.kernels: dict[str, int] = {}
        self.bytes: dict[str, float] = {}
        self.bwd_extra: dict[str, float] = {}  # backward bytes beyond 2 x forward (embedding tables)
        # forward FLOPs a causal fused attention skips (the tiles above the diagonal: half of SDPA's count)
        self.causal_skip: dict[str, float] = {}
        self.rnn_inputs: dict[str, tuple[int, ...]] = {}  # a recurrent module's input shape (torch_import_ops)
        self.failed_op = ""  # the aten op that raised, where one did
        self.fused = 0  # > 0 inside an op that runs as one fused kernel on a GPU
        self.keep: list[Any] = []
        # Forward ops counted so far, and per module the count at its first call and at the first op
        # that is its own or reads one of its parameters: when its work runs. A module whose
        # parameters its parent uses without calling it (MultiheadAttention's out_proj) runs there.
        self.ops = 0
        self.called_at: dict[str, int] = {}
        self.first_work: dict[str, int] = {}
        # DDP parameter indices in the order autograd accumulated their gradients in the backward
        self.ready: list[int] = []
        self.autograd_nodes = 0
        self.output_bytes = 0


def _make_dispatch_mode(torch: Any, trace: _Trace, elt: int, param_owner: dict[int, str]) -> Any:
    """Counts, per innermost module, the kernels and bytes of the aten ops its forward runs, costed
    as the zoo costs them (see ``zoo``'s module docstring). ``param_owner`` maps ``id`` of each
    parameter (and of views of it) to the module that registers it."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import flop_registry

    amp = elt < 4
    embedding = torch.ops.aten.embedding.default

    class _OpCounter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            try:
                out = func(*args, **(kwargs or {}))
            except Exception:
                trace.failed_op = trace.failed_op or str(func.overloadpacket.__name__)
                raise
            if getattr(func, "is_view", False):
                # Views launch no kernel and move no data; a view of a parameter (Linear's weight.t())
                # is still the parameter. Keep the view alive so its id is not reused.
                if isinstance(out, torch.Tensor):
                    for t in tree_leaves(args):
                        if isinstance(t, torch.Tensor) and id(t) in param_owner:
                            param_owner[id(out)] = param_owner[id(t)]
                            trace.keep.append(out)
                            break
                return out
            trace.ops += 1
            for t in tree_leaves((args, kwargs or {})):
                if isinstance(t, torch.Tensor) and id(t) in param_owner:
                    trace.first_work.setdefault(param_owner[id(t)], trace.ops)
            if not trace.stack or trace.fused:
                return out
            owner = trace.stack[-1]
            trace.first_work.setdefault(owner, trace.ops)
            kernels, moved = 1, 0.0
            if func is embedding:
                # A lookup reads only the rows it gathers; its backward zero-fills and scatter-adds
                # into a dense fp32 gradient of the whole table.
                table = args[0]
                moved = 2.0 * out.numel() * 4
                trace.bwd_extra[owner] = trace.bwd_extra.get(owner, 0.0) + 2.0 * table.numel() * 4
            else:
                matmul = func.overloadpacket in flop_registry
                for t in tree_leaves((args, kwargs or {}, out)):
                    if not isinstance(t, torch.Tensor):
                        continue
                    if id(t) in param_owner:
                        # fp32 parameter; autocast casts a matmul weight to 16 bits first
                        moved += t.numel() * (8.0 if amp and matmul else 4.0)
                        kernels += 1 if amp and matmul else 0
                    else:
                        # activations at the autocast width; ints/bools at their own size
                        moved += t.numel() * (elt if t.is_floating_point() else t.element_size())
            trace.kernels[owner] = trace.kernels.get(owner, 0) + kernels
            trace.bytes[owner] = trace.bytes.get(owner, 0.0) + moved
            return out

    return _OpCounter()


def _grouped_as_bmm(torch: Any, a: Any, b: Any) -> Any:
    """A grouped matmul of rows ``a`` (S, K) by experts ``b`` (E, K, N) as one batched matmul with
    the same shapes and FLOPs: each row meets a (K, N) matrix. Which expert a row meets is data the
    meta device does not have, and neither shapes nor FLOPs depend on it."""
    rows = a.shape[0]
    return torch.bmm(a.unsqueeze(1), b.select(0, 0).expand(rows, *b.shape[1:])).squeeze(1)


def _make_function_mode(torch: Any, trace: _Trace, elt: int, param_owner: dict[int, str]) -> Any:
    """Scaled-dot-product attention decomposes into a dozen ops on meta/CPU but runs as one fused
    (flash) kernel on a GPU: count it as one kernel moving q, k, v and the output.

    A mixture of experts' grouped matmul (``grouped_mm``, transformers' MoE layers) is one kernel
    too. torch's meta kernel for it takes bf16 only, so a model with fp32 weights (as DDP keeps them)
    cannot run it on the meta device, and the FLOP counter has no formula for it: it runs here as
    ``_grouped_as_bmm``, counted as one kernel reading the rows, the experts' weights and the output."""
    from torch.overrides import TorchFunctionMode

    sdpa = torch.nn.functional.scaled_dot_product_attention
    grouped = {f for f in (getattr(torch.nn.functional, "grouped_mm", None), getattr(torch, "_grouped_mm", None))
               if f is not None}
    amp = elt < 4

    class _FusedOps(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in grouped and len(args) >= 2 and args[0].dim() == 2 and args[1].dim() == 3:
                a, b = args[0], args[1]
                if trace.fused or not trace.stack:
                    return _grouped_as_bmm(torch, a, b)
                trace.fused += 1
                try:
                    out = _grouped_as_bmm(torch, a, b)
                finally:
                    trace.fused -= 1
                owner = trace.stack[-1]
                trace.ops += 1
                trace.first_work.setdefault(owner, trace.ops)
                weight_is_param = id(b) in param_owner
                # an fp32 parameter read at 16 bits under autocast is cast first (one more kernel)
                weight_bytes = b.numel() * (8.0 if amp else 4.0) if weight_is_param else b.numel() * elt
                trace.kernels[owner] = trace.kernels.get(owner, 0) + 1 + (1 if amp and weight_is_param else 0)
                trace.bytes[owner] = trace.bytes.get(owner, 0.0) + (a.numel() + out.numel()) * elt + weight_bytes
                return out
            if func is not sdpa or trace.fused or not trace.stack:
                return func(*args, **(kwargs or {}))
            trace.fused += 1
            try:
                out = func(*args, **(kwargs or {}))
            finally:
                trace.fused -= 1
            owner = trace.stack[-1]
            trace.ops += 1
            trace.first_work.setdefault(owner, trace.ops)
            q, k = args[0], args[1]
            if (kwargs or {}).get("is_causal") and q.dim() >= 2:
                # FlopCounterMode counts 4 x Tq x Tk x D per head (both matmuls); flash skips half of it
                heads = math.prod(q.shape[:-2])
                trace.causal_skip[owner] = (trace.causal_skip.get(owner, 0.0)
                                            + 2.0 * heads * q.shape[-2] * k.shape[-2] * q.shape[-1])
            moved = sum(t.numel() for t in (*args[:3], out) if isinstance(t, torch.Tensor)) * elt
            trace.kernels[owner] = trace.kernels.get(owner, 0) + 1
            trace.bytes[owner] = trace.bytes.get(owner, 0.0) + moved
            return out

    return _FusedOps()


class _ForwardFailed(Exception):
    """The model's forward raised: the error, and the innermost module running when it did."""

    def __init__(self, error: Exception, module: str, op: str = "") -> None:
        super().__init__(str(error))
        self.error = error
        self.module = module
        self.op = op


def _trace_model(torch: Any, model: Any, inputs: tuple[tuple[Any, ...], dict[str, Any]], elt: int
                 ) -> tuple[_Trace, dict[str, float], dict[str, float], bool]:
    """Run forward (and backward when possible) on meta tensors; return the trace and the flops per
    module, forward and backward, each keyed by module name ("" for the root) and including children."""
    from torch.utils.flop_counter import FlopCounterMode

    trace = _Trace()
    handles = []
    param_owner: dict[int, str] = {}
    for name, module in model.named_modules():
        def pre(_m: Any, _a: Any, name: str = name) -> None:
            if name not in trace.kernels:
                trace.order.append(name)
                trace.kernels[name] = 0
                trace.called_at[name] = trace.ops
            trace.stack.append(name)

        def post(_m: Any, _a: Any, output: Any, name: str = name) -> None:
            trace.stack.pop()

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
        if isinstance(module, torch.nn.RNNBase):
            def rnn_input(_m: Any, a: Any, name: str = name) -> None:
                trace.rnn_inputs.setdefault(name, tuple(a[0].shape))
            handles.append(module.register_forward_pre_hook(rnn_input))
        for param in module.parameters(recurse=False):
            param_owner.setdefault(id(param), name)  # frozen ones too: their bytes are read all the same
    for index, (_, _, param) in enumerate(ddp_parameters(model)):
        # Like DDP's reducer hook, this fires once autograd has accumulated the gradient, so the
        # order it fires in is the order DDP rebuilds its buckets in. The engine orders a one-device
        # backward the same way on meta tensors as on real ones (tests/test_ddp_layouts.py checks
        # it against DDP itself); a tied parameter has one accumulator, so it fires once.
        def ready(_p: Any, index: int = index) -> None:
            trace.ready.append(index)

        handles.append(param.register_post_accumulate_grad_hook(ready))
    root_class = type(model).__name__
    counter = FlopCounterMode(display=False)
    args, kwargs = inputs
    try:
        with counter:
            with _make_dispatch_mode(torch, trace, elt, param_owner), _make_function_mode(torch, trace, elt, param_owner):
                try:
                    output = model(*args, **kwargs)
                except Exception as err:
                    raise _ForwardFailed(err, trace.stack[-1] if trace.stack else "", trace.failed_op) from err
            forward = {k: float(sum(v.values())) for k, v in counter.get_flop_counts().items()}
            outs = [t for t in _output_tensors(torch, output) if t.requires_grad]
            trace.autograd_nodes = count_autograd_nodes(outs)
            trace.output_bytes = sum(t.numel() * elt for t in outs)
            backward_ran = bool(outs)
            if backward_ran:
                sum(t.float().sum() for t in outs).backward()
            total = {k: float(sum(v.values())) for k, v in counter.get_flop_counts().items()}
    finally:
        for h in handles:
            h.remove()

    def own(counts: dict[str, float]) -> dict[str, float]:
        """Inclusive counts -> each module's own: minus its nearest counted descendants. (A container
        that is never called, as a ModuleList, has no count: its children count for its parent.)"""
        inclusive: dict[str, float] = {}
        for key, value in counts.items():
            if key == root_class:
                inclusive[""] = value
            elif key.startswith(root_class + "."):
                inclusive[key[len(root_class) + 1:]] = value
        result = dict(inclusive)
        for name, value in inclusive.items():
            parent = name
            while parent:
                parent = parent.rsplit(".", 1)[0] if "." in parent else ""
                if parent in inclusive:
                    result[parent] -= value
                    break
        return result

    fwd = own(forward)
    bwd = {k: v - fwd.get(k, 0.0) for k, v in own(total).items()}
    return trace, fwd, bwd, backward_ran


def count_autograd_nodes(outputs: list[Any]) -> int:
    """The nodes DDP's ``Reducer::search_unused_parameters`` visits: every node reachable from the
    outputs' grad_fn along ``next_functions`` (the outputs' own grad_fn counted once each)."""
    seen: set[Any] = set()
    queue = [t.grad_fn for t in outputs if t.grad_fn is not None]
    seen.update(queue)
    while queue:
        fn = queue.pop()
        for nxt, _ in fn.next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return len(seen)


def _check_precision(precision: str) -> None:
    if precision not in ACTIVATION_BYTES:
        raise ScenarioError(f"expected one of {', '.join(ACTIVATION_BYTES)}, got {precision!r}",
                            field="workload.precision")


def import_torch_model(spec: str, batch_size: int, precision: str, seq_len: int | None = None,
                       optimizer: str = "", checkpoint_every: int = 0) -> Workload:
    """Build ``package.module:factory()`` on the meta device and describe it as DDP would see it.

    Inputs: the module's (or the factory's Python module's) ``example_input(batch_size, seq_len)``,
    else a guess from the first parametrised module (Conv2d: 3x224x224 images; Embedding: token ids
    of ``seq_len`` (default 128); Linear: features). Layers are the modules with their own
    parameters or their own work (FLOPs or kernels outside their children), in registration order;
    ``forward_order`` records the order their forward first ran, ``grad_ready_order`` the order
    autograd accumulated each parameter's gradient in (DDP's bucket rebuild order); parameters
    missing from it get no gradient. A factory may instead return ``(model, make_batch[, loss_fn])``, as
    ``ddpsim measure --model`` takes it: the input is then ``make_batch(batch_size, device, seed)``'s
    (its ``x`` for a batch ``(x, y)``). ``optimizer`` (a name of ``workload.optimizer``; "" = none known)
    runs PyTorch's MemTracker over a real training step on fake tensors for the step's peak memory (and over the step
    with every ``checkpoint_every``-th block checkpointed, where > 0). An autocast
    the factory opens on "cuda" or on the batch's device runs on the CPU (``torch_autocast``).
    """
    torch = _require_torch()
    _check_precision(precision)
    from ddpsim.workload.torch_autocast import autocast_on_cpu

    with autocast_on_cpu(torch):
        return _import_torch_model(torch, spec, batch_size, precision, seq_len, optimizer, checkpoint_every)


def _import_torch_model(torch: Any, spec: str, batch_size: int, precision: str, seq_len: int | None,
                        optimizer: str, checkpoint_every: int = 0) -> Workload:
    factory, py_module = _load_factory(spec)
    try:
        with torch.device("meta"):
            model = factory()
            batch_of = loss_of = None
            if isinstance(model, tuple | list) and len(model) in (2, 3) and isinstance(model[0], torch.nn.Module):
                loss_of = model[2] if len(model) > 2 else None
                model, batch_of = model[0], model[1]
    except Exception as err:
        hint = ("; name a Hugging Face model by its config or class instead: hf:GPT2Config, hf:GPT2LMHeadModel"
                if spec.startswith("transformers") else "")
        raise ScenarioError(f"{spec}() failed on the meta device: {type(err).__name__}: {err}{hint}",
                            field=FIELD) from None
    if not isinstance(model, torch.nn.Module):
        raise ScenarioError(f"{spec}() returned {type(model).__name__}, expected a torch.nn.Module", field=FIELD)
    inputs: tuple[tuple[Any, ...], dict[str, Any]] | None
    if batch_of is not None:
        inputs, source = _batch_input(torch, model, batch_of, loss_of, batch_size, spec)
    else:
        inputs, source = _example_input(torch, model, py_module, batch_size, seq_len)
    hint = f"give the module or {spec.partition(':')[0]} an example_input(batch_size, seq_len) function"
    lazy = [name or type(model).__name__ for name, module in model.named_modules() if _is_lazy(torch, module)]
    if inputs is None:
        why = f" (lazy modules: {', '.join(lazy)})" if lazy else ""
        raise ScenarioError(f"cannot guess an input for {spec}{why}; {hint}", field=FIELD)
    if lazy:
        _materialise_lazy(torch, model, inputs, spec, hint)
    guessed = source.startswith("a guessed")
    workload = _describe(torch, model, inputs, spec, f"torch:{spec}", batch_size, precision, seq_len,
                         source, hint if guessed else "")
    if not optimizer:
        return workload
    from ddpsim.workload.torch_import_memory import with_step_memory

    return with_step_memory(torch, workload, _fake_step(torch, factory, py_module, batch_size, seq_len), optimizer,
                            checkpoint_every)


class _InputsSeen(Exception):
    """Raised by the pre-forward hook once the loss function has called the model: its inputs are known."""


def _batch_input(torch: Any, model: Any, make_batch: Any, loss_fn: Any, batch_size: int,
                 spec: str) -> tuple[tuple[tuple[Any, ...], dict[str, Any]], str]:
    """The model's input from a factory's ``make_batch`` on the meta device: what its ``loss_fn`` passes to the
    model where it has one (caught by a pre-forward hook, the loss itself never computed), else read as
    ``ddpsim measure``'s default loss reads a batch: ``(x, y)`` -> ``model(x)``, a dict -> keywords, else the
    batch itself."""
    try:
        with torch.device("meta"):
            batch = make_batch(batch_size, torch.device("meta"), 0)
    except Exception as err:
        raise ScenarioError(f"{spec}: make_batch({batch_size}, 'meta', 0) failed: {type(err).__name__}: "
                            f"{_first_line(err)}", field=FIELD) from None
    source = f"the batch make_batch({batch_size}, ...) returned"
    if loss_fn is not None:
        seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

        def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            seen.append((tuple(args), dict(kwargs)))
            raise _InputsSeen

        handle = model.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            with torch.device("meta"):
                loss_fn(model, batch)
        except _InputsSeen:
            pass
        except Exception as err:
            raise ScenarioError(f"{spec}: its loss_fn failed before calling the model on the meta device: "
                                f"{type(err).__name__}: {_first_line(err)}", field=FIELD) from None
        finally:
            handle.remove()
        if seen:
            return seen[0], f"the inputs its loss_fn gives the model on make_batch({batch_size}, ...)"
    if isinstance(batch, dict):
        return ((), batch), source
    if isinstance(batch, tuple | list) and len(batch) == 2:
        return ((batch[0],), {}), source
    return ((batch,), {}), source


def _fake_step(torch: Any, factory: Any, py_module: Any, batch_size: int,
               seq_len: int | None) -> Callable[[], tuple[Any, Callable[[Any], Any]]]:
    """What torch_import_memory runs under FakeTensorMode: the factory's model and its step's loss (the factory's
    loss_fn or ``ddpsim measure``'s default; for a bare module, the mean square of its outputs)."""
    from ddpsim.workload.torch_import_memory import _outputs_loss, default_loss

    def build() -> tuple[Any, Callable[[Any], Any]]:
        made = factory()
        if isinstance(made, tuple | list):
            model, make_batch = made[0], made[1]
            loss_fn = made[2] if len(made) > 2 else None
            batch = make_batch(batch_size, torch.device("cpu"), 0)
            return model, (lambda m: loss_fn(m, batch)) if loss_fn is not None else \
                (lambda m: default_loss(torch, m, batch))
        provider = getattr(made, "example_input", None) or getattr(py_module, "example_input", None)
        value = provider(batch_size, seq_len) if provider is not None else _guess_inputs(torch, made, batch_size,
                                                                                          seq_len)
        args, kwargs = ((), value) if isinstance(value, dict) else (
            (tuple(value), {}) if isinstance(value, tuple | list) else ((value,), {}))
        return made, lambda m: _outputs_loss(torch, m(*args, **kwargs))

    return build


def import_hf_model(what: str, batch_size: int, precision: str, seq_len: int | None, base_dir: str,
                    optimizer: str = "", checkpoint_every: int = 0) -> Workload:
    """A Hugging Face model built from its config on the meta device: ``GPT2Config`` (a config class),
    ``GPT2LMHeadModel`` (a model class), ``path/config.json`` (relative to ``base_dir``, the scenario's
    folder) or ``org/name`` (the local Hugging Face cache's config only: nothing is downloaded). Names
    are read, and the model chosen, as ``ddpsim measure --model hf:...`` does (ddpsim/measure/hf.py):
    its sequence-to-sequence head for an encoder-decoder, else its causal-LM head, else its masked-LM head,
    else the bare model, trained on its own LM loss over random token ids of ``seq_len`` (default: the shorter
    of 512 and the model's positions). ``optimizer`` (a name of ``workload.optimizer``; "" = none known) runs
    PyTorch's MemTracker over the same training step on fake tensors, as for a ``torch:`` model."""
    torch = _require_torch()
    _check_precision(precision)
    from ddpsim.measure.hf import build_model, checked_seq, load_model_source, token_inputs
    from ddpsim.measure.spec import ModelArgError

    name = f"hf:{what}"
    beside = os.path.join(base_dir, what)
    try:
        config, model_class = load_model_source(beside if not os.path.isabs(what) and os.path.isfile(beside) else what,
                                                local_files_only=True)
    except ModelArgError as err:
        raise ScenarioError(str(err).removeprefix("model "), field=FIELD) from None
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 1:
        raise ScenarioError(f"{name}: the config has no vocab_size; hf: models take token ids (for another "
                            "input, wrap the model in a torch:module:factory with an example_input)", field=FIELD)
    try:
        with torch.device("meta"):
            model, has_head = build_model(config, model_class)
    except Exception as err:
        raise ScenarioError(f"{name}: building the model from its config on the meta device failed: "
                            f"{type(err).__name__}: {_first_line(err)}", field=FIELD) from None
    try:
        seq = checked_seq(config, seq_len, name)
    except ModelArgError as err:
        raise ScenarioError(str(err).removeprefix("model "), field="workload.seq_len") from None
    ids = torch.zeros(batch_size, seq, dtype=torch.long, device="meta")
    kwargs = token_inputs(model, ids, has_head)
    source = f"token ids ({batch_size}, {seq}){' as labels too' if has_head else ''}"
    workload = _describe(torch, model, ((), kwargs), name, name, batch_size, precision, seq, source, "")
    if not optimizer:
        return workload
    from ddpsim.workload.torch_import_memory import hf_loss, with_step_memory

    def build() -> tuple[Any, Callable[[Any], Any]]:
        fake, head = build_model(config, model_class)
        tokens = torch.zeros(batch_size, seq, dtype=torch.long)
        return fake, lambda m: hf_loss(torch, m(**token_inputs(m, tokens, head)))

    return with_step_memory(torch, workload, build, optimizer, checkpoint_every)


def _describe(torch: Any, model: Any, inputs: tuple[tuple[Any, ...], dict[str, Any]], spec: str, name: str,
              batch_size: int, precision: str, seq_len: int | None, source: str, hint: str) -> Workload:
    """The Workload of ``model`` (on the meta device) run on ``inputs``; ``source`` says where the
    inputs came from, ``hint`` what to do when the forward fails (empty: nothing to add)."""
    model.train()
    elt = ACTIVATION_BYTES[precision]
    try:
        trace, fwd, bwd, backward_ran = _trace_model(torch, model, inputs, elt)
    except ScenarioError:
        raise
    except _ForwardFailed as failed:
        err = failed.error
        where = f" in {failed.module} ({type(model.get_submodule(failed.module)).__name__})" if failed.module else ""
        op = data_dependent_op(err)
        if op:
            measured = name if name.startswith("hf:") else spec
            aten = f", {failed.op}" if failed.op else ""
            raise ScenarioError(f"forward of {spec}{where} takes a shape or a branch from the data ({op}{aten}): what "
                                "follows depends on the data and cannot be traced on the CPU without it; measure the "
                                "step on a GPU with "
                                f"`ddpsim measure --model {measured}` and name the profile it writes: "
                                "workload.model: profile:PATH", field=FIELD) from None
        if is_data_dependent(failed.op):
            raise ScenarioError(f"{spec}: " + data_dependent_message(failed.op, where), field=FIELD) from None
        raise ScenarioError(f"forward of {spec} on {source} failed on the meta device{where}: "
                            f"{type(err).__name__}: {_first_line(err)}" + (f"; {hint}" if hint else ""),
                            field=FIELD) from None
    except Exception as err:
        raise ScenarioError(f"backward of {spec} on {source} failed on the meta device: {type(err).__name__}: "
                            f"{_first_line(err)}", field=FIELD) from None

    params_of: dict[str, list[ParamTensor]] = {}
    for module_name, param_name, param in ddp_parameters(model):
        dtype = str(param.dtype).removeprefix("torch.")
        if dtype not in DTYPE_BYTES:
            raise ScenarioError(f"parameter {module_name}.{param_name} has unsupported dtype {dtype}", field=FIELD)
        full = f"{module_name}.{param_name}" if module_name else param_name
        params_of.setdefault(module_name, []).append(ParamTensor(full, param.numel(), dtype))

    layers: list[Layer] = []
    names: list[str] = []
    for name, module in model.named_modules():
        skip = trace.causal_skip.get(name, 0.0)
        own_fwd, own_bwd = fwd.get(name, 0.0) - skip, bwd.get(name, 0.0) - 2.0 * skip
        kernels = trace.kernels.get(name, 0)
        if name in trace.rnn_inputs:  # cuDNN's fused kernels, not the CPU decomposition's per-step ops
            kernels, trace.bytes[name] = fused_rnn_work(module, trace.rnn_inputs[name], elt)
        params = params_of.get(name, [])
        if not params and own_fwd <= 0 and kernels == 0:
            continue
        if not backward_ran:
            own_bwd = 2.0 * own_fwd  # no differentiable output: the zoo's convention
        # FlopCounterMode charges a module's backward with everything that runs while it is "active"
        # in backward, which on branches (a ResNet downsample) includes its sibling's work; an op's
        # backward never exceeds twice its forward, so clamp.
        own_bwd = min(own_bwd, 2.0 * own_fwd)
        kind = _kind(torch, module, own_fwd)
        moved = trace.bytes.get(name, 0.0)
        layers.append(Layer(name=name, params=tuple(params), forward_flops=max(own_fwd, 0.0),
                            backward_flops=max(own_bwd, 0.0), forward_bytes=moved,
                            backward_bytes=2.0 * moved + trace.bwd_extra.get(name, 0.0),
                            kernels=max(kernels, 1), kind=kind))
        names.append(name)
    # A module's work runs at its first own kernel or at the first kernel that reads its parameters,
    # whichever comes first: a parent's own work (an attention module's softmax) runs between its
    # children, and MultiheadAttention runs out_proj's matmul itself without calling out_proj.
    # Modules with neither fall back to their first call.
    started = {n: trace.first_work.get(n, trace.called_at.get(n)) for n in names}
    executed = sorted((i for i, n in enumerate(names) if started[n] is not None),
                      key=lambda i: (started[names[i]], i))
    # Modules that never ran still own parameters DDP waits for: put them first in forward, so that
    # without a recorded gradient order their (never produced) gradients are the last marked ready.
    missing = [i for i in range(len(names)) if started[names[i]] is None]
    forward_order = tuple(missing + executed)
    activation = _saved_bytes(trace, layers, elt)
    return Workload(
        name=spec,
        layers=tuple(layers),
        batch_size=batch_size,
        precision=precision,
        seq_len=seq_len,
        activation_bytes=activation,
        buffer_bytes=int(sum(b.numel() * b.element_size() for b in model.buffers())),
        forward_order=forward_order if forward_order != tuple(range(len(names))) else (),
        grad_ready_order=tuple(trace.ready) if backward_ran else (),
        autograd_nodes=trace.autograd_nodes if backward_ran else None,
        autograd_nodes_source="counted by the torch importer (the graph walk of find_unused_parameters)",
        output_bytes=trace.output_bytes if backward_ran else None,
        notes=(name,) + (() if backward_ran else ("backward FLOPs estimated as 2x forward",)),
    )


# What the meta device and fake tensors say when an op needs the data: (text in the error, the op to name)
_DATA_DEPENDENT = (("torch.nonzero", "torch.nonzero (boolean-mask indexing, torch.where(mask))"),
                   ("aten.nonzero", "torch.nonzero (boolean-mask indexing, torch.where(mask))"),
                   ("item() cannot be called on meta", "Tensor.item() (a Python branch or size from a tensor's value)"),
                   ("aten._local_scalar_dense", "Tensor.item() (a Python branch or size from a tensor's value)"),
                   ("masked_select", "torch.masked_select"), ("aten.unique", "torch.unique"),
                   ("aten.repeat_interleave", "torch.repeat_interleave with tensor repeats"))


def data_dependent_op(err: BaseException) -> str:
    """The operation whose output shape (or a Python branch) depends on tensor values, when ``err`` says so; ""
    otherwise. Routing a mixture of experts' tokens by index is the usual case."""
    text = f"{type(err).__name__}: {err}"
    if type(err).__name__ in ("DynamicOutputShapeException", "DataDependentOutputException"):
        return next((op for key, op in _DATA_DEPENDENT if key in text), _first_line(err) or type(err).__name__)
    return next((op for key, op in _DATA_DEPENDENT if key in text), "")


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else ""


def _kind(torch: Any, module: Any, own_fwd: float) -> str:
    nn = torch.nn
    if isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d | nn.ConvTranspose2d):
        # a depthwise convolution (a group per input channel) is memory bound: its own kernel class
        return "depthwise" if module.groups > 1 and module.groups == module.in_channels else "conv"
    # the kernel classes of hardware/kernel_classes.py that a module's type names
    if isinstance(module, nn.Embedding | nn.EmbeddingBag):
        return "embedding"
    norms = tuple(getattr(nn, n) for n in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm",
                                           "RMSNorm", "InstanceNorm2d") if hasattr(nn, n))
    if isinstance(module, norms):
        return "norm"
    if own_fwd <= 0:
        return ""
    if isinstance(module, nn.Linear | nn.Bilinear):
        return "matmul"
    return "attention" if not list(module.parameters(recurse=False)) else "matmul"


def _saved_bytes(trace: _Trace, layers: list[Layer], elt: int) -> float:
    """Rough activation memory: a third of each layer's forward traffic (its input, saved for
    backward) minus the parameters it read."""
    total = 0.0
    for layer in layers:
        total += max(layer.forward_bytes - sum(p.numel for p in layer.params) * elt, 0.0) / 3.0
    return total
