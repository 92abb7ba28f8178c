"""Child entry point: instrument this interpreter, run the target unmodified, record how it ended.

Run by runner.py as ``python -c CODE CONFIG.json`` (CODE: runtime/boot.py's call of :func:`main`) in the user's working folder, with
stdout/stderr sent to a log. CONFIG holds ``target`` (the TARGET spec), ``script_args``,
``out`` (the observations file), ``max_frames`` and ``seconds``. The target sees what a
plain ``python train.py ARGS`` would give it: ``__name__ == "__main__"``, ``sys.argv``,
its folder first on ``sys.path``. The end is one of: ``finished``, ``budget`` (stopped at
a checkpoint: max-frames or seconds), ``stuck`` (no checkpoint reached; stopped by the
watchdog, with the line it was on), ``exit`` (sys.exit with a code), ``raised``,
``cannot-run`` (the target could not be imported: the reason line), ``interrupted``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from pathlib import Path


def _import_auditor():
    # runner.py started this interpreter through runtime/boot.py: src/ is last on sys.path, so
    # the package never shadows a user module.
    from torchrl_skill.audit import DETECTORS, INFO, patches, probe

    return probe, patches, [importlib.import_module(f"torchrl_skill.audit.{name}") for name in DETECTORS + INFO]


def _main_site() -> str:
    """The user line the main thread is on (called from another thread)."""
    from torchrl_skill.audit.probe import is_library_file

    frame = sys._current_frames().get(threading.main_thread().ident)
    user = None
    while frame is not None:
        if not is_library_file(frame.f_code.co_filename) and user is None:
            user = frame
        frame = frame.f_back
    if user is None:
        return "library code"
    return f"{Path(user.f_code.co_filename).name}:{user.f_lineno} in {user.f_code.co_name}"


def _workers_alive(grace: float = 10.0) -> list[str]:
    """``["pid name"]`` of the non-daemon worker processes still running ``grace`` seconds
    after the target returned: a plain interpreter exit joins them and waits forever (a
    collector never shut down); measured here, because once this process is gone they may
    exit on their own. The grace: torchrl 0.13.3's ``MultiSyncCollector.shutdown()`` returns
    before its workers have exited (they are gone within a second; 0.14.1 joins them)."""
    import multiprocessing

    deadline = time.monotonic() + grace
    while True:
        alive = [f"{p.pid} {p.name}" for p in multiprocessing.active_children() if not p.daemon]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.2)


def _start_watchdog(hub, grace: float) -> None:
    """After ``seconds + grace`` with no checkpoint reached, stop the main thread where it is."""

    def watch():
        deadline = hub.seconds + grace
        while hub.paused or hub.elapsed() < deadline:
            time.sleep(0.2)
            if hub.end["how"] != "running":
                return
        hub.stop_reason = "stuck"
        hub.meta["stuck_at"] = _main_site()
        with contextlib.suppress(Exception):
            hub.snapshot()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    threading.Thread(target=watch, name="audit-watchdog", daemon=True).start()


def _warnings_point_at_user_code() -> None:
    """A library warning raised through one of the auditor's wrappers names the user's line,
    as it would without the auditor (``stacklevel`` counts the wrapper's frame too)."""
    import warnings

    from torchrl_skill.audit.probe import is_library_file

    here = str(Path(__file__).resolve().parent)
    show = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if str(filename).startswith(here):
            frame = sys._getframe(1)
            while frame is not None and is_library_file(frame.f_code.co_filename):
                frame = frame.f_back
            if frame is not None:
                filename, lineno, line = frame.f_code.co_filename, frame.f_lineno, None
        show(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning


def _run_target(cfg: dict, hub) -> None:
    from torchrl_skill.runtime import user_code as _user_code
    from torchrl_skill.report import skill_report

    spec = cfg["target"]
    target = _user_code.parse_target(spec, script_ok=True)
    if target.attr is None:
        sys.argv = [str(target.path), *cfg["script_args"]]
        sys.path.insert(0, str(target.path.parent))
        runpy.run_path(str(target.path), run_name="__main__")
        return
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            fn = _user_code.load_attr(target)
    except skill_report.CannotRun:
        hub.end = {"how": "cannot-run", "reason": captured.getvalue().strip().splitlines()[-1:]}
        return
    if not callable(fn):
        hub.end = {"how": "cannot-run", "reason": [f"x: error: {target.label} is not a function; fix: name a function defined there"]}
        return
    fn()


def _describe(err: BaseException) -> dict:
    frames = traceback.extract_tb(err.__traceback__)
    from torchrl_skill.audit.probe import is_library_file

    user = [f for f in frames if not is_library_file(f.filename)]
    site = user[-1] if user else (frames[-1] if frames else None)
    lines = str(err).strip().splitlines()
    return {
        "error": f"{type(err).__name__}: {lines[0] if lines else ''}"[:400],
        "site": f"{Path(site.filename).name}:{site.lineno} in {site.name}" if site else "unknown",
        "traceback": "".join(traceback.format_exception(type(err), err, err.__traceback__))[-3000:],
    }


def install_detectors(hub, detectors) -> None:
    """Each detector's ``install(hub)``; one that raises (it reads a private internal that
    moved in a newer torchrl) is recorded in ``hub.meta["uninstrumented"]`` under its row
    name and the others still run: its row skips with that line (audit_run.detector_check)."""
    for module in detectors:
        try:
            module.install(hub)
        except Exception as err:
            hub.meta.setdefault("uninstrumented", {})[module.NAME] = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"


def _install_on_import(hub, patches, detectors) -> None:
    """Instrument torchrl the moment the target imports it: before any TorchRL object can
    exist, and without paying for torchrl in a target that fails before importing it; at
    once if this interpreter already imported it (runtime/import_hook.py)."""
    from torchrl_skill.runtime.import_hook import when_imported

    def install():
        try:
            patches.install(hub)
        except Exception as err:  # the stack itself is broken: say so, run nothing more
            hub.end = {"how": "probe-failed", **_describe(err)}
            hub.snapshot()
            os._exit(0)
        install_detectors(hub, detectors)
        hub.start = time.monotonic()  # the budget counts the target's own time, not torchrl's import

    @contextlib.contextmanager
    def paused():
        hub.paused = True  # importing torchrl is not the target hanging
        try:
            yield
        finally:
            hub.paused = False

    if "torchrl" in sys.modules:  # imported before the target ran (a .pth file, a launcher that preloads it)
        install()
    else:
        when_imported("torchrl", install, around=paused)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _follow_parent(parent: int | None, run_dir: Path, every: float = 0.5) -> None:
    """End this run if the auditor dies without stopping it (SIGKILL, an OOM kill).

    The auditor stops this process group and removes ``run_dir`` itself on every exit it
    survives (Ctrl-C, SIGTERM, a budget); when it is killed outright this process is
    re-parented, and a daemon thread (a thread: the main thread may be inside a long
    compiled call) removes ``run_dir`` and kills the group within ``every`` seconds. A child
    started on the auditor's behalf by another process (``runner.START``) watches both.
    """
    if not parent:
        return
    started_by = os.getppid()

    def watch():
        while os.getppid() == started_by and (started_by == parent or _pid_alive(parent)):
            time.sleep(every)
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    threading.Thread(target=watch, name="audit-follow-parent", daemon=True).start()


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    _follow_parent(cfg.get("parent_pid"), Path(sys.argv[1]).parent)
    probe, patches, detectors = _import_auditor()
    if cfg.get("probe"):  # audit_run.py --probe: one rung of the ladder, judged by ladder_child; no detector rows
        from torchrl_skill.audit import ladder_child

        ladder_child.configure(cfg["probe"])
        detectors = [ladder_child]
    # A snapshot is an atomic file replace (tens of ms on some file systems): every 5 s is
    # enough, since the parent reads the file once the child ended (or was killed).
    hub = probe.Hub(Path(cfg["out"]), cfg.get("max_frames"), float(cfg["seconds"]), snapshot_every=5.0)

    def stop(signum, frame):
        raise probe.AuditStop(hub.stop_reason or "stopped")

    signal.signal(signal.SIGUSR1, stop)
    signal.signal(signal.SIGTERM, stop)
    _install_on_import(hub, patches, detectors)
    if cfg.get("workers_dir"):  # worker processes report to files there (workers.py)
        from torchrl_skill.audit import workers

        workers.enable(hub, patches, detectors, cfg["workers_dir"])
    _warnings_point_at_user_code()
    hub.start = time.monotonic()
    _start_watchdog(hub, grace=max(3.0, 0.1 * hub.seconds))
    hub.snapshot()
    try:
        _run_target(cfg, hub)
        if hub.end["how"] == "running":
            hub.end = {"how": "finished"}
    except probe.AuditStop as err:
        reason = str(err) or "stopped"
        hub.end = {"how": "stuck" if reason == "stuck" else "budget", "reason": reason}
        if reason == "stuck":
            hub.end["site"] = hub.meta.get("stuck_at", "unknown")
    except SystemExit as err:
        code = err.code
        if code in (None, 0):
            hub.end = {"how": "finished", "exit_code": 0}
        else:
            hub.end = {"how": "exit", "exit_code": code if isinstance(code, int) else 1, "message": str(code)[:300]}
    except KeyboardInterrupt:
        hub.end = {"how": "interrupted"}
    except BaseException as err:
        hub.end = {"how": "raised", **_describe(err)}
    finally:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        if hub.end.get("how") == "finished":
            hub.end["workers_alive"] = _workers_alive()
        with contextlib.suppress(Exception):
            hub.emit("target_ended")  # the probe ladder judges a script that ended before its budget
        with contextlib.suppress(Exception):
            hub.snapshot()
        sys.stdout.flush()
        sys.stderr.flush()
    # Worker processes or threads the target left behind must not keep this process
    # alive; the parent stops the whole process group after we exit.
    killer = threading.Timer(5.0, lambda: os._exit(0))
    killer.daemon = True
    killer.start()
    sys.exit(0)

