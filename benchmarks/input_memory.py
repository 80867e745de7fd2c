"""Peak memory per input byte: a compressed input expanding to N bytes is read (or refused) by
``distprof.sources.read`` in a fresh child process, and the child's peak RSS above its RSS just before
the read is printed as a multiple of N. Target (issue 41): <= 1.5 N, and a file expanding beyond
``input.max_uncompressed_mb`` refused while holding no more than that limit.

Inputs, each expanding to ``--mib`` MiB:
  kineto padded   a real Kineto trace (tests/data/torch_ddp/late/rank0.json.gz) with whitespace after its
                  JSON up to N: read to the same figures, the bytes held once
  bomb            N bytes of whitespace (an empty trace): read whole, then refused as empty
  bomb > limit    the same with ``input.max_uncompressed_mb`` at N / 4: refused, holding <= the limit
  bomb, no size   the same with its gzip trailer's size zeroed (a liar): refused at the limit

    python benchmarks/input_memory.py [--mib 256]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "torch_ddp" / "late" / "rank0.json.gz"
MIB = 1 << 20

CHILD = """
import json, sys
sys.path.insert(0, {bench!r})
from _memory import current_rss_mib, peak_rss_mib
from distprof import sources
from distprof.sources import kineto
kineto.read  # the reader and its imports are loaded before the baseline
before = current_rss_mib()
try:
    traces = sources.read({path!r}, {config!r})
    outcome = f"read: {{len(traces[0].events)}} events"
except sources.SourceError as error:
    outcome = str(error).split(": ", 1)[1][:100]
print(json.dumps({{"peak_mib": peak_rss_mib() - before, "outcome": outcome}}))
"""


def gzip_stream(parts: list[bytes], path: Path, liar: bool = False) -> None:
    """Write ``parts`` as one gzip member, compressed piece by piece (N bytes are never held here);
    ``liar`` zeroes the trailer's size field (ISIZE), as a crafted file could."""
    packer = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    with open(path, "wb") as out:
        for part in parts:
            out.write(packer.compress(part))
        tail = packer.flush()
        out.write(tail[:-4] + b"\0\0\0\0" if liar else tail)


def whitespace(total: int) -> list[bytes]:
    """``total`` bytes of spaces as a list of 16 MiB pieces sharing one buffer."""
    piece = b" " * (16 * MIB)
    return [piece] * (total // len(piece)) + [b" " * (total % len(piece))]


def measure(path: Path, config: dict, size: int) -> tuple[float, str]:
    """(peak RSS above the pre-read baseline / N, outcome) of reading ``path`` in a fresh child."""
    code = CHILD.format(bench=str(Path(__file__).resolve().parent), path=str(path), config=config)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout.splitlines()[-1])
    return figures["peak_mib"] * MIB / size, figures["outcome"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="expanded size N of each input, in MiB")
    args = parser.parse_args()
    size = args.mib * MIB
    trace = gzip.decompress(TRACE.read_bytes())
    with tempfile.TemporaryDirectory(prefix="distprof-mem-") as folder:
        cases = {}
        padded = Path(folder) / "rank0.json.gz"
        gzip_stream([trace, *whitespace(size - len(trace))], padded)
        cases["kineto padded"] = (padded, {})
        bomb = Path(folder) / "bomb.json.gz"
        gzip_stream(whitespace(size), bomb)
        cases["bomb"] = (bomb, {})
        cases["bomb > limit"] = (bomb, {"input": {"max_uncompressed_mb": args.mib // 4}})
        liar = Path(folder) / "liar.json.gz"
        gzip_stream(whitespace(size), liar, liar=True)
        cases["bomb, no size"] = (liar, {"input": {"max_uncompressed_mb": args.mib // 4}})
        print(f"N = {args.mib} MiB expanded; peak RSS above the child's RSS before the read, / N "
              f"(target <= 1.5; over the limit: <= {args.mib // 4} MiB = 0.25 N)")
        for name, (path, config) in cases.items():
            ratio, outcome = measure(path, config, size)
            print(f"  {name:<14} {path.stat().st_size / MIB:7.2f} MiB gzip  peak {ratio:5.2f} N  "
                  f"({ratio * args.mib:7.1f} MiB)  {outcome}")


if __name__ == "__main__":
    main()
