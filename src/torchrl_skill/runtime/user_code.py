"""Running the user's own code from a check: the one target loader, time limits, and
where a fault happened.

Every checker that takes user code (check_user_env.py, check_loss_wiring.py, the run-time
auditor) parses its TARGET with :func:`parse_target` and imports it with
:func:`load_attr`, so the forms and the errors are the same everywhere:

    path/to/file.py:function   a file, imported under its own name, its folder on sys.path
    package.module:function    a module found from the current folder or sys.path
    path/to/script.py          a whole script (only where the caller allows it)

Worker processes import the user's module by the same name (:func:`import_target`):
multiprocessing's spawn (ParallelEnv, multi-process collectors) copies sys.path, and
PYTHONPATH carries the folders to processes that only inherit the environment (Ray's
workers, started by ``ray.init()`` after the load). ``_worker_imports.unimportable_in_workers``
says what a worker would still fail to import.

Anything that stops the target from being imported (no such file, a folder, unreadable
or binary file, a syntax error, an exception at import, a missing attribute) exits 2
with one line (``skill_report.cannot_run``). Calling the target is the caller's check:
its exceptions are the user's faults, reported as check failures.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import difflib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import keyword
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

_BUNDLE = Path(__file__).resolve().parents[3]


def _cannot_run(reason: str, fix: str = ""):
    from torchrl_skill.report.base import cannot_run

    cannot_run(reason, fix)


def _is_library_file(filename: str) -> bool:
    prefixes = {sys.prefix, getattr(sys, "base_prefix", sys.prefix), str(_BUNDLE / "scripts"), str(_BUNDLE / "sub-skills"), str(_BUNDLE / "src")}
    return (
        filename.startswith("<")
        or "site-packages" in filename
        or "dist-packages" in filename
        or any(filename.startswith(p + "/") for p in prefixes)
    )


def user_site(frames: list[traceback.FrameSummary]) -> str:
    """``"file.py:LINE in func"`` for the innermost frame of user code among ``frames``
    (innermost last), or for the innermost frame when none is user code. User code is
    whatever is not the standard library, site-packages or this bundle."""
    if not frames:
        return "unknown location"
    pick = next((f for f in reversed(frames) if not _is_library_file(f.filename)), frames[-1])
    return f"{Path(pick.filename).name}:{pick.lineno} in {pick.name}"


def error_site(err: BaseException) -> str:
    """Where ``err`` was raised, as :func:`user_site` reads its traceback."""
    return user_site(traceback.extract_tb(err.__traceback__))


class TimeLimitExceeded(Exception):
    """Raised by :func:`time_limit` in the code under it when its budget runs out."""


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str) -> Iterator[None]:
    """Raise :class:`TimeLimitExceeded` in the code under it after ``seconds`` of wall time.

    Uses SIGALRM, so it interrupts Python code and sleeps in the main thread; a C call
    that never returns to Python is not interrupted. ``None``/0, another thread, or a
    platform without SIGALRM: no limit. The message names ``what`` and the user-code line
    that was running, e.g. ``check env:reset-output still running after 60 s (at
    my_env.py:12 in _reset)``. skill_report.Report.run reports it as that check's failure.
    """
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum, frame):
        raise TimeLimitExceeded(
            f"{what} still running after {seconds:g} s (at {user_site(traceback.extract_stack(frame))}); "
            "fix: find the loop or wait there that never ends, or give it more time with --timeout SECONDS"
        )

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Target:
    """A parsed TARGET. ``path``: the source file (None for a module not found on disk);
    ``module``: the importable module name (None for a file); ``attr``: the function
    (None for a whole script)."""

    spec: str
    path: Path | None
    module: str | None
    attr: str | None

    @property
    def label(self) -> str:
        where = self.path.name if self.path else self.module
        return f"{where}:{self.attr}" if self.attr else str(where)


def _looks_like_file(text: str) -> bool:
    return text.endswith(".py") or "/" in text or "\\" in text


def parse_target(spec: str, *, script_ok: bool = False, form: str = "path/to/file.py:function") -> Target:
    """Parse ``file.py:function``, ``package.module:function`` or (``script_ok``) ``file.py``.

    Exits 2 with one line when the form is wrong, the file does not exist, is a folder,
    cannot be read, is not text, or does not parse. The colon is split from the right, so
    a Windows drive letter survives. ``form`` is the example shown in the error.
    """
    spec = (spec or "").strip()
    head, sep, attr = spec.rpartition(":")
    if sep and (not head or not attr.isidentifier()):
        _cannot_run(f"TARGET {spec!r} is not {form}", f"e.g. my_env.py:make_env")
    if not sep:
        if not (script_ok and _looks_like_file(spec)):
            _cannot_run(f"TARGET {spec!r} names no function; expected {form}", "add :function_name after the file or module")
        head, attr = spec, None
    if _looks_like_file(head):
        path = Path(head).expanduser()
        read_source(path)
        return Target(spec, path.resolve(), None, attr)
    if not all(part.isidentifier() for part in head.split(".")):
        _cannot_run(f"TARGET {spec!r}: {head!r} is neither a .py path nor a module name", f"e.g. {form}")
    with _cwd_on_path():
        try:
            found = importlib.util.find_spec(head)
        except (ImportError, ValueError) as err:
            found = None
            reason = str(err)
        else:
            reason = ""
    if found is None:
        _cannot_run(
            f"module {head!r} not found from {Path.cwd()} or sys.path{': ' + reason if reason else ''}",
            "run from the folder that holds it, or pass path/to/file.py:function",
        )
    if found.origin is None and found.submodule_search_locations:
        _cannot_run(f"{head} is a folder, not a Python file", "pass path/to/file.py:function")
    origin = Path(found.origin) if found.origin and found.origin.endswith(".py") else None
    if origin is not None:
        read_source(origin)
    return Target(spec, origin, head, attr)


def read_source(path: Path) -> ast.Module:
    """Read and parse a user's Python file; exit 2 with one line if that is impossible."""
    if not path.exists():
        _cannot_run(f"file {path} not found", "pass an existing path/to/file.py")
    if path.is_dir():
        _cannot_run(f"{path} is a folder, not a Python file", "pass path/to/file.py (the file that defines the function)")
    try:
        raw = path.read_bytes()
    except OSError as err:
        _cannot_run(f"cannot read {path}: {err.strerror or err}", "check the path and its permissions")
    if b"\x00" in raw:
        _cannot_run(f"{path} is not a text file (it holds NUL bytes)", "pass the .py source file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        _cannot_run(f"{path} is not UTF-8 text ({err.reason} at byte {err.start})", "pass the .py source file")
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as err:
        _cannot_run(f"{path.name}:{err.lineno}: SyntaxError: {err.msg}", "fix the syntax error, then rerun")
    except (RecursionError, MemoryError, ValueError) as err:
        _cannot_run(f"{path.name} cannot be parsed ({type(err).__name__})", "split the deeply nested expression")


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    cwd = str(Path.cwd())
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _for_workers(folder: str, *, first: bool) -> None:
    """Put ``folder`` on sys.path (first, as Python does for a script's folder, or last) and
    on PYTHONPATH, so that worker processes find what this process imports from it."""
    if folder not in sys.path:
        sys.path.insert(0, folder) if first else sys.path.append(folder)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if folder not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([folder, *parts] if first else [*parts, folder])


def _finds(name: str, path: Path) -> bool:
    """True when ``name`` is free for the file ``path``: a fresh interpreter with this
    sys.path imports it from ``path``, and no other module holds that name (this process's
    modules, the standard library, another folder on sys.path), so that loading the file
    under it hides nothing the checker or torch import."""
    if not name.isidentifier() or keyword.iskeyword(name) or name in sys.stdlib_module_names:
        return False
    if importlib.machinery.FrozenImporter.find_spec(name) is not None:
        return False
    loaded = getattr(sys.modules.get(name), "__file__", None)
    if name in sys.modules and (loaded is None or Path(loaded).resolve() != path):
        return False
    spec = importlib.machinery.PathFinder.find_spec(name, sys.path)
    if spec is None or spec.origin is None or Path(spec.origin).resolve() != path:
        return False
    others = [p for p in sys.path if Path(p or ".").resolve() != path.parent]
    return importlib.machinery.PathFinder.find_spec(name, others) is None


_SHIM = '''"""Written by torchrl-skill's user-code loader: the user's {path!r} under this importable name,
for worker processes that unpickle what it defines. Removed when the checker exits."""
__file__ = {path!r}
with open(__file__, "rb") as _source:
    exec(compile(_source.read(), __file__, "exec"))
del _source
'''
_SHIMS: list[Path] = []  # the one temporary folder of shims, created on first use


def _shim_name(path: Path) -> str:
    """An importable alias for a file whose stem is no free module name (``my-env.py``, a
    ``json.py`` while the standard json is loaded): a shim module in a temporary folder that
    executes the file, so workers get the same functions under the same name."""
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_user_{stem}_{digest}"
    if not _SHIMS:
        _SHIMS.append(Path(tempfile.mkdtemp(prefix="torchrl_skill_user_code_")))
        atexit.register(shutil.rmtree, _SHIMS[0], True)
    _for_workers(str(_SHIMS[0]), first=False)  # again each time: a caller may have pruned sys.path
    (_SHIMS[0] / f"{name}.py").write_text(_SHIM.format(path=str(path)))
    importlib.invalidate_caches()
    return name


def import_target(target: Target):
    """Import the target's module and return it.

    A file is imported under its stem (``envs.py`` -> ``envs``), its folder first on
    sys.path and on PYTHONPATH (sibling imports work, and worker processes import it by
    that name); a stem that is no free module name gets a shim alias (:func:`_shim_name`).
    A module name is imported with the current folder on sys.path and PYTHONPATH (kept
    there for the workers). An exception at import exits 2 naming the line."""
    try:
        if target.path is not None and target.module is None:
            _for_workers(str(target.path.parent), first=True)
            name = target.path.stem if _finds(target.path.stem, target.path) else _shim_name(target.path)
            if name in sys.modules:
                return sys.modules[name]
            spec = importlib.util.spec_from_file_location(name, target.path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)
                raise
            return module
        cwd = str(Path.cwd())
        with _cwd_on_path():
            module = importlib.import_module(target.module)
        origin = getattr(module, "__file__", None)
        if origin and Path(origin).resolve().is_relative_to(Path(cwd).resolve()):
            _for_workers(cwd, first=True)
        return module
    except (KeyboardInterrupt, TimeLimitExceeded):
        raise
    except SystemExit as err:
        if type(err).__name__ == "CannotRun":
            raise
        _cannot_run(
            f"importing {target.label.split(':')[0]} called sys.exit({err.code!r})",
            "move the script's top-level work under if __name__ == \"__main__\":",
        )
    except BaseException as err:
        from torchrl_skill.report.base import first_line

        _cannot_run(
            f"importing {target.label.split(':')[0]} raised {first_line(err, 200)} (at {error_site(err)})",
            "fix that line; old TorchRL names: python sub-skills/development-and-testing/scripts/scan_api_drift.py FILE",
        )


def load_attr(target: Target):
    """Import the target and return its attribute (exit 2 when it has none, naming the closest)."""
    module = import_target(target)
    if target.attr is None:
        return module
    if not hasattr(module, target.attr):
        names = [n for n in dir(module) if not n.startswith("_")]
        close = difflib.get_close_matches(target.attr, names, n=3)
        funcs = [n for n in names if callable(getattr(module, n, None)) and getattr(getattr(module, n), "__module__", None) == module.__name__]
        hint = f"did you mean {', '.join(close)}?" if close else f"functions and classes defined there: {', '.join(funcs[:8]) or 'none'}"
        _cannot_run(f"{target.label.split(':')[0]} has no attribute {target.attr!r}", hint)
    return getattr(module, target.attr)


def call_user(fn, what: str, *args, **kwargs):
    """Call user code ``fn``. ``sys.exit`` inside it becomes a check failure naming ``what``
    (it would otherwise end the checker silently); other exceptions propagate."""
    try:
        return fn(*args, **kwargs)
    except SystemExit as err:
        if type(err).__name__ == "CannotRun":
            raise
        from torchrl_skill.report.base import CheckFailed

        raise CheckFailed(f"{what} called sys.exit({err.code!r}) (at {error_site(err)}); return a value instead") from None
