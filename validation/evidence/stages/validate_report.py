"""A ``validate`` stage: one validation (held out against a committed calibration, or cross-validated with
calibrations fitted on the other parts) written as the report ``ddpsim validate --out`` writes, so the committed
``validation/reports/<stage>/validation.md`` and a rerun can be compared byte for byte."""

from __future__ import annotations

from typing import Any

from ddpsim.calibration.file import read_calibration
from ddpsim.fitting.validate import Validation, cross_validate, validate
from validation.evidence.stages import across_gpus

# the library's fit options a stage may set (each was a research switch of `ddpsim validate`; the CLI may drop
# the switch, the evidence keeps measuring it through the library parameter)
FIT_OPTIONS = ("fix_measured_stretch", "idle_start_wait", "prune_undetermined", "comm_terms_fitted_models_only",
               "jitter_from_profile", "normalise_launches")


def run_validation(spec: dict[str, Any], jobs: int = 1) -> Validation:
    options = spec.get("options", {})
    unknown = sorted(set(options) - set(FIT_OPTIONS))
    if unknown:
        raise ValueError(f"manifest stage options: unknown {', '.join(unknown)}")
    data = spec["data"]
    if spec.get("cross"):
        caps = spec.get("calibration_caps", [5.0, 50.0])
        return cross_validate(data, spec["cross"], None if caps == "all" else [float(c) for c in caps],
                              jobs=jobs, **options)
    calibration = across_gpus(read_calibration(spec["calibration"])) if spec.get("calibration") else None
    return validate(data, calibration, **options)


def report_text(v: Validation) -> str:
    # the report's layout is the CLI's (``ddpsim validate --out DIR`` writes DIR/validation.md the same way)
    from ddpsim.cli.validation_report import validation_text

    return "# ddpsim validation\n\n" + validation_text(v, markdown=True) + "\n"


def run(spec: dict[str, Any], jobs: int = 1) -> str:
    return report_text(run_validation(spec, jobs))
