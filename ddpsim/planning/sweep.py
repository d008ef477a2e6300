"""Grids of scenarios: the cartesian product of ``--grid field=v1,v2`` lists, run on local processes or
a Dask cluster, one JSON per point so that an interrupted sweep resumes where it stopped.

Each point's JSON is named after a hash of the *resolved* scenario (the validated dataclasses, SI
units), so ``400Gbps`` and ``50GB/s`` are the same point and a rerun with a different grid still
reuses every point it has already computed.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import importlib
import io
import itertools
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import yaml

from ddpsim.errors import ScenarioError
from ddpsim.loader import apply_overrides, read_scenario_dict, scenario_from_dict
from ddpsim.planning.sweep_results import RESULT_COLUMNS, jsonable
from ddpsim.scenario.schema import Scenario

MAX_POINTS_WITHOUT_CONFIRMATION = 1000
STATUS_OK, STATUS_ERROR, STATUS_INVALID = "ok", "error", "invalid"
DASK_CONNECT_TIMEOUT_S = 5
DASK_NO_WORKERS_S = 30  # with no worker this long, the remaining points fail (reported well within 60 s)
DASK_POLL_S = 1.0
# Bump when the per-point JSON or the simulator changes meaning, so old points are not reused.
# 2: torch model sources in the key; results carry the copy-out and wait parts of the step.
# 3: results are run-result documents of schema_version 2 (resolved scenario, parameter names per bucket).
# 4: run-result 3: workload.optimizer and activation_checkpointing; memory counts the optimizer's states;
#    the network_fold source and a third fabric tier in the resolved scenario.
# 5: run-result 4: workload.memory_format; compute priced per unit (tensor or CUDA cores) with a kernel ramp.
POINT_FORMAT = 5


@dataclass(frozen=True)
class GridAxis:
    """One ``--grid`` field: its dotted name, the values as typed (for --set) and as parsed YAML."""

    field: str
    texts: tuple[str, ...]
    values: tuple[Any, ...]


@dataclass
class SweepPoint:
    """One grid point: its field values, the raw scenario mapping, and (once validated) its hash."""

    index: int
    values: dict[str, Any]
    data: dict[str, Any]
    hash: str = ""
    invalid: str | None = None  # the validation error of this combination, if any
    allow_other_gpu: bool = False  # --allow-other-gpu: its calibration may come from another GPU kind


@dataclass
class PointOutcome:
    point: SweepPoint
    status: str
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    cached: bool = False


@dataclass
class SweepOutcome:
    out: str
    axes: list[GridAxis]
    outcomes: list[PointOutcome]
    scenario: Scenario | None = None  # the base scenario (with --set), before each point's grid values

    @property
    def computed(self) -> int:
        return sum(1 for o in self.outcomes if o.status == STATUS_OK and not o.cached)

    @property
    def reused(self) -> int:
        return sum(1 for o in self.outcomes if o.cached)

    @property
    def failed(self) -> int:
        return sum(1 for o in self.outcomes if o.status != STATUS_OK)

    def to_dict(self) -> dict[str, Any]:
        """The ``sweep`` document (ddpsim/schemas/sweep.schema.json): every point's grid values, status and
        metrics; each ok point's whole result is points/<point>.json."""
        from ddpsim.schemas import document

        return document("sweep", {
            "out": self.out,
            "axes": [{"field": a.field, "values": [jsonable(v) for v in a.values]} for a in self.axes],
            "counts": {"points": len(self.outcomes), "simulated": self.computed, "reused": self.reused,
                       "failed": self.failed},
            "points": [{"index": o.point.index, "grid": {k: jsonable(v) for k, v in o.point.values.items()},
                        "status": o.status, "error": o.error, "cached": o.cached, "point": o.point.hash,
                        "metrics": {name: o.metrics.get(name) for name in RESULT_COLUMNS} if o.metrics else {}}
                       for o in self.outcomes],
        }, self.scenario)


def parse_grid(specs: Sequence[str], file: str = "--grid") -> list[GridAxis]:
    """``["ddp.bucket_cap_mb=1,5,25"]`` -> axes; values are YAML scalars split on commas."""
    if not specs:
        raise ScenarioError("a sweep needs at least one --grid FIELD=V1,V2,...", file=file, field="--grid")
    axes: list[GridAxis] = []
    for spec in specs:
        if "=" not in spec:
            raise ScenarioError(f"--grid expects FIELD=V1,V2,..., got {spec!r}", file=file, field="--grid")
        name, text = (part.strip() for part in spec.split("=", 1))
        texts = tuple(t.strip() for t in text.split(",")) if text.strip() else ()
        if not name:
            raise ScenarioError(f"--grid has no field name in {spec!r}", file=file, field="--grid")
        if not texts or any(not t for t in texts):
            raise ScenarioError("--grid value list is empty (or has an empty value)", file=file, field=name)
        if any(a.field == name for a in axes):
            raise ScenarioError("given twice in --grid; put all its values in one list", file=file, field=name)
        if len(set(texts)) != len(texts):
            raise ScenarioError("--grid lists a value twice", file=file, field=name)
        axes.append(GridAxis(name, texts, tuple(_yaml_scalar(t) for t in texts)))
    return axes


def _yaml_scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def point_count(axes: Sequence[GridAxis]) -> int:
    return math.prod(len(a.values) for a in axes)


def expand_grid(base: dict[str, Any], axes: Sequence[GridAxis], file: str) -> list[SweepPoint]:
    """The cartesian product of the axes (the last axis varies fastest), each applied to ``base``."""
    points = []
    for index, combo in enumerate(itertools.product(*(range(len(a.values)) for a in axes))):
        overrides = [f"{a.field}={a.texts[i]}" for a, i in zip(axes, combo, strict=True)]
        values = {a.field: a.values[i] for a, i in zip(axes, combo, strict=True)}
        points.append(SweepPoint(index, values, apply_overrides(base, overrides, file)))
    return points


def _is_unknown_field(exc: ScenarioError, grid_field: str) -> bool:
    """A wrong field name (as opposed to a bad value) is an error of the whole sweep, not of one point."""
    where = exc.field or ""
    names_it = where == grid_field or grid_field.startswith(where + ".") or where.startswith(grid_field + ".")
    structural = exc.detail.startswith(("unknown", "expected a mapping")) or "is not a section" in exc.detail
    return bool(where) and names_it and structural


def _file_digest(path: str | None, base_dir: str) -> str | None:
    """Content hash of a file the scenario points to: editing it must not reuse old points."""
    if not path:
        return None
    full = path if os.path.isabs(path) else os.path.join(base_dir, path)
    try:
        with open(full, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None  # the point will fail on its own with a clear message


def module_source_path(module_name: str, base_dir: str) -> str | None:
    """The file ``import module_name`` would load, found the way resolve.py imports it (the scenario's
    folder first, then sys.path) without importing anything: a sweep must not run user code to name
    a point."""
    parts = module_name.strip().split(".")
    if not all(part.isidentifier() for part in parts):
        return None
    for folder in [os.path.abspath(base_dir), *sys.path]:
        for candidate in (os.path.join(folder, *parts) + ".py", os.path.join(folder, *parts, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate
    return None


def _torch_source_digest(model: str, base_dir: str) -> str | None:
    """``torch:package.module:factory``: the content of the module's file, so editing it re-simulates."""
    module_name = model.split(":", 2)[1] if model.count(":") >= 2 else ""
    path = module_source_path(module_name, base_dir) if module_name else None
    return _file_digest(path, base_dir) if path else None


def scenario_hash(scenario: Scenario) -> str:
    """A stable name for the resolved scenario: validated values, not how they were spelled."""
    resolved = dataclasses.asdict(scenario)
    resolved.pop("source", None)  # moving or renaming the YAML file must not invalidate points
    resolved.pop("calibration", None)  # the value's content digest stands for it below
    resolved.pop("defaulted_fields", None)  # how the values were spelled, not what they are
    model = scenario.workload.model
    inputs = {
        "calibration": scenario.calibration.digest if scenario.calibration is not None else None,
        # only when allowed, so that adding it kept every other point's key: a point refused without it is redone
        **({"other_gpu_allowed": True} if scenario.calibration is not None and scenario.calibration.other_gpu_allowed
           else {}),
        "profile": _file_digest(model.split(":", 1)[1].strip(), scenario.base_dir) if model.startswith("profile:") else None,
        "torch_source": _torch_source_digest(model, scenario.base_dir) if model.startswith("torch:") else None,
        # only for hf: models, so that adding it kept every other point's key
        **({"hf_config": _file_digest(model.split(":", 1)[1].strip(), scenario.base_dir)} if model.startswith("hf:") else {}),
    }
    if model.startswith("trace:"):  # its measured times are its content, as a profile's (a key only here: others' hashes stay)
        inputs["trace"] = _file_digest(model.split(":", 1)[1].strip().removesuffix("@cpu").strip(), scenario.base_dir)
    text = json.dumps({"format": POINT_FORMAT, "scenario": resolved, "inputs": inputs}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


# how the loader words a value of the wrong kind for its field, whatever the rest of the scenario holds
_WRONG_KIND = ("expected one of", "expected an integer", "expected a number", "expected true or false",
               "expected a finite number")


def validate_points(points: Sequence[SweepPoint], axes: Sequence[GridAxis], file: str, base_dir: str,
                    allow_other_gpu: bool = False) -> None:
    """Build every point's Scenario; unknown grid fields and values of the wrong kind (a choice that is not
    one, text for a number) raise, values out of range mark just their points."""
    for point in points:
        point.allow_other_gpu = allow_other_gpu
        try:
            scenario = scenario_from_dict(point.data, file=file, base_dir=base_dir, allow_other_gpu=allow_other_gpu)
        except ScenarioError as exc:
            for axis in axes:
                if _is_unknown_field(exc, axis.field):
                    raise ScenarioError(f"--grid {exc.detail}", file=exc.file, field=exc.field) from None
                if exc.field == axis.field and exc.detail.startswith(_WRONG_KIND):
                    # wrong in every point, whatever the other axes say (a typo): nothing to simulate
                    value = next(t for t, v in zip(axis.texts, axis.values, strict=True)
                                 if v is point.values[axis.field])  # the very object: 1 == True, nan != nan
                    raise ScenarioError(f"--grid value {value!r}: {exc.detail}", file=exc.file,
                                        field=exc.field) from None
            point.invalid = str(exc)
            point.hash = "invalid-" + hashlib.sha256(
                json.dumps(point.data, sort_keys=True, default=str).encode()
            ).hexdigest()[:12]
            continue
        point.hash = scenario_hash(scenario)


def metrics_of(result_dict: dict[str, Any]) -> dict[str, Any]:
    return {name: result_dict.get(name) for name in RESULT_COLUMNS}


def run_point(task: tuple[dict[str, Any], str, str, bool]) -> dict[str, Any]:
    """Simulate one point (in a worker process, a Dask worker or inline); never raises.

    Returns plain data only, so it pickles cheaply across processes and machines.
    """
    data, file, base_dir, allow_other_gpu = task
    try:
        scenario = scenario_from_dict(data, file=file, base_dir=base_dir, allow_other_gpu=allow_other_gpu)
        # looked up at call time so tests can monkeypatch ddpsim.simulation.simulate
        simulate = importlib.import_module("ddpsim.simulation").simulate
        result = simulate(scenario)
        return {"status": STATUS_OK, "result": result.to_dict()}
    except Exception as exc:  # noqa: BLE001 - a failing point is recorded and the sweep goes on
        message = str(exc).splitlines()[0] if str(exc) else ""
        return {"status": STATUS_ERROR, "error": f"{type(exc).__name__}: {message}"}


class Progress:
    """A plain-text progress bar on stderr (no tqdm): redrawn in place on a terminal, one line per
    tenth otherwise, so logs of batch jobs stay short."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 30) -> None:
        self.total, self.width = total, width
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.done = self.failed = 0
        self.start = time.perf_counter()
        self._last_decile = -1

    def update(self, failed: bool = False) -> None:
        self.done += 1
        self.failed += int(failed)
        decile = 10 * self.done // max(self.total, 1)
        if self.tty or decile != self._last_decile or self.done == self.total:
            self._last_decile = decile
            self._draw()

    def _draw(self) -> None:
        filled = self.width * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self.start
        failed = f", {self.failed} failed" if self.failed else ""
        line = f"[{bar}] {self.done}/{self.total} points{failed}, {elapsed:.1f} s"
        end = "" if self.tty and self.done < self.total else "\n"
        self.stream.write(("\r" if self.tty else "") + line + end)
        self.stream.flush()


def _point_path(out: str, point_hash: str) -> str:
    return os.path.join(out, "points", f"{point_hash}.json")


def _load_cached(out: str, point: SweepPoint) -> dict[str, Any] | None:
    """A previous run's successful result for this resolved scenario, if any (failures are retried)."""
    path = _point_path(out, point.hash)
    try:
        with open(path, encoding="utf-8") as handle:
            stored = json.load(handle)
    except (OSError, ValueError):
        return None
    if stored.get("status") != STATUS_OK or stored.get("format") != POINT_FORMAT:
        return None
    return stored


def _save_point(out: str, point: SweepPoint, raw: dict[str, Any]) -> None:
    from ddpsim.outdir import atomic_write_text
    from ddpsim.schemas import document

    record = document("sweep-point", {
        "format": POINT_FORMAT,
        "hash": point.hash,
        "grid": point.values,
        "status": raw["status"],
        "error": raw.get("error", ""),
        "result": raw.get("result"),
        "scenario": point.data,
    })
    atomic_write_text(_point_path(out, point.hash), json.dumps(record, indent=1, default=str))


Runner = Callable[[list[SweepPoint], Callable[[SweepPoint, dict[str, Any]], None]], None]


def _task(point: SweepPoint, file: str, base_dir: str) -> tuple[dict[str, Any], str, str, bool]:
    return (point.data, file, base_dir, point.allow_other_gpu)


def _run_inline(points: list[SweepPoint], file: str, base_dir: str, done: Callable[..., None]) -> None:
    for point in points:
        done(point, run_point(_task(point, file, base_dir)))


def _die_with_parent() -> None:
    """Worker initializer: a worker never outlives the sweep that started it, and leaves Ctrl-C to it.

    Linux's parent-death signal covers ``kill -9`` of the sweep; the watchdog thread covers systems
    without it. SIGINT is ignored because the sweep itself stops the workers (a terminal sends Ctrl-C
    to the whole process group, and a worker's KeyboardInterrupt would only print a traceback).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the CLI turns SIGTERM into KeyboardInterrupt, and a forked worker inherits that: undo it, so a
    # worker told to stop stops at once instead of unwinding a simulation
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    def watchdog() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watchdog, name="ddpsim-parent-watchdog", daemon=True).start()


def _run_processes(points: list[SweepPoint], file: str, base_dir: str, workers: int, done: Callable[..., None]) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_die_with_parent)
    try:
        futures = {pool.submit(run_point, _task(p, file, base_dir)): p for p in points}
        for future in as_completed(futures):
            try:
                raw = future.result()
            except Exception as exc:  # noqa: BLE001 - e.g. a worker killed by the OOM killer
                raw = {"status": STATUS_ERROR, "error": f"{type(exc).__name__}: {exc}"}
            done(futures[future], raw)
    except BaseException:
        # Ctrl-C: stop now. Finished points are saved for the resume; a point in progress is lost, and
        # waiting for it (shutdown's default) could take as long as one simulation.
        pool.shutdown(wait=False, cancel_futures=True)
        workers_started = [p for p in multiprocessing.active_children() if p not in before]
        for process in workers_started:
            process.kill()  # a worker holds nothing to clean up: its point is saved by us, or not at all
        for process in workers_started:
            process.join(timeout=1.0)
        raise
    pool.shutdown()


def connect_dask(address: str) -> Any:
    """A ``distributed.Client`` for ``address``; an unreachable scheduler is a one-line user error."""
    try:
        from distributed import Client
    except ImportError:
        raise ScenarioError("--dask needs dask[distributed]: pip install 'ddpsim[dask]'", field="--dask") from None
    try:
        return Client(address, timeout=f"{DASK_CONNECT_TIMEOUT_S}s")
    except Exception as exc:  # noqa: BLE001 - OSError, TimeoutError, ValueError for a bad address ...
        if isinstance(exc, OSError | TimeoutError | ValueError):
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        else:  # something answered but did not speak Dask's protocol (a proxy, another service)
            detail = f"no Dask scheduler answered: {type(exc).__name__}"
        raise ScenarioError(
            f"cannot reach the Dask scheduler at {address} within {DASK_CONNECT_TIMEOUT_S} s ({detail})",
            field="--dask",
        ) from None


def _dask_worker_count(client: Any) -> int | None:
    try:
        return len(client.scheduler_info().get("workers", {}))
    except Exception:  # noqa: BLE001 - the scheduler itself is gone: the futures will say so
        return None


def _run_dask(
    points: list[SweepPoint],
    file: str,
    base_dir: str,
    client: Any,
    done: Callable[..., None],
    warn: TextIO | None = None,
    no_workers_s: float = DASK_NO_WORKERS_S,
) -> None:
    """Run the points on Dask. Dask itself waits forever for workers to come back; a sweep instead
    reports each lost worker at once and fails the remaining points after ``no_workers_s`` with none."""
    from distributed import wait

    stream = warn if warn is not None else sys.stderr
    # pure=False: two points never share a Dask key, even if the scheduler has seen the data before
    futures = client.map(run_point, [_task(p, file, base_dir) for p in points], pure=False)
    by_key = {f.key: p for f, p in zip(futures, points, strict=True)}
    pending = set(futures)
    known_workers = _dask_worker_count(client) or 0
    no_workers_since: float | None = None
    try:
        while pending:
            try:
                finished = wait(list(pending), timeout=DASK_POLL_S, return_when="FIRST_COMPLETED").done
            except TimeoutError:  # nothing finished in this poll: Dask's wait raises rather than returns
                finished = {f for f in pending if f.done()}
            except Exception as exc:  # noqa: BLE001 - the scheduler is gone: Dask cancels every future
                message = f"the Dask scheduler was lost ({type(exc).__name__}); the point was not simulated"
                stream.write(f"warning: lost the Dask scheduler; {len(pending)} point(s) not simulated\n")
                stream.flush()
                for future in list(pending):
                    done(by_key[future.key], {"status": STATUS_ERROR, "error": message})
                pending.clear()
                break
            for future in finished:
                pending.discard(future)
                try:
                    raw = future.result()
                except Exception as exc:  # noqa: BLE001 - a lost worker fails only its own points
                    raw = {"status": STATUS_ERROR, "error": f"{type(exc).__name__}: {exc}"}
                done(by_key[future.key], raw)
            count = _dask_worker_count(client)
            if count is not None and count < known_workers:
                stream.write(f"warning: Dask lost {known_workers - count} worker(s); {count} left\n")
                stream.flush()
            if count is not None:
                known_workers = count
            if not pending or (count is not None and count > 0):
                no_workers_since = None
                continue
            # no worker, or no answer from the scheduler (count None): either way nothing runs the points
            no_workers_since = no_workers_since or time.monotonic()
            if time.monotonic() - no_workers_since >= no_workers_s:
                message = (f"no Dask worker for {no_workers_s:.0f} s" if count is not None else
                           f"no answer from the Dask scheduler for {no_workers_s:.0f} s") + "; the point was not simulated"
                for future in list(pending):
                    done(by_key[future.key], {"status": STATUS_ERROR, "error": message})
                client.cancel(list(pending))
                pending.clear()
    except BaseException:
        client.cancel(futures)
        raise


def _check_names(scenario: Scenario) -> None:
    """A GPU or zoo model that does not exist is a mistake of the whole sweep (exit 2), not one failed
    point per grid value: look both up once, cheaply, before anything runs (torch models and profiles
    are read by the points themselves)."""
    from ddpsim.hardware.catalog import get_gpu
    from ddpsim.workload.resolve import HF_PREFIX, PROFILE_PREFIX, TORCH_PREFIX, TRACE_PREFIX
    from ddpsim.workload.zoo import resolve_zoo_name

    try:
        get_gpu(scenario.cluster.gpu)
        if not scenario.workload.model.startswith((TORCH_PREFIX, PROFILE_PREFIX, TRACE_PREFIX, HF_PREFIX)):
            resolve_zoo_name(scenario.workload.model)
    except ScenarioError as exc:
        raise ScenarioError(exc.detail, file=exc.file or scenario.source, field=exc.field) from None


def prepare_sweep(
    scenario_path: str, grid_specs: Sequence[str], overrides: Iterable[str] = (), yes: bool = False,
    allow_other_gpu: bool = False,
) -> tuple[list[GridAxis], list[SweepPoint], str, str, Scenario]:
    """Parse and validate everything a sweep needs before any file is written."""
    axes = parse_grid(grid_specs, scenario_path)
    base = apply_overrides(read_scenario_dict(scenario_path), overrides, scenario_path)
    base_dir = os.path.dirname(os.path.abspath(scenario_path))
    base_scenario = scenario_from_dict(base, file=scenario_path, base_dir=base_dir, allow_other_gpu=allow_other_gpu)
    _check_names(base_scenario)  # the base must be valid
    count = point_count(axes)
    if count > MAX_POINTS_WITHOUT_CONFIRMATION and not yes:
        raise ScenarioError(
            f"the grid has {count} points (more than {MAX_POINTS_WITHOUT_CONFIRMATION}); pass --yes to run them",
            file=scenario_path,
            field="--grid",
        )
    points = expand_grid(base, axes, scenario_path)
    validate_points(points, axes, scenario_path, base_dir, allow_other_gpu)
    return axes, points, scenario_path, base_dir, base_scenario


def run_sweep(
    scenario_path: str,
    grid_specs: Sequence[str],
    out: str,
    overrides: Iterable[str] = (),
    workers: int | None = None,
    dask_address: str | None = None,
    yes: bool = False,
    progress: TextIO | None = None,
    allow_other_gpu: bool = False,
) -> SweepOutcome:
    """Run (or resume) a sweep into ``out``: points/<hash>.json as they finish, then sweep.csv and
    report.md at the end. Raises ScenarioError before writing anything if the inputs are wrong."""
    axes, points, file, base_dir, base = prepare_sweep(scenario_path, grid_specs, overrides, yes, allow_other_gpu)
    from ddpsim.outdir import check_out_path, removed_if_left_empty

    check_out_path(out)
    if dask_address:
        _quiet_dask_logs()
    client = connect_dask(dask_address) if dask_address else None
    try:
        # a sweep that fails before its first point is saved leaves no empty folders behind
        with removed_if_left_empty(out, os.path.join(out, "points")):
            return _execute(axes, points, file, base_dir, out, workers, client, progress, base)
    finally:
        if client is not None:
            client.close(timeout=DASK_CONNECT_TIMEOUT_S)


def _quiet_dask_logs() -> None:
    """distributed logs a lost scheduler or worker as ERROR with tracebacks (dozens of lines, some from its
    reconnecting thread after the client is closed); the sweep says it in one line of its own, so the
    client's logs below CRITICAL are held back for the rest of the process."""
    for name in ("distributed", "distributed.client", "distributed.core", "distributed.comm", "distributed.utils",
                 "distributed.batched"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _execute(
    axes: list[GridAxis],
    points: list[SweepPoint],
    file: str,
    base_dir: str,
    out: str,
    workers: int | None,
    client: Any,
    progress_stream: TextIO | None,
    base: Scenario | None = None,
) -> SweepOutcome:
    outcomes: dict[int, PointOutcome] = {}
    todo: list[SweepPoint] = []
    seen: dict[str, SweepPoint] = {}
    duplicates: list[SweepPoint] = []  # two spellings of one resolved scenario: simulate it once
    for point in points:
        if point.invalid is not None:
            outcomes[point.index] = PointOutcome(point, STATUS_INVALID, error=point.invalid)
            continue
        cached = _load_cached(out, point)
        if cached is not None:
            outcomes[point.index] = PointOutcome(point, STATUS_OK, metrics_of(cached["result"]), cached=True)
        elif point.hash in seen:
            duplicates.append(point)
        else:
            seen[point.hash] = point
            todo.append(point)

    bar = Progress(len(points), progress_stream)
    for outcome in outcomes.values():
        bar.update(failed=outcome.status != STATUS_OK)

    def done(point: SweepPoint, raw: dict[str, Any]) -> None:
        if raw["status"] == STATUS_OK:
            outcomes[point.index] = PointOutcome(point, STATUS_OK, metrics_of(raw["result"]))
        else:
            outcomes[point.index] = PointOutcome(point, STATUS_ERROR, error=raw.get("error", "unknown error"))
        _save_point(out, point, raw)
        bar.update(failed=raw["status"] != STATUS_OK)

    n_workers = max(1, min(workers or os.cpu_count() or 1, len(todo) or 1))
    if client is not None and todo:
        _run_dask(todo, file, base_dir, client, done, progress_stream)
    elif n_workers == 1 or len(todo) <= 1:
        _run_inline(todo, file, base_dir, done)  # no pool start-up for one point or one worker
    else:
        _run_processes(todo, file, base_dir, n_workers, done)

    for point in duplicates:
        twin = outcomes[seen[point.hash].index]
        outcomes[point.index] = dataclasses.replace(twin, point=point, cached=True)
        bar.update(failed=twin.status != STATUS_OK)

    ordered = [outcomes[p.index] for p in points]
    summary = SweepOutcome(out, list(axes), ordered, base)
    write_summary(summary)
    return summary


def csv_text(outcome: SweepOutcome) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([a.field for a in outcome.axes] + list(RESULT_COLUMNS) + ["status", "error", "point"])
    for o in outcome.outcomes:
        grid = [_cell(o.point.values[a.field]) for a in outcome.axes]
        metrics = [_cell(o.metrics.get(name)) for name in RESULT_COLUMNS]
        writer.writerow(grid + metrics + [o.status, o.error, o.point.hash])
    return buffer.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def write_summary(outcome: SweepOutcome) -> None:
    """sweep.csv, sweep.json (and sweep.parquet with pyarrow), report.md, report.html and the figures, all
    moved into ``out`` together at the end."""
    from ddpsim.outdir import atomic_dir
    from ddpsim.planning.sweep_results import write_sweep_data
    from ddpsim.report.html import report_html
    from ddpsim.schemas import ddpsim_version

    with atomic_dir(outcome.out) as staging:
        with open(os.path.join(staging, "sweep.csv"), "w", encoding="utf-8") as handle:
            handle.write(csv_text(outcome))
        data_files = write_sweep_data(outcome.to_dict(), staging)
        figures = _figures(outcome, staging)
        with open(os.path.join(staging, "report.md"), "w", encoding="utf-8") as handle:
            handle.write(report_markdown(outcome, figures, data_files))
        page = report_html("ddpsim sweep", [_overview(outcome, data_files)], points_table(outcome),
                           [(os.path.join(staging, name), title) for name, title in figures],
                           meta=f"ddpsim {ddpsim_version()}; scenario {outcome.scenario.source if outcome.scenario else '?'}")
        with open(os.path.join(staging, "report.html"), "w", encoding="utf-8") as handle:
            handle.write(page)


_MAX_SERIES = 12
_MAX_BARS = 60


def _numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _figures(outcome: SweepOutcome, folder: str) -> list[tuple[str, str]]:
    from ddpsim.report.plots import line_plot, stacked_breakdown

    ok = [o for o in outcome.outcomes if o.status == STATUS_OK]
    if not ok:
        return []
    first, others = outcome.axes[0], outcome.axes[1:]
    numeric = _numeric(first.values)
    # categorical x values (algorithm names, "default") are plotted at their string labels
    xs: list[Any] = [float(v) for v in first.values] if numeric else [str(v) for v in first.values]
    series: dict[str, list[float]] = {}
    for o in outcome.outcomes:
        label = ", ".join(f"{a.field}={o.point.values[a.field]}" for a in others) or "step time"
        if label not in series and len(series) >= _MAX_SERIES:
            continue
        ys = series.setdefault(label, [math.nan] * len(first.values))
        position = first.values.index(o.point.values[first.field])
        if o.status == STATUS_OK and o.metrics.get("step_time_s") is not None:
            ys[position] = float(o.metrics["step_time_s"]) * 1e3
    positive = numeric and min(xs) > 0
    logx = bool(positive and max(xs) / min(xs) >= 50)
    figures = []
    values = [y for ys in series.values() for y in ys if not math.isnan(y)]
    spread = f" (max/min {100 * (max(values) / min(values) - 1):.1f}% apart)" if values and min(values) > 0 else ""
    line_plot(
        os.path.join(folder, "step_time.png"), xs, series, first.field, "step time (ms)",
        f"step time vs {first.field}{spread}", logx=logx, y_from_zero=True,
    )
    figures.append(("step_time.png", f"Step time vs {first.field}"))
    shown = ok[:_MAX_BARS]
    # the last part of each field name keeps bar labels short but unambiguous ("nodes=2")
    labels = [", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in o.point.values.items()) for o in shown]
    parts = {name: [float(o.metrics.get(key) or 0.0) for o in shown] for name, key in _BREAKDOWN}
    parts["other"] = [
        max(0.0, float(o.metrics["step_time_s"]) - sum(parts[n][i] for n, _ in _BREAKDOWN)) for i, o in enumerate(shown)
    ]
    stacked_breakdown(os.path.join(folder, "breakdown.png"), labels, parts, "where the step time goes")
    figures.append(("breakdown.png", "Step time breakdown" + (f" (first {_MAX_BARS} points)" if len(ok) > _MAX_BARS else "")))
    return figures


_BREAKDOWN = (
    ("forward", "forward_s"),
    ("backward", "backward_s"),
    ("exposed communication", "exposed_comm_s"),
    ("optimizer", "optimizer_s"),
)


def _overview(outcome: SweepOutcome, data_files: Sequence[str] = ("sweep.json",)) -> str:
    return (f"{len(outcome.outcomes)} points over " + ", ".join(a.field for a in outcome.axes)
            + f"; {outcome.failed} failed. Raw numbers: sweep.csv, " + ", ".join(data_files)
            + "; one result per point in points/.")


def points_table(outcome: SweepOutcome) -> str:
    """Every point in a markdown table: its grid values, step time, exposed comm, throughput, memory, status."""
    from ddpsim.report.tables import table
    from ddpsim.units import format_time

    headers = [a.field for a in outcome.axes] + ["step time", "exposed comm", "samples/s", "memory", "status"]
    rows = []
    for o in outcome.outcomes:
        m = o.metrics
        ok = o.status == STATUS_OK
        rows.append(
            [_cell(o.point.values[a.field]) for a in outcome.axes]
            + [
                format_time(m["step_time_s"]) if ok else "-",
                format_time(m["exposed_comm_s"]) if ok else "-",
                f"{m['samples_per_s']:,.0f}" if ok else "-",
                ("fits" if m.get("fits_in_memory") else "DOES NOT FIT") if ok else "-",
                o.status if ok else f"{o.status}: {o.error}".replace("|", "/"),
            ]
        )
    return table(headers, rows, markdown=True)


def report_markdown(outcome: SweepOutcome, figures: Sequence[tuple[str, str]],
                    data_files: Sequence[str] = ("sweep.json",)) -> str:
    lines = ["# ddpsim sweep", "", _overview(outcome, data_files), "", points_table(outcome), ""]
    lines += [f"![{title}]({name})\n" for name, title in figures]
    return "\n".join(lines)
