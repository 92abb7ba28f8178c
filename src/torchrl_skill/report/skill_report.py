"""Shared reporting helper for every torchrl-skill check script (CONTRIBUTING.md, "Scripts").

One job: give each script the same CLI conventions, stack probe, check runner and report
format. A script declares its checks as data and reads top to bottom::

    def check_rollout(args):                        # a check: returns the pass detail,
        td = make_env().rollout(args.steps)         # or Passed(detail, value) to hand a
        sr.evidence(td.numel(), "steps")            # value to later checks; it counts the
        return sr.Passed(f"batch {td.shape}", td)   # evidence for what it proves

    def check_buffer(rollout):                      # takes that value by parameter name
        ...

    CHECKS = [
        sr.Check("core:rollout", check_rollout, gives="rollout", proves="the env steps"),
        sr.Check("core:buffer", check_buffer),
        sr.Check("cli:rlrender", check_cli, flag="check_cli"),   # runs only with --check-cli
    ]

    def build_parser():                             # parse args
        parser = sr.make_parser(__doc__, EXAMPLE)
        parser.add_argument("--steps", type=sr.int_at_least(1), default=5)
        return parser

    def run_checks(args, report):                   # run checks
        sr.run_declared(CHECKS, report, args=args)

    def main(argv=None):                            # probe the stack, report
        return sr.standard_main(__file__, build_parser, run_checks, argv)

    if __name__ == "__main__":
        sr.main_guard(main)

Statuses: ``pass``; ``fail`` (the check ran and found a fault; exit 1); ``skip`` (not
asked for, cannot run here, or a check it needs did not pass); ``missing`` (an optional
backend is not installed; never fails the run). Ctrl-C ends a script with exit 130.

Evidence: a check declares the property it proves (``Check(..., proves="...")``) and counts
the items it checked that property on (``sr.evidence(n, "unit")``, from the check or any
helper it calls: ``_base.evidence``). A PASS whose count is 0 (an empty rollout, a zero-length
batch, a file with nothing to check) is recorded as a SKIP naming the property and what was
missing; the JSON row carries ``proves`` and ``evidence`` (the count; null when undeclared).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib.metadata
import importlib.util
import inspect
import json
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from torchrl_skill import data

# The layers below (report.base, report.cli, runtime, stack); their public names are part of
# this helper's API, so scripts reach everything as ``sr.<name>``. They import from
# report.base, never from here.
from torchrl_skill.runtime import user_code as _user_code  # noqa: E402
from torchrl_skill.report.base import (  # noqa: E402,F401
    AREAS, BUNDLE_ROOT, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_INTERRUPTED, EXIT_NOTHING_AUDITED, EXIT_OK, BackendMissing, CannotRun, CheckFailed,
    CheckSkipped, Terminated, cannot_run, evidence, first_line, next_key, one_line, stop_on_termination,
)
from torchrl_skill.report import base as _base  # noqa: E402  (its EVIDENCE list is the running check's count)
from torchrl_skill.report.cli import EXIT_CODES_HELP, add_device_flag, add_timeout_flag, int_at_least, make_parser, number_above  # noqa: E402,F401
from torchrl_skill.runtime.processes import child_processes, leftover_processes  # noqa: E402,F401
from torchrl_skill.stack.probe import SUPPORTED, VERIFIED, installed_version, plain_torchrl_logs, require_stack, stack_versions  # noqa: E402,F401
from torchrl_skill.stack.probe import newest_run_line, requires as torchrl_requires, td_pairing, tensordict_fix  # noqa: E402,F401
from torchrl_skill.stack.probe import _release, bundle_text, clear_bundle_text, line_of, stack_lines, stack_note, take_unverified_mark  # noqa: E402,F401

SCHEMA_ID = "torchrl-skill.report/1"
SCHEMA_PATH = data.REPORT_SCHEMA


@dataclass
class CheckResult:
    """One row of the report; ``seconds`` is wall time of the check.

    ``proves``: the property the check declared (``Check.proves``), None when undeclared;
    ``evidence``: how many items it counted for that property (``evidence``), None when
    nothing was counted.
    """

    name: str
    status: str
    seconds: float
    detail: str
    proves: str | None = None
    evidence: int | None = None


@dataclass(frozen=True)
class Passed:
    """A check's return value when it hands ``value`` on to later checks (see :class:`Check`)."""

    detail: str
    value: Any = None


@dataclass(frozen=True)
class Check:
    """One declared check of a script's ``CHECKS`` list, run by :func:`run_declared`.

    ``fn``'s parameters are filled by name from the namespace: what the script passes
    (``args=args``, ...) plus the value of every earlier check that ``gives`` a name.
    ``flag``: an ``args`` attribute that must be truthy, else the check is skipped as
    "not asked for (pass --flag)".
    ``proves``: the property a PASS of this check stands for, in words ("every step's reward
    equals the reference's"); the check counts its evidence with :func:`evidence`, and a PASS
    on a count of 0 becomes a SKIP (:meth:`Report.add`). None: not declared yet
    (tests/test_evidence_sweep.py lists each such check by name).
    """

    name: str
    fn: Callable[..., Any]
    gives: str | None = None
    flag: str | None = None
    proves: str | None = None


def print_row(c: CheckResult) -> None:
    """Print one report row: ``STATUS  name  (seconds)  detail``."""
    print(f"{c.status.upper():<8} {c.name:<34} ({c.seconds:6.2f}s)  {c.detail}", flush=True)


def _chained(err: BaseException, types: tuple) -> BaseException | None:
    """The first exception of ``types`` in ``err``'s ``__cause__``/``__context__`` chain."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, types):
            return err
        err = err.__cause__ or err.__context__
    return None


def _absent_feature(err: BaseException | None) -> str | None:
    """src/torchrl_skill/stack/versions.py ``missing_feature``: what the installed (older) torchrl line lacks,
    when the bundle's own code asked for it. None when user code is in the traceback: a user's
    call that the installed release rejects is that check's failure, not a skip."""
    if err is None or any(not _user_code._is_library_file(f.filename) for f in traceback.extract_tb(err.__traceback__)):
        return None
    from torchrl_skill.stack.versions import missing_feature

    return missing_feature(err)


@dataclass
class Report:
    """Collects check results and prints them as a table or one JSON object.

    ``script``: the script's ``__file__``; stored bundle-relative in the report.
    ``json_mode``: while True, anything a library prints to stdout during a check is sent
    to stderr, so stdout carries the JSON object alone.
    ``timeout``: seconds each check may run (``_user_code.time_limit``); None for no limit.
    ``nothing_audited``: set by a script whose checks passed on nothing (audit_run.py, when no
    optimizer stepped): the report is not ok, and without a failed check it exits
    ``EXIT_NOTHING_AUDITED`` with the summary word ``NOTHING AUDITED``.
    """

    script: str
    json_mode: bool = False
    checks: list[CheckResult] = field(default_factory=list)
    versions: dict | None = None
    timeout: float | None = None
    nothing_audited: str | None = None
    # names of the checks stopped by ``timeout``: run_declared does not hand what they held on
    timed_out: set[str] = field(default_factory=set)

    @property
    def script_path(self) -> str:
        path = Path(self.script).resolve()
        path = entry_point_of(path) or path  # a script's body in the package: the entry point users run
        try:
            return path.relative_to(BUNDLE_ROOT).as_posix()
        except ValueError:
            return path.name

    def add(self, name: str, status: str, detail: str = "", seconds: float = 0.0, proves: str | None = None,
            evidence: int | None = None) -> CheckResult:
        """Record a result directly (e.g. a backend probe that needs no try block).

        ``proves`` and ``evidence``: the property the row stands for and the items counted for
        it (:class:`Check`). A ``pass`` that declares ``proves`` on no evidence (None or 0) is
        recorded as ``skip``: "no evidence for <proves>: 0 <what was counted>".
        """
        if status not in ("pass", "fail", "skip", "missing"):
            raise ValueError(f"unknown status {status!r}")
        if status == "pass" and proves and not evidence:
            status, detail = "skip", no_evidence_detail(proves, evidence, detail)
        # a row quoting the bundle's text (sr.bundle_text) off the line it was verified on says so
        result = CheckResult(name, status, round(float(seconds), 3), one_line(detail) + take_unverified_mark(),
                             proves, evidence if evidence is None else int(evidence))
        self.checks.append(result)
        if not self.json_mode:
            print_row(result)
        return result

    def note_stack(self) -> None:
        """Open the report with one ``stack:version`` row when the stack is not the verified
        one (``_stack.stack_note``: what runs here, what was verified, what the version
        matrix ran on this line); nothing on the verified stack."""
        note = stack_note(self.versions or stack_versions())
        if note:
            self.add("stack:version", "pass", note)

    def skip_all(self, names, reason: str) -> None:
        """Record every check in ``names`` as skipped for ``reason``."""
        for name in names:
            self.add(name, "skip", reason)

    def result(self, name: str) -> CheckResult | None:
        """The row recorded under ``name`` (the latest one), or None."""
        return next((c for c in reversed(self.checks) if c.name == name), None)

    @contextlib.contextmanager
    def quiet_stdout(self) -> Iterator[None]:
        """In JSON mode, send what is printed to stdout to stderr (stdout holds the report)."""
        if self.json_mode:
            with contextlib.redirect_stdout(sys.stderr):
                yield
        else:
            yield

    def run(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` as one check and return the value it hands on
        (:meth:`run_check` with no declared property)."""
        return self.run_check(name, fn, None, args, kwargs)

    def run_check(self, name: str, fn: Callable[..., Any], proves: str | None, args: tuple = (),
                  kwargs: dict | None = None) -> Any:
        """Run ``fn(*args, **kwargs)`` as one check proving ``proves`` (None: undeclared) and
        return the value it hands on.

        ``fn`` returns the pass detail (a str), or :class:`Passed` (detail and value); it
        raises :class:`CheckFailed`, :class:`CheckSkipped` or :class:`BackendMissing` to set
        the status; any other exception is a ``fail`` whose detail is its type, first line
        and the user-code line that raised it (never a traceback). Returns
        ``Passed.value`` when the check passed, else None; the row is ``self.result(name)``.
        What ``fn`` counts with :func:`evidence` is the row's ``evidence``; a declared
        property on a count of 0 makes a PASS a SKIP (:meth:`add`) and hands nothing on.
        """
        start = time.perf_counter()
        status, detail, value = "pass", "", None
        clear_bundle_text()
        outer = _base.EVIDENCE[:]  # a check run inside another check keeps its own count
        _base.EVIDENCE.clear()
        with self.quiet_stdout():
            try:
                with _user_code.time_limit(self.timeout, f"check {name}"):
                    out = fn(*args, **(kwargs or {}))
                if isinstance(out, Passed):
                    detail, value = out.detail, out.value
                else:
                    detail = out or ""
            except (CheckFailed, _user_code.TimeLimitExceeded) as err:
                status, detail = "fail", str(err)
                if isinstance(err, _user_code.TimeLimitExceeded):
                    self.timed_out.add(name)
            except CheckSkipped as err:
                status, detail = "skip", str(err)
            except BackendMissing as err:
                status, detail = "missing", str(err)
            except (KeyboardInterrupt, CannotRun):
                raise
            except BaseException as err:  # a crash inside a check is that check's failure
                status, detail = "fail", f"{first_line(err)} (raised at {_user_code.error_site(err)})"
                # the time limit or Ctrl-C fired inside compiled code (Ray's serializer), which
                # re-raised it as "SystemError: ... returned a result with an exception set"
                cause = _chained(err, (KeyboardInterrupt, _user_code.TimeLimitExceeded))
                if isinstance(cause, KeyboardInterrupt):
                    raise cause from None
                if cause is not None:
                    detail = f"{cause} (surfaced as {type(err).__name__} from compiled code)"
                    self.timed_out.add(name)
                absent = _absent_feature(_chained(err, (ImportError, AttributeError, TypeError)))
                if absent:  # an older torchrl line lacks what the check exercises: it cannot run here
                    status, detail = "skip", absent
            finally:
                counted = _base.EVIDENCE[:]
                _base.EVIDENCE[:] = outer
        total = sum(n for n, _ in counted) if counted else None
        if status == "pass" and proves and not total:
            status, detail = "skip", no_evidence_detail(proves, total, detail, [u for _, u in counted])
        self.add(name, status, detail, time.perf_counter() - start, proves, total)
        return value if status == "pass" else None

    def extend(self, other: "Report", prefix: str) -> None:
        """Append another report's rows, names prefixed (used by the all-checks runner)."""
        for c in other.checks:
            self.checks.append(dataclasses.replace(c, name=f"{prefix}{c.name}"))

    def summary(self) -> dict[str, int]:
        counts = {"pass": 0, "fail": 0, "skip": 0, "missing": 0}
        for c in self.checks:
            counts[c.status] += 1
        return counts

    @property
    def ok(self) -> bool:
        return self.summary()["fail"] == 0 and not self.nothing_audited

    def as_dict(self) -> dict:
        """The report object of CONTRIBUTING.md "JSON report" (validated by report.schema.json)."""
        return {
            "schema": SCHEMA_ID,
            "script": self.script_path,
            "ok": self.ok,
            "versions": self.versions or stack_versions(),
            "checks": [c.__dict__ for c in self.checks],
            "summary": self.summary(),
        }

    def finish(self) -> int:
        """Print the summary line (or the JSON object) and return the exit code: 0, 1, or
        ``EXIT_NOTHING_AUDITED`` when ``nothing_audited`` is set and no check failed."""
        empty = bool(self.nothing_audited) and self.summary()["fail"] == 0
        if self.json_mode:
            sys.stdout.write(json.dumps(self.as_dict()) + "\n")
        else:
            s = self.summary()
            verdict = "OK" if self.ok else ("NOTHING AUDITED" if empty else "FAILED")
            print(
                f"{verdict}: {s['pass']} pass, {s['fail']} fail, {s['skip']} skip, "
                f"{s['missing']} missing  [{self.script_path}]"
            )
        sys.stdout.flush()
        return EXIT_OK if self.ok else (EXIT_NOTHING_AUDITED if empty else EXIT_FAIL)


def no_evidence_detail(proves: str, evidence: int | None, detail: str = "", units: list[str] = ()) -> str:
    """The SKIP detail of a PASS on no evidence: the property, what was counted (0 of
    ``units``) or that nothing was, then the check's own pass detail in brackets."""
    what = ", ".join(dict.fromkeys(u or "items" for u in units)) or "items"
    counted = "the check counted no evidence" if evidence is None else f"0 {what}"
    return f"no evidence for '{proves}': {counted}, nothing was checked" + (f" (it said: {detail})" if detail else "")


def check_params(check: Check) -> list[str]:
    """The namespace names ``check.fn`` takes (parameters without a default)."""
    params = inspect.signature(check.fn).parameters.values()
    return [p.name for p in params if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def validate_declared(checks: list[Check], provided: set[str]) -> list[str]:
    """Problems with a CHECKS list: doubled names, or a parameter that neither ``provided``
    nor an earlier check's ``gives`` supplies. Empty when the list is sound (tests call this)."""
    problems, seen, available = [], set(), set(provided)
    for check in checks:
        if check.name in seen:
            problems.append(f"check {check.name!r} declared twice")
        seen.add(check.name)
        for param in check_params(check):
            if param not in available:
                problems.append(f"check {check.name!r} takes {param!r}, which nothing before it gives")
        if check.gives:
            available.add(check.gives)
    return problems


def run_declared(checks: list[Check], report: Report, **namespace: Any) -> dict[str, Any]:
    """Run ``checks`` in order, passing values by parameter name; return the namespace.

    A check whose ``flag`` is off is skipped as not asked for; a check that needs a value
    an earlier check did not give (it failed or skipped) is skipped naming that check.
    A check stopped by the report's time limit was interrupted inside what it held (the
    user's env, mid-``_step``): a later check taking one of those given values is skipped
    naming the hung check, instead of waiting out the limit again on the same code.
    """
    problems = validate_declared(checks, set(namespace))
    if problems:
        raise TypeError("; ".join(problems))
    givers = {c.gives: c.name for c in checks if c.gives}
    args = namespace.get("args")
    hung: dict[str, str] = {}  # given value -> the check that timed out holding it
    for check in checks:
        if check.flag and not getattr(args, check.flag, False):
            report.add(check.name, "skip", f"not asked for (pass --{check.flag.replace('_', '-')})", proves=check.proves)
            continue
        absent = [p for p in check_params(check) if p not in namespace]
        if absent:
            missing = ", ".join(f"{p} from {givers.get(p, '?')}" for p in absent)
            report.add(check.name, "skip", f"not run: needs {missing}, which did not pass", proves=check.proves)
            continue
        params = inspect.signature(check.fn).parameters
        kwargs = {name: namespace[name] for name in params if name in namespace}
        held = [p for p in kwargs if p in hung]
        if held:
            report.add(check.name, "skip", f"not run: {hung[held[0]]} timed out inside {held[0]} (its state is "
                                           "unknown after the interrupt; fix that hang first)", proves=check.proves)
            continue
        value = report.run_check(check.name, check.fn, check.proves, kwargs=kwargs)
        if check.name in report.timed_out:
            hung.update({p: check.name for p in kwargs if p in givers})
        if check.gives and report.checks[-1].status == "pass":
            namespace[check.gives] = value
    return namespace


def expect(condition: bool, message: str) -> None:
    """Fail the current check with ``message`` unless ``condition`` holds.

    Used instead of ``assert``, which ``python -O`` strips.
    """
    if not condition:
        raise CheckFailed(message)


def optional_backend(dist: str, module: str | None = None, install: str = "") -> str:
    """Probe an optional backend without importing it.

    Returns ``"<dist> <version>"`` when found; raises :class:`BackendMissing` with the
    install command otherwise. ``module`` is the import name when it differs from ``dist``.
    """
    spec = importlib.util.find_spec(module or dist.replace("-", "_"))
    version = installed_version(dist)
    if spec is None:
        raise BackendMissing(f"{dist} not installed; install: {install or 'pip install ' + dist}")
    evidence(1, "import specs found")
    return f"{dist} {version or '(version unknown)'}"


def discover_scripts(root: Path = BUNDLE_ROOT) -> list[Path]:
    """Every check script of the bundle: ``scripts/*.py`` and ``sub-skills/*/scripts/*.py``.

    Private modules (``_*.py``) and this helper are not check scripts.
    """
    found = sorted((root / "scripts").glob("*.py")) + sorted((root / "sub-skills").glob("*/scripts/*.py"))
    return [p for p in found if not p.name.startswith("_") and p.name != Path(__file__).name]


def entry_module(path: Path) -> str:
    """The package module a bundle script (an entry point) runs: the ``from torchrl_skill.X import
    main`` line of its file, ``"torchrl_skill.checks.envs.check_user_env"``. ValueError when the
    file has no such line."""
    import re

    found = re.search(r"^from (torchrl_skill[\w.]*) import main\b", Path(path).read_text(), re.M)
    if found is None:
        raise ValueError(f"{path} is no entry point: no 'from torchrl_skill.X import main' line")
    return found.group(1)


def entry_point_of(module_file: Path, root: Path = BUNDLE_ROOT) -> Path | None:
    """The entry point (``scripts/*.py``, ``sub-skills/*/scripts/*.py``) whose body is the package
    module file ``module_file``; None for a file that is no script's body."""
    try:
        rel = Path(module_file).resolve().relative_to((root / "src").resolve()).with_suffix("")
    except ValueError:
        return None
    return _entry_points(root).get(".".join(rel.parts))


@functools.lru_cache(maxsize=None)
def _entry_points(root: Path) -> dict[str, Path]:
    found = [*discover_scripts(root), root / "scripts" / "skill_report.py"]
    return {entry_module(p): p for p in found if p.is_file()}


def script_area(path: Path, root: Path = BUNDLE_ROOT) -> str:
    """``root`` for a root script, else the sub-skill folder name."""
    rel = path.resolve().relative_to(root.resolve()).parts
    return rel[1] if rel[0] == "sub-skills" else "root"


def main_guard(main: Callable[[list[str] | None], int]) -> None:
    """Run ``main`` as a script: exit with its code; 2 (one line) on CannotRun; 130 on
    Ctrl-C; 128 + the signal's number on SIGTERM (143) or SIGHUP (129), after the same
    clean-up as Ctrl-C (:class:`_base.Terminated`)."""
    stop_on_termination()
    try:
        code = main(None)
    except CannotRun as err:
        code = err.code if isinstance(err.code, int) else EXIT_CANNOT_RUN
    except Terminated as err:
        print(f"{Path(sys.argv[0]).name}: terminated by {signal.Signals(err.signum).name}", file=sys.stderr)
        code = 128 + err.signum
    except KeyboardInterrupt:
        print(f"{Path(sys.argv[0]).name}: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    _exit_now(code)


def _exit_now(code: int) -> None:
    """Exit with ``code`` as an interpreter does (non-daemon threads joined, ``atexit``
    handlers run, a garbage collection so that finalizers of what is still alive run, streams
    flushed) but skip the teardown of every loaded module, about 1 s once torch, torchrl and
    transformers are loaded (measured on run_all_checks.py: 1.36 s of 13.4 s). In a process
    that src/torchrl_skill/runtime/fork.py turned into this script, its caller finishes the exit instead."""
    from torchrl_skill.runtime import fork as _fork

    if _fork.IN_FORK:
        sys.stdout.flush()
        sys.exit(code)
    import os

    _fork.wind_down()
    os._exit(code)


def standard_main(
    script_file: str,
    build_parser: Callable[[], argparse.ArgumentParser],
    run_checks: Callable[[argparse.Namespace, "Report"], None],
    argv: list[str] | None,
    import_torchrl: bool = True,
) -> int:
    """The shared body of every check script's ``main``: parse, probe, check, report.

    The all-checks runner (scripts/run_all_checks.py) calls ``build_parser`` and
    ``run_checks`` itself, in worker processes that each run many scripts. A script with a
    ``--timeout`` flag gets that limit on each of its checks. ``import_torchrl=False``:
    the versions are checked but torchrl is not imported (a script whose work happens in
    a child process, like audit_run.py, saves the import).
    """
    args = build_parser().parse_args(argv)
    versions = require_stack(import_torchrl)
    report = Report(
        script_file,
        json_mode=getattr(args, "json", False),
        versions=versions,
        timeout=getattr(args, "timeout", None),
    )
    report.note_stack()
    run_checks(args, report)
    return report.finish()


def main(argv: list[str] | None = None) -> int:
    """``python scripts/skill_report.py``: this is the helper the check scripts import, not a
    check; exits 2 with one line naming the scripts to run instead."""
    cannot_run(
        "skill_report.py is the helper the check scripts import, not a check",
        "run python scripts/run_all_checks.py (every check) or python scripts/check_torchrl_env.py",
    )
