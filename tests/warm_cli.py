"""`distprof ...` for the tests, each command its own process, without paying Python's start-up and
distprof's imports (~0.45 s of CPU) hundreds of times.

A server process (one per test process, started on first use) imports what every command imports,
then forks a child per command: the child takes the caller's folder, environment and arguments,
writes to its own stdout/stderr files and ends with the command's exit status, exactly as
``python -m distprof ARGS`` would. Only the imports are shared, and only ones every command makes
(the tests of what a command does *not* import start their own interpreter).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

PRELOAD = ("numpy", "distprof.cli", "distprof.pipeline", "distprof.results", "distprof.reports.export")


def _child(request: dict) -> None:
    """In the forked child: become ``python -m distprof ARGS`` in the caller's folder, then exit."""
    import runpy
    import signal
    import traceback
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT),
                                (2, request["stderr"], os.O_WRONLY | os.O_CREAT)):
            os.dup2(os.open(path, flags, 0o600), fd)
        sys.argv = ["distprof", *request["args"]]
        sys.path[0] = os.getcwd()  # as -m sets it
        signal.alarm(max(1, int(request["timeout"])))  # the default action ends the child: a timeout
        try:
            runpy.run_module("distprof", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - an uncaught error ends the process as Python's would
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a closed stream: nothing left to write
                pass
        os._exit(code)


def serve() -> None:
    """The server loop: one JSON request a line on stdin, one exit status (and the CPU seconds the
    command used) a line on stdout."""
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        _, status, usage = os.wait4(pid, 0)  # the child's CPU, its own reaped processes included
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "cpu_s": usage.ru_utime + usage.ru_stime}),
              flush=True)


class WarmCli:
    """The caller's side: a lazily started server, one command at a time. ``cpu_s``: CPU seconds its
    commands used so far (a test's own children, for the tests that measure what other jobs used)."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self._server: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._folder = Path(tempfile.mkdtemp(prefix="distprof-warm-cli-"))

    def _started(self) -> subprocess.Popen:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            text=True, cwd=Path(__file__).parent)
        return self._server

    def run(self, args: list[str], cwd: Path | None, env: dict, timeout: float) -> subprocess.CompletedProcess:
        with self._lock:
            server = self._started()
            out, err = self._folder / "stdout", self._folder / "stderr"
            for path in (out, err):
                path.unlink(missing_ok=True)
            request = {"args": list(args), "cwd": str(cwd or os.getcwd()), "env": env, "timeout": timeout,
                       "stdout": str(out), "stderr": str(err)}
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            reply = json.loads(server.stdout.readline())
            returncode, self.cpu_s = reply["rc"], self.cpu_s + reply["cpu_s"]
            stdout, stderr = out.read_text(), err.read_text()
        command = [sys.executable, "-m", "distprof", *args]
        if returncode == -14:  # SIGALRM: the child ran past its timeout
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
        return subprocess.CompletedProcess(command, returncode, stdout, stderr)

    def close(self) -> None:
        if self._server is not None and self._server.poll() is None:
            self._server.stdin.close()
            self._server.wait(timeout=30)
        shutil.rmtree(self._folder, ignore_errors=True)  # the last command's stdout/stderr files


if __name__ == "__main__":
    serve()
