"""Worker processes: instrument them as the main process is, bring their observations back.

Child side (``enable``, called by child.py in the audited process and again in every
instrumented worker, so workers of workers are covered too):

- ``spawn`` workers (torchrl's default start method, torchrl/_utils.py
  ``_get_default_mp_start_method`` 0.14.1: ``ParallelEnv``, ``MultiSyncCollector``,
  ``MultiAsyncCollector``): ``multiprocessing.spawn.get_command_line`` is wrapped so that the
  new interpreter runs ``boot(folder)`` before ``spawn_main``: a :class:`WorkerHub` and the
  same detectors, installed when the worker imports torchrl (as child.py does);
- ``fork`` workers (a script that called ``mp.set_start_method("fork")``, gymnasium's
  ``AsyncVectorEnv``): an ``os.register_at_fork`` handler turns the inherited hub into a
  fresh :class:`WorkerHub` and installs the detectors again, so nothing the parent saw
  before the fork is counted twice;
- ``BaseProcess.start`` is wrapped to list every process started (pid, start method, target
  function, wall-clock start) under ``meta["processes"]``; a started process without a report
  was not instrumented (``forkserver``, or killed before it booted), and the run row says so.
  The early stop (d_training.py) reads the reports as they come, from ``hub.workers_dir``.

A worker hub writes ``worker-PID.json`` in the runner's temporary folder (removed with it)
when it boots, every SNAPSHOT_S seconds while events come, when the worker exits
(``multiprocessing.util.Finalize``) and on SIGTERM (then dies of it, as a plain worker
would); a worker killed by SIGKILL keeps its last snapshot.

The parent side (reading the reports, merging them into the rows) is worker_reports.py.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from torchrl_skill.runtime import boot as _boot

from . import probe

SNAPSHOT_S = 0.5
_STATE: dict = {}  # per process: what enable() already did


class WorkerHub(probe.Hub):
    """A hub in a worker process: records like the main one, never stops the run (the main
    process owns the budget), and snapshots itself as events come."""

    is_worker = True

    def __init__(self, folder: str):
        super().__init__(Path(folder) / f"worker-{os.getpid()}.json", None, float("inf"), snapshot_every=SNAPSHOT_S)
        self._worker_meta()

    def _worker_meta(self) -> None:
        import multiprocessing

        proc = multiprocessing.current_process()
        target = getattr(proc, "_target", None)
        self.meta.update(pid=os.getpid(), parent_pid=os.getppid(), process=proc.name, instrumented=False,
                         target=getattr(target, "__name__", None) if target is not None else None)
        self._writing = False

    def reset_after_fork(self, folder: str) -> None:
        """Start over in a forked child: its own file, counters, listeners and sections."""
        fresh = WorkerHub.__new__(WorkerHub)
        probe.Hub.__init__(fresh, Path(folder) / f"worker-{os.getpid()}.json", None, float("inf"), snapshot_every=SNAPSHOT_S)
        self.__dict__.clear()
        self.__dict__.update(fresh.__dict__)
        self._worker_meta()

    def checkpoint(self, collecting: bool) -> None:
        self._maybe_snapshot()

    def emit(self, event: str, *args) -> None:
        super().emit(event, *args)
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        if not self._writing and self.elapsed() - self._last_snapshot >= self.snapshot_every:
            self.snapshot()

    def snapshot(self) -> None:
        if self._writing or not self.active():
            return
        self._writing = True
        try:
            if self.meta["target"] is None:  # spawn: the Process object is unpickled after boot
                self._worker_meta_target()
            super().snapshot()
        except Exception:  # a report that cannot be written must not break the worker
            pass
        finally:
            self._writing = False

    def _worker_meta_target(self) -> None:
        import multiprocessing

        proc = multiprocessing.current_process()
        target = getattr(proc, "_target", None)
        if target is not None:
            self.meta.update(target=getattr(target, "__name__", None), process=proc.name)


def _modules():
    import importlib

    from . import DETECTORS, INFO

    return [importlib.import_module(f"torchrl_skill.audit.{name}") for name in DETECTORS + INFO]


def _install(hub, patches, detectors) -> None:
    patches.install(hub)
    for module in detectors:
        module.install(hub)
    _watch_first_resets(hub)
    hub.meta["instrumented"] = True


def _install_on_import(hub, patches, detectors) -> None:
    """Instrument torchrl when this worker imports it (as child.py does in the main process,
    through the same hook: runtime/import_hook.py); a failure leaves the worker
    uninstrumented and says so in its report, never stops it."""
    from torchrl_skill.runtime.import_hook import when_imported

    def install():
        try:
            _install(hub, patches, detectors)
        except Exception as err:
            hub.probe_error("worker-install:torchrl_skill.audit.workers", err)
        hub.snapshot()

    when_imported("torchrl", install)


def boot(folder: str) -> None:
    """Entry point of a spawned worker, run before ``spawn_main`` (see ``enable``)."""
    from . import patches

    hub = WorkerHub(folder)
    detectors = _modules()
    if "torchrl" in sys.modules:  # imported already (a preloaded module): instrument now
        _install(hub, patches, detectors)
    else:
        _install_on_import(hub, patches, detectors)
    enable(hub, patches, detectors, folder)
    _snapshot_on_term(hub)
    hub.snapshot()


def _patch_spawn(folder: str) -> None:
    import multiprocessing.spawn as spawn

    orig = spawn.get_command_line
    if getattr(orig, "_audit_wrapped", False):
        return
    prefix = ("try:\n"
              f"    {_boot.call('torchrl_skill.audit.workers', f'boot({folder!r})')}\n"
              "except Exception:\n"
              "    pass\n")

    def get_command_line(**kwds):
        cmd = orig(**kwds)
        if "-c" in cmd:
            i = cmd.index("-c") + 1
            cmd = [*cmd[:i], prefix + cmd[i], *cmd[i + 1:]]
        return cmd

    get_command_line._audit_wrapped = True
    spawn.get_command_line = get_command_line


def _patch_start(hub) -> None:
    from multiprocessing.process import BaseProcess

    orig = BaseProcess.start
    if getattr(orig, "_audit_wrapped", False):
        return

    def start(self):
        out = orig(self)
        try:
            module = type(getattr(self, "_popen", None)).__module__
            method = {"popen_fork": "fork", "popen_spawn_posix": "spawn", "popen_forkserver": "forkserver"}.get(module.rpartition(".")[2], module)
            target = getattr(self, "_target", None)
            hub.meta.setdefault("processes", []).append(
                {"pid": self.pid, "method": method, "target": getattr(target, "__name__", None) if target is not None else None,
                 "t": round(time.time(), 3)})  # wall clock, comparable across processes (d_training's early stop)
        except Exception as err:
            hub.probe_error("process-start:torchrl_skill.audit.workers", err)
        return out

    start._audit_wrapped = True
    BaseProcess.start = start


def enable(hub, patches, detectors, folder: str) -> None:
    """Instrument the processes this one starts (once per process; see the module doc)."""
    if _STATE.get("pid") == os.getpid():
        return
    _STATE["pid"] = os.getpid()
    if not isinstance(hub, WorkerHub):  # the audited process makes the folder; a late worker never re-creates it
        Path(folder).mkdir(parents=True, exist_ok=True)
        hub.workers_dir = folder  # the early stop reads the reports there (d_training.py)
    _patch_spawn(folder)
    _patch_start(hub)

    def after_fork():
        installed = bool(hub.meta.get("instrumented")) or bool(getattr(hub, "_listeners", None))
        _snapshot_on_term(hub)  # not the audited process's handler: a plain worker dies on SIGTERM
        if not isinstance(hub, WorkerHub):
            hub.__class__ = WorkerHub
        hub.reset_after_fork(folder)
        patches._local.__dict__.clear()
        _STATE.pop("pid", None)
        try:
            if installed:
                for module in detectors:
                    module.install(hub)
                _watch_first_resets(hub)
                hub.meta["instrumented"] = True
        except Exception as err:
            hub.probe_error("worker-install:torchrl_skill.audit.workers", err)
        hub.snapshot()

    if not _STATE.get("fork_hook"):
        _STATE["fork_hook"] = True
        os.register_at_fork(after_in_child=after_fork)
    # A forked child's Process._bootstrap clears the finalizers it inherited, then runs the
    # after-fork callbacks: its last snapshot is registered from there. A spawned child's
    # _after_fork does nothing (SpawnProcess): it registers its own now (boot).
    from multiprocessing import util

    util.register_after_fork(hub, _finalize)
    if isinstance(hub, WorkerHub):
        _finalize(hub)


def _snapshot_on_term(hub) -> None:
    """On SIGTERM (``Process.terminate()``, a daemon worker stopped at its parent's exit, the
    runner's clean-up) write the last snapshot, then die of the signal as a plain worker does."""
    import signal

    def on_term(signum, frame):
        try:
            hub.end = {"how": "sigterm"}
            hub.snapshot()
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        signal.signal(signal.SIGTERM, on_term)
    except (ValueError, OSError):  # not the main thread
        pass


def _finalize(hub) -> None:
    from multiprocessing import util

    def last():
        hub.end = {"how": "exit"}
        hub.snapshot()

    if isinstance(hub, WorkerHub):
        util.Finalize(hub, last, exitpriority=100)


def _watch_first_resets(hub) -> None:
    """Record the first reset of each non-batched env of this worker as a digest, so that
    the parent can compare them across collector workers (identical-workers)."""
    import hashlib

    import torch

    from .tdtools import ObjectKeys

    sec = hub.section("_workers")
    key_of = ObjectKeys()
    seen: set = set()
    seeded: set = set()
    sites: dict = {}  # where the worker's code built each env (the user's factory line)

    def on_reset(env, out):
        if out is None or key_of(env) in seen or out.batch_size.numel() != 1:
            return
        seen.add(key_of(env))
        keys = [k for k in out.keys(True, True) if (k[-1] if isinstance(k, tuple) else k) not in ("done", "terminated", "truncated")]
        parts = [out.get(k).detach().float().reshape(-1).cpu() for k in keys if torch.is_tensor(out.get(k, None))]
        if not parts:
            return
        digest = hashlib.sha1(torch.cat(parts).numpy().tobytes()).hexdigest()[:16]
        base = getattr(env, "base_env", None) if type(env).__name__ == "TransformedEnv" else None
        label = f"TransformedEnv({type(base).__name__})" if base is not None else type(env).__name__
        sec.setdefault("first_resets", []).append({"cls": label, "digest": digest, "seeded": key_of(env) in seeded,
                                                   "site": sites.get(key_of(env), "?")})

    hub.on("env_built", lambda env, site, by_user=True: sites.setdefault(key_of(env), site))
    hub.on("env_seed", lambda env: seeded.add(key_of(env)))
    hub.on("env_reset", on_reset)
