"""Reader for PyTorch profiler (Kineto) Chrome traces: ``.json`` or ``.json.gz``, one rank per file.

What the format holds (Kineto ``output_json.cpp`` and the real traces in ``data/kineto``):
``traceEvents`` of complete events (``ph`` "X") with ``ts``/``dur`` in microseconds. Newer
PyTorch writes ``ts`` relative to ``baseTimeNanoseconds`` with exactly three decimals (whole
nanoseconds); older PyTorch writes integer microseconds since the epoch. GPU events sit in a
pseudo-process whose pid is the device index and whose tid is the stream; their ``args`` carry
``device``, ``stream`` and ``correlation``, which equals the ``correlation`` of the
``cuda_runtime``/``cuda_driver`` call that launched them.

Mapping to the event table (``distprof.events``):

==========================================  ======================================================
``cat``                                     row
==========================================  ======================================================
kernel                                      kernel; COMMUNICATION if the name starts with one of
                                            ``communication.kernel_prefixes``, else COMPUTE
gpu_memcpy / gpu_memset                     memcpy / memset, MEMORY
cuda_runtime / cuda_driver                  runtime, RUNTIME (kept: they join kernels to the CPU)
cpu_op / user_annotation / python_function  range, USER, on the host thread
gpu_user_annotation                         range, USER, on the GPU stream
``ProfilerStep#N``                          range ``ProfileStep``, PHASE, ``step`` = N, bounded by
                                            the GPU work launched inside it (see below); the
                                            original CPU range stays as a USER row
anything else (Trace spans, flows, ...)     skipped (counted in ``meta["skipped_categories"]``)
==========================================  ======================================================

GPU rows get the *host* process pid (not Kineto's device pseudo-pid) so that all lanes of a rank
share one process key. A GPU row's ``step`` is the ProfilerStep whose CPU range holds its
launching call (any thread of the process). A step's GPU window is the span of the kernels,
memcpys and memsets launched in it; a step that launched nothing keeps its CPU bounds. Steps of
zero length are dropped and overlapping ones named (``events.checked_steps``, as in every reader).

Decoding the file and its numbers (timestamps to exact integer nanoseconds): ``kineto_decode``;
the communication columns (collective, group, bytes, peer): ``kineto_comm``.

Clock: ``clock_offset_ns`` = ``baseTimeNanoseconds`` when present (Kineto's definition:
absolute = base + ts), else 0, since older traces already write microseconds since the epoch.
Run: ``meta["run"]`` (sources.run_identity) is the recorded span on that absolute clock. Nothing else
in a trace names its run: ``trace_id`` is per process (each rank's differs), ``baseTimeNanoseconds``
is a coarse base shared by unrelated runs (1790857026000000000 in every torch 2.11-2.13 trace of
tests/data, on two machines), and ``distributedInfo`` describes the job's shape.
"""

from __future__ import annotations

import re
from itertools import compress, repeat
from pathlib import Path

import numpy as np

from .. import events as ev
from ..joins import innermost_enclosing, launch_join, span_of_groups
from . import comm_kernels, plausible_span, run_identity, sane_rank
from .kineto_comm import comm_columns, comm_facts, comm_sources
from .kineto_decode import (
    CATEGORY_CLASS,
    DROP_CLASS,
    GPU_RANGE_CLASS,
    GPU_WORK,
    HOST_RANGE_CLASS,
    INT_US_LIMIT,
    KERNEL_CLASS,
    MEMCPY_CLASS,
    MEMSET_CLASS,
    RUNTIME_CLASS,
    Document,
    NeedText,
    exact_number,
    gc_paused,
    int_column,
    is_missing,
    load,
    to_int,
    us_to_ns,
)

_OP_CATEGORIES = ("cpu_op", "operator")  # framework operators: the rows of the profile side tables
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
# record_function ranges that are the Model Summary's phases (others are USER ranges)
_PHASE_NAME = re.compile(r"^(## *(forward|backward|optimi[sz]er|optimi[sz]er[._ ]step|data_?load(er|ing)?) *##"
                         r"|Optimizer\.step#.*|enumerate\(DataLoader\)#.*)$", re.IGNORECASE)
_HOST_COMM_ALWAYS = ("gloo:",)          # gloo worker-thread ranges: the real exchange, waiting included
_HOST_COMM_CPU_ONLY = ("c10d::",)       # on GPU traces these only enqueue NCCL kernels
_HOST_COMPUTE = ("aten::",)
_HOST_RULE = "gloo/c10d host op"  # comm_rule of the host rows that are communication (gloo:*, CPU-only c10d::*)
_RANK_IN_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)


def read(path: Path, config: dict) -> list[ev.RankTrace]:
    """Read one Kineto trace file as one rank. Raises SourceError with one line on bad input."""
    path = Path(path)
    try:
        with gc_paused():
            try:
                return [_convert(path, load(path, exact_text=False, config=config), config)]
            except NeedText:
                pass  # decode again outside the handler, once the first document is released
            return [_convert(path, load(path, exact_text=True, config=config), config)]
    except RecursionError:
        raise ev.SourceError(f"{path}: JSON nested too deep to be a Kineto trace") from None
    except UnicodeDecodeError as error:
        raise ev.SourceError(f"{path}: not valid UTF-8 text (byte 0x{error.object[error.start]:02x} "
                             "in a string)") from None


# ---------------------------------------------------------------------------- conversion

def _convert(path: Path, document: Document, config: dict) -> ev.RankTrace:
    try:
        return _build(path, document, config)
    except ev.SourceError as error:
        message = str(error)
        raise ev.SourceError(message if message.startswith(f"{path}:") else f"{path}: {message}") from None


def _build(path: Path, doc: Document, config: dict) -> ev.RankTrace:
    """The rank's event table: rows of known categories, their times and ids, the steps, then
    the categorical columns."""
    rows, classes, skipped, is_op = _known_rows(doc)
    read = {field: doc.field(rows, field) for field in ("pid", "tid", "ts", "dur")}  # each read once
    read["is_op"] = is_op  # filtered with the rows: the side tables need not read "cat" again
    rows, classes, read, corrupt_warnings = _without_corrupt_numbers(rows, classes, read, path)
    rows, classes, read, start_ns, end_ns, negative = _times(rows, classes, read, skipped)
    keep, span_warnings = plausible_span(start_ns, end_ns, path)
    if keep is not None:
        rows, classes, read = _filtered(keep, rows, classes, read)
        start_ns, end_ns = start_ns[keep], end_ns[keep]
    time_warnings = _check_times(start_ns, end_ns, to_int(doc.info.get("baseTimeNanoseconds"), 0), path)
    name_codes, name_uniques = _factorize_names(doc.field(rows, "name"))
    ids = _ids(doc, rows, classes, read["pid"], read["tid"])
    comm_kernel = _comm_kernel_rows(classes, name_codes, name_uniques, start_ns, end_ns, ids, config)
    facts = comm_facts(doc, rows, comm_sources(classes, name_codes, name_uniques, comm_kernel["is_comm"]),
                       name_codes, name_uniques)
    profiles = _profile_tables(doc, rows, read["is_op"], name_codes, name_uniques, start_ns, end_ns, ids)
    del rows
    doc.events = []  # everything is read: free the structs now (their raw args hold the whole file's text)
    steps = _steps(classes, name_codes, name_uniques, start_ns, end_ns, ids, path)
    columns, name_uniques = _columns(classes, name_codes, name_uniques, start_ns, end_ns, ids, steps, comm_kernel)
    comm, comm_meta, comm_warnings = comm_columns(doc, facts, ids, steps, classes, start_ns, end_ns,
                                                   columns["category"].codes[:len(classes)], path)
    columns.update(comm)
    columns["collective"] = _kernel_kinds(columns["collective"], comm_kernel["kind_code"], len(classes))
    rank, rank_from, world_size, rank_warnings = _checked_rank(doc, path)
    table = ev.make_events(rank=-1 if rank is None else rank, **columns)

    device, gpu = ids["device"], ids["gpu"]
    used = device[gpu & (device >= 0)]
    main_device = int(np.bincount(used).argmax()) if used.size else None
    warnings = [f"{path}: {negative} event(s) with negative duration, clamped to 0"] if negative else []
    if facts["corrupt_sizes"]:
        warnings.append(f"{path}: {facts['corrupt_sizes']} collective message size(s) (in/out msg nelems) out of "
                        f"range (e.g. {facts['size_example']}): taken as unknown")
    warnings += corrupt_warnings + span_warnings + time_warnings + steps["warnings"] + rank_warnings + comm_warnings
    meta = _meta(doc, main_device, int(steps["work"].size - (steps["launch"] >= 0).sum()), skipped)
    meta.update(comm_meta)
    meta["world_size"] = world_size
    meta["run"] = run_identity(table["start_ns"], table["end_ns"], to_int(doc.info.get("baseTimeNanoseconds"), 0))
    # the GPU window of each step (span of the GPU work launched in it), next to the CPU step rows
    meta["gpu_step_windows"] = {"step": steps["numbers"].tolist(), "start_ns": steps["gpu_start"].tolist(),
                                "end_ns": steps["gpu_end"].tolist()}
    return ev.RankTrace(events=table, rank=rank, source="kineto", source_file=str(path), pid=steps["host_pid"],
                        device=main_device, clock_offset_ns=to_int(doc.info.get("baseTimeNanoseconds"), 0),
                        rank_from=rank_from, warnings=warnings, meta=meta, profiles=profiles)


def _known_rows(doc: Document) -> tuple[list, np.ndarray, dict, np.ndarray]:
    """The complete events of known categories, their class, the count of skipped ones by category,
    and which rows are framework operators (cpu_op: the side tables' rows; "cat" is read once)."""
    complete = doc.complete_events()
    cat_codes, cat_uniques = ev.factorize(doc.field(complete, "cat"))
    class_of = np.array([CATEGORY_CLASS.get(str(cat).lower(), DROP_CLASS) for cat in cat_uniques], dtype=np.int8)
    op_of = np.array([str(cat).lower() in _OP_CATEGORIES for cat in cat_uniques], bool)
    classes = class_of[cat_codes] if cat_codes.size else np.empty(0, np.int8)
    keep = classes != DROP_CLASS
    dropped = np.bincount(cat_codes[~keep], minlength=len(cat_uniques))
    skipped = {str(cat): int(n) for cat, n in zip(cat_uniques, dropped) if n}
    rows = list(compress(complete, keep.tolist()))
    if not rows:
        raise ev.SourceError("no CPU or GPU events in the trace (only metadata or unknown categories)")
    return rows, classes[keep], skipped, op_of[cat_codes[keep]]


def _beyond_time_range(values: list) -> tuple[np.ndarray, np.ndarray | list]:
    """Mask of ts/dur values (µs) that no int64 nanosecond can hold (1e30, inf, "1e400"), and the
    values: as the int64/float64 array numpy inferred when all are plain numbers (us_to_ns then
    converts them without a second pass over the Python objects), else the list as given."""
    try:
        inferred = np.array(values)
        if inferred.ndim == 1 and inferred.dtype.kind in "if":
            with np.errstate(invalid="ignore"):
                return ~(np.abs(inferred.astype(np.float64)) <= INT_US_LIMIT), inferred
    except (OverflowError, ValueError):
        pass
    codes, uniques = ev.factorize(values)
    number = [None if is_missing(value) else exact_number(value) for value in uniques]
    bad = [n is not None and (not n.is_finite() or abs(n) > INT_US_LIMIT) for n in number]
    return np.array(bad, bool)[codes], values


def _filtered(keep: np.ndarray, rows: list, classes: np.ndarray, read: dict) -> tuple[list, np.ndarray, dict]:
    """The kept rows, their classes and their fields read so far (arrays or lists)."""
    listed = keep.tolist()
    return list(compress(rows, listed)), classes[keep], {
        name: values[keep] if isinstance(values, np.ndarray) else list(compress(values, listed))
        for name, values in read.items()}


def _without_corrupt_numbers(rows: list, classes: np.ndarray, read: dict, path: Path):
    """pid and tid as int64 (``read``'s lists replaced); rows whose pid, tid, ts or dur is a number no
    int64 can hold (a float 1e30 where Kineto writes an integer) are dropped with one warning, not
    the whole file."""
    masks: list[np.ndarray] = []
    read = {**read, "pid": int_column(read["pid"], corrupt=masks), "tid": int_column(read["tid"], corrupt=masks)}
    for field in ("ts", "dur"):
        mask, read[field] = _beyond_time_range(read[field])
        masks.append(mask)
    bad = np.logical_or.reduce(masks)
    if not bad.any():
        return rows, classes, read, []
    fields = [name for name, mask in zip(("pid", "tid", "ts", "dur"), masks) if mask.any()]
    if bad.all():
        raise ev.SourceError(f"every CPU/GPU event ({bad.size}) has a {'/'.join(fields)} out of range "
                             "(timestamp out of range or id beyond int64)")
    warning = f"{path}: {int(bad.sum())} event(s) dropped: {'/'.join(fields)} out of range (beyond int64)"
    return (*_filtered(~bad, rows, classes, read), [warning])


def _times(rows: list, classes: np.ndarray, read: dict, skipped: dict):
    """Start and end in ns; rows without a time are dropped (counted in ``skipped``), negative
    durations clamped to 0 (counted)."""
    start_ns, no_ts = us_to_ns(read["ts"])
    if no_ts is not None:  # malformed rows without a time: skip them
        rows, classes, read = _filtered(~no_ts, rows, classes, read)
        start_ns = start_ns[~no_ts]
        skipped["(no ts)"] = int(no_ts.sum())
        if not rows:
            raise ev.SourceError(f"no event with a timestamp ('ts') among {no_ts.size} CPU/GPU event(s)")
    dur_ns, _ = us_to_ns(read["dur"])  # a missing dur is 0
    negative = int((dur_ns < 0).sum())
    return rows, classes, read, start_ns, start_ns + np.maximum(dur_ns, 0), negative


def _ids(doc: Document, rows: list, classes: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> dict:
    """pid, tid, lane (stream on the GPU, else tid), device and correlation id of every row."""
    pid, tid = pid.copy(), tid.copy()  # _steps rewrites GPU rows' pid
    gpu = np.isin(classes, (*GPU_WORK, GPU_RANGE_CLASS))
    linked = np.isin(classes, (*GPU_WORK, RUNTIME_CLASS))
    lane = tid.copy()
    device = np.full(len(rows), -1, np.int64)
    correlation = np.full(len(rows), -1, np.int64)
    if linked.any() or gpu.any():
        needs_args = gpu | linked
        args = doc.args(compress(rows, needs_args.tolist()))
        where = np.flatnonzero(needs_args)
        correlation[where] = np.where(linked[where], int_column(doc.arg(args, "correlation")), -1)
        gpu_args = list(compress(args, gpu[where].tolist()))
        stream = int_column(doc.arg(gpu_args, "stream"))
        lane[gpu] = np.where(stream >= 0, stream, tid[gpu])
        dev = int_column(doc.arg(gpu_args, "device"))
        device[gpu] = np.where(dev >= 0, dev, pid[gpu])
    return {"pid": pid, "tid": tid, "gpu": gpu, "lane": lane, "device": device, "correlation": correlation}


def _steps(classes, name_codes, name_uniques, start_ns, end_ns, ids: dict, path: Path) -> dict:
    """The ProfilerStep#N ranges (CPU bounds: the step as the framework marks it; those of zero
    length dropped and overlapping ones named by events.checked_steps, in ``warnings``), the step
    of every row (host rows: the step holding their start on the step's process; GPU work: the
    step of its launching call, else the step holding its start), the launch join, the training
    process, each step's GPU window, and the host categories. Sets GPU rows' pid to the host pid."""
    pid, gpu = ids["pid"], ids["gpu"]
    step_of_name = np.array([_step_number(name) for name in name_uniques], dtype=np.int64)
    step_rows = np.flatnonzero((classes == HOST_RANGE_CLASS) & (step_of_name[name_codes] >= 0))
    keep, step_warnings = ev.checked_steps(start_ns[step_rows], end_ns[step_rows],
                                           step_of_name[name_codes[step_rows]], pid[step_rows], path)
    step_rows = step_rows[keep]
    step_rows = step_rows[np.argsort(start_ns[step_rows], kind="stable")]
    step_numbers = step_of_name[name_codes[step_rows]]
    step_start, step_end, step_pid = start_ns[step_rows], end_ns[step_rows], pid[step_rows]
    host_pid = _main_pid(pid, classes, step_pid)

    def step_at(rows: np.ndarray, process: np.ndarray) -> np.ndarray:
        if not step_rows.size:
            return np.full(rows.size, -1, np.int64)
        at = start_ns[rows]  # a point: the step holding the row's start
        found = innermost_enclosing(step_pid, step_start, step_end, process, at, at)
        return np.where(found >= 0, step_numbers[np.maximum(found, 0)], -1)

    step = np.full(len(classes), -1, np.int64)
    host = np.flatnonzero(~gpu)
    step[host] = step_at(host, pid[host])
    step[step_rows] = step_numbers
    work = np.flatnonzero(np.isin(classes, GPU_WORK))
    runtime = np.flatnonzero(classes == RUNTIME_CLASS)
    launch = launch_join(ids["correlation"][work], ids["correlation"][runtime])
    by_time = step_at(work, np.full(work.size, step_pid[0] if step_pid.size else 0, np.int64))
    step[work] = np.where(launch >= 0, step[runtime[np.maximum(launch, 0)]] if runtime.size else -1, by_time)
    if host_pid is not None:
        pid[gpu] = host_pid
    launched = launch >= 0
    gpu_start, gpu_end = _step_gpu_bounds(step_numbers, np.where(launched, step[work], -1), start_ns[work],
                                          end_ns[work], step_start, step_end)
    host_category = _host_categories(classes, name_codes, name_uniques, bool((classes == KERNEL_CLASS).any()))
    _demote_nested_phases(host_category, ids, start_ns, end_ns)
    phase_row = _phases(host_category, start_ns, end_ns, ids, work, runtime, launch)
    return {"rows": step_rows, "numbers": step_numbers, "pid": step_pid, "step": step, "work": work,
            "launch": launch, "host_pid": host_pid, "start": step_start, "end": step_end,
            "gpu_start": gpu_start, "gpu_end": gpu_end, "host_category": host_category,
            "phase_row": phase_row, "warnings": step_warnings}


def _phases(host_category, start_ns, end_ns, ids: dict, work, runtime, launch) -> np.ndarray:
    """Phase of every row as the row of its phase range (-1: none): host rows the innermost
    PHASE range around them on their thread (a phase range is its own phase), GPU work the
    phase of its launching call; GPU work whose launch is unknown has none."""
    phase_rows = np.flatnonzero(host_category == ev.CATEGORIES.index(ev.PHASE))
    host = np.flatnonzero(~ids["gpu"])
    tid = ids["tid"]
    found = innermost_enclosing(tid[phase_rows], start_ns[phase_rows], end_ns[phase_rows],
                                tid[host], start_ns[host], end_ns[host])
    phase_row = np.full(len(host_category), -1, np.int64)
    phase_row[host] = np.where(found >= 0, phase_rows[np.maximum(found, 0)], -1) if phase_rows.size else -1
    if runtime.size:
        phase_row[work] = np.where(launch >= 0, phase_row[runtime[np.maximum(launch, 0)]], -1)
    return phase_row


def _host_categories(classes, name_codes, name_uniques, gpu_trace: bool) -> np.ndarray:
    """Category codes of host ranges by name: gloo:* (and c10d::* on CPU-only traces)
    COMMUNICATION, aten::* COMPUTE, the phase names PHASE, the rest USER; -1 for other rows."""
    comm_prefixes = _HOST_COMM_ALWAYS + (() if gpu_trace else _HOST_COMM_CPU_ONLY)
    by_name = np.full(len(name_uniques), ev.CATEGORIES.index(ev.USER), np.int64)
    for index, name in enumerate(name_uniques):  # per distinct name, not per event
        if name.startswith(comm_prefixes):
            by_name[index] = ev.CATEGORIES.index(ev.COMMUNICATION)
        elif name.startswith(_HOST_COMPUTE):
            by_name[index] = ev.CATEGORIES.index(ev.COMPUTE)
        elif _PHASE_NAME.match(name):
            by_name[index] = ev.CATEGORIES.index(ev.PHASE)
    return np.where(classes == HOST_RANGE_CLASS, by_name[name_codes] if name_codes.size else -1, -1)


def _demote_nested_phases(category, ids, start_ns, end_ns) -> None:
    """A phase range inside another phase range on the same thread is a USER range (one phase
    per moment: ``Optimizer.step#`` inside ``## optimizer ##`` is not counted twice)."""
    rows = np.flatnonzero(category == ev.CATEGORIES.index(ev.PHASE))
    if rows.size < 2:
        return
    lane, start, end = ids["lane"][rows], start_ns[rows], end_ns[rows]
    order = np.lexsort((-end, start, lane))
    lane, start, end = lane[order], start[order], end[order]
    # running max of ends, restarting per lane: later lanes are lifted above every earlier end
    level = np.cumsum(np.concatenate([[0], (lane[1:] != lane[:-1]).astype(np.int64)]))
    lift = level * (int(end.max()) - int(end.min()) + 1)
    reach = np.maximum.accumulate(end - end.min() + lift) - lift + end.min()
    inside = np.zeros(order.size, bool)
    inside[1:] = (level[1:] == level[:-1]) & (reach[:-1] >= end[1:]) & (start[1:] < reach[:-1])
    category[rows[order[inside]]] = ev.CATEGORIES.index(ev.USER)


def _comm_kernel_rows(classes, name_codes, name_uniques, start_ns, end_ns, ids: dict, config: dict) -> dict:
    """Per row: a communication kernel or not, the rule that says so (``comm_rule``) and the collective
    its name says (0: not said). Names by the one table (comm_kernels.classify, once per distinct kernel
    name); a kernel no name rule knows is communication when the innermost host op around its launching
    call is a communication op (c10d::*, record_param_comms, symm_mem::*, ...)."""
    is_kernel = classes == KERNEL_CLASS
    used = np.zeros(len(name_uniques), bool)
    used[name_codes[is_kernel]] = True
    kernel_names = np.flatnonzero(used)
    known = comm_kernels.classify([name_uniques[code] for code in kernel_names.tolist()], config)
    by_name = np.zeros(len(name_uniques), bool)
    by_name[kernel_names] = known.is_comm
    rule_of_name = np.full(len(name_uniques), "", dtype=object)
    rule_of_name[kernel_names] = known.rule
    kind_of_name = np.zeros(len(name_uniques), np.int8)
    kind_of_name[kernel_names] = known.kind_code
    is_comm = is_kernel & by_name[name_codes]
    rule = np.where(is_comm, rule_of_name[name_codes], "")
    launched = _launched_by_comm_op(classes, name_codes, name_uniques, start_ns, end_ns, ids) & is_kernel & ~is_comm
    rule[launched] = comm_kernels.RULE_LAUNCHED
    return {"is_comm": is_comm | launched, "rule": rule,
            "kind_code": np.where(is_comm, kind_of_name[name_codes], 0).astype(np.int8)}


def _launched_by_comm_op(classes, name_codes, name_uniques, start_ns, end_ns, ids: dict) -> np.ndarray:
    """Per row: GPU work whose launching call's innermost enclosing host op is a communication op."""
    comm_op_name = np.array([comm_kernels.is_comm_op_name(name) for name in name_uniques], bool)
    host = np.flatnonzero(classes == HOST_RANGE_CLASS)
    runtime = np.flatnonzero(classes == RUNTIME_CLASS)
    work = np.flatnonzero(classes == KERNEL_CLASS)
    result = np.zeros(len(classes), bool)
    if not (host.size and runtime.size and work.size and comm_op_name.any()):
        return result
    tid = ids["tid"]
    # the innermost op around a call inside a communication op is that op or one nested in it: only those
    # ops and only the calls inside one take part in the join (a few, of tens of thousands)
    inside = _inside_any(host[comm_op_name[name_codes[host]]], start_ns, end_ns, tid)
    ops, calls = host[inside(host)], runtime[inside(runtime)]
    call_in_comm = np.zeros(runtime.size, bool)
    if calls.size:
        around = innermost_enclosing(tid[ops], start_ns[ops], end_ns[ops], tid[calls], start_ns[calls], end_ns[calls])
        call_in_comm[np.searchsorted(runtime, calls)] = np.where(
            around >= 0, comm_op_name[name_codes[ops[np.maximum(around, 0)]]], False)
    launch = launch_join(ids["correlation"][work], ids["correlation"][runtime])
    result[work] = np.where(launch >= 0, call_in_comm[np.maximum(launch, 0)], False)
    return result


def _inside_any(ranges: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray, tid: np.ndarray):
    """A test of rows: within one of ``ranges`` (rows) on the same thread. The ranges' union per thread,
    then one searchsorted: ``(thread, time)`` as one sortable key."""
    base, span = int(start_ns.min()), int(end_ns.max() - start_ns.min()) + 1
    threads, thread_code = np.unique(tid, return_inverse=True)
    thread_code = thread_code.ravel().astype(np.int64)
    key_start = thread_code[ranges] * span + (start_ns[ranges] - base)
    key_end = thread_code[ranges] * span + (end_ns[ranges] - base)
    order = np.argsort(key_start, kind="stable")
    key_start, key_end = key_start[order], np.maximum.accumulate(key_end[order])  # threads never overlap

    def test(rows: np.ndarray) -> np.ndarray:
        start = thread_code[rows] * span + (start_ns[rows] - base)
        end = thread_code[rows] * span + (end_ns[rows] - base)
        at = np.searchsorted(key_start, start, side="right") - 1
        return (at >= 0) & (end <= key_end[np.maximum(at, 0)]) if key_start.size else np.zeros(rows.size, bool)
    return test


def _kernel_kinds(collective: ev.Texts, kind_code: np.ndarray, rows: int) -> ev.Texts:
    """The collective a known kernel family names, where no other source said one (DeepEP's dispatch is
    an all-to-all: no record_param_comms says so)."""
    codes = ev.Texts.of(collective, ev.COLLECTIVE_KINDS).codes
    said = np.zeros(codes.size, np.int32)
    said[:rows] = kind_code
    unsaid = (codes == 0) | (codes == ev.COLLECTIVE_KINDS.index(ev.OTHER_COMM))
    return ev.Texts.from_codes(np.where(unsaid & (said > 0), said, codes), ev.COLLECTIVE_KINDS)


def _columns(classes, name_codes, name_uniques, start_ns, end_ns, ids: dict, steps: dict, comm_kernel: dict):
    """The event-table columns as categoricals, one ProfileStep row appended per step (the CPU
    ProfilerStep#N rows stay as USER ranges)."""
    kind = np.full(len(classes), ev.KINDS.index(ev.RANGE), np.int64)
    for cls, value in ((KERNEL_CLASS, ev.KERNEL), (MEMCPY_CLASS, ev.MEMCPY), (MEMSET_CLASS, ev.MEMSET),
                       (RUNTIME_CLASS, ev.RUNTIME)):
        kind[classes == cls] = ev.KINDS.index(value)
    category = steps["host_category"].copy()
    category[category < 0] = ev.CATEGORIES.index(ev.USER)
    kind[category == ev.CATEGORIES.index(ev.COMMUNICATION)] = ev.KINDS.index(ev.COMM_OP)
    category[np.isin(classes, (MEMCPY_CLASS, MEMSET_CLASS))] = ev.CATEGORIES.index(ev.MEMORY)
    category[classes == RUNTIME_CLASS] = ev.CATEGORIES.index(ev.RUNTIME_CAT)
    is_kernel = classes == KERNEL_CLASS
    category[is_kernel] = np.where(comm_kernel["is_comm"][is_kernel], ev.CATEGORIES.index(ev.COMMUNICATION),
                                   ev.CATEGORIES.index(ev.COMPUTE))
    comm_rule = comm_kernel["rule"].copy()
    comm_rule[(category == ev.CATEGORIES.index(ev.COMMUNICATION)) & ~is_kernel] = _HOST_RULE
    lane_kind = np.where(ids["gpu"], ev.LANE_KINDS.index(ev.GPU_STREAM), ev.LANE_KINDS.index(ev.HOST_THREAD))

    n_steps = steps["rows"].size
    if ev.PROFILE_STEP not in name_uniques:
        name_uniques = [*name_uniques, ev.PROFILE_STEP]
    profile_step_code = name_uniques.index(ev.PROFILE_STEP)
    columns = {
        "kind": np.concatenate([kind, np.full(n_steps, ev.KINDS.index(ev.RANGE))]),
        "category": np.concatenate([category, np.full(n_steps, ev.CATEGORIES.index(ev.PHASE))]),
        "name": np.concatenate([name_codes, np.full(n_steps, profile_step_code)]),
        "start_ns": np.concatenate([start_ns, steps["start"]]),
        "end_ns": np.concatenate([end_ns, steps["end"]]),
        "device": np.concatenate([ids["device"], np.full(n_steps, -1, np.int64)]),
        "lane": np.concatenate([ids["lane"], ids["tid"][steps["rows"]]]),
        "lane_kind": np.concatenate([lane_kind, np.full(n_steps, ev.LANE_KINDS.index(ev.HOST_THREAD))]),
        "pid": np.concatenate([ids["pid"], steps["pid"]]),
        "correlation_id": np.concatenate([ids["correlation"], np.full(n_steps, -1, np.int64)]),
        "step": np.concatenate([steps["step"], steps["numbers"]]),
        "comm_rule": np.concatenate([comm_rule, np.full(n_steps, "", dtype=object)]),
    }
    for column, allowed in (("kind", ev.KINDS), ("category", ev.CATEGORIES), ("lane_kind", ev.LANE_KINDS),
                            ("name", name_uniques)):
        columns[column] = ev.Texts.from_codes(columns[column], allowed)
    phase_row = np.concatenate([steps["phase_row"], np.full(n_steps, -1, np.int64)])
    phase_name = np.where(phase_row >= 0, columns["name"].codes[np.maximum(phase_row, 0)], -1)
    used, phase_code = _small_unique(phase_name, len(name_uniques))
    names = ["" if code < 0 else name_uniques[code] for code in used.tolist()]
    columns["phase"] = ev.Texts.from_codes(phase_code, names) if "" in names or not names else \
        ev.Texts.from_codes(phase_code + 1, ["", *names])
    return columns, name_uniques


def _small_unique(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(codes, return_inverse=True)`` for codes in [-1, size): a mask of the values used and its
    running count, no sort (np.unique sorted the 84k rows of a 109k-event rank in 12 ms)."""
    used = np.zeros(size + 1, bool)
    used[codes + 1] = True
    return np.flatnonzero(used) - 1, (np.cumsum(used) - 1)[codes + 1]


# ---------------------------------------------------------------------------- profiles


def _number_column(values: list) -> np.ndarray:
    """float64 numbers from JSON values, numeric text included (NaN where absent or not a number);
    converted once per distinct value."""
    codes, uniques = ev.factorize(values)
    return np.array([_as_float(value) for value in uniques], np.float64)[codes] if codes.size \
        else np.empty(0, np.float64)


def _as_float(value) -> float:
    """A JSON number or numeric text as a float (a bool as 0/1), anything else NaN."""
    if isinstance(value, (bool, int, float)) or (isinstance(value, str) and value.strip()):
        try:
            return float(value)
        except (ValueError, OverflowError):
            return float("nan")
    return float("nan")


def _profile_tables(doc: Document, rows: list, is_op: np.ndarray, name_codes, name_uniques, start_ns, end_ns,
                    ids: dict) -> dict:
    """The side tables of analyses.profiles, read before the raw rows are released: the framework
    operators (cpu_op rows) with their ``flops`` arg and record_shapes' Input Dims / Concrete
    Inputs (codes into distinct decoded values; -1 on the ops whose FLOPs formula reads none), and
    the profile_memory samples. Facts only."""
    where = np.flatnonzero(is_op)
    args = doc.args(compress(rows, is_op.tolist()))
    op_names = name_codes[where]
    (dims_codes, dims), (concrete_codes, concrete) = _shape_args(doc, args, op_names, name_uniques)
    operators = ev.Operators({
        "start_ns": start_ns[where], "end_ns": end_ns[where], "pid": ids["pid"][where], "lane": ids["tid"][where],
        "name": ev.Texts.from_codes(op_names, name_uniques), "flops": _number_column(doc.arg(args, "flops")),
        "dims": dims_codes, "concrete": concrete_codes})
    samples = doc.memory_samples()
    sample_args = doc.args(samples)
    time_ns, _ = us_to_ns(doc.field(samples, "ts")) if samples else (np.empty(0, np.int64), None)
    memory = ev.MemorySamples({"time_ns": time_ns,
                                "allocated": int_column(doc.arg(sample_args, "total_allocated")),
                                "reserved": int_column(doc.arg(sample_args, "total_reserved")),
                                "device_type": int_column(doc.arg(sample_args, "device_type")),
                                "device_id": int_column(doc.arg(sample_args, "device_id"))})
    return {"operators": operators, "input_dims": dims, "concrete_inputs": concrete, "memory": memory}


def _shape_args(doc: Document, args: list, op_names: np.ndarray, name_uniques: list) -> tuple:
    """record_shapes' Input Dims and Concrete Inputs of the operators as ((codes, distinct values),
    (codes, distinct values)), decoded only for the ops whose FLOPs formula reads them (GEMMs and
    convolutions; the code is -1 elsewhere): on every other op they feed no figure, and decoding
    them for every op was a tenth of a 128-rank merge's CPU."""
    from ..flop_ops import shape_args_needed  # the formulas' own list; imported once the reader runs
    needs_dims, needs_concrete = shape_args_needed(name_uniques)
    out = []
    for needed, arg in ((needs_dims, "input_dims"), (needs_concrete, "concrete")):  # two args
        on = needed[op_names] if op_names.size else np.zeros(0, bool)
        codes = np.full(op_names.size, -1, np.int64)
        codes[on], values = doc.json_arg(list(compress(args, on.tolist())), arg)
        out.append((codes, values))
    return tuple(out)


def _factorize_names(names: list) -> tuple[np.ndarray, list[str]]:
    """Codes and distinct names as text (a missing or non-text name becomes its text or '')."""
    codes, uniques = ev.factorize(names)
    if all(map(isinstance, uniques, repeat(str))):
        return codes, uniques
    recoded, texts = ev.factorize(["" if value is None else str(value) for value in uniques])
    return recoded[codes] if codes.size else codes, texts


def _step_number(name: str) -> int:
    match = _STEP_NAME.match(name)
    return int(match.group(1)) if match else -1


def _main_pid(pid: np.ndarray, classes: np.ndarray, step_pid: np.ndarray) -> int | None:
    """The training process: owner of the ProfilerSteps, else of most launches, else of most
    host events; None for a GPU-only trace."""
    for values in (step_pid, pid[classes == RUNTIME_CLASS], pid[np.isin(classes, (HOST_RANGE_CLASS, RUNTIME_CLASS))]):
        if values.size:
            unique, counts = np.unique(values, return_counts=True)
            return int(unique[counts.argmax()])
    return None


def _step_gpu_bounds(step_numbers, work_step, work_start, work_end, step_start, step_end):
    """Per step: [min start, max end] of the GPU work launched in it, else its CPU bounds."""
    gpu_start, gpu_end = step_start.copy(), step_end.copy()
    if not step_numbers.size or not work_step.size:
        return gpu_start, gpu_end
    order = np.argsort(step_numbers, kind="stable")
    slot = np.minimum(np.searchsorted(step_numbers[order], work_step), order.size - 1)
    valid = (work_step >= 0) & (step_numbers[order][slot] == work_step)
    target = np.where(valid, order[slot], -1)
    lowest, highest = span_of_groups(step_numbers.size, target, work_start, work_end)
    has_work = highest >= lowest
    gpu_start[has_work], gpu_end[has_work] = lowest[has_work], highest[has_work]
    return gpu_start, gpu_end


def _check_times(start_ns: np.ndarray, end_ns: np.ndarray, base_ns: int, path: Path) -> list[str]:
    """Refuse times that overflowed int64 once converted (rows beyond a plausible span are already
    dropped by plausible_span: a
    corrupt ts near 2**63 or far below 0 would make a 292-year window); warn on negative times."""
    if not start_ns.size:
        return []
    if (end_ns < start_ns).any():
        raise ev.SourceError("ts + dur does not fit int64 nanoseconds")
    first, last = int(start_ns.min()), int(end_ns.max())
    if not (-2 ** 63 <= first + base_ns and last + base_ns < 2 ** 63):
        raise ev.SourceError("ts + baseTimeNanoseconds does not fit int64 nanoseconds")
    negative = int((start_ns < 0).sum())
    return [f"{path}: {negative} event(s) with a negative timestamp"] if negative and first + base_ns < 0 else []


def _checked_rank(doc: Document, path: Path) -> tuple[int | None, str, int | None, list[str]]:
    """Rank and world size, a corrupt world_size or a rank outside the world dropped with a warning."""
    rank, rank_from = _rank(doc.info.get("distributedInfo"), path)
    info = doc.info.get("distributedInfo") if isinstance(doc.info.get("distributedInfo"), dict) else {}
    rank, world_size, warnings = sane_rank(rank, to_int(info.get("world_size"), 0) or None, path)
    return rank, rank_from if rank is not None else "unknown", world_size, warnings


def _rank(info, path: Path) -> tuple[int | None, str]:
    """Rank from distributedInfo, else from the file name (rank-3, rank3, rank_3...), else None."""
    if isinstance(info, dict) and info.get("rank") is not None:
        rank = to_int(info["rank"], -1)
        if rank >= 0:
            return rank, "distributedInfo"
    for name in (path.name, path.parent.name):
        matches = _RANK_IN_NAME.findall(name)
        if matches:
            return int(matches[-1]), "file name"
    return None, "unknown"


def _meta(doc: Document, device: int | None, unlaunched: int, skipped: dict) -> dict:
    """Compact facts about the file (they travel to rank 0 with the summary)."""
    info = doc.info.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    meta = {"world_size": to_int(info.get("world_size"), 0) or None, "backend": info.get("backend"),
            "base_time_ns": to_int(doc.info.get("baseTimeNanoseconds"), 0) or None,
            "gpu_events_without_launch": unlaunched, "skipped_categories": skipped}
    if isinstance(doc.info.get("host_name"), str) and doc.info["host_name"]:
        meta["hostname"] = doc.info["host_name"]  # PyTorch's top-level "host_name": ranks on one host share a clock
    properties = doc.info.get("deviceProperties")
    if device is not None and isinstance(properties, list):
        meta["gpu_name"] = next((p.get("name") for p in properties if isinstance(p, dict) and p.get("id") == device),
                                None)
    return meta


__all__ = ["read"]
