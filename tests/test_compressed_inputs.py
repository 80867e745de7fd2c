"""Compressed SQLite inputs (issue 29): the repo's own tests/data/nsys/*.sqlite.gz and gzipped rank
files merge like the plain files, named by the file given."""

import gzip
import json
import shutil
from pathlib import Path

import pytest
from conftest import run_cli
from nsys_fixtures import real_export

DATA = Path(__file__).parent / "data"


def test_gzipped_nsys_export_merges_like_the_plain_one(tmp_path):
    packed = DATA / "nsys" / "pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite.gz"
    plain = tmp_path / "pipit.sqlite"
    shutil.copy(real_export("pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite"), plain)
    outputs = []
    for given in (packed, plain):
        result = run_cli("merge", str(given), "-o", str(tmp_path / ("out_" + given.name)), "--no-html")
        assert result.returncode == 0 and "not valid JSON" not in result.stderr, result.stderr[-2000:]
        outputs.append(json.loads((tmp_path / ("out_" + given.name) / "summary.json").read_text()))
    assert outputs[0]["ranks"][0]["source_file"] == str(packed)
    for summary in outputs:
        for row in summary["ranks"]:
            row.pop("source_file")
    assert outputs[0]["ranks"] == outputs[1]["ranks"] and outputs[0]["findings"] == outputs[1]["findings"]


def test_folder_of_gzipped_rank_files_is_expanded_and_merged(tmp_path):
    folder = tmp_path / "packed"
    folder.mkdir()
    for rank in range(3):
        with open(DATA / "demo_ranks" / f"rank{rank}.sqlite", "rb") as source, \
                gzip.open(folder / f"rank{rank}.sqlite.gz", "wb") as target:
            shutil.copyfileobj(source, target)
    result = run_cli("merge", str(folder), "-o", str(tmp_path / "out"), "--no-html")
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == [0, 1, 2]
    assert [Path(r["source_file"]).name for r in summary["ranks"]] == [f"rank{r}.sqlite.gz" for r in range(3)]


def test_gunzip_with_isal_and_with_zlib_give_the_same_bytes(tmp_path, monkeypatch):
    """Kineto traces are gunzipped by ISA-L (the isal wheel) when installed, else by zlib: same bytes,
    several gzip members included; a corrupt stream is one line either way."""
    import sys

    from distprof import sources
    text = json.dumps({"traceEvents": [{"ph": "X", "name": f"op{i}", "ts": i, "dur": 1} for i in range(5000)]})
    path = tmp_path / "two_members.json.gz"
    path.write_bytes(gzip.compress(text[:7000].encode()) + gzip.compress(text[7000:].encode()))
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(text.encode())[:-40] + b"\x00" * 40)
    with_isal = sources.read_bytes(path, {})
    with monkeypatch.context() as patched:
        patched.setitem(sys.modules, "isal", None)   # as if the wheel were absent
        assert sources._inflater()[0].__name__ == "zlib"
        with_zlib = sources.read_bytes(path, {})
        with pytest.raises(sources.SourceError, match="corrupt or truncated gzip"):
            sources.read_bytes(bad, {})
    with pytest.raises(sources.SourceError, match="corrupt or truncated gzip"):
        sources.read_bytes(bad, {})
    assert bytes(with_isal) == bytes(with_zlib) == text.encode()
    assert sources._inflater()[0].__name__ == "isal.isal_zlib"
