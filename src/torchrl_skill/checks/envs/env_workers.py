"""Worker processes of a user's batched env, started by check_user_env.py's build check.

A ``ParallelEnv`` starts its workers on first use; each worker is a spawned interpreter
that unpickles the env factory (cloudpickle: a module-level function by reference, so it
imports the module that defines it). When a worker cannot import user code, every later
check of the env fails with something that looks like a fault of the env ("EOFError",
"still running after 60 s", seen in the claims sweep). So the build check starts the workers itself:
first :func:`_worker_imports.unimportable_in_workers` (what the pickle needs that no folder on
sys.path provides), then a real start with the workers' stderr copied (:func:`_tee_stderr`),
and says "loading problem" when a worker could not import or unpickle user code.
Observed on torchrl 0.14.1 (``ParallelEnv.start``, spawn by default).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from typing import Iterator

from torchrl_skill.runtime.worker_imports import unimportable_in_workers

LOADING = "user-code loading problem, not a fault of the env"
LOADING_FIX = (
    "define the env factory in the file or module you pass (the checker makes it importable by its name in workers), "
    "or in a module a fresh python imports by name (a folder on PYTHONPATH, an installed package); "
    "a module loaded with importlib under a name of your own is not found by workers"
)
# A worker's last line that says it could not import or unpickle what it was sent.
_IMPORT_ERRORS = re.compile(r"(ModuleNotFoundError: .*|ImportError: .*|AttributeError: Can't get attribute .*)")
_ERROR_LINE = re.compile(r"^\w*(?:Error|Exception)\b.*$", re.M)


def worker_envs(env) -> list:
    """The ParallelEnv instances on ``env``'s chain (itself, or the base of its transforms)."""
    from torchrl.envs import ParallelEnv, TransformedEnv

    found, seen = [], env
    while seen is not None:
        if isinstance(seen, ParallelEnv):
            found.append(seen)
        seen = seen.base_env if isinstance(seen, TransformedEnv) else None
    return found


@contextlib.contextmanager
def _tee_stderr(limit: int = 20_000) -> Iterator[bytearray]:
    """Point fd 2 at a pipe while the body runs; a thread copies the pipe to the real stderr
    and keeps the last ``limit`` bytes in the yielded buffer. Processes started in the body
    inherit the pipe, so their tracebacks are both shown and read."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # started outside the body: it lives until exit, holding fd 2
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    saved, out = os.dup(2), os.dup(2)
    captured = bytearray()

    def pump() -> None:
        try:
            while chunk := os.read(read_fd, 65536):
                with contextlib.suppress(OSError):
                    os.write(out, chunk)
                captured.extend(chunk)
                del captured[:-limit]
        finally:
            os.close(read_fd)
            os.close(out)

    os.dup2(write_fd, 2)
    os.close(write_fd)
    threading.Thread(target=pump, daemon=True, name="worker-stderr").start()
    try:
        yield captured
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _worker_error(captured: bytearray, wait: float = 10.0) -> str:
    """The last error line the workers wrote (waiting up to ``wait`` s for the copy thread)."""
    deadline = time.monotonic() + wait
    while True:
        text = captured.decode(errors="replace")
        lines = _ERROR_LINE.findall(text)
        if lines or time.monotonic() > deadline:
            return lines[-1].strip() if lines else ""
        time.sleep(0.05)


def start_workers(env) -> str | None:
    """Start the workers of every closed ParallelEnv on ``env``'s chain. Returns None, or
    the row detail of a failure: a loading problem (a worker cannot import user code) or
    the error a worker raised while building its env. Other exceptions propagate."""
    for penv in worker_envs(env):
        missing = unimportable_in_workers((penv.create_env_fn, penv.create_env_kwargs))
        if missing:
            return (f"{LOADING}: ParallelEnv's {penv.num_workers} spawned workers cannot import "
                    f"{'; '.join(missing)}; fix: {LOADING_FIX}")
        if not penv.is_closed:
            continue
        with _tee_stderr() as captured:
            try:
                penv.start()
            except Exception as err:
                failed = err
            else:
                continue
        said = _worker_error(captured)
        if _IMPORT_ERRORS.search(said):
            return (f"{LOADING}: ParallelEnv's spawned workers exited while starting with {said!r}; fix: {LOADING_FIX}")
        return (f"ParallelEnv's spawned workers exited while starting ({type(failed).__name__} in this process); "
                f"a worker said {said!r}" if said else
                f"ParallelEnv's spawned workers exited while starting ({type(failed).__name__}: {failed}); "
                "their traceback is on stderr above")
    return None
