"""`ultraroute serve`: one process, or `--workers N` processes on one port, each a replica.

With one worker the gateway runs in this process, as it always has. With N, this process becomes a
small supervisor:

    bind      the listening socket, here, before any worker starts (a port in use fails at once),
              and every worker accepts from it: a busy worker accepts less, an idle one more, and a
              restarted worker finds the queue as it was. (Not `SO_REUSEPORT`: it would also let a
              second gateway started on the same port by mistake silently take half the traffic,
              and it keeps handing a saturated worker its share of new connections.)
    spawn     N workers (multiprocessing "spawn": a fresh interpreter, no state copied from here).
              Each loads the config itself, from the same file, environment and flags, and builds
              its own app: its own replica id, telemetry, health board, key ring and limits. With
              `REDIS_URL` they share stats, health, keys and limits as replicas on different machines
              do; without it each measures and limits alone (start-up says so).
    forward   SIGTERM and SIGINT to every worker as SIGTERM (each stops gracefully: uvicorn stops
              accepting and finishes its requests), SIGHUP as SIGHUP (each reloads, where the app
              supports it). A second SIGTERM/SIGINT kills the workers. Workers run in their own
              process group, so a Ctrl-C in a terminal reaches them once, through here. At the
              first SIGTERM this process closes its copy of the listening sockets, so the port
              refuses new connections once the last worker stops listening, rather than queueing
              connections no one will accept (reset when this process exits).
    restart   a worker that exits on its own (a crash), after a second; five quick deaths in a row
              stop the whole server instead of looping.

A worker whose supervisor disappears (killed with SIGKILL) notices within a second and stops itself.
Metrics, in-flight counts and circuits live in each worker; with `--worker-ports FIRST`, worker i also
answers on port FIRST + i, so Prometheus can scrape every worker (the shared port reaches any one).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType

from gateway.config import Config, load_config
from gateway.policy import policies_dir

log = logging.getLogger("ultraroute.serve")

BACKLOG = 2048
RESTART_DELAY_S = 1.0
QUICK_DEATH_S = 10.0  # a worker that dies sooner than this after its start counts towards giving up
MAX_QUICK_DEATHS = 5


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """The `serve` flags every worker needs to build the same gateway (picklable: sent to workers)."""

    config: str
    policies: str | None
    open_access: bool
    host: str
    port: int
    log_level: str
    worker_ports: int | None = None  # worker i also answers on worker_ports + i (scrape each one there)


def worker_count(value: str) -> int:
    """`--workers`: a positive number, or `auto` for the cores this process may run on."""
    if value == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    count = int(value)  # argparse turns the ValueError into a usage error
    if count < 1:
        raise ValueError(value)
    return count


def load(options: ServeOptions, worker: int | None = None) -> Config:
    config = load_config(Path(options.config), policies_dir(options.policies, Path(options.config)),
                         open_access=options.open_access)
    return config if worker is None else replace(config, worker=worker)


def run_server(config: Config, options: ServeOptions, sockets: list[socket.socket] | None = None) -> None:
    """The gateway's app under uvicorn, in this process, until SIGTERM/SIGINT (drained: `server.py`)."""
    from gateway.app import create_app
    from gateway.serve.server import serve as run

    run(create_app(config), host=options.host, port=options.port, log_level=options.log_level, sockets=sockets,
        backlog=BACKLOG)


def serve(options: ServeOptions, workers: int, config: Config) -> int:
    """Run the gateway with `workers` processes (`config`: as `load(options)` read it); returns the exit
    status."""
    if workers == 1 and options.worker_ports is None:
        run_server(config, options)  # uvicorn binds the port itself, as it always has
        return 0
    try:
        shared, own = _bind(options.host, options.port), []
        if options.worker_ports is not None:
            own = [_bind(options.host, options.worker_ports + i) for i in range(workers)]
    except OSError as err:
        print(f"error: cannot listen on {options.host}:{options.port} or the worker ports: "
              f"{(err.strerror or str(err)).lower()}", file=sys.stderr)
        return 1
    if workers == 1:
        run_server(config, options, [shared, *own])
        return 0
    if config.redis_url is None:
        print(f"ultraroute: {workers} workers without REDIS_URL: each worker measures endpoints, trips circuits "
              "and enforces client limits and budgets alone; set REDIS_URL to share them", file=sys.stderr)
    return Supervisor(options, workers, shared, own).run()


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


class Supervisor:
    """Starts the workers, forwards signals to them, restarts the ones that crash."""

    def __init__(self, options: ServeOptions, workers: int, shared: socket.socket,
                 own: list[socket.socket]) -> None:
        self.options = options
        self.count = workers
        self.shared = shared  # every worker accepts from it...
        self.own = own  # ...and worker i from own[i], its own port, if any
        self.procs: dict[int, BaseProcess] = {}  # worker index -> its process
        self.started: dict[int, float] = {}
        self.stopping = False
        self.quick_deaths = 0
        self._context = multiprocessing.get_context("spawn")
        # The signal handler writes here so that `_watch` wakes at once and closes the listeners.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        try:
            for index in range(self.count):
                if not self.stopping:
                    self._start(index)
            print(f"ultraroute: {self.count} workers on http://{self.options.host}:"
                  f"{self.shared.getsockname()[1]} (pids {' '.join(str(p.pid) for p in self.procs.values())})",
                  file=sys.stderr, flush=True)
            return self._watch()
        finally:
            for proc in self.procs.values():
                if proc.is_alive():
                    proc.kill()
            self._close_listeners()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _close_listeners(self) -> None:
        """This process's copies of the listening sockets. Once stopping, the supervisor must not hold
        them: the kernel would keep completing handshakes on the port after the last worker closed
        its own copy, and those connections, never accepted, are reset when this process exits (a
        request sent, no answer). Closed here, the port refuses new connections as soon as the last
        worker stops listening."""
        for sock in (self.shared, *self.own):
            sock.close()

    def _start(self, index: int) -> None:
        proc = self._context.Process(target=_worker_main, name=f"ultraroute-worker-{index}",
                                     args=(self.options, index, self._sockets_of(index), os.getpid()))
        proc.start()
        self.procs[index] = proc
        self.started[index] = time.monotonic()

    def _sockets_of(self, index: int) -> list[socket.socket]:
        """The shared port's socket for this worker, and its own port's, if any."""
        return [self.shared, *self.own[index:index + 1]]

    def _watch(self) -> int:
        status = 0
        while self.procs:
            ready = wait([*(p.sentinel for p in self.procs.values()), self._wake_r], timeout=1.0)
            if self._wake_r in ready:
                os.read(self._wake_r, 512)
            if self.stopping:
                self._close_listeners()
            for index, proc in list(self.procs.items()):
                if proc.sentinel not in ready:
                    continue
                proc.join()
                del self.procs[index]
                if self.stopping:
                    continue
                quick = time.monotonic() - self.started[index] < QUICK_DEATH_S
                self.quick_deaths = self.quick_deaths + 1 if quick else 0
                if self.quick_deaths >= MAX_QUICK_DEATHS:
                    print(f"ultraroute: workers keep dying (last exit code {proc.exitcode}); stopping",
                          file=sys.stderr, flush=True)
                    self._forward(signal.SIGTERM)
                    self.stopping = True
                    status = 1
                    continue
                print(f"ultraroute: worker {index} (pid {proc.pid}) exited with {proc.exitcode}; restarting",
                      file=sys.stderr, flush=True)
                time.sleep(RESTART_DELAY_S)
                if not self.stopping:
                    self._start(index)
        return status

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(BlockingIOError):  # full: `_watch` has a wake-up pending anyway
            os.write(self._wake_w, b"s")  # wake `_watch` (it closes the listeners once stopping)
        if signum == signal.SIGHUP:
            self._forward(signal.SIGHUP)
        elif self.stopping:  # a second request to stop: do not wait for the requests in flight
            for proc in self.procs.values():
                proc.kill()
        else:
            self.stopping = True
            self._forward(signal.SIGTERM)

    def _forward(self, signum: int) -> None:
        for proc in self.procs.values():
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signum)


def _worker_main(options: ServeOptions, index: int, sockets: list[socket.socket], parent: int) -> None:
    """A worker process: the gateway on the supervisor's socket, until SIGTERM."""
    os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the supervisor only; it forwards one SIGTERM
    # SIGHUP's default would kill the worker: ignored unless the app installs its own handler (reload).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    threading.Thread(target=_stop_when_orphaned, args=(parent,), daemon=True, name="orphan-watch").start()
    config = load(options, worker=index)
    run_server(config, options, sockets)


def _stop_when_orphaned(parent: int) -> None:
    """Gunicorn's rule: a worker whose supervisor is gone (re-parented) stops itself gracefully."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)
            return
