"""Turn a freshly forked process into ``python ARGS``, without a fresh interpreter's imports.

A process forked from an interpreter that already imported torch, tensordict and torchrl
(about 5 s of CPU) can run a script as a new interpreter would, minus that import: its own
session, the standard streams on the files asked for, the working folder, environment and
``sys.path`` given, ``sys.argv`` and ``__main__`` as ``python ARGS`` sets them, the signal
dispositions an interpreter starts with, and at the end what an interpreter does on its way
out (non-daemon threads joined, ``atexit`` run, streams flushed). Used by the all-checks
runner for the auditor's child (_audit/runner.fork_child) and by the test suite's warm
interpreters (tests/zygote.py).

What a fork cannot give: environment variables read while the already-imported modules were
imported, and whatever those imports printed. Callers fork only where neither matters.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def _run_args(args: list[str]) -> None:
    """Run ``python ARGS`` here: a script path, ``-c CODE`` or ``-m MODULE``, then its arguments."""
    import runpy
    import types

    if args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main
        exec(compile(args[1], "<string>", "exec"), main.__dict__)  # noqa: S102 - what python -c does
    elif args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(args)
        runpy.run_path(args[0], run_name="__main__")


def _exit_code(stop: SystemExit) -> int:
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code
    print(stop.code, file=sys.stderr)
    return 1


def _print_uncaught(err: BaseException, args: list[str]) -> None:
    """The traceback ``python ARGS`` prints: from the script's own first frame on."""
    own = "<string>" if args[0] == "-c" else None if args[0] == "-m" else args[0]
    tb = err.__traceback__
    while own and tb is not None and tb.tb_frame.f_code.co_filename not in (own, str(Path(own).resolve())):
        tb = tb.tb_next
    if tb is not None:
        err.__traceback__ = tb  # the default hook prints the exception's own traceback
    sys.excepthook(type(err), err, err.__traceback__)


def _streams(stdin: str, stdout: str, stderr: str, unbuffered: bool) -> None:
    for fd, path, flags in ((0, stdin, os.O_RDONLY),
                            (1, stdout, os.O_WRONLY | os.O_CREAT | os.O_APPEND),
                            (2, stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND)):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - this process's streams from now on
    sys.stdout = open(1, "w", closefd=False, errors="backslashreplace")  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")  # noqa: SIM115
    sys.stderr.reconfigure(line_buffering=True)
    if unbuffered:  # PYTHONUNBUFFERED, for an interpreter already running
        sys.stdout.reconfigure(write_through=True)
        sys.stderr.reconfigure(write_through=True)


def base_path(root: Path) -> list[str]:
    """This interpreter's ``sys.path`` without the working folder and without folders under
    ``root`` (the bundle's script folders a runner put there): the entries a new interpreter
    would have after its script's folder and ``PYTHONPATH``."""
    root = root.resolve()
    return [p for p in sys.path if p and not Path(p).resolve().is_relative_to(root)]


IN_FORK = False  # set in a process become() turned into a script: its exit is become()'s


def fork() -> int:
    """``os.fork()`` with the garbage collector's objects frozen across it: 0 in the child,
    its pid in this process.

    The child's collections (``wind_down`` collects, as an interpreter's exit does) then skip
    what it inherited: collecting touches every tracked object, and each touched page of the
    inherited heap is copied. Measured on a process that imported torchrl: a forked ``-c pass``
    took 0.49 s with an ordinary fork, 0.12 s with this one (its exit's ``gc.collect()``
    0.33 s -> 0.001 s). This process's objects are unfrozen again right after the fork.
    """
    import gc

    gc.freeze()
    pid = os.fork()
    if pid:
        gc.unfreeze()
    return pid


def wind_down() -> None:
    """What an interpreter does on its way out, short of tearing its modules down: join the
    non-daemon threads, run ``atexit`` handlers, collect garbage (finalizers of what is still
    alive run), flush the standard streams. Never raises: the caller exits next with
    ``os._exit`` (become(), skill_report._exit_now)."""
    try:
        import atexit
        import gc
        import threading

        threading._shutdown()
        atexit._run_exitfuncs()
        gc.collect()
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed pipe: nothing more can be said there
            pass


def become(args: list[str], *, cwd: str, env: dict, path: list[str], stdin: str = os.devnull, stdout: str,
           stderr: str, status: str | None = None) -> None:
    """In a just-forked process: become ``python ARGS`` and exit with its code; never returns.

    ``path``: ``sys.path`` after the script's own entry (its folder, or ``""`` for ``-c``/``-m``)
    and ``PYTHONPATH`` from ``env``. ``stdin``/``stdout``/``stderr``: file paths (output
    appended). ``status``: a file that receives the exit code, for a caller that is not this
    process's parent.
    """
    global IN_FORK
    IN_FORK = True
    code = 1
    try:
        # an interpreter starts with SIGPIPE and SIGXFSZ ignored, the others at their defaults
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.setsid()
        _streams(stdin, stdout, stderr, bool(env.get("PYTHONUNBUFFERED")))
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
        first = "" if args[0] in ("-c", "-m") else str(Path(args[0]).resolve().parent)
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [first, *extra, *path]
        _run_args(args)
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop)
    except BaseException as err:  # noqa: BLE001 - printed as an uncaught exception is
        _print_uncaught(err, args)
        code = 1
    wind_down()
    if status:
        try:
            Path(status).write_text(str(code))
        except OSError:
            pass
    os._exit(code)
