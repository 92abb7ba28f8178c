"""Shared reporting helper for every torchrl-skill check script.

One job: give each script the same CLI conventions, stack probe, check runner and
report format, as fixed by BUNDLE_CONTRACT.md section 4.

A script imports this module (sub-skill scripts put the root ``scripts/`` folder on
``sys.path`` first) and reads top to bottom::

    def build_parser():                                   # parse args
        parser = skill_report.make_parser(__doc__, EXAMPLE)
        parser.add_argument("--steps", type=skill_report.int_at_least(1), default=5)
        return parser

    def run_checks(args, report):                         # run checks
        report.run("area:what", check_fn)   # check_fn returns the pass detail

    def main(argv=None):                                  # probe the stack, report
        return skill_report.standard_main(__file__, build_parser, run_checks, argv)

    if __name__ == "__main__":
        skill_report.main_guard(main)

Statuses: ``pass``; ``fail`` (the check ran and found a fault; exit 1); ``skip`` (not
asked for, or cannot run here, e.g. no GPU); ``missing`` (an optional backend is not
installed; never fails the run).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

SCHEMA_ID = "torchrl-skill.report/1"
BUNDLE_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = BUNDLE_ROOT / "scripts" / "report.schema.json"

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_CANNOT_RUN = 2

EXIT_CODES_HELP = (
    "exit codes:\n"
    "  0  no check failed (skip and missing optional backends are allowed)\n"
    "  1  at least one check failed\n"
    "  2  cannot run: bad arguments, or torch/tensordict/torchrl missing or outside\n"
    "     the supported range (reason and fix on stderr, one line)"
)

# The range this bundle was verified on (references/repo-provenance.md). A lower
# bound alone would let a future release with renamed APIs pass silently. torch is
# left open above on purpose: a torch that does not match torchrl's build is a fault
# for check_torchrl_env.py to name (exit 1), not a reason to refuse to run (exit 2).
SUPPORTED = {
    "torch": ("2.1", None),
    "tensordict": ("0.14", "0.15"),
    "torchrl": ("0.14", "0.15"),
}
VERIFIED = {"torch": "2.14.1", "tensordict": "0.14.3", "torchrl": "0.14.1"}


class CheckFailed(Exception):
    """Raise inside a check: the check ran and found a fault (status ``fail``)."""


class CheckSkipped(Exception):
    """Raise inside a check: it cannot run here or was not asked for (``skip``)."""


class BackendMissing(Exception):
    """Raise inside a check: an optional backend is not installed (``missing``)."""


class CannotRun(SystemExit):
    """Exit 2 with one line on stderr; raised by :func:`cannot_run`."""


def cannot_run(reason: str, fix: str = "") -> "CannotRun":
    """Print ``<script>: error: REASON; fix: FIX`` on stderr and exit 2 (no traceback)."""
    prog = Path(sys.argv[0]).name or "torchrl-skill"
    line = f"{prog}: error: {reason}" + (f"; fix: {fix}" if fix else "")
    print(" ".join(line.split()), file=sys.stderr)
    raise CannotRun(EXIT_CANNOT_RUN)


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one stderr line and exits 2."""

    def error(self, message: str) -> "CannotRun":  # type: ignore[override]
        cannot_run(message, f"run {self.prog} --help")


def make_parser(doc: str | None, example: str) -> argparse.ArgumentParser:
    """Build the contract CLI: ``--json``, the example and the exit codes in ``--help``.

    ``doc``: the script's module docstring (its first paragraph becomes the description).
    ``example``: one or more command lines shown under "example:".
    """
    description = (doc or "").strip().split("\n\n")[0]
    epilog = f"example:\n  {example.strip()}\n\n{EXIT_CODES_HELP}"
    parser = _OneLineParser(
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON report on stdout, nothing else")
    return parser


def add_device_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--device`` (default ``cpu``); checks run on CPU unless asked otherwise."""
    parser.add_argument("--device", default="cpu", help="torch device to run on (default: cpu)")


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type=`` accepting integers >= ``minimum`` (bad values exit 2)."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise ValueError(text)
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def child_processes() -> dict[int, str]:
    """Live (non-zombie) descendants of this process, ``{pid: "name cmdline[:2]"}``.

    Used to prove a check left nothing running. Needs psutil (in requirements.txt);
    raises :class:`BackendMissing` without it. ``multiprocessing``'s resource tracker is
    excluded: the standard library keeps it alive until the interpreter exits.
    """
    try:
        import psutil
    except ImportError:
        raise BackendMissing("psutil not installed; install: pip install psutil") from None
    out = {}
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = proc.cmdline()
            if any("resource_tracker" in part for part in cmd):
                continue
            out[proc.pid] = " ".join([proc.name(), *cmd[:2]])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def leftover_processes(before: dict[int, str], grace: float = 10.0) -> dict[int, str]:
    """Descendants absent from ``before`` still alive after up to ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while True:
        left = {pid: desc for pid, desc in child_processes().items() if pid not in before}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def _release(version: str) -> tuple[int, ...]:
    from packaging.version import Version

    return Version(version).release


def installed_version(dist: str) -> str | None:
    """Installed distribution version from its metadata, or None; never imports it."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def stack_versions() -> dict[str, str | None]:
    """``{"python", "torch", "tensordict", "torchrl"}`` versions (None when not installed)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("torch", "tensordict", "torchrl"):
        out[dist] = installed_version(dist) if importlib.util.find_spec(dist) else None
    return out


def require_stack(import_torchrl: bool = True) -> dict[str, str | None]:
    """Exit 2 unless torch, tensordict and torchrl are installed, in range and importable.

    The supported range is :data:`SUPPORTED` (verified on :data:`VERIFIED`). A torchrl
    that imports but whose compiled extension is broken is NOT rejected here: that is a
    check failure for ``scripts/check_torchrl_env.py`` to report, not a reason to refuse.
    Returns :func:`stack_versions`.
    """
    versions = stack_versions()
    pins = " ".join(f"{d}=={v}" for d, v in VERIFIED.items())
    for dist, (low, high) in SUPPORTED.items():
        found = versions[dist]
        if found is None:
            cannot_run(f"{dist} is not installed", f"pip install {pins}")
        rel = _release(found)
        if rel < _release(low) or (high and rel >= _release(high)):
            rng = f">={low}" + (f",<{high}" if high else "")
            cannot_run(
                f"{dist} {found} is outside the range this bundle supports ({dist}{rng})",
                f"pip install {pins} (or use a bundle verified for {dist} {found})",
            )
    if import_torchrl:
        # torchrl's logger binds its stream at import and defaults to stdout; a JSON
        # report must own stdout (torchrl/_utils.py reads TORCHRL_CONSOLE_STREAM).
        os.environ.setdefault("TORCHRL_CONSOLE_STREAM", "stderr")
        with contextlib.redirect_stdout(sys.stderr):
            try:
                import torchrl  # noqa: F401
            except Exception as err:  # an import failure is a stack fault, reported in one line
                msg = str(err).splitlines()[0] if str(err) else ""
                cannot_run(
                    f"import torchrl failed: {type(err).__name__}: {msg}",
                    f"install matching releases: pip install {pins}",
                )
    return versions


@dataclass
class CheckResult:
    """One row of the report; ``seconds`` is wall time of the check."""

    name: str
    status: str
    seconds: float
    detail: str


@dataclass
class Report:
    """Collects check results and prints them as a table or one JSON object.

    ``script``: the script's ``__file__``; stored bundle-relative in the report.
    ``json_mode``: while True, anything a library prints to stdout during a check is sent
    to stderr, so stdout carries the JSON object alone.
    """

    script: str
    json_mode: bool = False
    checks: list[CheckResult] = field(default_factory=list)
    versions: dict | None = None

    @property
    def script_path(self) -> str:
        path = Path(self.script).resolve()
        try:
            return path.relative_to(BUNDLE_ROOT).as_posix()
        except ValueError:
            return path.name

    def add(self, name: str, status: str, detail: str = "", seconds: float = 0.0) -> CheckResult:
        """Record a result directly (e.g. a backend probe that needs no try block)."""
        if status not in ("pass", "fail", "skip", "missing"):
            raise ValueError(f"unknown status {status!r}")
        result = CheckResult(name, status, round(float(seconds), 3), " ".join(str(detail).split()))
        self.checks.append(result)
        if not self.json_mode:
            _print_row(result)
        return result

    @contextlib.contextmanager
    def _quiet_stdout(self) -> Iterator[None]:
        if self.json_mode:
            with contextlib.redirect_stdout(sys.stderr):
                yield
        else:
            yield

    def run(self, name: str, fn: Callable[[], str | None]) -> CheckResult:
        """Run ``fn()`` as one check. Its return value is the pass detail.

        ``fn`` raises :class:`CheckFailed`, :class:`CheckSkipped` or :class:`BackendMissing`
        to set the status; any other exception is a ``fail`` whose detail is the exception
        type and first line of its message (never a traceback).
        """
        start = time.perf_counter()
        status, detail = "pass", ""
        with self._quiet_stdout():
            try:
                detail = fn() or ""
            except CheckFailed as err:
                status, detail = "fail", str(err)
            except CheckSkipped as err:
                status, detail = "skip", str(err)
            except BackendMissing as err:
                status, detail = "missing", str(err)
            except (KeyboardInterrupt, CannotRun):
                raise
            except BaseException as err:  # a crash inside a check is that check's failure
                first = str(err).strip().splitlines()[0] if str(err).strip() else ""
                status, detail = "fail", f"{type(err).__name__}: {first}"
        return self.add(name, status, detail, time.perf_counter() - start)

    def extend(self, other: "Report", prefix: str) -> None:
        """Append another report's rows, names prefixed (used by the all-checks runner)."""
        for c in other.checks:
            self.checks.append(CheckResult(f"{prefix}{c.name}", c.status, c.seconds, c.detail))

    def summary(self) -> dict[str, int]:
        counts = {"pass": 0, "fail": 0, "skip": 0, "missing": 0}
        for c in self.checks:
            counts[c.status] += 1
        return counts

    @property
    def ok(self) -> bool:
        return self.summary()["fail"] == 0

    def as_dict(self) -> dict:
        """The report object of BUNDLE_CONTRACT.md section 4 (validated by report.schema.json)."""
        return {
            "schema": SCHEMA_ID,
            "script": self.script_path,
            "ok": self.ok,
            "versions": self.versions or stack_versions(),
            "checks": [c.__dict__ for c in self.checks],
            "summary": self.summary(),
        }

    def finish(self) -> int:
        """Print the summary line (or the JSON object) and return the exit code (0 or 1)."""
        if self.json_mode:
            sys.stdout.write(json.dumps(self.as_dict()) + "\n")
        else:
            s = self.summary()
            verdict = "OK" if self.ok else "FAILED"
            print(
                f"{verdict}: {s['pass']} pass, {s['fail']} fail, {s['skip']} skip, "
                f"{s['missing']} missing  [{self.script_path}]"
            )
        sys.stdout.flush()
        return EXIT_OK if self.ok else EXIT_FAIL


def _print_row(c: CheckResult) -> None:
    print(f"{c.status.upper():<8} {c.name:<34} ({c.seconds:6.2f}s)  {c.detail}", flush=True)


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
    return f"{dist} {version or '(version unknown)'}"


def discover_scripts(root: Path = BUNDLE_ROOT) -> list[Path]:
    """Every check script of the bundle: ``scripts/*.py`` and ``sub-skills/*/scripts/*.py``.

    Private modules (``_*.py``) and this helper are not check scripts.
    """
    found = sorted((root / "scripts").glob("*.py")) + sorted((root / "sub-skills").glob("*/scripts/*.py"))
    return [p for p in found if not p.name.startswith("_") and p.name != Path(__file__).name]


def script_area(path: Path, root: Path = BUNDLE_ROOT) -> str:
    """``root`` for a root script, else the sub-skill folder name."""
    rel = path.resolve().relative_to(root.resolve()).parts
    return rel[1] if rel[0] == "sub-skills" else "root"


def main_guard(main: Callable[[list[str] | None], int]) -> None:
    """Run ``main`` as a script: exit with its code; exit 2 (one line) on CannotRun."""
    try:
        code = main(None)
    except CannotRun as err:
        code = err.code if isinstance(err.code, int) else EXIT_CANNOT_RUN
    sys.stdout.flush()
    sys.exit(code)


def env_flag(name: str) -> bool:
    """True when environment variable ``name`` is set to a true-ish value."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def standard_main(
    script_file: str,
    build_parser: Callable[[], argparse.ArgumentParser],
    run_checks: Callable[[argparse.Namespace, "Report"], None],
    argv: list[str] | None,
) -> int:
    """The shared body of every check script's ``main``: parse, probe, check, report.

    The all-checks runner (scripts/run_all_checks.py) calls ``build_parser`` and
    ``run_checks`` itself so that every script runs in one process.
    """
    args = build_parser().parse_args(argv)
    versions = require_stack()
    report = Report(script_file, json_mode=getattr(args, "json", False), versions=versions)
    run_checks(args, report)
    return report.finish()
