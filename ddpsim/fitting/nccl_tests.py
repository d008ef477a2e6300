"""nccl-tests output as calibration input: the text every ``*_perf`` binary prints, and its ``-J`` JSON report.

What a file says about itself is read before any row is used: the binary that ran (``# Collective test
starting: all_gather_perf``, the JSON's ``args[0]``, the harness's own header), whether the time column is
CPU time (``-C 1``: the column is named ``cputime``, the JSON key ``cpu_time``), the data types and
reductions of its rows (``-d all`` and ``-o all`` put several sweeps in one file), aggregated calls
(``-m``), the ranks and hosts, and the sizes the run meant to reach (``maxBytes``). A file is refused,
on one line naming it and what is wrong, where its rows are not one GPU-timed sweep of one collective
the caller reads.

The rows are checked against nccl-tests' own arithmetic, so a file cannot say one thing and hold
another: ``algbw`` is size / time, and ``busbw`` is ``algbw`` times the collective's bus factor on n
ranks (all-reduce 2(n-1)/n: each rank sends and receives 2(n-1)/n of the buffer in a ring;
reduce-scatter and all-gather (n-1)/n: each rank sends n-1 of n shards; the size column of those two is
the whole unsharded buffer, n times the per-rank ``count``). A file that names no binary (nccl-tests
before 2.17 print no ``Collective test`` line) is read as the collective its columns fit; where they
fit two (all-gather and all-to-all print the same columns), the caller must name it.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ddpsim.errors import ScenarioError
from ddpsim.fitting.measurements import AllReduceSample, open_text

# the collectives calibration reads: all-reduce for the links, reduce-scatter and all-gather for sharded data parallel
COLLECTIVES_READ = ("all_reduce", "reduce_scatter", "all_gather")
# bytes per element of nccl-tests' type names (``char`` and ``int``: nccl-tests built against NCCL 1)
TYPE_BYTES = {"int8": 1, "uint8": 1, "char": 1, "int32": 4, "uint32": 4, "int": 4, "int64": 8, "uint64": 8,
              "half": 2, "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}
# how each collective's row looks: whether it reduces, its size column over count x element bytes
# (1 or n ranks), and whether it has a root
_SIGNATURES: dict[str, tuple[bool, str, bool]] = {
    "all_reduce": (True, "1", False), "reduce_scatter": (True, "n", False), "all_gather": (False, "n", False),
    "alltoall": (False, "n", False), "sendrecv": (True, "1", False), "broadcast": (False, "1", True),
    "reduce": (True, "1", True),
}
_BUS_TOLERANCE = 0.03  # busbw / algbw and size / time against algbw: both printed with 3+ significant digits
_CHECKED_ALGBW_GBPS = 1.0  # rows below print too few digits of algbw to check
_CHECKED_TIME_US = 1.0

_LAUNCHER_PREFIX = re.compile(r"^(\[\d+,\d+\]<std(?:out|err)>:|\s*\d+: )")
_BINARY_LINE = re.compile(r"^#\s*Collective test (?:starting|concluded):\s*(\S+)")
_HARNESS_HEADER = "# ddpsim harness: torch.distributed.all_reduce"
_RANK_LINE = re.compile(r"^#\s*Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw: what each rank's link carries per byte of the collective's size column."""
    if collective == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if collective in ("reduce_scatter", "all_gather", "alltoall"):
        return (ranks - 1) / ranks
    return 1.0


def collective_of_binary(name: str) -> str:
    """``./build/all_reduce_perf_mpi`` -> ``all_reduce``."""
    stem = os.path.basename(name)
    stem = stem.removesuffix("_mpi")
    return stem.removesuffix("_perf")


@dataclass(frozen=True)
class Row:
    """One size of a sweep, one column group (out-of-place or in-place)."""

    where: str  # "line 17" or "results[3]"
    bytes: int
    count: int
    data_type: str
    redop: str  # "none" where the collective reduces nothing
    root: int | None  # None: a layout without the root column
    time_us: float
    algbw_GBps: float | None
    busbw_GBps: float | None
    wrong: str  # a count, or "N/A" where nccl-tests did not check (-c 0)


@dataclass(frozen=True)
class _Report:
    """What one file says: its header's facts and its rows, before any row is chosen."""

    binary: str | None
    cpu_time: bool
    agg_iters: int | None
    max_bytes: int | None
    step: tuple[int, str] | None  # (2, "factor") or (1048576, "bytes")
    ranks: int | None  # None: the file does not list them (a trimmed header)
    hosts: tuple[str, ...]  # the host of each rank (text) or of each process (JSON)
    emulated_nodes: bool  # the harness's files: several nodes emulated on one host
    rows: tuple[Row, ...]
    harness_nodes: int | None = None  # the nodes the harness's launch ran (its launch name says), None: not said


@dataclass(frozen=True)
class NcclTestsSweep:
    """One GPU-timed sweep of one collective, one data type and one reduction, read from nccl-tests output.

    ``sizes_bytes`` are nccl-tests' size column: for reduce-scatter and all-gather the whole (unsharded)
    buffer, n times each rank's shard."""

    source: str
    collective: str
    data_type: str
    redop: str
    link_class: str
    world_size: int
    nodes: int
    sizes_bytes: tuple[int, ...]
    times_s: tuple[float, ...]

    def allreduce_samples(self) -> list[AllReduceSample]:
        if self.collective != "all_reduce":
            raise ScenarioError(f"{self.collective}_perf output: only all_reduce_perf output is an all-reduce sweep",
                                file=self.source, field="collective")
        return [AllReduceSample(self.link_class, self.world_size, self.nodes, size, time_s, self.source)
                for size, time_s in zip(self.sizes_bytes, self.times_s, strict=True)]


def read_nccl_tests(path: str, link_class: str, world_size: int, nodes: int = 1, in_place: bool = False,
                    data_type: str | None = None, redop: str | None = None) -> list[AllReduceSample]:
    """An ``all_reduce_perf`` sweep (text or ``-J`` JSON) as all-reduce samples; any other binary's output is refused."""
    # the caller wants an all-reduce: a file that names no binary is read as one if its columns fit it
    return read_nccl_tests_sweep(path, link_class, world_size, nodes, in_place, data_type, redop,
                                 collective="all_reduce").allreduce_samples()


def read_nccl_tests_sweep(path: str, link_class: str, world_size: int, nodes: int = 1, in_place: bool = False,
                          data_type: str | None = None, redop: str | None = None,
                          collective: str | None = None) -> NcclTestsSweep:
    """One sweep of all_reduce_perf, reduce_scatter_perf or all_gather_perf output (text or ``-J`` JSON).

    ``data_type`` and ``redop`` choose one sweep of a ``-d all`` / ``-o all`` file (without them, such a
    file is refused); ``collective`` names the binary of a file that does not name it; ``in_place`` reads
    the in-place column group instead of the out-of-place one."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
        raise ScenarioError(f"a collective needs 2 or more ranks, got {world_size}", file=path,
                            field="--nccl-tests WORLD_SIZE")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1 or world_size % nodes:
        raise ScenarioError(f"{world_size} ranks do not split into {nodes} nodes", file=path, field="--nccl-tests NODES")
    text = open_text(path)
    report = _read_json(path, text, in_place) if text.lstrip().startswith("{") else _read_text(path, text, in_place)
    if report.cpu_time:
        raise ScenarioError("the time column is CPU time (nccl-tests -C 1): it times the launch, not the collective; "
                            "rerun without -C", file=path, field="cputime")
    if report.agg_iters is not None and report.agg_iters > 1:
        raise ScenarioError(f"agg iters: {report.agg_iters} (nccl-tests -m {report.agg_iters}): each timed call "
                            "grouped several collectives, whose time per collective hides the per-call latency; "
                            "rerun with -m 1", file=path, field="agg iters")
    _check_hosts(path, report, world_size, nodes)
    rows = _one_sweep(path, report.rows, data_type, redop)
    named = _named_collective(path, report.binary, collective)
    found = named if named is not None and named not in COLLECTIVES_READ else _collective_of_rows(path, rows, world_size, named)
    if found not in COLLECTIVES_READ:
        raise ScenarioError(f"{found}_perf output: calibration reads all_reduce_perf, reduce_scatter_perf and "
                            "all_gather_perf output", file=path, field="collective")
    _check_rows(path, rows)
    _check_complete(path, rows, report)
    return NcclTestsSweep(path, found, rows[0].data_type, rows[0].redop, link_class, world_size, nodes,
                          tuple(r.bytes for r in rows), tuple(r.time_us * 1e-6 for r in rows))


# ----------------------------------------------------------------------------------------------- text


def _read_text(path: str, text: str, in_place: bool) -> _Report:
    lines = [_LAUNCHER_PREFIX.sub("", line, count=1) for line in text.splitlines()]
    binaries = {collective_of_binary(m.group(1)) for line in lines if (m := _BINARY_LINE.match(line.strip()))}
    if len(binaries) > 1:
        raise ScenarioError(f"holds the output of several binaries ({', '.join(sorted(binaries))}): one run per file",
                            file=path, field="Collective test")
    binary = next(iter(binaries), None)
    if binary is None and any(line.startswith(_HARNESS_HEADER) for line in lines):
        binary = "all_reduce"
    headers = [(number, tokens) for number, line in enumerate(lines, start=1)
               if (tokens := _column_names(line)) is not None]
    if len(headers) > 1:
        raise ScenarioError(f"lines {headers[0][0]} and {headers[1][0]}: two column headers, the output of two runs: "
                            "one run per file", file=path, field="columns")
    names = headers[0][1] if headers else None
    header = next((line for line in lines if line.startswith("# nThread")), "")
    agg = re.search(r"agg iters: (\d+)", header)
    max_bytes = re.search(r"maxBytes (\d+)", header)
    step = re.search(r"step: (\d+)\((factor|bytes)\)", header)
    rows = []
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields or line.lstrip().startswith("#") or not fields[0].isdigit():
            continue
        rows.append(_text_row(path, number, fields, names, in_place))
    hosts = tuple(m.group(1) for line in lines if (m := _RANK_LINE.match(line.strip())))
    return _Report(binary, names is not None and "cputime" in names, int(agg.group(1)) if agg else None,
                   int(max_bytes.group(1)) if max_bytes else None,
                   (int(step.group(1)), step.group(2)) if step else None, len(hosts) or None, hosts,
                   any(line.startswith("# ddpsim harness:") for line in lines), tuple(rows), _harness_nodes(path, lines))


def _harness_nodes(path: str, lines: Sequence[str]) -> int | None:
    """The nodes of the harness's launch from its header line (``launch socket_2x1_0``: 2 nodes, ``launch
    nvlink_w4_0``: one), None where the file is not the harness's or does not say."""
    for line in lines:
        if line.startswith("# transport ") and re.search(r"\bgpu cpu\b", line):
            from ddpsim.fitting.device import DRY_RUN

            raise ScenarioError(f"measured on {DRY_RUN}", file=path, field="gpu")
        if line.startswith("# transport ") and (launch := re.search(r"\blaunch (\S+)", line)):
            shape = re.search(r"_(\d+)x(\d+)_\d+$", launch.group(1))
            if shape:
                return int(shape.group(1))
            return 1 if re.search(r"_w\d+_\d+$", launch.group(1)) else None
    return None


def _column_names(line: str) -> list[str] | None:
    """The column-name line (``#  size  count  type  redop  root  time  algbw ...``) as its names."""
    if not line.startswith("#"):
        return None
    tokens = line[1:].split()
    if tokens[:2] != ["size", "count"] or not any(t in ("time", "cputime") for t in tokens):
        return None
    return tokens


# the layouts nccl-tests printed before the column header could be relied on: with the root column and without
_DEFAULT_NAMES = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                  "time", "algbw", "busbw", "#wrong"]


def _text_row(path: str, number: int, fields: list[str], names: list[str] | None, in_place: bool) -> Row:
    if names is None:
        # no column header (a trimmed file): the 13 columns of nccl-tests since 2.12, or the 12 before the root column
        names = _DEFAULT_NAMES if len(fields) >= 13 else [n for n in _DEFAULT_NAMES if n != "root"]
    times = [i for i, name in enumerate(names) if name in ("time", "cputime")]
    if len(times) < 2:
        raise ScenarioError("the column header names fewer than two time columns (out-of-place, in-place)",
                            file=path, field="columns")
    first = times[1] if in_place else times[0]
    # a row shorter than its header was cut (a run killed mid-row, a file cut short); a timestamp column
    # (-R) prints two words under one name, so longer rows are fine
    needed = len([n for n in names if n != "timestamp"])
    if len(fields) < needed:
        raise ScenarioError(f"line {number}: a row cut short ({len(fields)} of the header's {needed} columns): "
                            "the run or the file was truncated", file=path, field="row")
    where = f"line {number}"

    def column(name: str) -> str | None:
        return fields[names.index(name)] if name in names else None

    try:
        size, count = int(fields[0]), int(fields[1])
        time_us = float(fields[first])
        algbw = float(fields[first + 1])
        busbw = float(fields[first + 2])
        root_text = column("root")
        root = int(root_text) if root_text is not None else None
    except ValueError:
        raise ScenarioError(f"{where}: a size, count, time or bandwidth is not a number", file=path) from None
    return Row(where, size, count, fields[2].lower(), (column("redop") or "none").lower(), root, time_us, algbw, busbw,
               fields[first + 3])


# ----------------------------------------------------------------------------------------------- JSON


def _read_json(path: str, text: str, in_place: bool) -> _Report:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        # nccl-tests writes the report as the run goes: a killed run leaves it unclosed
        raise ScenarioError(f"not valid JSON at line {err.lineno} ({err.msg}): a report cut short?", file=path,
                            field="json") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ScenarioError("expected nccl-tests' -J report: an object with a 'results' list", file=path, field="results")
    args: list = data["args"] if isinstance(data.get("args"), list) else []
    config: dict = data["config"] if isinstance(data.get("config"), dict) else {}
    devices: list = config["devices"] if isinstance(config.get("devices"), list) else []
    # the report lists each process's first GPU only (util.cu parses one rank line per process): the ranks are
    # processes x threads x GPUs per thread
    hosts = tuple(str(d.get("hostname")) for d in devices if isinstance(d, dict) and d.get("hostname") is not None)
    threads, gpus = _json_int(config.get("nthreads")), _json_int(config.get("ngpus"))
    ranks = len(hosts) * threads * gpus if hosts and threads and gpus else None
    group = "in_place" if in_place else "out_of_place"
    rows = []
    cpu_time = _cpu_time_asked(args)
    for index, result in enumerate(data["results"]):
        where = f"results[{index}]"
        if not isinstance(result, dict):
            raise ScenarioError("expected an object", file=path, field=where)
        timed = result.get(group)
        if not isinstance(timed, dict):
            raise ScenarioError(f"no {group} timing", file=path, field=f"{where}.{group}")
        cpu_time = cpu_time or "cpu_time" in timed
        rows.append(_json_row(path, where, f"{where}.{group}", result, timed))
    step = (config.get("step_factor"), "factor") if "step_factor" in config else (config.get("step_bytes"), "bytes")
    return _Report(collective_of_binary(args[0]) if args and isinstance(args[0], str) else None, cpu_time,
                   _json_int(config.get("aggregated_iterations")), _json_int(config.get("maximum_bytes")),
                   (step[0], step[1]) if isinstance(step[0], int) and not isinstance(step[0], bool) else None,
                   ranks, hosts, False, tuple(rows))


def _cpu_time_asked(args: Sequence[object]) -> bool:
    """Whether the command line the report recorded asked for CPU time (``-C 1``, ``-C1``, ``--report_cputime=1``)."""
    words = [str(a) for a in args]
    for index, word in enumerate(words):
        value = None
        if word in ("-C", "--report_cputime"):
            value = words[index + 1] if index + 1 < len(words) else None
        elif word.startswith("--report_cputime="):
            value = word.split("=", 1)[1]
        elif word.startswith("-C") and len(word) > 2:
            value = word[2:]
        if value is not None and value.strip() not in ("", "0"):
            return True
    return False


def _json_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _json_row(path: str, where: str, group: str, result: dict, timed: dict) -> Row:
    def number(record: dict, key: str, at: str) -> float:
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ScenarioError(f"expected a number, got {value!r}", file=path, field=f"{at}.{key}")
        return float(value)

    time_key = "cpu_time" if "cpu_time" in timed else "time"
    for key in ("type", "redop"):
        if not isinstance(result.get(key), str):
            raise ScenarioError(f"expected a string, got {result.get(key)!r}", file=path, field=f"{where}.{key}")
    root = str(result.get("root", "")).strip()
    wrong = timed.get("nwrong")
    return Row(where, int(number(result, "size", where)), int(number(result, "count", where)), result["type"].lower(),
               result["redop"].lower() or "none", int(root) if root.lstrip("-").isdigit() else None,
               number(timed, time_key, group), number(timed, "alg_bw", group), number(timed, "bus_bw", group),
               "N/A" if wrong is None else str(int(wrong)) if isinstance(wrong, int | float) else str(wrong))


# ----------------------------------------------------------------------------------------------- checks


def _one_sweep(path: str, rows: Sequence[Row], data_type: str | None, redop: str | None) -> list[Row]:
    """The rows of one data type and one reduction: the one named, or the only one the file holds."""
    if not rows:
        raise ScenarioError("no result rows found (not nccl-tests output, or a run that printed none)", file=path)
    def data_type_of(row: Row) -> str:
        return row.data_type

    def redop_of(row: Row) -> str:
        return row.redop

    for name, wanted, key, kind in (("data type", data_type, "type", data_type_of),
                                    ("reduction", redop, "redop", redop_of)):
        present = list(dict.fromkeys(kind(r) for r in rows))
        if wanted is not None:
            if wanted.lower() not in present:
                raise ScenarioError(f"no rows of {name} {wanted!r} (the file holds {', '.join(present)})", file=path,
                                    field=key)
            rows = [r for r in rows if kind(r) == wanted.lower()]
        elif len(present) > 1:
            # each kind is its own sweep (a half element costs other than a float one), and DDP's all-reduce
            # moves one kind: one curve through all of them would be a curve of none
            example = next((p for p in ("float", "sum") if p in present), present[0])
            raise ScenarioError(f"rows of {len(present)} {name}s ({', '.join(present)}; nccl-tests "
                                f"{'-d' if key == 'type' else '-o'} all): name the one to fit "
                                f"(FILE:CLASS:WORLD:{key}={example})", file=path, field=key)
    return list(rows)


def _named_collective(path: str, binary: str | None, given: str | None) -> str | None:
    if given is None:
        return binary
    given = collective_of_binary(given)
    if binary is not None and binary != given:
        raise ScenarioError(f"{binary}_perf output, read as {given}_perf", file=path, field="collective")
    return given


def _collective_of_rows(path: str, rows: Sequence[Row], world_size: int, named: str | None) -> str:
    """The collective the rows' columns fit (reduction or none, size over count, root, busbw / algbw): the
    named one must be among them; an unnamed file must fit exactly one."""
    first = rows[0]
    element = TYPE_BYTES.get(first.data_type)
    if element is None:
        raise ScenarioError(f"unknown data type {first.data_type!r} (known: {', '.join(TYPE_BYTES)})", file=path,
                            field="type")
    ratios = {r.bytes / (r.count * element) for r in rows if r.count > 0}
    factors = [r.busbw_GBps / r.algbw_GBps for r in rows
               if r.algbw_GBps is not None and r.busbw_GBps is not None and r.algbw_GBps >= _CHECKED_ALGBW_GBPS]
    fits = []
    for name, (reduces, ratio, rooted) in _SIGNATURES.items():
        expected_ratio = 1.0 if ratio == "1" else float(world_size)
        if reduces != (first.redop != "none") or (first.root is not None and rooted != (first.root >= 0)):
            continue
        if ratios and not all(math.isclose(r, expected_ratio, rel_tol=1e-9) for r in ratios):
            continue
        if factors and not all(abs(f / bus_factor(name, world_size) - 1) <= _BUS_TOLERANCE for f in factors):
            continue
        fits.append(name)
    measured = (f"reduction {first.redop}, size {first.bytes} for count {first.count} of {first.data_type}"
                + (f", busbw/algbw {statistics.median(factors):.2f}" if factors else ""))
    if named is not None:
        if named not in fits:
            raise ScenarioError(f"the columns are not those of {named}_perf on {world_size} ranks ({measured}; "
                                f"its busbw/algbw is {bus_factor(named, world_size):.2f})", file=path,
                                field="--nccl-tests WORLD_SIZE")
        return named
    if not fits:
        raise ScenarioError(f"the columns fit no nccl-tests collective on {world_size} ranks ({measured})",
                            file=path, field="--nccl-tests WORLD_SIZE")
    if len(fits) > 1:
        raise ScenarioError(f"names no binary (no 'Collective test starting' line) and its columns fit "
                            f"{' and '.join(f + '_perf' for f in fits)} alike on {world_size} ranks: name it "
                            f"(FILE:CLASS:WORLD:op={fits[0]})", file=path, field="op")
    return fits[0]


def _check_rows(path: str, rows: Sequence[Row]) -> None:
    seen: set[int] = set()
    for row in rows:
        if row.bytes <= 0 or not math.isfinite(row.time_us) or row.time_us <= 0:
            raise ScenarioError(f"{row.where}: size and time must be positive, got {row.bytes} bytes, {row.time_us} us",
                                file=path)
        # a row whose results nccl-tests found wrong timed a broken collective; N/A: not checked (-c 0)
        if row.wrong.isdigit() and int(row.wrong) > 0:
            raise ScenarioError(f"{row.where}: nccl-tests found {row.wrong} wrong results at {row.bytes} bytes",
                                file=path, field="#wrong")
        if row.bytes in seen:
            raise ScenarioError(f"{row.where}: {row.bytes} bytes measured twice: one sweep per file (split the file)",
                                file=path, field="size")
        seen.add(row.bytes)
        # nccl-tests computes algbw from the GPU time; where the time column disagrees, it holds something else
        # (CPU time with -C in a file whose header was trimmed away)
        if row.algbw_GBps is not None and row.algbw_GBps >= _CHECKED_ALGBW_GBPS and row.time_us >= _CHECKED_TIME_US:
            implied = row.bytes / (row.time_us * 1e-6) / 1e9
            if abs(implied / row.algbw_GBps - 1) > _BUS_TOLERANCE:
                raise ScenarioError(f"{row.where}: size / time is {implied:.2f} GB/s but algbw says {row.algbw_GBps:.2f}: "
                                    "the time column is not the collective's GPU time (CPU time, nccl-tests -C 1?)",
                                    file=path, field="time")


def _check_complete(path: str, rows: Sequence[Row], report: _Report) -> None:
    """Rows that stop a step or more before the header's maxBytes: a run killed, or a file cut short."""
    if report.max_bytes is None or report.step is None or report.step[0] < 1:
        return
    largest = max(r.bytes for r in rows)
    step, mode = report.step
    # nccl-tests rounds each size down to whole elements per rank, so the last row may sit a little below maxBytes
    reached = largest * step > report.max_bytes if mode == "factor" and step > 1 else largest + step > report.max_bytes
    if not reached:
        raise ScenarioError(f"the rows stop at {largest} bytes, but the run was to reach maxBytes {report.max_bytes}: "
                            "the run or the file was cut short", file=path, field="maxBytes")


def _check_hosts(path: str, report: _Report, world_size: int, nodes: int) -> None:
    """nccl-tests lists every rank and its host: a file that says otherwise than the ranks and nodes given
    would be fitted as a shape it never measured."""
    if report.ranks is None:
        return  # a header without the rank lines (trimmed output) says nothing to check
    if report.ranks != world_size:
        raise ScenarioError(f"the header lists {report.ranks} ranks, but {world_size} were given", file=path,
                            field="--nccl-tests WORLD_SIZE")
    distinct = len(set(report.hosts))
    # one host in the rank lines of the harness's own file: its launch name says how many nodes it emulated
    if distinct == 1 and report.emulated_nodes and report.harness_nodes not in (None, nodes):
        raise ScenarioError(f"the header's launch ran {report.harness_nodes} node(s), but {nodes} were given", file=path,
                            field="--nccl-tests NODES")
    # several nodes on one host is the harness's emulation (NCCL_HOSTID), which its own files say; nccl-tests
    # run by hand name each rank's real host, so there the hosts must be the nodes given
    if distinct != nodes and not (distinct == 1 and report.emulated_nodes):
        raise ScenarioError(f"the header lists {distinct} hosts, but {nodes} nodes were given", file=path,
                            field="--nccl-tests NODES")
