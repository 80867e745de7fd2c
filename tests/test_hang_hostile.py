"""Hostile input to `distprof hang` stays bounded (issue 38, point 5): each case ends within 10 s, in one line
naming the file (exit 2) or a bounded result (exit 0, a short text), under a 1.5 GiB address-space limit, and
nothing from a pickle ever runs. Each case is made here, as the issue measured it outside the repo."""

import inspect
import json
import os
import pickle
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from test_hang import Hostile
from test_hang_missing_member import ROOT, scale_module

from distprof.sections.hang import HangResult
from distprof.sources import flight_recorder as fr

GOOD = {"collective_seq_id": 1, "profiling_name": "nccl:all_reduce", "process_group": ["0", "default_pg"],
        "input_sizes": [[4]], "output_sizes": [[4]], "input_dtypes": ["Float"], "state": "scheduled",
        "time_created_ns": 1795469762499407811, "timeout_ms": 600000, "is_p2p": False, "pg_id": 0, "record_id": 0}
LIMIT_S = 10
MEMORY = 3 << 29  # 1.5 GiB of address space: a case that tried to build GiBs fails with MemoryError, not quietly


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def hang(*args: str) -> subprocess.CompletedProcess:
    """`python -m distprof hang ...`, as a user runs it, within LIMIT_S seconds and MEMORY bytes."""
    return subprocess.run([sys.executable, "-m", "distprof", "hang", *args], capture_output=True, text=True,
                          timeout=LIMIT_S, cwd=ROOT, preexec_fn=_limit_memory)


def refused(path: Path, out: Path) -> str:
    """The one stderr line of a run whose only input is refused (exit 2)."""
    result = hang(str(path), "-o", str(out))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[0].startswith(f"distprof: error: {path}: ") and lines[0].endswith("(no input could be read)")
    assert not (out / "hang.json").exists()
    return lines[0]


def bounded(path: Path, out: Path) -> dict:
    """A run that reads the input: exit 0, a short text, a small hang.json."""
    result = hang(str(path), "-o", str(out))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(result.stdout.splitlines()) < 40 and max(map(len, result.stdout.splitlines())) < 1000
    assert (out / "hang.json").stat().st_size < 100_000
    doc = json.loads((out / "hang.json").read_text())
    assert HangResult.from_json(doc).to_json() == doc  # hang.json round-trips through its type, hostile names too
    return doc


def dump(tmp_path: Path, data: bytes, name: str = "nccl_trace_rank_0") -> Path:
    path = tmp_path / "in" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return path


def test_shared_references_are_never_printed_whole(tmp_path):
    node: list = [1]
    for _ in range(64):  # 2^64 leaves when printed, 2 kB pickled
        node = [node, node]
    path = dump(tmp_path, pickle.dumps({"entries": [dict(GOOD, input_sizes=node)], "pg_config": {}}))
    assert path.stat().st_size < 3000
    doc = bounded(path.parent, tmp_path / "out")
    sizes = doc["culprits"] or doc["waiting"]
    assert doc["ranks_dumped"] == [0] and sizes  # read, its one collective pending
    assert len(fr.read(path).entries[0].input_sizes) < 2000


def test_deep_pickle_is_read_with_its_nesting_cut(tmp_path):
    deep = (b"\x80\x04}(\x8c\x07entries]}(\x8c\x11collective_seq_idK\x01\x8c\x0eprofiling_name\x8c\x0fnccl:all_reduce"
            b"\x8c\rprocess_group]\x8c\x010a\x8c\x0binput_sizes" + b"]" * 100_000 + b"a" * 99_999 + b"uau.")
    path = dump(tmp_path, deep)
    bounded(path.parent, tmp_path / "out")
    assert fr.read(path).entries[0].input_sizes == "[[[[[[[[[...]]]]]]]]]"


def test_deep_json_is_refused(tmp_path):
    path = dump(tmp_path, b'{"entries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "rank0.json")
    assert refused(path, tmp_path / "out").endswith(": refused: nested deeper than a dump is (no input could be read)")


def test_fifo_is_refused_before_it_is_opened_for_reading(tmp_path):
    path = tmp_path / "in" / "rank0.json"
    path.parent.mkdir()
    os.mkfifo(path)  # no writer: a plain open would block forever
    assert "refused unread: not a regular file (a FIFO, device or socket)" in refused(path, tmp_path / "out")


def test_fifo_in_a_folder_is_named_and_the_rest_read(tmp_path):
    scale_module().write_job(tmp_path / "in", 4, tp=2, steps=2, stuck=1)
    os.mkfifo(tmp_path / "in" / "rank9.json")
    result = hang(str(tmp_path / "in"), "-o", str(tmp_path / "out"))
    assert result.returncode == 0 and "Inputs: 4 read, 0 cut short, 1 refused" in result.stdout
    assert f"  {tmp_path / 'in' / 'rank9.json'}: refused unread: not a regular file" in result.stdout


def test_dev_zero_is_refused_unread(tmp_path):
    assert "/dev/zero: refused unread: not a regular file" in refused(Path("/dev/zero"), tmp_path / "out")


@pytest.mark.parametrize("doc, message", [
    ({"rank": 10**9, "entries": [GOOD]}, "refused: its rank is 1000000000, not an integer from 0 to 1048575"),
    ({"entries": [GOOD], "pg_config": {"0": {"desc": "default_pg", "ranks": "[0, 1000000000]"}}},
     "refused: pg_config '0' ranks holds 1000000000, not a rank below 1048576"),
    ({"entries": [GOOD], "pg_config": {"0": {"desc": "default_pg", "ranks": "[0, Infinity]"}}},
     "refused: pg_config '0' ranks is '[0, Infinity]', not a list of ranks"),
    ({"entries": [dict(GOOD, collective_seq_id=float("inf"))]}, "refused: states Infinity (no dump has it)"),
    ({"entries": [dict(GOOD, time_created_ns=float("nan"))]}, "refused: states NaN (no dump has it)"),
    ({"entries": [dict(GOOD, collective_seq_id=1.5)]}, "refused: collective_seq_id is 1.5, not an integer"),
    ({"entries": [dict(GOOD, process_group=[["x"], "d"])]}, "refused: process_group name is a list, not a short text"),
    ({"entries": 5}, "not a Flight Recorder dump (no 'entries' list)"),
])
def test_json_values_no_dump_has_are_refused_in_one_line(tmp_path, doc, message):
    path = dump(tmp_path, json.dumps(doc).encode(), "rank0.json")
    assert message in refused(path, tmp_path / "out")


def test_5000_digit_seq_ids_are_refused_in_one_line(tmp_path):
    text = b'{"entries": [{"collective_seq_id": ' + b"9" * 5000 + b', "profiling_name": "a", "process_group": ["0"]}]}'
    path = dump(tmp_path, text, "rank0.json")
    assert "refused: exceeds the limit (4300 digits)" in refused(path, tmp_path / "out")
    path = dump(tmp_path, pickle.dumps({"entries": [dict(GOOD, collective_seq_id=10**5000)]}), "nccl_trace_rank_1")
    assert "refused: collective_seq_id is a 16610-bit integer, not an integer" in refused(path, tmp_path / "out2")


def test_a_pickle_that_expands_hugely_is_stopped(tmp_path):
    path = dump(tmp_path, b"\x80\x04}(\x8c\x07entries]" + b"]a" * 20_000_000 + b"u.")  # 40 MB -> 2.8 GiB of lists
    line = refused(path, tmp_path / "out")
    assert "refused: decoding it took more than 256 MiB" in line


def test_json_that_would_expand_hugely_is_refused_unread(tmp_path):
    path = dump(tmp_path, b'{"entries": [' + b"[]," * 12_000_000 + b"[]]}", "rank0.json")
    assert "refused unread: decoding it would take about" in refused(path, tmp_path / "out")


def test_a_file_larger_than_a_dump_is_refused_unread(tmp_path):
    path = tmp_path / "in" / "rank0.json"
    path.parent.mkdir()
    with open(path, "wb") as handle:
        handle.truncate(fr.MAX_DUMP_BYTES + 1)  # sparse: nothing written
    assert "refused unread: 64 MiB, larger than a dump can be (64 MiB)" in refused(path, tmp_path / "out")


def watchdog(**fields) -> bytes:
    doc = {"distprof_hang": 1, "rank": 0, "world_size": 2, "step": 1, "pid": 1, "hostname": "h",
           "open_ranges": [{"name": "ar", "category": "COMMUNICATION", "group": None, "thread": "t", "elapsed_ns": 1}]}
    return json.dumps({**doc, **fields}).encode()


@pytest.mark.parametrize("fields, message", [
    ({"world_size": 10**12}, "world_size is 1000000000000, not an integer from 1 to 1048576"),
    ({"world_size": "big"}, "world_size is 'big', not an integer from 1 to 1048576"),
    ({"rank": "a"}, "rank is 'a', not an integer from 0 to 1048575"),
    ({"rank": 5}, "rank 5 is outside its world of 2"),
    ({"step": "x"}, "step is 'x', not an integer"),
    ({"open_ranges": 5}, "open_ranges is 5, not a list"),
    ({"open_ranges": ["x"]}, "an open_ranges item is 'x', not a table"),
    ({"open_ranges": [{"group": "x"}]}, "open_ranges group is 'x', not a list of at most 1048576 ranks"),
    ({"open_ranges": [{"group": [0, 10**9]}]}, "open_ranges group holds 1000000000, not a rank below 1048576"),
    ({"open_ranges": [{"elapsed_ns": [1]}]}, "open_ranges elapsed_ns is a list, not an integer"),
    ({"open_ranges": [{"name": {"a": 1}}]}, "open_ranges name is a dict, not a short text"),
    ({"flight_recorder": []}, "flight_recorder is a list, not a dump"),
    ({"flight_recorder": {"entries": "x"}}, "entries is 'x', not a list"),
    ({"pid": "p"}, "pid is 'p', not an integer"),
    ({"stacks": 5}, "stacks is 5, not a list of at most 1024 threads"),
    ({"stacks": [{"thread": "MainThread", "frames": [1]}]}, "a stacks frame is 1, not a short text"),
    ({"stacks": [{"frames": ["x"] * 1000}]}, "stacks item 0 is a dict, not a thread with at most 256 frames"),
])
def test_watchdog_fields_of_the_wrong_type_are_one_line_each(tmp_path, fields, message):
    path = dump(tmp_path, watchdog(**fields), "hang_rank0.json")
    line = refused(path, tmp_path / "out")
    assert line.startswith(f"distprof: error: {path}: refused: {message}"), line


def test_out_whose_hang_json_is_a_folder_is_one_line(tmp_path):
    (tmp_path / "out" / "hang.json").mkdir(parents=True)
    result = hang(str(ROOT / "tests" / "data" / "flight_recorder" / "tp_dp"), "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"distprof: error: {tmp_path / 'out' / 'hang.json'}: output file is an existing directory (remove it or choose "
        "another -o)"]


def test_no_literal_eval_and_one_parse_per_distinct_ranks_text(tmp_path):
    assert "literal_eval" not in inspect.getsource(fr)
    scale_module().write_job(tmp_path / "d", 64, tp=8, steps=2, stuck=3)
    dumps, _ = fr.read_all([str(tmp_path / "d")])
    worlds = {id(d.group_ranks["0"]) for d in dumps}
    assert len(worlds) == 1 and dumps[0].group_ranks["0"] == tuple(range(64))  # one tuple for the 64 dumps


def test_nothing_of_a_cut_short_hostile_pickle_runs(tmp_path):
    marker = tmp_path / "ran"
    whole = pickle.dumps({"entries": [GOOD, {"x": Hostile(marker)}]})
    path = dump(tmp_path, whole[: len(whole) - 3])  # cut short: the salvaging unpickler reads it too
    assert "refused: the pickle names posix.system" in refused(path, tmp_path / "out")
    assert not marker.exists()
