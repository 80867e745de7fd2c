"""The communication columns of a Kineto trace's COMMUNICATION rows, for ``kineto``.

Communication columns (``collective``, ``group``, ``nbytes``, ``peer``) on the COMMUNICATION rows
(NCCL kernels; gloo:* ranges, and c10d::* ops on CPU-only traces), each from the most explicit
source that says it:

* an NCCL kernel: its own args (newer PyTorch: "Collective name", "In/Out msg nelems", "dtype",
  "Group size", "Process Group Name"/"Ranks"), else the innermost ``record_param_comms`` around
  its launching call (the ``cudaLaunchKernel`` with the same ``correlation``, on that call's
  thread), then the innermost ``nccl:*`` and ``c10d::*`` ranges there: a SendRecv kernel launched
  inside ``nccl:all_to_all`` is an alltoall; the kernel's own name only when nothing encloses it;
* a c10d::* op: its name and the record_param_comms inside it; a gloo:* range: its name.

An arg "Collective name" that names no known collective says nothing (the names decide: such a
text once made every op "other", 0 matched); one naming a kind that no op name around agrees with
(all_gather on c10d::allreduce_) is kept, as the most explicit source. Both are counted in a
warning with an example.

``nbytes`` is the nccl-tests message size S: max(In, Out msg nelems) x dtype size (allgather's
total output, reduce_scatter's total input), else record_shapes' "Input Dims" x "Input type" (a
c10d::* op lists output and input: the larger; nccl:*/gloo:* ranges list the input: allgather's
is multiplied by the group size when that is known), else -1 (a TensorList has no dtype).
``group``: the args' "Process Group Name"; the one group of pg_config when the rank has one; for
gloo (which names no group) the worker threads: each gloo group owns its threads, created with
it and taking turns at its ops: threads split by the kinds they ran, else at the largest tid
gaps, into equal sets mapped in order to pg_config's entries, or, when their count cannot fill
every group's pool and pg_config starts with the world, to the entries after it (the default
group ran nothing: TP x DP on CPU) (else "" and a warning); a c10d::* op then takes the one
group of the gloo ranges of its kind.
``peer``: c10d::send / recv_'s third concrete input (a rank in the group) as a global rank; a
gloo:send / gloo:recv range (the exchange, with its wait) takes the peer of the c10d op of its
direction whose span holds the range's start on the same thread (gloo creates the Work, and
opens the range, inside the op; the range ends at wait(), after the op returned).
``sent_bytes`` / ``recv_bytes`` (all-to-all rows only): what the rank sends and receives, its own share
included: In / Out msg nelems x dtype (NCCL's record_param_comms, whose "In/Out split size" are the
per-peer rows of those tensors), else the ``c10d::alltoall_base_`` op's output and input tensors (a
gloo:all_to_all range takes its op's: _gloo_alltoall_ops; torch 2.13 on gloo records no
record_param_comms, and the op's "Concrete Inputs" hold the splits). Uneven MoE splits make them
differ by rank.
``meta["process_groups"]`` = {name: ranks} from pg_config and the args, ``meta["group_from"]``.
"""

from __future__ import annotations

import json
from itertools import compress
from pathlib import Path

import numpy as np

from .. import events as ev
from ..joins import innermost_enclosing
from . import dtype_size
from .kineto_decode import (
    HOST_RANGE_CLASS,
    RUNTIME_CLASS,
    Document,
    int_column,
    to_int,
)

_MAX_ELEMENTS = 2 ** 59  # a message size in elements above this (x 8 bytes) is corrupt


# ---------------------------------------------------------------------------- communication
# Rows that can tell about a communication op: the NCCL kernel (newer PyTorch copies the
# collective's args onto it), record_param_comms (the same args on the host), the nccl:*/gloo:*
# ranges and the c10d::* ops (their names; "Input Dims"/"Input type" when shapes were recorded).
_SRC_KERNEL, _SRC_PARAM, _SRC_NCCL, _SRC_C10D, _SRC_GLOO = range(5)
_PARAM_COMMS = "record_param_comms"
_ALLGATHER_CODE = ev.COLLECTIVE_KINDS.index(ev.ALLGATHER)
_P2P_CODES = (ev.COLLECTIVE_KINDS.index(ev.SEND), ev.COLLECTIVE_KINDS.index(ev.RECV))
_OTHER_CODE = ev.COLLECTIVE_KINDS.index(ev.OTHER_COMM)
_COMM_ROW = ev.CATEGORIES.index(ev.COMMUNICATION)
_PEER_ARG = 2  # c10d::send(tensors, group, dstRank, tag) / c10d::recv_(tensors, group, srcRank, tag)


def comm_sources(classes, name_codes, name_uniques, comm_kernel: np.ndarray) -> np.ndarray:
    """Per row, the kind of row (_SRC_*) that can describe a communication op, -1 for the rest
    (``comm_kernel``: per row, a communication kernel by comm_kernels' rules)."""
    host_source = np.full(len(name_uniques), -1, np.int8)
    for index, name in enumerate(name_uniques):  # per distinct name
        for source, match in ((_SRC_PARAM, name == _PARAM_COMMS), (_SRC_NCCL, name.startswith("nccl:")),
                              (_SRC_GLOO, name.startswith("gloo:")), (_SRC_C10D, name.startswith("c10d::"))):
            if match:
                host_source[index] = source
    if not name_codes.size:
        return np.empty(0, np.int8)
    source = np.where(classes == HOST_RANGE_CLASS, host_source[name_codes], -1).astype(np.int8)
    source[comm_kernel] = _SRC_KERNEL
    return source


def _kind_codes(values: list) -> np.ndarray:
    """COLLECTIVE_KINDS index of each op text (0 where absent or not text)."""
    codes, uniques = ev.factorize(values)
    kinds = [ev.COLLECTIVE_KINDS.index(ev.collective_kind(u)) if isinstance(u, str) and u else 0 for u in uniques]
    return np.array(kinds, np.int64)[codes] if codes.size else np.empty(0, np.int64)


def _text_column(values: list) -> np.ndarray:
    """Object array of text ("" where absent; numbers as their text)."""
    codes, uniques = ev.factorize(values)
    texts = np.array(["" if u is None or isinstance(u, (list, dict, bool)) else str(u) for u in uniques],
                     dtype=object)
    return texts[codes] if codes.size else np.empty(0, object)


def comm_facts(doc: Document, rows: list, source: np.ndarray, name_codes, name_uniques) -> dict:
    """What the rows that can describe a communication op say on their own, read from their args
    before the raw rows are released (arrays over those rows; -1 / 0 / "" = not said)."""
    keep = source >= 0
    where = np.flatnonzero(keep)
    src = source[where]
    args = doc.args(compress(rows, keep.tolist()))
    used, used_codes = np.unique(name_codes[where], return_inverse=True)  # kinds per distinct name
    name_kind = _kind_codes([name_uniques[code] for code in used.tolist()])[used_codes.ravel()] if where.size \
        else np.empty(0, np.int64)
    name_kind[src == _SRC_PARAM] = 0  # the name record_param_comms says nothing
    corrupt: list[np.ndarray] = []
    sizes = (doc.arg(args, "in_nelems"), doc.arg(args, "out_nelems"))
    in_nelems, out_nelems = int_column(sizes[0], corrupt=corrupt), int_column(sizes[1], corrupt=corrupt)
    nelems = np.maximum(in_nelems, out_nelems)
    huge = nelems > _MAX_ELEMENTS  # times 8 bytes would overflow int64: not a real message
    size_example = _size_example(sizes, corrupt, huge)
    nelems = np.where(huge, -1, nelems)
    dtype_codes, dtypes = ev.factorize(doc.arg(args, "dtype"))
    element = np.array([dtype_size(d) for d in dtypes], np.int64)[dtype_codes] if where.size else nelems
    tensor_bytes, input_only, op_sides = _shape_bytes(doc, args, src)
    sides = [np.where(~huge & (count >= 0) & (element > 0), count * element, -1) for count in (in_nelems, out_nelems)]
    group = _text_column(doc.arg(args, "pg_name"))
    concrete_codes, concrete = doc.json_arg(args, "concrete")
    peer = np.array([_peer_in_group(value) for value in concrete], np.int64)[concrete_codes] if where.size \
        else nelems
    collective = doc.arg(args, "collective")
    return {"rows": where, "source": src, "arg_kind": _kind_codes(collective), "arg_text": _text_column(collective),
            "name": np.asarray(name_uniques, dtype=object)[name_codes[where]] if where.size else np.empty(0, object),
            "name_kind": name_kind, "nelems_bytes": np.where((nelems >= 0) & (element > 0), nelems * element, -1),
            "tensor_bytes": tensor_bytes, "input_only": input_only, "group": group,
            "in_bytes": _first_known(-1, sides[0], op_sides[0]), "out_bytes": _first_known(-1, sides[1], op_sides[1]),
            "group_size": int_column(doc.arg(args, "group_size")),
            "peer": np.where(np.isin(name_kind, _P2P_CODES) & (src == _SRC_C10D), peer, -1),
            "named_groups": _named_groups(group, doc.arg(args, "pg_ranks")),
            "corrupt_sizes": int((corrupt[0] | corrupt[1] | huge).sum()), "size_example": size_example}


def _size_example(sizes: tuple[list, list], corrupt: list[np.ndarray], huge: np.ndarray) -> str:
    """The first out-of-range message size as the file wrote it (as JSON, cut to 40 characters), for
    the warning: it once said "(e.g. 1e400)" whatever the file held."""
    bad = np.flatnonzero(corrupt[0] | corrupt[1] | huge)
    if not bad.size:
        return ""
    row = int(bad[0])
    values = [sizes[0][row], sizes[1][row]]
    if corrupt[0][row] or corrupt[1][row]:
        value = values[0] if corrupt[0][row] else values[1]
    else:  # a whole number too large to be a message: the larger one
        value = max((v for v in values if isinstance(v, int)), default=values[0])
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _shape_bytes(doc: Document, args: list, src: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Bytes of the tensor arguments from record_shapes' "Input Dims" x "Input type" (once per
    distinct pair), whether they are the input only, and (input bytes, output bytes). nccl:*/gloo:*
    ranges list their inputs (bytes = their sum; the input); c10d::* ops list output and input (bytes =
    the larger: allgather's total output, reduce_scatter's total input; a real gloo trace's
    ``c10d::alltoall_base_`` lists [out rows, width], [in rows, width]: the first is what the rank
    receives, the second what it sends), input only when one tensor is listed. -1: unknown."""
    dim_codes, dims = doc.json_arg(args, "input_dims")
    type_codes, types = doc.json_arg(args, "input_type")
    if not src.size:
        return np.empty(0, np.int64), np.empty(0, bool), (np.empty(0, np.int64), np.empty(0, np.int64))
    pair_codes, pairs = ev.factorize(list(zip(dim_codes.tolist(), type_codes.tolist())))
    sizes = [_tensor_sizes(dims[d], types[t]) for d, t in pairs]
    total = np.array([sum(s) if s else -1 for s in sizes], np.int64)[pair_codes]
    largest = np.array([max(s) if s else -1 for s in sizes], np.int64)[pair_codes]
    count = np.array([len(s) if s else 0 for s in sizes], np.int64)[pair_codes]
    first = np.array([s[0] if s else -1 for s in sizes], np.int64)[pair_codes]
    second = np.array([s[1] if s and len(s) == 2 else -1 for s in sizes], np.int64)[pair_codes]
    from_op = src == _SRC_C10D
    tensor_bytes = np.where(from_op, largest, total)
    ranges = np.isin(src, (_SRC_NCCL, _SRC_GLOO))
    sides = (np.where(from_op, second, np.where(ranges, total, -1)), np.where(from_op & (count == 2), first, -1))
    return np.where(np.isin(src, (_SRC_C10D, _SRC_NCCL, _SRC_GLOO)), tensor_bytes, -1), ~from_op | (count == 1), sides


def _tensor_sizes(dims, types) -> list[int] | None:
    """Byte size of each tensor argument whose element type is known; None when shapes are absent
    or a tensor argument has no element type (a TensorList): a partial size would be wrong."""
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types):
        return None
    sizes = []
    for shape, dtype in zip(dims, types):
        element = dtype_size(dtype)
        flat = isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)
        if element > 0 and flat:
            sizes.append(int(np.prod(shape, dtype=object)) * element if shape else element)
        elif shape:
            return None
    return sizes or None


def _peer_in_group(concrete) -> int:
    """The peer's rank within the group from c10d::send/recv_ "Concrete Inputs" (its 3rd entry)."""
    if isinstance(concrete, list) and len(concrete) > _PEER_ARG:
        value = concrete[_PEER_ARG]
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        if type(value) is int and value >= 0:
            return value
    return -1


def _named_groups(group: np.ndarray, ranks_text: list) -> dict[str, list[int]]:
    """{group name: ranks} from the "Process Group Ranks" text ("[0, 1]") next to the group names."""
    named: dict[str, list[int]] = {}
    for name, text in dict(zip(group.tolist(), ranks_text)).items():  # one per distinct name
        ranks = _rank_list(json.loads(text) if isinstance(text, str) and _looks_like_list(text) else text)
        if name and ranks is not None:
            named.setdefault(name, ranks)
    return named


def _looks_like_list(text: str) -> bool:
    try:
        return isinstance(json.loads(text), list)
    except ValueError:
        return False


def _rank_list(value) -> list[int] | None:
    if isinstance(value, list) and all(type(rank) is int and rank >= 0 for rank in value):
        return list(value)
    return None


def _take(values: np.ndarray, index: np.ndarray, missing):
    """values[index] where index >= 0, else ``missing``."""
    if not values.size:
        return np.full(index.size, missing, dtype=values.dtype)
    return np.where(index >= 0, values[np.maximum(index, 0)], missing)


def _first_known(missing, *candidates: np.ndarray) -> np.ndarray:
    """Per element, the first candidate that is not ``missing`` (candidates in order of trust)."""
    out = candidates[0].copy()
    for candidate in candidates[1:]:
        hole = out == missing
        out[hole] = candidate[hole]
    return out


def _related_ops(facts: dict, ids: dict, start_ns, end_ns, launch_row: np.ndarray) -> dict[int, np.ndarray]:
    """Per fact row, the fact row of the op around it, by source (-1: none). A kernel: the
    innermost record_param_comms / nccl:* / c10d::* range around its launching call on the
    launching thread (a SendRecv kernel inside nccl:all_to_all is an alltoall). A c10d::* op:
    the record_param_comms inside it (on CPU traces the op is the communication row). A gloo:send
    / gloo:recv range: the c10d op it started in, for the peer (_gloo_p2p_ops)."""
    rows, src, tid = facts["rows"], facts["source"], ids["tid"]
    related = {source: np.full(rows.size, -1, np.int64) for source in (_SRC_PARAM, _SRC_NCCL, _SRC_C10D)}
    kernels = np.flatnonzero(src == _SRC_KERNEL)
    calls = launch_row[rows[kernels]]
    launched = kernels[calls >= 0]
    calls = calls[calls >= 0]
    for source, found in related.items():
        ranges = np.flatnonzero(src == source)
        if not ranges.size or not calls.size:
            continue
        r = rows[ranges]
        inner = innermost_enclosing(tid[r], start_ns[r], end_ns[r], tid[calls], start_ns[calls], end_ns[calls])
        found[launched] = np.where(inner >= 0, ranges[np.maximum(inner, 0)], -1)
    ops, params = np.flatnonzero(src == _SRC_C10D), np.flatnonzero(src == _SRC_PARAM)
    if ops.size and params.size:
        o, p = rows[ops], rows[params]
        outer = innermost_enclosing(tid[o], start_ns[o], end_ns[o], tid[p], start_ns[p], end_ns[p])
        related[_SRC_PARAM][ops[outer[outer >= 0]]] = params[outer >= 0]
    gloo_op = np.maximum(_gloo_p2p_ops(facts, tid, start_ns, end_ns), _gloo_alltoall_ops(facts, start_ns))
    related[_SRC_C10D] = np.where(gloo_op >= 0, gloo_op, related[_SRC_C10D])
    return related


def _gloo_alltoall_ops(facts: dict, start_ns: np.ndarray) -> np.ndarray:
    """Per fact row: for a gloo:all_to_all range, the fact row of its c10d::alltoall* op (-1: none,
    and for every other row). Why: the range (the exchange, kept as the communication row) lists only
    the input tensor; the op lists output and input, so only it says what the rank receives (uneven
    MoE splits: not what it sends). The op enqueues the work on a gloo worker, which runs a group's
    works in order, so the k-th op pairs with the k-th range: taken only when the counts are equal,
    each range starts after its op and both list the same input bytes (a real 4-rank gloo job:
    9 of 9 pairs on every rank); else none (never a guess)."""
    rows, src, kind = facts["rows"], facts["source"], facts["name_kind"]
    found = np.full(rows.size, -1, np.int64)
    alltoall = kind == ev.COLLECTIVE_KINDS.index(ev.ALLTOALL)
    gloo, ops = np.flatnonzero((src == _SRC_GLOO) & alltoall), np.flatnonzero((src == _SRC_C10D) & alltoall)
    if not gloo.size or gloo.size != ops.size:
        return found
    gloo, ops = gloo[np.argsort(start_ns[rows[gloo]], kind="stable")], ops[np.argsort(start_ns[rows[ops]],
                                                                                     kind="stable")]
    sent_gloo, sent_op = facts["in_bytes"][gloo], facts["in_bytes"][ops]
    same = (sent_gloo < 0) | (sent_op < 0) | (sent_gloo == sent_op)
    if same.all() and (start_ns[rows[gloo]] >= start_ns[rows[ops]]).all():
        found[gloo] = ops
    return found


def _gloo_p2p_ops(facts: dict, tid: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Per fact row: for a gloo:send / gloo:recv range, the fact row of its c10d::send / recv_ op
    (-1: none, and for every other row). Why: on gloo only the op's concrete inputs name the peer
    (and tag), while the range is the exchange itself, where the wait is, and the row that is kept.
    Traces show the link unambiguously: gloo creates the Work, which opens the range, inside the
    op on the op's thread, and the range ends at wait(), after the op returned; so ranges and ops
    cross, never nest. The op is the one of the same direction whose span holds the range's
    start on the same thread; an op that two ranges would claim is left to neither (a guess)."""
    rows, src, kind = facts["rows"], facts["source"], facts["name_kind"]
    found = np.full(rows.size, -1, np.int64)
    p2p = np.isin(kind, _P2P_CODES)
    gloo, ops = np.flatnonzero((src == _SRC_GLOO) & p2p), np.flatnonzero((src == _SRC_C10D) & p2p)
    if not gloo.size or not ops.size:
        return found
    o, g = rows[ops], rows[gloo]
    inner = innermost_enclosing(tid[o], start_ns[o], end_ns[o], tid[g], start_ns[g], start_ns[g])  # the start
    op = np.where(inner >= 0, ops[np.maximum(inner, 0)], -1)
    op[kind[np.maximum(op, 0)] != kind[gloo]] = -1
    claims = np.bincount(np.maximum(op, 0), weights=op >= 0, minlength=rows.size)
    found[gloo] = np.where(claims[np.maximum(op, 0)] == 1, op, -1)
    return found


def _merged_facts(facts: dict, related: dict[int, np.ndarray]) -> dict:
    """Each fact row's own facts completed by the ops around it, most explicit first: the args of
    the collective (kernel, record_param_comms), then the op names, then the kernel name; bytes
    from msg nelems x dtype, else the c10d::* op's shapes, else the nccl:* range's. An arg that
    names no known collective ("Collective name": "lots") says nothing: the names decide (it once
    made every op "other", 0 matched). ``said_by`` / ``named_by``: the fact row whose args / name
    gave the kind, for the warnings of _kind_warnings."""
    param, nccl, op = related[_SRC_PARAM], related[_SRC_NCCL], related[_SRC_C10D]
    arg_kind, name_kind = facts["arg_kind"], facts["name_kind"]
    own_name = np.where(facts["source"] == _SRC_KERNEL, 0, name_kind)
    kernel_name = np.where(facts["source"] == _SRC_KERNEL, name_kind, 0)
    names = (own_name, _take(name_kind, nccl, 0), _take(name_kind, op, 0))
    said = _first_known(0, arg_kind, _take(arg_kind, param, 0))
    by_name = _first_known(0, *names, kernel_name)
    kind = np.where((said == _OTHER_CODE) & (by_name > 0), by_name, _first_known(0, said, by_name))
    here = np.arange(said.size)
    known = [(name > 0) & (name != _OTHER_CODE) for name in names]
    tensor_bytes, input_only = facts["tensor_bytes"], facts["input_only"]
    around = np.where(_take(tensor_bytes, op, -1) >= 0, op, nccl)
    return {"kind": kind, "said": said, "said_by": np.where(arg_kind > 0, here, param),
            "named": np.logical_or.reduce(known),
            "agree": np.logical_or.reduce([k & (name == said) for k, name in zip(known, names)]),
            "named_by": np.where(known[0], here, np.where(known[1], nccl, op)),
            "nelems_bytes": _first_known(-1, facts["nelems_bytes"], _take(facts["nelems_bytes"], param, -1)),
            "tensor_bytes": _first_known(-1, tensor_bytes, _take(tensor_bytes, around, -1)),
            "input_only": np.where(tensor_bytes >= 0, input_only, _take(input_only, around, False)),
            "group": _first_known("", facts["group"], _take(facts["group"], param, "")),
            "sent_bytes": _first_known(-1, facts["in_bytes"], _take(facts["in_bytes"], param, -1),
                                       _take(facts["in_bytes"], op, -1)),
            "recv_bytes": _first_known(-1, facts["out_bytes"], _take(facts["out_bytes"], param, -1),
                                       _take(facts["out_bytes"], op, -1)),
            "group_size": _first_known(-1, facts["group_size"], _take(facts["group_size"], param, -1)),
            "peer": _first_known(-1, facts["peer"], _take(facts["peer"], op, -1))}


def _pg_config(doc: Document) -> list[tuple[str, list[int] | None]]:
    """The rank's process groups in creation order from distributedInfo.pg_config."""
    info = doc.info.get("distributedInfo")
    config = info.get("pg_config") if isinstance(info, dict) else None
    if not isinstance(config, list):
        return []
    return [(str(entry.get("pg_name")), _rank_list(entry.get("ranks"))) for entry in config
            if isinstance(entry, dict) and entry.get("pg_name") is not None]


def _clusters_by_kinds(threads: np.ndarray, row_tid: np.ndarray, row_kind: np.ndarray,
                       groups: int) -> np.ndarray | None:
    """Cluster index of each sorted gloo worker tid by the kinds of collective it ran, or None.
    A group's threads take turns at its ops, so they run the same kinds; when that splits the
    threads into as many equal sets as there are groups, the sets are the groups, ordered by
    their first tid (groups are created one after the other, each with its threads)."""
    signature = {int(t): "|".join(sorted(set(map(str, row_kind[row_tid == t])))) for t in threads}  # per thread
    sets = sorted({s for s in signature.values()}, key=lambda s: min(t for t, v in signature.items() if v == s))
    if len(sets) != groups:
        return None
    cluster = np.array([sets.index(signature[int(t)]) for t in threads], np.int64)
    return cluster if (np.bincount(cluster) == threads.size // groups).all() and threads.size % groups == 0 else None


def _thread_clusters(threads: np.ndarray, groups: int) -> np.ndarray | None:
    """Cluster index (in tid order) of each sorted gloo worker tid, or None when the split is not
    clear. A group's threads are created together, so its tids are close; other processes on the
    host (the other ranks, started at the same moment) can take tids in between, so the groups
    are split at the ``groups - 1`` largest tid gaps, and only accepted when every group gets
    the same number of threads (gloo gives each group the same pool) and those gaps are wider
    than every gap inside a group."""
    if threads.size < groups or threads.size % groups:
        return None
    gaps = np.diff(threads)
    if groups == 1:
        return np.zeros(threads.size, np.int64)
    cut = np.sort(np.argsort(-gaps, kind="stable")[:groups - 1])
    inside = np.delete(gaps, cut)
    if inside.size and gaps[cut].min() <= inside.max():
        return None
    cluster = np.zeros(threads.size, np.int64)
    cluster[cut + 1] = 1
    cluster = np.cumsum(cluster)
    return cluster if (np.bincount(cluster) == threads.size // groups).all() else None


def _thread_groups(threads: np.ndarray, row_tid: np.ndarray, row_kind: np.ndarray, pg_names: list[str],
                   default_first: bool) -> tuple[np.ndarray | None, list[str], bool]:
    """The gloo worker threads' groups: (cluster per thread, the pg names they index, whether the
    default group was taken to be idle). The split by kinds, else by tid gaps, into the groups of
    pg_config; failing that, when pg_config starts with the default (world) group, into the
    others: the default group is created first, with init_process_group, and a job whose
    collectives all run in subgroups leaves its threads without a single gloo range (TP x DP on
    CPU). Only when the threads cannot all be there (every group has the same pool, and their
    count is no multiple of the groups'); counts that then disagree across ranks are still caught
    by the matching."""
    idle_default = default_first and threads.size % len(pg_names) != 0
    for names, idle in ((pg_names, False), (pg_names[1:] if idle_default else [], True)):
        if not names:
            continue
        cluster = _clusters_by_kinds(threads, row_tid, row_kind, len(names))
        cluster = _thread_clusters(threads, len(names)) if cluster is None else cluster
        if cluster is not None:
            return cluster, names, idle
    return None, pg_names, False


def _infer_groups(merged: dict, facts: dict, tid: np.ndarray, pg_names: list[str],
                  default_first: bool = False) -> tuple[list[str], list[str]]:
    """Fill the group of rows whose args do not name it, in ``merged["group"]``; returns how
    (phrases for meta["group_from"]) and warnings. One group in pg_config: every op is in it.
    Gloo: each process group owns its worker threads, created with the group: the threads split
    by the kinds they ran (_clusters_by_kinds), else into runs of close tids (_thread_clusters),
    map to pg_config entries in order (never a guess when neither split is clear). A c10d::* op
    (CPU trace): the one group of the gloo ranges of its kind, when its kind has as many gloo
    ranges as ops."""
    group, src, kind = merged["group"], facts["source"], merged["kind"]
    methods = ["record_param_comms"] if (group != "").any() else []
    unknown = (group == "") & (src != _SRC_PARAM)  # record_param_comms already lent its group
    if len(pg_names) == 1 and unknown.any():
        group[unknown] = pg_names[0]
        return methods + ["pg_config (the rank's only group)"], []
    gloo = np.flatnonzero((src == _SRC_GLOO) & unknown)
    if not gloo.size or not pg_names:
        return methods, []
    threads = np.unique(tid[facts["rows"][gloo]])
    cluster, pg_names, idle_default = _thread_groups(threads, tid[facts["rows"][gloo]], kind[gloo], pg_names,
                                                     default_first)
    methods += ["the default group ran no collective in the trace"] if idle_default else []
    if cluster is None:
        return methods, [f"gloo process groups could not be told apart: {threads.size} worker thread(s) do not "
                         f"split into {len(pg_names)} equal runs of tids for the group(s) in pg_config; their "
                         "collectives have no group (matched on the world)"]
    group[gloo] = np.array(pg_names, dtype=object)[cluster[np.searchsorted(threads, tid[facts["rows"][gloo]])]]
    methods.append("gloo worker threads + pg_config")
    ops = np.flatnonzero((src == _SRC_C10D) & (group == ""))
    gloo_all = np.flatnonzero(src == _SRC_GLOO)
    told = False
    for code in np.unique(kind[ops]):  # per distinct kind
        mine, theirs = ops[kind[ops] == code], gloo_all[kind[gloo_all] == code]
        names = set(group[theirs].tolist())
        if mine.size == theirs.size and len(names) == 1 and "" not in names:
            group[mine], told = names.pop(), True
    return methods + (["c10d ops: the group of the gloo ranges of their kind"] if told else []), []


def _gloo_reduce_scatters(facts: dict, kind: np.ndarray, start_ns: np.ndarray) -> np.ndarray:
    """The merged kinds with gloo's reduce-scatters named: gloo runs ``c10d::_reduce_scatter_base_`` as an
    all-reduce of the whole input (a ``gloo:all_reduce`` range, the exchange, kept as the communication row),
    so FSDP's gradient reduce-scatters read as all-reduces. A gloo worker runs its works in order: the k-th
    all-reduce range is the k-th c10d all-reduce or reduce-scatter op, taken only when the counts are equal,
    each range starts after its op and both list the same bytes (a real FSDP2 job: 16 of 16 on each rank);
    else the kinds as they were (never a guess)."""
    rows, src, name_kind = facts["rows"], facts["source"], facts["name_kind"]
    allreduce, reduce_scatter = ev.COLLECTIVE_KINDS.index(ev.ALLREDUCE), ev.COLLECTIVE_KINDS.index(ev.REDUCE_SCATTER)
    gloo = np.flatnonzero((src == _SRC_GLOO) & (name_kind == allreduce))
    ops = np.flatnonzero((src == _SRC_C10D) & np.isin(name_kind, (allreduce, reduce_scatter)))
    if not gloo.size or gloo.size != ops.size or not (name_kind[ops] == reduce_scatter).any():
        return kind
    gloo = gloo[np.argsort(start_ns[rows[gloo]], kind="stable")]
    ops = ops[np.argsort(start_ns[rows[ops]], kind="stable")]
    sizes = facts["tensor_bytes"]
    same = (sizes[gloo] < 0) | (sizes[ops] < 0) | (sizes[gloo] == sizes[ops])
    if not same.all() or (start_ns[rows[gloo]] < start_ns[rows[ops]]).any():
        return kind
    out = kind.copy()
    out[gloo] = np.where((name_kind[ops] == reduce_scatter) & (kind[gloo] == allreduce), reduce_scatter, kind[gloo])
    return out


def comm_columns(doc: Document, facts: dict, ids: dict, steps: dict, classes, start_ns, end_ns,
                  category: np.ndarray, path: Path) -> tuple[dict, dict, list[str]]:
    """The collective / group / nbytes / peer columns of the communication rows (defaults on
    the others and on the ProfileStep rows), meta["process_groups"] / meta["group_from"], and
    warnings."""
    n, n_steps = len(classes), steps["rows"].size
    launch_row = np.full(n, -1, np.int64)
    runtime = np.flatnonzero(classes == RUNTIME_CLASS)
    if runtime.size:
        launch_row[steps["work"]] = np.where(steps["launch"] >= 0, runtime[np.maximum(steps["launch"], 0)], -1)
    merged = _merged_facts(facts, _related_ops(facts, ids, start_ns, end_ns, launch_row))
    merged["kind"] = _gloo_reduce_scatters(facts, merged["kind"], start_ns)
    pg = _pg_config(doc)
    groups = {name: ranks for name, ranks in pg if ranks is not None}
    for name, ranks in facts["named_groups"].items():
        groups.setdefault(name, ranks)
    info = doc.info.get("distributedInfo")
    world = to_int(info.get("world_size"), 0) if isinstance(info, dict) else 0
    default_first = len(pg) > 1 and pg[0][1] is not None and 0 < world == len(pg[0][1]) and \
        sorted(pg[0][1]) == list(range(world))
    methods, warnings = _infer_groups(merged, facts, ids["tid"], [name for name, _ in pg], default_first)
    group = merged["group"]
    size_of = {name: len(ranks) for name, ranks in groups.items()}
    group_codes, group_names = ev.factorize(group.tolist())
    known_size = np.array([size_of.get(name, -1) for name in group_names], np.int64)[group_codes] \
        if group.size else np.empty(0, np.int64)
    group_size = _first_known(-1, merged["group_size"], known_size)
    per_member = (merged["kind"] == _ALLGATHER_CODE) & merged["input_only"]
    shaped = np.where(per_member, np.where(group_size > 0, merged["tensor_bytes"] * group_size, -1),
                      merged["tensor_bytes"])
    nbytes = _first_known(-1, merged["nelems_bytes"], np.where(merged["tensor_bytes"] >= 0, shaped, -1))
    ranks_of = [groups.get(name) for name in group_names]
    peer = np.array([_global_rank(ranks_of[g], p) for g, p in zip(group_codes.tolist(), merged["peer"].tolist())],
                    np.int64) if (merged["peer"] >= 0).any() else merged["peer"]
    comm = np.flatnonzero(category[facts["rows"]] == _COMM_ROW)
    rows = facts["rows"][comm]
    warnings += _kind_warnings(facts, merged, comm)
    names = ["", *(name for name in group_names if name)]  # group column: codes into these
    code_of = np.array([names.index(name) for name in group_names], np.int32)
    size = n + n_steps  # the ProfileStep rows appended after the trace's rows keep the defaults
    columns = {"collective": np.zeros(size, np.int8), "group": np.zeros(size, np.int32),
               "nbytes": np.full(size, -1, np.int64), "peer": np.full(size, -1, np.int64),
               "sent_bytes": np.full(size, -1, np.int64), "recv_bytes": np.full(size, -1, np.int64)}
    alltoall = merged["kind"] == ev.COLLECTIVE_KINDS.index(ev.ALLTOALL)  # the sides differ only there
    for column, values in (("collective", merged["kind"]), ("group", code_of[group_codes] if group.size else group),
                           ("nbytes", nbytes), ("peer", peer),
                           ("sent_bytes", np.where(alltoall, merged["sent_bytes"], -1)),
                           ("recv_bytes", np.where(alltoall, merged["recv_bytes"], -1))):
        columns[column][rows] = values[comm]
    columns["collective"] = ev.Texts.from_codes(columns["collective"], ev.COLLECTIVE_KINDS)
    columns["group"] = ev.Texts.from_codes(columns["group"], names)
    meta = {"process_groups": groups, "group_from": "; ".join(methods) or "unknown"}
    return columns, meta, [f"{path}: {warning}" for warning in warnings]


def _kind_warnings(facts: dict, merged: dict, comm: np.ndarray) -> list[str]:
    """Where the collective's args and its op names disagree, on the communication rows: args that
    name a known kind no op name around agrees with (the args' kind is kept: the most explicit
    source), and args naming no known collective (the op names' kind is used). Count and example."""
    said, named, agree = merged["said"][comm], merged["named"][comm], merged["agree"][comm]
    contradicted = comm[(said > 0) & (said != _OTHER_CODE) & named & ~agree]
    unknown = comm[(said == _OTHER_CODE) & named]
    warnings = []
    for rows, what in ((contradicted, "contradicts its op's name ({arg} on {name}): the args' kind ({kind}) is "
                                      "used, as the most explicit source"),
                       (unknown, "names no known collective ({arg} on {name}): the op's name gives its kind "
                                 "({kind})")):
        if rows.size:
            row = int(rows[0])
            arg = str(facts["arg_text"][merged["said_by"][row]])[:40]
            name = str(facts["name"][merged["named_by"][row]])[:60]
            kind = ev.COLLECTIVE_KINDS[int(merged["kind"][row])]
            warnings.append(f"{rows.size} collective(s) whose 'Collective name' arg "
                            + what.format(arg=repr(arg), name=name, kind=kind))
    return warnings


def _global_rank(ranks: list[int] | None, rank_in_group: int) -> int:
    """A group rank as a global rank (-1 when the group's ranks are not known)."""
    if rank_in_group < 0 or ranks is None or rank_in_group >= len(ranks):
        return -1
    return ranks[rank_in_group]
