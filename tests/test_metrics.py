"""The live view's /metrics made fit for a shared cluster (issue 39, point 4): one address
(loopback by default), 404 on any other path, bounded connections with timeouts (it answers while
200 idle connections are held), alert thresholds as config keys, no ``_created`` series."""

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from result_views import live_window

from distprof import config as config_mod
from distprof import live
from distprof.analyses.live import AlertRule
from distprof.sections.machine import LiveAlert

prom = pytest.importorskip("prometheus_client")


def _window(first: int = 0, straggler: int | None = 1, share: float = 0.3, behind: list[dict] = ()):
    row = {"rank": 0, "steps": 4, "step_ns": 100e6, "step_durations_ns": [100e6] * 4, "communication_ns": 4e7,
           "computation_ns": 3e8, "exposed_communication_ns": 1e6, "overlap_ratio": 0.5}
    return live_window([first, first + 3], [row], step_time_ns=100e6, behind=behind,
                       straggler=None if straggler is None else
                       {"rank": straggler, "cost_ns": 30e6, "cost_share": share})


def test_prometheus_addr_is_loopback_by_default_and_never_empty():
    assert config_mod.load()["live"]["prometheus_addr"] == "127.0.0.1"
    assert config_mod.load(None, {"live": {"prometheus_addr": "0.0.0.0"}})["live"]["prometheus_addr"] == "0.0.0.0"
    with pytest.raises(config_mod.ConfigError, match="key 'live.prometheus_addr' must not be empty"):
        config_mod.load(None, {"live": {"prometheus_addr": " "}})  # "" binds every interface


def test_alert_thresholds_are_config_keys_and_alerts_false_still_works():
    alerts = config_mod.load()["live"]["alerts"]
    assert alerts == {"enabled": True, "windows_in_a_row": 2, "straggler_min_cost_share": 0.10,
                      "baseline_windows": 3, "min_baseline_windows": 2, "jump_share": 0.25, "jump_noise": 3.0,
                      "exposed_floor_share": 0.10}
    assert AlertRule.from_config(alerts) == AlertRule()  # the keys' defaults are the rule's
    assert config_mod.load(None, {"live": {"alerts": False}})["live"]["alerts"]["enabled"] is False
    for bad, key in (({"jump_share": -1}, "jump_share"), ({"straggler_min_cost_share": 2}, "straggler_min_cost_share"),
                     ({"windows_in_a_row": 0}, "windows_in_a_row"), ({"typo": 1}, "typo")):
        with pytest.raises(config_mod.ConfigError, match=f"live.alerts.{key}"):
            config_mod.load(None, {"live": {"alerts": bad}})


def test_alert_thresholds_from_config_change_when_an_alert_fires():
    def codes(rule: AlertRule, windows: list) -> list[tuple[int, str]]:
        return [(i, a.code) for i, w in enumerate(windows) for a in rule.update(w)]
    windows = [_window(4 * i) for i in range(3)]
    assert codes(AlertRule(), windows) == [(1, "straggler")]
    assert codes(AlertRule.from_config({"windows_in_a_row": 1}), windows) == [(0, "straggler")]
    assert codes(AlertRule.from_config({"straggler_min_cost_share": 0.5}), windows) == []  # costs 30%


def test_a_window_with_a_rank_behind_neither_clears_nor_recovers_the_straggler():
    rule = AlertRule()
    partial = [_window(first, None, behind=[{"rank": 1, "committed_step": 7}]) for first in (8, 12)]
    seen = [a.code for w in (_window(0), _window(4), *partial, _window(16)) for a in rule.update(w)]
    assert seen == ["straggler"]  # no "recovered" while rank 1's results are missing


def _request(port: int, line: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(line + b"\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


@pytest.fixture
def metrics():
    metrics = live.Metrics({"prometheus_port": 0, "prometheus_addr": "127.0.0.1", "textfile": None})
    assert metrics.server is not None
    metrics.update(_window(), [LiveAlert(steps=[0, 3], code="straggler", rank=1)])
    yield metrics
    metrics.server.close()


def test_metrics_binds_loopback_and_answers_metrics_only(metrics):
    port = metrics.server.port
    assert metrics.server.listener.getsockname()[0] == "127.0.0.1"
    ok = _request(port, b"GET /metrics HTTP/1.1")
    assert ok.startswith(b"HTTP/1.1 200 OK") and b'distprof_step_seconds{rank="0"} 0.1' in ok
    assert b'distprof_alerts_total{code="straggler"} 1.0' in ok and b"_created" not in ok
    assert _request(port, b"GET /metrics?name[]=x HTTP/1.1").startswith(b"HTTP/1.1 200")
    for path in (b"/", b"/x/../../etc/passwd", b"/metrics/", b"/metricsx", b"/../metrics"):
        answer = _request(port, b"GET " + path + b" HTTP/1.1")
        assert answer.startswith(b"HTTP/1.1 404") and b"distprof_" not in answer, path
    assert _request(port, b"POST /metrics HTTP/1.1").startswith(b"HTTP/1.1 405")
    assert _request(port, b"garbage").startswith(b"HTTP/1.1 400")
    head = _request(port, b"HEAD /metrics HTTP/1.1")
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")


def test_metrics_answers_while_200_idle_connections_are_held(metrics):
    """Idle clients cannot hold it: at most MAX_CONNECTIONS are kept, a new one closes the oldest
    that sent no request; a Python thread keeps the GIL busy, as the view's window analysis does."""
    port, stop = metrics.server.port, threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(10000))
    worker = threading.Thread(target=busy, daemon=True)
    worker.start()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(200)]
    try:
        started = time.monotonic()
        for _ in range(3):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                assert response.status == 200 and b"distprof_step_seconds" in response.read()
        assert time.monotonic() - started < 5
        assert len(metrics.server.conns) <= metrics.server.MAX_CONNECTIONS
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
    finally:
        stop.set()
        for sock in idle:
            sock.close()


def test_metrics_answers_100_concurrent_scrapes_beside_200_idle_connections(metrics):
    port = metrics.server.port
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(200)]
    answers: list = []

    def scrape() -> None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                answers.append(response.status)
        except OSError as error:
            answers.append(repr(error))
    try:
        threads = [threading.Thread(target=scrape) for _ in range(100)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        assert answers == [200] * 100, [a for a in answers if a != 200][:5]
    finally:
        for sock in idle:
            sock.close()


def test_an_idle_connection_is_closed_after_the_request_timeout(metrics, monkeypatch):
    monkeypatch.setattr(metrics.server, "REQUEST_TIMEOUT_S", 0.3)
    with socket.create_connection(("127.0.0.1", metrics.server.port), timeout=5) as sock:
        sock.sendall(b"GET /metr")  # slow: never finishes its request
        started = time.monotonic()
        assert sock.recv(10) == b""  # closed by the server
        assert time.monotonic() - started < 3


def test_textfile_has_no_created_series(tmp_path):
    target = tmp_path / "distprof.prom"
    alert = LiveAlert(steps=[0, 3], code="straggler", rank=1)
    live.Metrics({"textfile": str(target), "prometheus_port": None}).update(_window(), [alert])
    text = target.read_text()
    assert 'distprof_alerts_total{code="straggler"} 1.0' in text and "_created" not in text


def test_a_port_in_use_costs_one_warning(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        metrics = live.Metrics({"prometheus_port": taken.getsockname()[1], "prometheus_addr": "127.0.0.1"})
    assert metrics.server is None and "cannot serve /metrics on 127.0.0.1 port" in capsys.readouterr().err
    metrics.update(_window(), [])  # the gauges still work (textfile, the next window)
