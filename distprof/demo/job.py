"""One rank of the demo job (started by ``distprof demo`` through mpirun).

A numpy MLP trained on synthetic data, in one of three layouts (``--topology``):
  dp:     data-parallel. Backward produces per-layer gradients that are summed across ranks with
          MPI Iallreduce (polled, so waiting ranks yield the CPU):
            overlap: each layer's allreduce is issued on a communication thread while backward goes
                     on with the next layer (numpy matmul releases the GIL, so both really run);
            serial:  every allreduce runs after backward, on the main thread.
  tp2dp2: 4 ranks, tensor-parallel pairs {0,1},{2,3} (each layer's matmul split by rows, its partial
          outputs summed by an allreduce over the pair inside forward) x data-parallel pairs {0,2},{1,3}
          (gradients allgathered over the pair after backward): two process groups, two kinds.
  pp4:    4 pipeline stages, rank r = stage r, 2 micro-batches per step (GPipe): activations go
          r -> r+1 in forward, gradients r -> r-1 in backward, as MPI point-to-point messages.
``--straggler RANK:MS`` makes that rank sleep MS ms in its forward pass every step;
``RANK:MS@STEP`` from step STEP on (a rank that starts lagging while the job runs); a ``:data`` suffix
puts the sleep in the dataloader's next() instead (a slow input pipeline, the Dataloader phase).
Config ``demo.kernel_ms`` > 0 follows every matmul with a wait of that many ms that uses no CPU, as a
training thread waits for its GPU's kernels: with a small ``demo.width`` the ranks then hardly use their
cores, so more ranks than cores run side by side without slowing each other at random (what the
fault-injection matrix needs on a small machine; 0, the default, is the numpy compute alone).
``--hang RANK:STEP`` makes that rank stop (sleep for an hour) in its forward pass of that step, with the hang
watchdog on (``collector.hang_dump_s`` = ``--hang-dump-s``): every rank writes its hang file.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

import distprof

TOPOLOGIES = ("dp", "tp2dp2", "pp4")
DATA_SUFFIX = ":data"  # --straggler RANK:MS[@STEP]:data: the sleep is in the dataloader
MICRO_BATCHES = 2  # pp4: micro-batches per step


def parse_straggler(text: str) -> tuple[int, float, int] | None:
    """(rank, seconds of sleep per step, first step) of ``RANK:MS[@STEP][:data]`` (checked by the CLI)."""
    if not text:
        return None
    rank, _, rest = text.removesuffix(DATA_SUFFIX).partition(":")
    ms, _, step = rest.partition("@")
    return int(rank), float(ms) / 1000.0, int(step or 0)


def straggler_in_loader(text: str) -> bool:
    """Whether ``--straggler`` sleeps in the dataloader (``:data``) rather than in forward."""
    return bool(text) and text.endswith(DATA_SUFFIX)


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


def wait(request) -> None:
    """Wait for a non-blocking MPI request, polled with short sleeps: a blocking MPI call spins on
    its core, and with more ranks than cores that spinning starves the other ranks' compute and
    makes the ranks' timings jitter (a spurious straggler)."""
    while not request.Test():
        time.sleep(0.0002)


def allreduce(comm, grad: np.ndarray) -> None:
    """Sum ``grad`` over the ranks of ``comm`` in place (non-blocking, polled: see ``wait``)."""
    from mpi4py import MPI

    wait(comm.Iallreduce(MPI.IN_PLACE, grad, op=MPI.SUM))


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


@dataclass
class Job:
    """What every topology's training loop needs: this rank, the model and the injected faults."""

    comm: object  # MPI.COMM_WORLD
    rank: int
    world: int
    weights: list[np.ndarray]
    batch: int
    width: int
    steps: int
    straggler: tuple[int, float, int] | None
    slow_loader: bool  # the straggler sleeps in the dataloader, not in forward
    hang: tuple[int, int] | None
    lr: float = 0.01
    kernel_s: float = 0.0  # demo.kernel_ms: the wait after each matmul (a GPU kernel's, on the host)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a @ b``, then the kernel wait (none by default)."""
        out = a @ b
        if self.kernel_s:
            time.sleep(self.kernel_s)
        return out

    def lagging(self, step: int) -> bool:
        return self.straggler is not None and self.straggler[0] == self.rank and step >= self.straggler[2]

    def slow_forward(self, step: int, share: float = 1.0) -> None:
        """The injected faults inside forward: the straggler's sleep (``share`` of it: a pipeline
        stage sleeps a part in each micro-batch) and the hang."""
        if not self.slow_loader and self.lagging(step):
            time.sleep(self.straggler[1] * share)
        if self.hang is not None and self.hang == (self.rank, step):
            time.sleep(HANG_SLEEP_S)

    def batches(self, rng: np.random.Generator) -> Iterator:
        """The dataset; with ``:data``, the straggler sleeps before each batch of its lagging steps,
        inside the dataloader's next() (``prof.loader`` times it as the Dataloader phase)."""
        for step, item in enumerate(synthetic_batches(rng, self.batch, self.width, self.steps)):
            if self.slow_loader and self.lagging(step):
                time.sleep(self.straggler[1])
            yield item


NEIGHBOUR = """import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:  # a CPU-bound loop, as long as the rank it sits beside lives
    sum(range(100_000))
"""


@contextlib.contextmanager
def noisy_neighbour(rank: int, world: int, beside: int | None) -> Iterator[None]:
    """``--neighbour RANK``: every rank takes a core of its own where the ranks fit the cores (as a
    launcher binds them), and a CPU-bound process is pinned to rank RANK's core for the run: the other
    processes of a shared machine, on one rank's core. The process ends with the rank."""
    if beside is None:
        yield
        return
    cores = sorted(os.sched_getaffinity(0))
    core = cores[rank % len(cores)]
    if world <= len(cores):
        os.sched_setaffinity(0, {core})
    hog = None
    if rank == beside:
        hog = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(os.getpid())],
                               preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    try:
        yield
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def train(args: argparse.Namespace) -> dict | None:
    """This rank's whole run: the profiler around the chosen topology's training loop."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    demo = distprof.config.load(args.config)["demo"]
    straggler_text = args.straggler if args.straggler is not None else demo["straggler"]
    width = demo["width"]
    weights = [np.random.default_rng(7 + i).standard_normal((width, width)) / np.sqrt(width)
               for i in range(demo["layers"])]  # same init on every rank
    job = Job(comm=comm, rank=comm.Get_rank(), world=comm.Get_size(), weights=weights, batch=demo["batch"],
              width=width, steps=args.steps or demo["steps"], straggler=parse_straggler(straggler_text),
              slow_loader=straggler_in_loader(straggler_text), hang=parse_hang(args.hang),
              kernel_s=demo["kernel_ms"] / 1000)
    overrides = {"clock": {"align": False}} if args.no_align else {}
    live = {key: value for key, value in (("every_steps", args.live_every),
                                          ("prometheus_port", args.prometheus_port)) if value is not None}
    if live:
        overrides["live"] = live
    if job.hang is not None:
        overrides["collector"] = {"hang_dump_s": args.hang_dump_s}
    topology = args.topology or "dp"
    groups = tp2dp2_groups(job) if topology == "tp2dp2" else None  # collective: before the first step
    comm_thread = CommThread(comm) if topology == "dp" and (args.comm or demo["comm"]) == "overlap" else None
    profiler = distprof.Profiler(config=args.config, out=args.out, **overrides)
    with noisy_neighbour(job.rank, job.world, args.neighbour), profiler as prof:
        if topology == "tp2dp2":
            train_tp2dp2(prof, job, *groups)
        elif topology == "pp4":
            train_pp4(prof, job)
        else:
            train_dp(prof, job, comm_thread)
    if comm_thread is not None:
        comm_thread.stop()
    for group in groups or ():
        group.comm.Free()
    return profiler.summary


def train_dp(prof: distprof.Profiler, job: Job, comm_thread: CommThread | None) -> None:
    """Data-parallel: every rank runs the whole model on its own data; gradients allreduced over the world."""
    rng = np.random.default_rng(1234 + job.rank)
    weights = job.weights
    for x, target in prof.loader(job.batches(rng)):
        with distprof.phase("forward"):
            activations = [x]
            for w in weights:
                activations.append(np.maximum(job.matmul(activations[-1], w), 0.0))
            job.slow_forward(prof.step_num)
        with distprof.range("loss"):  # a user range: the UserDefined table has a row
            error = activations[-1] - target
            loss = float(np.mean(error * error))  # noqa: F841 - what a training loop would log
        with distprof.phase("backward"):  # each allreduce overlaps with the next layer's backward
            grads, _ = backward(weights, activations, error / job.batch, job.matmul,
                                comm_thread.submit if comm_thread is not None else None)
        if comm_thread is not None:
            comm_thread.wait()
        else:
            group = list(range(job.world))  # the world, as global ranks
            for grad in reversed(grads):
                with distprof.comm("allreduce", group=group, nbytes=grad.nbytes):
                    allreduce(job.comm, grad)
        with distprof.phase("optimizer"):
            for w, grad in zip(weights, grads):
                w -= job.lr * grad / job.world
        prof.step()


def backward(weights: list[np.ndarray], activations: list[np.ndarray], delta: np.ndarray,
             matmul: Callable[[np.ndarray, np.ndarray], np.ndarray] = np.matmul,
             on_grad: Callable[[np.ndarray], None] | None = None) -> tuple[list[np.ndarray], np.ndarray]:
    """The MLP's backward from ``delta`` (the loss gradient at its output): the weight gradients
    and the gradient at its input. ``on_grad(grad)`` is called as soon as a layer's gradient is ready."""
    grads: list = [None] * len(weights)
    for i in reversed(range(len(weights))):
        delta = delta * (activations[i + 1] > 0)
        grads[i] = matmul(activations[i].T, delta)
        if on_grad is not None:
            on_grad(grads[i])
        delta = matmul(delta, weights[i].T)
    return grads, delta


@dataclass(frozen=True)
class Group:
    """An MPI sub-communicator and its members as global ranks (what ``distprof.comm(group=)`` names)."""

    comm: object
    ranks: list[int]


def tp2dp2_groups(job: Job) -> tuple[Group, Group]:
    """(tensor-parallel pair, data-parallel pair) of this rank: TP {0,1},{2,3}; DP {0,2},{1,3}."""
    replica, shard = job.rank // 2, job.rank % 2
    tp = Group(job.comm.Split(color=replica, key=job.rank), [2 * replica, 2 * replica + 1])
    dp = Group(job.comm.Split(color=shard, key=job.rank), [shard, shard + 2])
    return tp, dp


def tp_forward(tp: Group, weights: list[np.ndarray], x: np.ndarray,
               matmul: Callable[[np.ndarray, np.ndarray], np.ndarray] = np.matmul) -> list[np.ndarray]:
    """Row-parallel layers: this rank multiplies its half of the input's columns by its half of the
    weight's rows; the allreduce over the TP pair sums the two partial products into the output."""
    shard = tp.comm.Get_rank()  # 0 or 1: the sub-communicator keeps the global order
    rows = slice(shard * x.shape[1] // 2, (shard + 1) * x.shape[1] // 2)
    activations = [x]
    for w in weights:
        out = matmul(activations[-1][:, rows], w[rows])
        with distprof.comm("allreduce", group=tp.ranks, nbytes=out.nbytes):
            allreduce(tp.comm, out)
        activations.append(np.maximum(out, 0.0))
    return activations


def dp_allgather(dp: Group, grads: list[np.ndarray]) -> None:
    """Average each gradient over the DP pair by allgathering it (in place in ``grads``); nbytes is
    the whole output, as nccl-tests counts an allgather."""
    for i in reversed(range(len(grads))):  # the last layer's gradient is ready first
        gathered = np.empty((len(dp.ranks), *grads[i].shape))
        with distprof.comm("allgather", group=dp.ranks, nbytes=gathered.nbytes):
            wait(dp.comm.Iallgather(grads[i], gathered))
        grads[i] = gathered.mean(axis=0)


def train_tp2dp2(prof: distprof.Profiler, job: Job, tp: Group, dp: Group) -> None:
    """Tensor x data parallel on 4 ranks. The two ranks of a TP pair see the same data and compute
    the same backward whole (so their weights stay equal without a TP exchange in backward); the DP
    pairs see different data and average their gradients after backward, on the main thread."""
    rng = np.random.default_rng(1234 + job.rank // 2)  # one data stream per TP pair (a DP replica)
    for x, target in prof.loader(job.batches(rng)):
        with distprof.phase("forward"):
            activations = tp_forward(tp, job.weights, x, job.matmul)
            job.slow_forward(prof.step_num)
        with distprof.range("loss"):
            error = activations[-1] - target
        with distprof.phase("backward"):
            grads, _ = backward(job.weights, activations, error / job.batch, job.matmul)
        dp_allgather(dp, grads)
        with distprof.phase("optimizer"):
            for w, grad in zip(job.weights, grads):
                w -= job.lr * grad
        prof.step()


def send(job: Job, buffer: np.ndarray, peer: int, tag: int) -> None:
    """Send ``buffer`` to global rank ``peer`` and wait until it is taken, as torch.distributed.send does."""
    with distprof.comm("send", peer=peer, group=list(range(job.world)), nbytes=buffer.nbytes):
        wait(job.comm.Isend(buffer, dest=peer, tag=tag))


def recv(job: Job, like: np.ndarray, peer: int, tag: int) -> np.ndarray:
    """Receive an array shaped like ``like`` from global rank ``peer``."""
    buffer = np.empty_like(like)
    with distprof.comm("recv", peer=peer, group=list(range(job.world)), nbytes=buffer.nbytes):
        wait(job.comm.Irecv(buffer, source=peer, tag=tag))
    return buffer


def stage_forward(job: Job, step: int, weights: list[np.ndarray], micro: int, x: np.ndarray) -> list[np.ndarray]:
    """One micro-batch through this pipeline stage: activations in from the stage before (stage 0
    reads the batch), its layers, activations out to the next stage. Tag 2m: forward of micro-batch m."""
    stage, last = job.rank, job.world - 1
    if stage > 0:
        x = recv(job, x, stage - 1, tag=2 * micro)
    with distprof.phase("forward"):  # the compute only: the waits are the recv's and send's
        activations = [x]
        for w in weights:
            activations.append(np.maximum(job.matmul(activations[-1], w), 0.0))
        job.slow_forward(step, share=1 / MICRO_BATCHES)  # a slow stage is slow in every micro-batch
    if stage < last:
        send(job, activations[-1], stage + 1, tag=2 * micro)
    return activations


def stage_backward(job: Job, weights: list[np.ndarray], activations: list[np.ndarray], target: np.ndarray,
                   micro: int) -> list[np.ndarray]:
    """One micro-batch's backward through this stage (the loss on the last stage, else the gradient
    in from the next stage; out to the stage before): its weight gradients. Tag 2m+1: backward of m."""
    stage, last = job.rank, job.world - 1
    if stage < last:
        delta = recv(job, activations[-1], stage + 1, tag=2 * micro + 1)
    else:
        with distprof.range("loss"):
            delta = (activations[-1] - target) / job.batch
    with distprof.phase("backward"):
        grads, delta = backward(weights, activations, delta, job.matmul)
    if stage > 0:
        send(job, delta, stage - 1, tag=2 * micro + 1)
    return grads


def train_pp4(prof: distprof.Profiler, job: Job) -> None:
    """A GPipe pipeline, rank r = stage r: every micro-batch's forward, then their backwards in
    reverse order; gradients summed over the micro-batches, then the optimizer step (no DP exchange)."""
    layers = np.array_split(np.arange(len(job.weights)), job.world)[job.rank]
    weights = [job.weights[i] for i in layers]
    rng = np.random.default_rng(1234)  # one replica: every stage draws the same batches
    for x, target in prof.loader(job.batches(rng)):
        inputs, targets = np.array_split(x, MICRO_BATCHES), np.array_split(target, MICRO_BATCHES)
        saved = [stage_forward(job, prof.step_num, weights, m, inputs[m]) for m in range(MICRO_BATCHES)]
        grads = [np.zeros_like(w) for w in weights]
        for m in reversed(range(MICRO_BATCHES)):
            for total, grad in zip(grads, stage_backward(job, weights, saved[m], targets[m], m)):
                total += grad
        with distprof.phase("optimizer"):
            for w, grad in zip(weights, grads):
                w -= job.lr * grad
        prof.step()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one rank of the distprof demo job (run `distprof demo`)")
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--topology", choices=TOPOLOGIES, default=None)
    parser.add_argument("--comm", choices=("overlap", "serial"), default=None)
    parser.add_argument("--straggler", default=None)
    parser.add_argument("--hang", default=None, help="RANK:STEP: that rank stops at that step")
    parser.add_argument("--hang-dump-s", type=float, default=2.0, help="the hang watchdog's limit with --hang")
    parser.add_argument("--out", default="distprof_out")
    parser.add_argument("--config", default=None)
    parser.add_argument("--live-every", type=int, default=None)
    parser.add_argument("--prometheus-port", type=int, default=None)
    parser.add_argument("--no-align", action="store_true", help="keep the ping-pong clock offsets as they are")
    parser.add_argument("--neighbour", type=int, default=None, help="RANK: a CPU-bound process on that rank's core")
    train(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
