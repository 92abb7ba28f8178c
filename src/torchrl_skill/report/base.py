"""The bottom of the check scripts' shared helpers: what every other helper may import.

One direction: ``_base`` imports nothing of the bundle; ``_cli``, ``_stack``, ``_processes``,
``_user_code`` and ``_error_index`` import from it; ``skill_report`` sits on top of them all
and re-exports these names, so scripts reach everything as ``sr.<name>``
(tests/test_skill_report.py::test_helpers_import_in_one_direction).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Where scripts live: "root" (scripts/) and the six sub-skills (sub-skills/<name>/scripts/).
AREAS = (
    "root",
    "envs-and-transforms",
    "collectors-and-replay",
    "modules-and-policies",
    "objectives-and-training",
    "llm-vla-and-services",
    "development-and-testing",
)
BUNDLE_ROOT = Path(__file__).resolve().parents[3]  # src/torchrl_skill/report/base.py

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_CANNOT_RUN = 2
EXIT_INTERRUPTED = 130  # the shell's code for a SIGINT death (128 + 2)
EXIT_NOTHING_AUDITED = 5  # audit_run.py alone: no check failed, but the run trained nothing (pytest's "no tests collected")


class CheckFailed(Exception):
    """Raise inside a check: the check ran and found a fault (status ``fail``)."""


class CheckSkipped(Exception):
    """Raise inside a check: it cannot run here or was not asked for (``skip``)."""


class BackendMissing(Exception):
    """Raise inside a check: an optional backend is not installed (``missing``)."""


class CannotRun(SystemExit):
    """Exit 2 with one line on stderr; raised by :func:`cannot_run`."""


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the script is so that the Ctrl-C clean-up runs.

    ``timeout``, an agent's tool limit and a closed terminal end a script this way; a
    KeyboardInterrupt subclass so every ``except KeyboardInterrupt`` that stops child
    processes and removes temporary folders covers it. ``signum``: the signal's number;
    the script exits ``128 + signum`` (143 for SIGTERM, 129 for SIGHUP), as the shell reports
    a death by that signal.
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def stop_on_termination() -> None:
    """Turn SIGTERM and SIGHUP into :class:`Terminated` in this (main) thread.

    Without it the default action kills the interpreter at once: no ``finally`` runs, so a
    child process (the auditor's audited run, a Ray head) outlives the script and its
    temporary folder stays behind.
    """
    import signal

    def raise_terminated(signum, frame):
        raise Terminated(signum)

    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        # only where the default death was coming: `nohup` ignores SIGHUP, and that must hold
        if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, raise_terminated)


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) folded to one space."""
    return " ".join(str(text).split())


def first_line(err: BaseException, limit: int = 300) -> str:
    """``"TypeName: first line of the message"`` (at most ``limit`` characters), never a traceback."""
    lines = str(err).strip().splitlines()
    text = f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
    return text[:limit]


def next_key(key: str | tuple) -> tuple:
    """``("next", *key)``: where EnvBase.step writes an observation, reward or done key."""
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


def cannot_run(reason: str, fix: str = "") -> "CannotRun":
    """Print ``<script>: error: REASON; fix: FIX`` on stderr and exit 2 (no traceback)."""
    prog = Path(sys.argv[0]).name or "torchrl-skill"
    line = f"{prog}: error: {reason}" + (f"; fix: {fix}" if fix else "")
    print(one_line(line), file=sys.stderr)
    raise CannotRun(EXIT_CANNOT_RUN)


# The verified_on of each piece of the bundle's own text (an error-index cause or fix) read
# since the last report row; _stack.take_unverified_mark turns it into the row's mark (that
# needs the installed torchrl, so it lives one level up).
BUNDLE_TEXT_READS: list[tuple[str, ...]] = []


def bundle_text(verified_on=()) -> None:
    """Record that the row being built quotes the bundle's own text, verified on the torchrl
    releases ``verified_on`` (empty: on the verified stack only)."""
    BUNDLE_TEXT_READS.append(tuple(verified_on))


# The evidence the running check counted for the property it declares (skill_report.Check's
# ``proves``): one (count, unit) per call of :func:`evidence`. Here, not in skill_report, so
# that the private helpers that do a check's counting (they import _base) can record it.
EVIDENCE: list[tuple[int, str]] = []


def evidence(count, unit: str = "") -> int:
    """Count ``count`` items of evidence for the property the running check proves.

    ``count``: how many independent items the property was checked on (steps compared with a
    reference, rows read back, workers seen, files scanned); an int, a bool or a 0-d tensor,
    at least 0. ``unit``: what was counted, plural ("steps compared"), shown when the total is
    zero. Calls add up over one check. A check declaring ``proves=`` whose total is 0 is not
    a PASS: ``skill_report.Report`` records it as a SKIP naming the property and the missing
    evidence. Returns ``count`` as an int, so the call can sit inside an expression
    (``f"{evidence(len(rows), 'rows')} rows"``). Raises ValueError on a negative count.
    """
    n = int(count)
    if n < 0:
        raise ValueError(f"evidence count must be >= 0, got {n}")
    EVIDENCE.append((n, unit))
    return n
