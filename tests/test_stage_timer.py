"""The stage timer: `distprof merge --timings` (or DISTPROF_TIMINGS=1) names each stage with its wall
and CPU seconds on stderr, and prints nothing of it otherwise."""

import os
import re
import subprocess
import sys

from conftest import DATA, run_cli

MOE = DATA / "torch_moe" / "even"
LINE = re.compile(r"distprof: timing: (.+?)\s+wall\s+([\d.]+|-)\s+s\s+cpu\s+([\d.]+) s")
STAGES = ("start-up", "read and reduce 4 file(s)", "combine 2 rank(s)", "word the findings",
          "write summary.json, ranks.csv, collectives.csv", "text report", "report.html")


def _stages(stderr: str) -> dict[str, tuple[str, float]]:
    return {m.group(1): (m.group(2), float(m.group(3))) for m in LINE.finditer(stderr)}


def test_merge_with_timings_names_every_stage_in_order(tmp_path):
    timed = run_cli("merge", str(MOE), "-o", str(tmp_path / "t"), "--timings")
    plain = run_cli("merge", str(MOE), "-o", str(tmp_path / "p"))
    assert timed.returncode == plain.returncode == 0, timed.stderr
    stages = _stages(timed.stderr)
    assert tuple(stages) == STAGES
    assert all(wall == "-" or float(wall) >= 0 for wall, _ in stages.values())
    assert "distprof: timing" not in plain.stderr and "distprof: timing" not in timed.stdout
    assert timed.stdout.replace(str(tmp_path / "t"), str(tmp_path / "p")) == plain.stdout  # the same report


def test_the_environment_variable_times_a_fresh_process(tmp_path):
    env = dict(os.environ, DISTPROF_TIMINGS="1")
    done = subprocess.run([sys.executable, "-m", "distprof", "merge", str(MOE), "-o", str(tmp_path), "--no-html"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    stages = _stages(done.stderr)
    assert "report.html" not in stages and tuple(stages)[:3] == STAGES[:3]
    assert stages["start-up"][0] != "-" and float(stages["start-up"][0]) > 0  # Linux: /proc/self/stat
