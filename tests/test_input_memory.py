"""Memory per input byte (issue 41): a compressed input is expanded once, into one buffer, and a file
expanding beyond ``input.max_uncompressed_mb`` is refused holding at most that limit (nothing at all
when its gzip trailer already says so). benchmarks/input_memory.py measures the same in whole processes."""

import gzip
import json
import tracemalloc
import zlib

import pytest
from conftest import run_cli
from test_robust_inputs import low_limits, one_line_error

from distprof import sources
from distprof.events import SourceError

MB = 1 << 20
LATE = sources.Path(__file__).parent / "data" / "torch_ddp" / "late"


def held_while(call):
    """(result or the SourceError raised, peak bytes Python allocated during ``call``)."""
    tracemalloc.start()
    try:
        try:
            result = call()
        except SourceError as error:
            result = error
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def liar(data: bytes) -> bytes:
    """``data`` gzipped with the trailer's size field zeroed: valid to zlib only up to that check."""
    packed = gzip.compress(data)
    return packed[:-4] + b"\0\0\0\0"


def test_bomb_whose_trailer_says_it_is_too_big_is_refused_holding_nothing(tmp_path, monkeypatch):
    bomb = tmp_path / "rank1.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (16 * MB), compresslevel=9))
    monkeypatch.setattr(sources, "_gunzip", lambda *args: pytest.fail("expanded into memory"))
    error, peak = held_while(lambda: sources.read_bytes(bomb, {"input": {"max_uncompressed_mb": 2}}))
    assert str(error) == (f"{bomb}: refused while decompressing: gzip expands beyond input.max_uncompressed_mb = 2; "
                          "raise it in the config to read this file")
    assert peak < 4 * MB  # a piece or two in flight, never the 16 MB
    config = low_limits(tmp_path, "input:\n  max_uncompressed_mb: 2\n")
    one_line_error(run_cli("merge", str(bomb), "--config", str(config), "-o", str(tmp_path / "o")),
                   str(bomb), "gzip expands beyond input.max_uncompressed_mb = 2")


def test_bomb_that_hides_its_size_is_refused_at_the_limit(tmp_path):
    bomb = tmp_path / "rank1.json.gz"
    bomb.write_bytes(liar(b" " * (16 * MB)))
    error, peak = held_while(lambda: sources.read_bytes(bomb, {"input": {"max_uncompressed_mb": 4}}))
    assert isinstance(error, SourceError) and "gzip expands beyond input.max_uncompressed_mb = 4" in str(error)
    assert peak <= 4 * MB + 3 * MB  # the limit, one expanded piece and one compressed read


def test_a_file_within_the_limit_is_held_once(tmp_path):
    text = b'{"traceEvents": []}' + b" " * (12 * MB)
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(text))
    data, peak = held_while(lambda: sources.read_bytes(path, {}))
    assert data == text and peak <= 1.25 * len(text)  # was 2x: pieces joined into a second copy
    path.write_bytes(liar(text))  # no usable size in the trailer: grown in place, still once
    with pytest.raises(SourceError, match="corrupt or truncated gzip"):  # zlib checks the trailer
        sources.read_bytes(path, {})


@pytest.mark.parametrize("pieces", [1, 3])
def test_members_padding_and_small_reads_give_gzips_bytes(tmp_path, monkeypatch, pieces):
    text = json.dumps({"traceEvents": [{"ph": "X", "name": f"op{i}", "ts": i, "dur": 1} for i in range(3000)]})
    cut = [len(text) * k // pieces for k in range(pieces + 1)]
    packed = b"\0\0".join(gzip.compress(text[a:b].encode()) for a, b in zip(cut, cut[1:])) + b"\0" * 7
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(packed)
    monkeypatch.setattr(sources, "GZIP_READ", 7)
    monkeypatch.setattr(sources, "GZIP_PIECE", 5)
    assert sources.read_bytes(path, {}) == text.encode()
    path.write_bytes(packed[:len(packed) // 2])
    with pytest.raises(SourceError, match=r"corrupt or truncated gzip \(compressed data ended early\)"):
        sources.read_bytes(path, {})


def test_gzipped_trace_reads_to_the_same_figures_as_the_plain_one(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    for rank in (0, 1):
        expanded = zlib.decompress((LATE / f"rank{rank}.json.gz").read_bytes(), zlib.MAX_WBITS | 16)
        (plain / f"rank{rank}.json").write_bytes(expanded)
    summaries = []
    for given in (LATE, plain):
        out = tmp_path / ("out_" + given.name)
        result = run_cli("merge", str(given), "-o", str(out), "--no-html")
        assert result.returncode == 0, result.stderr[-2000:]
        summary = json.loads((out / "summary.json").read_text())
        for row in summary["ranks"]:
            row["source_file"] = row["source_file"].replace(".json.gz", ".json")
        summaries.append(json.dumps(summary, sort_keys=True).replace(str(given), "<inputs>"))
    assert summaries[0] == summaries[1]
