"""Run the pipeline's stages: each writes its committed output file (the file the figures read)."""

from __future__ import annotations

import importlib
import os
from typing import Any

from validation.evidence.figures import FigureError


def stage_text(name: str, spec: dict[str, Any], jobs: int = 1) -> str:
    """The stage's output, computed now (run from the repository root: reports name their data by path)."""
    if spec["kind"] == "validate":
        from validation.evidence.stages.validate_report import run

        return run(spec, jobs)
    if spec["kind"] == "function":
        module, _, function = spec["function"].partition(":")
        return str(getattr(importlib.import_module(module), function)())
    raise FigureError(f"manifest: stage {name}: unknown kind {spec['kind']!r}")


def run_stage(root: str, name: str, spec: dict[str, Any], jobs: int = 1) -> str:
    text = stage_text(name, spec, jobs)
    path = os.path.join(root, spec["output"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(path + ".tmp", path)
    return path
