"""One rank of the demo job (started by ``distprof demo`` through mpirun).

A numpy MLP trained data-parallel on synthetic data. Backward produces per-layer gradients
that are summed across ranks with MPI Iallreduce (polled, so waiting ranks yield the CPU):
  overlap: each layer's allreduce is issued on a communication thread while backward goes
           on with the next layer (numpy matmul releases the GIL, so both really run);
  serial:  every allreduce runs after backward, on the main thread.
``--straggler RANK:MS`` makes that rank sleep MS ms in its forward pass every step;
``RANK:MS@STEP`` from step STEP on (a rank that starts lagging while the job runs).
``--hang RANK:STEP`` makes that rank stop (sleep for an hour) in its forward pass of that step, with the hang
watchdog on (``collector.hang_dump_s`` = ``--hang-dump-s``): every rank writes its hang file.
"""

from __future__ import annotations

import argparse
import queue
import threading
import time

import numpy as np

import distprof


def parse_straggler(text: str) -> tuple[int, float, int] | None:
    """(rank, seconds of sleep per step, first step) of ``RANK:MS[@STEP]`` (checked by the CLI)."""
    if not text:
        return None
    rank, _, rest = text.partition(":")
    ms, _, step = rest.partition("@")
    return int(rank), float(ms) / 1000.0, int(step or 0)


def parse_hang(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    rank, _, step = text.partition(":")
    return int(rank), int(step)


HANG_SLEEP_S = 3600.0  # "stops": ``distprof demo --hang`` ends the job once the hang files exist


def synthetic_batches(rng: np.random.Generator, batch: int, width: int, steps: int):
    """The 'dataset': random inputs and a fixed linear teacher's targets."""
    teacher = np.random.default_rng(0).standard_normal((width, width)) / np.sqrt(width)
    for _ in range(steps):
        x = rng.standard_normal((batch, width))
        yield x, np.tanh(x @ teacher)


def allreduce(comm, grad: np.ndarray) -> None:
    """Sum ``grad`` over the ranks in place. Non-blocking, polled with short sleeps: a blocking
    MPI call spins on its core, and with more ranks than cores that spinning starves the other
    ranks' compute and makes the ranks' timings jitter (a spurious straggler)."""
    from mpi4py import MPI

    request = comm.Iallreduce(MPI.IN_PLACE, grad, op=MPI.SUM)
    while not request.Test():
        time.sleep(0.0002)


class CommThread:
    """Runs allreduces in order on its own thread, like DDP's communication stream."""

    def __init__(self, comm) -> None:
        self.comm = comm
        self.group = list(range(comm.Get_size()))  # the world, as global ranks
        self.jobs: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="distprof-demo-comm", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            grad = self.jobs.get()
            if grad is None:
                return
            with distprof.comm("allreduce", group=self.group, nbytes=grad.nbytes):
                allreduce(self.comm, grad)
            self.jobs.task_done()

    def submit(self, grad: np.ndarray) -> None:
        self.jobs.put(grad)

    def wait(self) -> None:
        self.jobs.join()

    def stop(self) -> None:
        self.jobs.put(None)
        self.thread.join()


def train(args: argparse.Namespace) -> dict | None:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    demo = distprof.config.load(args.config)["demo"]
    steps = args.steps or demo["steps"]
    mode = args.comm or demo["comm"]
    straggler = parse_straggler(args.straggler if args.straggler is not None else demo["straggler"])
    width, layers, batch = demo["width"], demo["layers"], demo["batch"]

    rng = np.random.default_rng(1234 + rank)
    weights = [np.random.default_rng(7 + i).standard_normal((width, width)) / np.sqrt(width)
               for i in range(layers)]  # same init on every rank
    lr = 0.01
    comm_thread = CommThread(comm) if mode == "overlap" else None
    overrides = {"clock": {"align": False}} if args.no_align else {}
    live = {key: value for key, value in (("every_steps", args.live_every),
                                          ("prometheus_port", args.prometheus_port)) if value is not None}
    if live:
        overrides["live"] = live
    hang = parse_hang(args.hang)
    if hang is not None:
        overrides["collector"] = {"hang_dump_s": args.hang_dump_s}
    profiler = distprof.Profiler(config=args.config, out=args.out, **overrides)
    with profiler as prof:
        for x, target in prof.loader(synthetic_batches(rng, batch, width, steps)):
            with distprof.phase("forward"):
                activations = [x]
                for w in weights:
                    activations.append(np.maximum(activations[-1] @ w, 0.0))
                if straggler and straggler[0] == rank and prof.step_num >= straggler[2]:
                    time.sleep(straggler[1])
                if hang is not None and hang == (rank, prof.step_num):
                    time.sleep(HANG_SLEEP_S)
            with distprof.range("loss"):  # a user range: the UserDefined table has a row
                error = activations[-1] - target
                loss = float(np.mean(error * error))  # noqa: F841 - what a training loop would log
            with distprof.phase("backward"):
                delta = error / batch
                grads = [None] * layers
                for i in reversed(range(layers)):
                    delta = delta * (activations[i + 1] > 0)
                    grads[i] = activations[i].T @ delta
                    if comm_thread is not None:
                        comm_thread.submit(grads[i])  # overlaps with the next layer's backward
                    delta = delta @ weights[i].T
            if comm_thread is not None:
                comm_thread.wait()
            else:
                group = list(range(world))  # the world, as global ranks
                for grad in reversed(grads):
                    with distprof.comm("allreduce", group=group, nbytes=grad.nbytes):
                        allreduce(comm, grad)
            with distprof.phase("optimizer"):
                for w, grad in zip(weights, grads):
                    w -= lr * grad / world
            prof.step()
    if comm_thread is not None:
        comm_thread.stop()
    return profiler.summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one rank of the distprof demo job (run `distprof demo`)")
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--comm", choices=("overlap", "serial"), default=None)
    parser.add_argument("--straggler", default=None)
    parser.add_argument("--hang", default=None, help="RANK:STEP: that rank stops at that step")
    parser.add_argument("--hang-dump-s", type=float, default=2.0, help="the hang watchdog's limit with --hang")
    parser.add_argument("--out", default="distprof_out")
    parser.add_argument("--config", default=None)
    parser.add_argument("--live-every", type=int, default=None)
    parser.add_argument("--prometheus-port", type=int, default=None)
    parser.add_argument("--no-align", action="store_true", help="keep the ping-pong clock offsets as they are")
    train(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
