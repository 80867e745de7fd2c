"""A damaged summary.json never crashes `report`, `report --html` or `diff` (issue 57): seeded mutations of the
goldens, and of the demo's with a live record and a model profile added (a leaf of another type, a key deleted or
added, a wrong number or text of the right type, NaN, infinite and out-of-range numbers, lists emptied, cut short or
doubled), each end in exit 0, or in exit 2 with one line `distprof: error: FILE: ... ($.key.path: ...)` naming the
damaged key; never a traceback, nor a renderer's error caught on its way out. Why the key: the file is checked when
read (typed.py, sections/invariants.py), not each renderer. Most runs call the CLI in-process (fast); a few go
through a real process."""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import traceback
from pathlib import Path

import pytest
from conftest import DATA, run_cli

from distprof import cli
from distprof.sections import machine, profiles

GOLDENS = sorted((DATA / "golden").glob("*.json"))
SEED = 57
MUTATIONS = 480        # ~12 s on one core
COMMANDS = ("report", "html", "diff_before", "diff_after")
# the damage done, by weight: a leaf of another type (the renderers' tracebacks were those), a key deleted or added,
# a wrong number or text of the right type, a list emptied, cut short or doubled
KINDS = ("type", "type", "type", "delete", "insert", "number", "number", "text", "container", "container")

# what a leaf may become: every JSON type, and the numbers a summary never holds
ODD_VALUES = ("x", "", {}, [], True, False, None, 0, 1, 1.5, -1, -(10 ** 18), 10 ** 30, 2 ** 64, 1e308,
              float("nan"), float("inf"), float("-inf"), [1, "x"], {"a": 1})


def _nodes(value: object, path: tuple = ()) -> list[tuple]:
    """Every (path, value) below ``value``, containers and leaves."""
    found = [(path, value)]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found.extend(_nodes(item, (*path, key)))
    return found


def _parent(doc: object, path: tuple) -> object:
    for key in path[:-1]:
        doc = doc[key]
    return doc


def _replace(doc: object, path: tuple, value: object) -> None:
    _parent(doc, path)[path[-1]] = value


def _where(path: tuple) -> str:
    return "$" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path)


def _number(value: object, rng: random.Random, same: list) -> object:
    """Another number of the same kind where it can be (a wrong value, not a wrong type), else a non-finite one."""
    if isinstance(value, int):
        return rng.choice((-1, -value - 1, 0, 1 << 62, value * 1000 + 1, rng.choice(same or [0])))
    return rng.choice((-1.0, -value, 0.0, 1e308, float("nan"), float("inf"), float("-inf"), value * 1e6))


def _short(value: object) -> str:
    said = repr(value)
    return said if len(said) <= 40 else said[:37] + "..."


def _pools(doc: dict) -> dict[str, list[tuple]]:
    """The (path, value) of an undamaged summary to pick damage from: any node, numbers, texts, filled containers;
    each also as ``shown_*``: only the first rows of every list, the ones a report shows (a table shows its top
    rows, and damage to its 117th is seldom read)."""
    nodes = [(p, v) for p, v in _nodes(doc) if p]
    pools = {"any": nodes,
             "number": [(p, v) for p, v in nodes if isinstance(v, (int, float)) and not isinstance(v, bool)],
             "text": [(p, v) for p, v in nodes if isinstance(v, str)],
             "container": [(p, v) for p, v in nodes if isinstance(v, (list, dict)) and v]}
    shown = {f"shown_{name}": [(p, v) for p, v in pool if all(k < 3 for k in p if isinstance(k, int))]
             for name, pool in pools.items()}
    return {**pools, **shown}


def _pick(doc: dict, pools: dict[str, list[tuple]], kind: str, rng: random.Random) -> tuple[tuple, object]:
    """A path of the pool ``kind`` (its shown rows 3 times in 4) still in ``doc`` (an earlier damage may have removed
    it) and its value there now."""
    pool = pools[f"shown_{kind}"] if rng.random() < 0.75 else pools[kind]
    for _ in range(1000):
        path, _ = rng.choice(pool)
        try:
            return path, _parent(doc, path)[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue
    raise AssertionError("no path of the pool is left in the summary")


def _mutate(doc: dict, pools: dict[str, list[tuple]], rng: random.Random) -> str:
    """One random damage to ``doc`` (in place); what was done, for the failure message."""
    kind = rng.choice(KINDS)
    if kind in ("number", "text"):  # a wrong value of the right type: numbers, or text from elsewhere in the file
        path, value = _pick(doc, pools, kind, rng)
        same = [v for _, v in pools[kind] if type(v) is type(value)]
        new = _number(value, rng, same) if kind == "number" else rng.choice(("", "x" * 300, rng.choice(same)))
        _replace(doc, path, new)
        return f"{_where(path)}: {_short(value)} -> {_short(new)}"
    if kind == "container":  # a list emptied, cut short or doubled, an object emptied
        path, value = _pick(doc, pools, "container", rng)
        how = rng.choice(("empty", "drop", "drop", "double"))
        if how == "empty" or not value:
            _replace(doc, path, type(value)())
        elif isinstance(value, list):
            index = rng.randrange(len(value))
            value.insert(index, value[index]) if how == "double" else value.pop(index)
        else:
            value.pop(rng.choice(list(value)))
        return f"{_where(path)}: {how}"
    path, value = _pick(doc, pools, "any", rng)
    if kind == "delete":
        _parent(doc, path).pop(path[-1])
        return f"{_where(path)}: deleted"
    if kind == "insert":
        parent = _parent(doc, path)
        if isinstance(parent, dict):
            parent["surprise"] = rng.choice(ODD_VALUES)
        else:
            parent.insert(path[-1], rng.choice(ODD_VALUES))
        return f"{_where(path)}: inserted beside"
    new = rng.choice([v for v in ODD_VALUES if type(v) is not type(value)])
    _replace(doc, path, new)
    return f"{_where(path)}: {_short(value)} -> {_short(new)}"


def _live_and_probe() -> dict:
    """The sections no golden has (a live view's record, the FLOPs probe's model_profile), as a run with both
    writes them: the demo golden with them added."""
    ms = 10 ** 6

    def window(first: int) -> machine.LiveWindow:
        ranks = [machine.WindowRank(rank=r, steps=4, step_ns=1e8 + r * 1e7, step_durations_ns=[100 * ms] * 4,
                                    communication_ns=40 * ms, computation_ns=300 * ms, overlap_ns=10 * ms,
                                    exposed_communication_ns=30 * ms, overlap_ratio=0.25, waits_for_straggler_ns=ms,
                                    sent_bytes=2048) for r in range(3)]
        straggler = machine.WindowStraggler(rank=2, cost_ns=10 * ms, cost_share=0.09, waits_caused_ns=10 * ms,
                                            waits_caused_share=0.1, late_in=4, of=4)
        return machine.LiveWindow(steps=[first, first + 3], ranks=ranks, step_time_ns=1.1e8, straggler=straggler,
                                  spread=machine.WindowSpread(step_ns=2e7, slowest_rank=2,
                                                              exposed_communication_ns=10 * ms),
                                  behind=[machine.Behind(rank=1, committed_step=first + 2)])
    alerts = [machine.LiveAlert(steps=[8, 11], code="straggler", rank=2, cost_ns=10 * ms, cost_share=0.09, windows=2),
              machine.LiveAlert(steps=[16, 19], code="step_time_jump", rank=2, value_ns=1.5e8, baseline_ns=1e8,
                                noise_ns=1e6),
              machine.LiveAlert(steps=[16, 19], code="straggler_recovered", rank=2)]
    live = machine.Live(every_steps=4, windows=[window(first) for first in (0, 4, 8, 16)], alerts=alerts,
                        skipped=[[12, 15]], nodes={"node1": machine.LiveNode(ranks=[1, 2], state="done", bytes=4096)})
    module = profiles.ModuleProfile(name="module.0", depth=1, params=1000, macs=ms, fwd_latency_ns=10 ** 5,
                                    tflops=0.02)
    probe = profiles.ModelProfile(ranks=[profiles.RankModelProfile(
        rank=r, params=1000, forwards=1, fwd_flops_per_step=2 * ms, bwd_flops_per_step=4 * ms, fwd_latency_ns=10 ** 5,
        bwd_latency_ns=2 * 10 ** 5, step_latency_ns=10 ** 4, iter_latency_ns=4 * 10 ** 5, achieved_tflops=0.015,
        samples_per_s=None if r else 640.0, mfu=None, modules=[module]) for r in range(3)])
    doc = json.loads((DATA / "golden" / "demo__demo_ranks.json").read_text())
    return {**doc, "model_profile": probe.to_json(), "live": live.to_json()}


def sources() -> dict[str, dict]:
    """The summaries the damage is done to: each golden, and the demo's with a live record and a model profile."""
    return {**{p.name: json.loads(p.read_text()) for p in GOLDENS}, "demo+live+probe": _live_and_probe()}


def cases(count: int, seed: int = SEED) -> list[tuple[str, str, dict, str]]:
    """``count`` damaged summaries: (source name, what was done, content, command), the commands in turn."""
    rng = random.Random(seed)
    made = sources()
    texts = {name: json.dumps(doc) for name, doc in made.items()}
    pools = {name: _pools(doc) for name, doc in made.items()}
    out = []
    for index in range(count):
        name = rng.choice(sorted(made))
        doc = json.loads(texts[name])
        done = "; ".join(_mutate(doc, pools[name], rng) for _ in range(rng.choice((1, 1, 1, 2, 3))))
        out.append((name, done, doc, COMMANDS[index % len(COMMANDS)]))
    return out


def argv(command: str, damaged: Path, good: Path, out: Path) -> list[str]:
    if command == "report":
        return ["report", str(damaged), "--width", "100"]
    if command == "html":
        return ["report", str(damaged), "--width", "100", "--html", str(out / "report.html")]
    pair = [str(damaged), str(good)] if command == "diff_before" else [str(good), str(damaged)]
    return ["diff", *pair, "-o", str(out / "diff"), "--width", "100"]


def run_in_process(args: list[str]) -> tuple[int | None, str, str]:
    """(exit code, stderr, traceback or ""): the CLI's main as the console script runs it."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = cli.main(args)
        except SystemExit as exit_:
            code = exit_.code
        except BaseException:  # noqa: BLE001 -- what the test is for
            return None, stderr.getvalue(), traceback.format_exc()
    return code, stderr.getvalue(), ""


def problem(code: int | None, stderr: str, trace: str, damaged: Path) -> str | None:
    """What is wrong with a run's end, or None: exit 0, or exit 2 with one error line naming the file and the key."""
    if trace or "Traceback" in stderr:
        return "traceback:\n" + (trace or stderr)
    if code not in (0, 2):
        return f"exit {code}: {stderr}"
    errors = [line for line in stderr.splitlines() if line.startswith("distprof: error:")]
    others = [line for line in stderr.splitlines() if line and not line.startswith("distprof: warning:")]
    if code == 2 and (len(errors) != 1 or str(damaged) not in errors[0] or others != errors):
        return f"exit 2 without one error line naming {damaged}: {stderr!r}"
    if code == 2 and not NAMES_THE_KEY.search(errors[0]):
        return f"exit 2 naming no key (a renderer's error caught, not the file checked): {errors[0]}"
    return None


# an error line names the damaged key: its path, or a top-level key the file lacks or holds wrong
NAMES_THE_KEY = re.compile(r"\$[.\[:]|missing key '|'ranks' is not a list")


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("good")
    (folder / "summary.json").write_text((DATA / "golden" / "demo__demo_ranks.json").read_text())
    return folder / "summary.json"


def test_damaged_summaries_end_in_one_line_or_a_report(tmp_path, good):
    failures = []
    for index, (name, done, doc, command) in enumerate(cases(MUTATIONS)):
        damaged = tmp_path / f"d{index}" / "summary.json"
        damaged.parent.mkdir()
        damaged.write_text(json.dumps(doc))
        code, stderr, trace = run_in_process(argv(command, damaged, good, tmp_path / f"o{index}"))
        said = problem(code, stderr, trace, damaged)
        if said:
            failures.append(f"{name} {done} ({command}): {said}")
    assert not failures, f"{len(failures)} of {MUTATIONS}:\n" + "\n".join(failures[:5])


@pytest.mark.parametrize("index", [0, 5, 3, 9])  # report, --html, diff refusing; a --html report
def test_damaged_summaries_in_a_real_process(tmp_path, good, index):
    """A few of the cases as a user runs them: the console script's own process, its exit code and stderr."""
    name, done, doc, command = cases(index + 1)[index]
    damaged = tmp_path / "summary.json"
    damaged.write_text(json.dumps(doc))
    result = run_cli(*argv(command, damaged, good, tmp_path / "out"))
    assert problem(result.returncode, result.stderr, "", damaged) is None, (name, done, result.stderr)


def _one_line(code: int | None, stderr: str, trace: str, path: Path, *needles: str) -> str:
    """Exit 2 and, besides warnings, one error line naming ``path`` and holding every needle."""
    lines = [line for line in stderr.splitlines() if not line.startswith("distprof: warning:")]
    assert code == 2 and not trace and len(lines) == 1, stderr + trace
    assert lines[0].startswith(f"distprof: error: {path}") and all(needle in lines[0] for needle in needles), lines[0]
    return lines[0]


@pytest.mark.parametrize(("change", "said"), [
    (lambda s: s["ranks"][0].update(window_ns=10 ** 30), "$.ranks[0].window_ns: 1e+30 is out of range"),
    (lambda s: s["skew"]["steps_summary"].update(count=float("nan")),
     "$.skew.steps_summary.count: expected int, got nan"),
    (lambda s: s["ranks"][0].update(pid="12"), "$.ranks[0].pid: expected int or null, got str"),
    (lambda s: s["tables"]["merged"]["steps"]["step"].pop(), "$.tables.merged.steps.min_ns: 4 item(s)"),
])
def test_a_damaged_leaf_is_named_by_its_key(tmp_path, good, change, said):
    """Beyond the type: an integer numpy would overflow on, NaN where no unknown is allowed, a step deleted."""
    doc = json.loads(good.read_text())
    change(doc)
    damaged = tmp_path / "summary.json"
    damaged.write_text(json.dumps(doc))
    for command in COMMANDS:
        _one_line(*run_in_process(argv(command, damaged, good, tmp_path / command)), damaged, said)


def test_nan_where_a_figure_may_be_unknown_reads_as_unknown(tmp_path, good):
    doc = json.loads(good.read_text())
    doc["ranks"][1]["overlap_ratio"] = float("nan")
    damaged = tmp_path / "summary.json"
    damaged.write_text(json.dumps(doc))
    code, stderr, trace = run_in_process(argv("report", damaged, good, tmp_path))
    assert code == 0 and not trace, stderr + trace
    assert stderr.splitlines() == [f"distprof: warning: {damaged}: 1 figure(s) NaN or infinite (first: "
                                   "ranks[1].overlap_ratio): read as unknown (\"-\"); merge the run again to get them"]


def test_diff_and_hang_outputs_given_as_a_summary_say_what_they_are(tmp_path, good):
    """distprof reads no diff.json or hang.json back; given where a summary belongs, each is named for what it is."""
    assert run_in_process(["diff", str(good), str(good), "-o", str(tmp_path / "d")])[0] == 0
    assert run_in_process(["hang", str(DATA / "flight_recorder" / "missing"), "-o", str(tmp_path / "h")])[0] == 0
    for made, command in ((tmp_path / "d" / "diff.json", "diff"), (tmp_path / "h" / "hang.json", "hang")):
        for args in (["report", str(made)], ["diff", str(made), str(good), "-o", str(tmp_path / "o")]):
            if args[0] == "diff":
                made = made.parent / "summary.json"   # a diff side is a summary.json or a folder holding one
                made.write_text((made.parent / f"{command}.json").read_text())
                args[1] = str(made)
            _one_line(*run_in_process(args), made, f"`distprof {command}`'s output ({command}.json), not a summary")
