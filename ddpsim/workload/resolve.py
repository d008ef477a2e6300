"""Turn the scenario's ``workload`` section into a Workload, whatever its source."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import replace

from ddpsim.errors import ScenarioError
from ddpsim.scenario.schema import WorkloadSpec
from ddpsim.workload.model import Workload
from ddpsim.workload.profile import load_profile
from ddpsim.workload.zoo import ZOO_NAMES, zoo_workload

TORCH_PREFIX = "torch:"
PROFILE_PREFIX = "profile:"
TRACE_PREFIX = "trace:"
CPU_TIMES = "@cpu"  # trace:PATH@cpu: a trace without GPU kernels, timed by its CPU ops (host time)
HF_PREFIX = "hf:"


def load_workload(spec: WorkloadSpec, base_dir: str) -> Workload:
    """A zoo name, ``torch:package.module:factory``, ``hf:CONFIG`` (a Hugging Face config or model class,
    config.json or cached hub name), ``profile:path.json`` or ``trace:path.json`` (a torch.profiler trace;
    paths relative to ``base_dir``, the scenario's folder). A profile or trace must match the scenario's
    batch size and precision, since its measured times hold only for those."""
    model = spec.model.strip()
    if model.startswith(HF_PREFIX):
        from ddpsim.workload.torch_import import import_hf_model

        return import_hf_model(model[len(HF_PREFIX):].strip(), spec.batch_size, spec.precision, spec.seq_len, base_dir,
                               _optimizer_of(spec), _checkpoint_every(spec))
    if model.startswith(PROFILE_PREFIX):
        return _load_profile(spec, model[len(PROFILE_PREFIX):].strip(), base_dir)
    if model.startswith(TRACE_PREFIX):
        from ddpsim.workload.trace import load_trace

        relative = model[len(TRACE_PREFIX):].strip()
        cpu_times = relative.endswith(CPU_TIMES)
        relative = relative.removesuffix(CPU_TIMES).strip()
        return _load_profile(spec, relative, base_dir, lambda path: load_trace(path, cpu_times), "trace")
    if model.startswith(TORCH_PREFIX):
        from ddpsim.workload.torch_import import import_torch_model

        # The factory's module may live beside the scenario file: let it be imported from there.
        folder = os.path.abspath(base_dir)
        added = folder not in sys.path
        if added:
            sys.path.insert(0, folder)
        try:
            return import_torch_model(model[len(TORCH_PREFIX):].strip(), spec.batch_size, spec.precision,
                                      spec.seq_len, _optimizer_of(spec), _checkpoint_every(spec))
        finally:
            if added:
                sys.path.remove(folder)
    return zoo_workload(model, spec.batch_size, spec.precision, spec.seq_len)


def _optimizer_of(spec: WorkloadSpec) -> str:
    """The optimizer a torch: model's step is estimated with: the scenario's, auto as hardware.compute reads
    it (AdamW for a sequence model, SGD with momentum otherwise)."""
    if spec.optimizer != "auto":
        return spec.optimizer
    return "adamw" if spec.seq_len is not None else "sgd_momentum"


def _checkpoint_every(spec: WorkloadSpec) -> int:
    """The k of workload.activation_checkpointing (0: none), for the tracker to run the checkpointed step too."""
    from ddpsim.sharded.checkpointing import checkpoint_every

    return checkpoint_every(spec.activation_checkpointing)


def _load_profile(spec: WorkloadSpec, relative: str, base_dir: str,
                  loader: Callable[[str], Workload] = load_profile, what: str = "profile") -> Workload:
    if not relative:
        raise ScenarioError(f"expected '{what}:path/to/{what}.json'", field="workload.model")
    path = relative if os.path.isabs(relative) else os.path.join(base_dir, relative)
    if not os.path.exists(path):
        raise ScenarioError(f"{what} file {path!r} not found (relative paths start at the scenario's folder)",
                            field="workload.model")
    workload = loader(path)
    for field_name, wanted, measured in (
        ("batch_size", spec.batch_size, workload.batch_size),
        ("precision", spec.precision, workload.precision),
    ):
        if wanted != measured:
            raise ScenarioError(
                f"the {what} was measured with {field_name} {measured!r}, the scenario asks for {wanted!r}; "
                "measured times hold only for the measured setting",
                field=f"workload.{field_name}",
            )
    if spec.seq_len is not None and workload.seq_len is not None and spec.seq_len != workload.seq_len:
        raise ScenarioError(f"the {what} was measured with seq_len {workload.seq_len}, the scenario asks "
                            f"for {spec.seq_len}", field="workload.seq_len")
    # A profile has no activation estimate; a zoo model of the same name provides one (memory report).
    if workload.name in ZOO_NAMES and workload.activation_bytes == 0.0:
        zoo = zoo_workload(workload.name, workload.batch_size, workload.precision, workload.seq_len)
        workload = replace(workload, activation_bytes=zoo.activation_bytes,
                           activation_bytes_by_layer=zoo.activation_bytes_by_layer,
                           transient_bytes=zoo.transient_bytes,
                           activation_source=f"the zoo's count for {workload.name} (the {what} has no memory record)")
    return workload


# the harness's built-in models (ddpsim/measure/models.py) that the torch importer can build again by name
_HARNESS_FACTORIES = {"resnet50": "resnet50", "gpt2-124m": "gpt2_124m", "mlp-heavy": "mlp_heavy",
                      "mlp-ln-64": "mlp_ln_64", "mlp-wide": "mlp_wide", "bert-large": "bert_large",
                      "llama-1b": "ddpsim.measure.llama:llama_1b"}


def class_estimate(workload: Workload) -> tuple[Workload | None, str]:
    """The same model's FLOPs, bytes and kernels per layer, for splitting a measured profile by kernel
    class: (estimate or None, where it came from or why there is none). The harness built-in or
    ``module:factory`` the profile names, through the torch importer (the real graph, as the fit of
    ``hardware/data/compute_classes.json`` saw it), else a zoo model of the profile's name (no torch needed)."""
    name = workload.name.split("@")[0]
    seq = workload.seq_len
    source = workload.model_source
    factory = _HARNESS_FACTORIES.get(name) if source in ("builtin", "") else None
    if factory is not None and ":" not in factory:
        factory = f"ddpsim.measure.models:{factory}"
    elif factory is None and source and ":" in source and not source.startswith(("hf:", "/")):
        factory = source
    why = f"no zoo model or importable factory named {workload.name!r} (model_source {source or 'absent'!r})"
    if factory is not None:
        try:
            from ddpsim.workload.torch_import import import_torch_model

            return (import_torch_model(factory, workload.batch_size, workload.precision, seq),
                    f"torch importer on {factory}")
        except ScenarioError as err:
            why = f"the torch importer could not build {factory}: {err.detail}"
    if name in ZOO_NAMES:
        return zoo_workload(name, workload.batch_size, workload.precision, seq), f"zoo model {name}"
    return None, why
