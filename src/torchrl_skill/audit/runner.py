"""Parent side: run the audited target in a child process and bring back what it saw.

One job: start ``child.py`` in its own session (so the whole process tree can be stopped
as one group), wait for it within the budget, stop it and everything it started, and
return the observations with the output log. Everything is written in a temporary folder
that is removed before returning; nothing is written in the user's project (the child
runs with ``PYTHONDONTWRITEBYTECODE=1``). Ctrl-C or SIGTERM (``_base.Terminated``) stops the
child's process group (SIGINT, then SIGKILL after 2 s) and re-raises; if this process is
killed outright, the child notices it was re-parented, removes the folder and ends its group
(child._follow_parent).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from torchrl_skill.report.base import BUNDLE_ROOT
from torchrl_skill.runtime import boot

# ``python -c CODE CONFIG``: child.py's main(), the package found through runtime/boot.py
CHILD_ARGS = boot.child_args("torchrl_skill.audit.child")
TMP_PREFIX = "torchrl-audit-"


@dataclass
class Outcome:
    """What came back: ``observed`` (the child's JSON, see probe.Hub.payload), ``log`` (the
    target's stdout and stderr, interleaved), ``wall_s``, ``leftovers`` (processes that had
    to be killed after the child ended: ``["pid name"]``) and ``killed`` (the child itself
    had to be killed: it did not stop at the budget)."""

    observed: dict
    log: str
    wall_s: float
    leftovers: list
    killed: bool


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs. A zombie does not count: a process the
    child started and orphaned (multiprocessing's resource tracker, which exits with the
    child) stays a zombie until init reaps it, which took 1-2 s per audit here, while
    ``killpg(pgid, 0)`` still reports the group."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        import psutil
    except ImportError:
        return True
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
    return False


def _descendants(pid: int) -> dict[int, str]:
    """``{pid: "name"}`` of the live descendants of ``pid``; multiprocessing's resource
    tracker is named so that it is not reported (it exits on its own once its pipe closes)."""
    try:
        import psutil
        from torchrl_skill.runtime.processes import is_resource_tracker

        out = {}
        for p in psutil.Process(pid).children(recursive=True):
            try:
                out[p.pid] = "resource_tracker" if is_resource_tracker(p.cmdline()) else p.name()
            except psutil.Error:
                continue
        return out
    except Exception:  # psutil missing or the child already gone
        return {}


def _stop_all(pgid: int, known: dict[int, str], first=signal.SIGTERM, grace: float = 3.0) -> None:
    """Signal the child's process group and every descendant seen; SIGKILL what is left."""
    for sig in (first, signal.SIGKILL):
        if sig == signal.SIGKILL:
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (_group_alive(pgid) or _any_alive(known)):
                time.sleep(0.1)
        for pid in [pid for pid in known if _alive(pid)]:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _alive(pid: int) -> bool:
    try:
        import psutil

        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except Exception:
        return False


def _any_alive(known: dict[int, str]) -> bool:
    return any(_alive(pid) for pid in known)


def start_child(config: Path, log: Path, env: dict) -> subprocess.Popen:
    """``python child.py CONFIG`` in its own session (its pid is its process group), stdin
    from /dev/null, stdout and stderr to LOG, environment ENV."""
    with open(log, "wb") as logf:
        return subprocess.Popen(
            [sys.executable, *CHILD_ARGS, str(config)],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
            start_new_session=True, env=env,
        )


class _Forked:
    """This process's forked child, with the Popen methods the runner uses."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self.pid, 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("audit child", timeout)
            time.sleep(0.05)
        return self.returncode


def fork_child(config: Path, log: Path, env: dict):
    """:func:`start_child`, by forking this process when it already imported torchrl (the
    all-checks runner's worker): the child skips a ~5 s import and is otherwise started as
    ``python child.py CONFIG`` would be (src/torchrl_skill/runtime/fork.py). Only from a process with no other
    thread (a fork copies none, and a lock one held stays held); otherwise, or without
    ``os.fork``, it is :func:`start_child`."""
    import threading

    if "torchrl" not in sys.modules or not hasattr(os, "fork") or threading.active_count() > 1:
        return start_child(config, log, env)
    from torchrl_skill.runtime import fork as _fork

    path = _fork.base_path(BUNDLE_ROOT)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = _fork.fork()
    if pid == 0:
        _fork.become([*CHILD_ARGS, str(config)], cwd=os.getcwd(), env=env, path=path, stdout=str(log), stderr=str(log))
    return _Forked(pid)


# How the child is started: a fresh interpreter. The all-checks runner's workers, which
# imported torchrl already, use :func:`fork_child`; the test suite forks it from a warm
# interpreter of its own (tests/zygote.py). Whatever START returns has ``pid`` (a session
# leader), ``poll()`` and ``wait(timeout)`` like a Popen.
START = start_child


def run(target: str, script_args: list[str], seconds: float, max_frames: int | None, log_copy: Path | None = None,
        extra: dict | None = None) -> Outcome:
    """Run TARGET (a spec _user_code.parse_target accepts) under the auditor and return the
    :class:`Outcome`. ``seconds``: the run's budget; the child stops itself at its next
    checkpoint past it, its watchdog stops a stuck main thread at ``seconds + grace``, and
    this function kills the process group 120 s after that (the import of torchrl, not counted in the budget, can take that long on a loaded machine).
    ``extra``: more entries of the child's config (``{"probe": ...}``: one rung of the probe ladder, ladder_child.py)."""
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
    started = time.monotonic()
    try:
        out, log = tmp / "observed.json", tmp / "output.log"
        cfg = {"target": target, "script_args": script_args, "out": str(out), "max_frames": max_frames, "seconds": seconds,
               "workers_dir": str(tmp / "workers"), "parent_pid": os.getpid(), **(extra or {})}
        (tmp / "config.json").write_text(json.dumps(cfg))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        proc = START(tmp / "config.json", log, env)
        known: dict[int, str] = {}
        killed = False
        hard_deadline = seconds + max(3.0, 0.1 * seconds) + 120.0  # torchrl's import is not in the budget: slow under load
        polls = 0
        try:
            while proc.poll() is None:
                if polls % 20 == 0:  # a scan of the process table takes CPU from the audited run: once a second
                    known.update(_descendants(proc.pid))
                polls += 1
                if time.monotonic() - started > hard_deadline:
                    killed = True
                    _stop_all(proc.pid, {proc.pid: "python", **known})
                    break
                time.sleep(0.05)  # a poll is a waitpid: cheap; the child's end is seen within 50 ms
            proc.wait(timeout=10)
        except KeyboardInterrupt:
            _stop_all(proc.pid, {proc.pid: "python", **known}, first=signal.SIGINT, grace=2.0)
            with contextlib.suppress(Exception):
                proc.wait(timeout=2)
            raise
        deadline = time.monotonic() + 2.0  # give exiting workers a moment before calling them left over
        while time.monotonic() < deadline and _any_alive(known):
            time.sleep(0.1)
        leftovers = [f"{pid} {name}" for pid, name in known.items() if name != "resource_tracker" and _alive(pid)]
        if leftovers or _group_alive(proc.pid):
            _stop_all(proc.pid, known)
        observed = json.loads(out.read_text()) if out.exists() else {}
        if observed:  # what the instrumented worker processes saw (workers.py), merged by audit_run
            from . import worker_reports

            observed["worker_reports"] = worker_reports.collect(tmp / "workers")
        text = log.read_text(errors="replace") if log.exists() else ""
        if log_copy is not None:
            shutil.copyfile(log, log_copy)
        return Outcome(observed, text, time.monotonic() - started, leftovers, killed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
