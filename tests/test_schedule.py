"""Scheduler states and what the Profiler records under a schedule or in timer_only mode."""

import json

import pytest

import distprof
from distprof import events as ev
from distprof.schedule import State, from_range, make_schedule, resolve
from distprof.sections.benchmark import BenchmarkSummary
from distprof.sources import native

C, W, R, S = State.CLOSED, State.READY, State.RECORD, State.RECORD_AND_RETURN


def test_pytorch_style_cycle():
    state = make_schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=2)
    assert [state(i) for i in range(11)] == [C, C, W, R, S, C, W, R, S, C, C]


def test_repeat_zero_runs_forever_and_range_shorthand():
    state = make_schedule(wait=0, warmup=0, active=1)
    assert all(state(i) is S for i in range(50))
    shorthand = from_range(2, 4)
    assert [shorthand(i) for i in range(6)] == [C, C, R, S, C, C]


@pytest.mark.parametrize("bad", [(3, 3), (-1, 2), {"activ": 2}, {"active": 0}, "2-3"])
def test_bad_schedules(bad):
    with pytest.raises(ValueError, match="schedule"):
        resolve(bad)


def test_profiler_records_only_active_steps(tmp_path, monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "RANK", "PMI_RANK"):
        monkeypatch.delenv(var, raising=False)
    ready = []
    with distprof.Profiler(out=tmp_path, quiet=True, schedule={"wait": 1, "warmup": 1, "active": 2, "repeat": 2},
                           on_trace_ready=lambda prof: ready.append(prof.step_num)) as prof:
        for _ in range(10):
            with distprof.phase("forward"):
                pass
            prof.step()
    assert ready == [3, 7]  # after the last active step of each cycle
    events = native.read(tmp_path / "rank0.sqlite", distprof.config.load())[0].events.to_frame()
    steps = events[events["name"] == ev.PROFILE_STEP]["step"].tolist()
    assert steps == [2, 3, 6, 7]
    forward_steps = sorted(events[events["name"] == "forward"]["step"].tolist())
    assert forward_steps == [2, 3, 6, 7]
    assert prof.summary["ranks"][0]["steps"] == 4


def test_timer_only(tmp_path, monkeypatch, capsys):
    import time
    for var in ("OMPI_COMM_WORLD_SIZE", "RANK", "PMI_RANK"):
        monkeypatch.delenv(var, raising=False)

    def slow_loader():
        for i in range(5):
            time.sleep(0.002)
            yield i

    with distprof.Profiler(out=tmp_path, timer_only=True, batch_size=32) as prof:
        for _ in prof.loader(slow_loader()):
            time.sleep(0.004)
            prof.step()
    assert not (tmp_path / "rank0.sqlite").exists()  # no tracing at all
    written = json.loads((tmp_path / "summary.json").read_text())
    assert BenchmarkSummary.from_json(written).to_json() == written  # the timer_only summary's own type
    bench = written["benchmark"]
    rank = bench["ranks"][0]
    assert rank["steps"] == 5
    assert rank["reader_cost"]["min_ns"] >= 2_000_000
    assert rank["batch_cost"]["min_ns"] >= 6_000_000
    # the reader's share of the batch time: 2 of 6 ms by construction, more where sleeps overshoot on a busy machine
    assert rank["reader_ratio"] > 0.2
    assert rank["reader_ratio"] == pytest.approx(sum(prof.reader_ns) / sum(prof.batch_ns))
    assert min(prof.reader_ns) >= 2_000_000 and min(b - r for b, r in zip(prof.batch_ns, prof.reader_ns)) >= 4_000_000
    assert rank["ips"]["unit"] == "samples/s"
    assert rank["ips"]["avg"] == pytest.approx(5 * 32 * 1e9 / sum(prof.batch_ns))
    assert "Perf Summary" in capsys.readouterr().out
