"""The child's hub: who listens to which event, what has been seen, when to stop.

``patches.py`` calls :meth:`Hub.emit` from inside wrapped torchrl/torch methods; detectors
subscribe with :meth:`Hub.on` and keep their findings in :meth:`Hub.section` (plain JSON
values). A listener that raises never breaks the user's code: the error is counted under
``meta.probe_errors`` and the call goes on.

Budget: collection calls (a collector batch, ``env.rollout``, an outermost ``env.step``)
and optimizer steps are checkpoints; at a checkpoint past ``max_frames`` or ``seconds`` the
hub raises :class:`AuditStop` (a BaseException, so ``except Exception`` in user code does
not swallow it, while its ``finally`` blocks still shut collectors down).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

_BUNDLE = Path(__file__).resolve().parents[3]
_LIBRARY_MARKERS = ("site-packages", "dist-packages", os.sep + "lib" + os.sep + "python")


class AuditStop(BaseException):
    """Raised into the user's code at a checkpoint once the budget is spent."""


def is_library_file(filename: str) -> bool:
    """True for the standard library, installed packages, this bundle and frozen/built-in code."""
    return (
        filename.startswith("<")
        or not filename.endswith(".py")  # compiled modules (numpy's .pyx frames)
        or any(m in filename for m in _LIBRARY_MARKERS)
        or filename.startswith((str(_BUNDLE / "scripts"), str(_BUNDLE / "src")))
    )


# cloudpickle >= 3.0 rebuilds a function it pickled by value (one defined in the script run
# as __main__: a ParallelEnv's or a collector's env factory sent to a spawned worker) with
# co_filename "<dynamic-code>" (cloudpickle/cloudpickle.py ``_code_reduce``, 3.1.3); 2.x kept
# the file. Such a function's globals keep its module's ``__file__`` (``_function_getstate``).
_DYNAMIC_CODE = "<dynamic-code>"


def frame_file(frame) -> str:
    """The file a frame's code was written in: ``co_filename``, or for a function cloudpickle
    >= 3.0 unpickled by value, its module's ``__file__`` (``"<dynamic-code>"`` when unknown)."""
    name = frame.f_code.co_filename
    if name == _DYNAMIC_CODE:
        return frame.f_globals.get("__file__") or name
    return name


def user_site(skip: int = 1) -> str:
    """``"train.py:42 in main"`` for the innermost user-code frame of the current stack
    (in a worker too: see :func:`frame_file`)."""
    try:
        frame = sys._getframe(skip)
    except ValueError:
        return "library code"
    while frame is not None:
        if not is_library_file(frame_file(frame)):
            return f"{Path(frame_file(frame)).name}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "library code"


_AUDIT_DIR = str(Path(__file__).resolve().parent)


def caller_is_user() -> bool:
    """Whether the nearest caller outside this package is user code (not torchrl, tensordict,
    torch or the standard library): tells a user's ``rb.update_priority`` from torchrl's own."""
    frame = sys._getframe(1)
    # Skip this package's wrappers and the metaclass __call__ that torchrl's EnvBase and
    # collectors construct instances through.
    while frame is not None and (frame.f_code.co_filename.startswith(_AUDIT_DIR)
                                 or (frame.f_code.co_name == "__call__" and is_library_file(frame_file(frame)))):
        frame = frame.f_back
    return frame is not None and not is_library_file(frame_file(frame))


class Hub:
    """Subscriptions, sections, frame/step counters and the budget of one audited run.

    ``out``: the JSON file the parent reads; written atomically at most every
    ``snapshot_every`` seconds and at the end. ``max_frames``/``seconds``: the budget (None:
    no frame limit).
    """

    def __init__(self, out: Path, max_frames: int | None, seconds: float, snapshot_every: float = 1.0):
        self.pid = os.getpid()
        self.out = Path(out)
        self.max_frames = max_frames
        self.seconds = seconds
        self.start = time.monotonic()
        self.snapshot_every = snapshot_every
        self._last_snapshot = 0.0
        self._listeners: dict[str, list] = {}
        self._summarisers: list = []
        self.sections: dict[str, dict] = {}
        self.meta: dict = {
            "built": [],  # first TorchRL objects, "Class at file.py:LINE"
            "probe_errors": {},
            # what could not be instrumented on this torchrl (a private internal that moved in a
            # newer release): {"Class (module)" or detector row: "ExcType: message"}
            "uninstrumented": {},
            "workers": [],  # multi-process components whose workers are not instrumented
            "frames": 0,
            "env_frames": 0,
            "collector_frames": 0,
            "optimizer_steps": 0,
            "first_frame_s": None,
            "last_frame_s": None,
        }
        self.end: dict = {"how": "running"}
        self.stop_reason: str | None = None
        self.paused = False  # True while torchrl is imported and instrumented
        self.lock = threading.RLock()

    # --- subscriptions -------------------------------------------------------------
    def on(self, event: str, fn) -> None:
        self._listeners.setdefault(event, []).append(fn)

    def summariser(self, fn) -> None:
        """``fn()`` runs before each snapshot to refresh a section from live objects."""
        self._summarisers.append(fn)

    def active(self) -> bool:
        """False in a forked worker: only the main process records."""
        return os.getpid() == self.pid

    def emit(self, event: str, *args) -> None:
        if not self.active():
            return
        for fn in self._listeners.get(event, ()):
            try:
                fn(*args)
            except AuditStop:
                raise
            except Exception as err:  # a probe fault must never change the user's run
                self.probe_error(f"{event}:{getattr(fn, '__module__', '?')}", err)

    def probe_error(self, where: str, err: BaseException) -> None:
        """Record an exception of the auditor's own code under ``where`` (``"EVENT:MODULE"``,
        e.g. ``"env_reset:torchrl_skill.audit.d_identical_workers"``) as ``"TypeError: message at
        file.py:LINE"``, the line being the innermost one of this package (an auditor bug,
        shown in the row of the detector ``MODULE`` belongs to)."""
        errors = self.meta["probe_errors"]
        if where not in errors:
            tb = traceback.extract_tb(err.__traceback__)
            ours = [f for f in tb if f.filename.startswith(_AUDIT_DIR)] or tb
            site = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"
            message = " ".join(str(err).split())[:160]
            errors[where] = f"{type(err).__name__}{': ' + message if message else ''} at {site}"

    def section(self, name: str) -> dict:
        return self.sections.setdefault(name, {})

    # --- counters and budget -------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def mark_built(self, obj) -> None:
        """Record one of the first TorchRL objects the target builds (proof it got that far)."""
        if self.active() and len(self.meta["built"]) < 8:
            self.meta["built"].append(f"{type(obj).__name__} at {user_site()}")

    def add_frames(self, n: int, source: str) -> None:
        key = "env_frames" if source == "env" else "collector_frames"
        self.meta[key] += int(n)
        self.meta["frames"] = max(self.meta["env_frames"], self.meta["collector_frames"])
        now = round(self.elapsed(), 3)
        if self.meta["first_frame_s"] is None:
            self.meta["first_frame_s"] = now
        self.meta["last_frame_s"] = now

    def checkpoint(self, collecting: bool) -> None:
        """Stop here if the budget is spent; ``collecting``: the user asks for more data."""
        if not self.active():
            return
        if self.stop_reason is None:
            if collecting and self.max_frames is not None and self.meta["frames"] >= self.max_frames:
                self.stop_reason = "max-frames"
            elif self.elapsed() >= self.seconds:
                self.stop_reason = "seconds"
        if self.stop_reason is not None:
            raise AuditStop(self.stop_reason)
        if self.elapsed() - self._last_snapshot >= self.snapshot_every:
            self.snapshot()

    # --- output --------------------------------------------------------------------
    def payload(self) -> dict:
        for fn in self._summarisers:
            try:
                fn()
            except Exception as err:
                self.probe_error(f"summarise:{getattr(fn, '__module__', '?')}", err)
        self.meta["elapsed_s"] = round(self.elapsed(), 3)
        return {"meta": self.meta, "sections": self.sections, "end": self.end}

    def snapshot(self) -> None:
        if not self.active():
            return
        with self.lock:
            self._last_snapshot = self.elapsed()
            tmp = self.out.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.payload(), default=str))
            os.replace(tmp, self.out)
