"""The one test harness: the bundle root, loading a script, running it in this process
or as a user would (a fresh interpreter in an unrelated folder).

Test files import what they need from here (``from conftest import BUNDLE, load_module,
run_in_process``) instead of recomputing paths or carrying their own runner.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

BUNDLE = Path(__file__).resolve().parent.parent
TESTS = BUNDLE / "tests"
FIXTURES = TESTS / "fixtures"
# src/ (the torchrl_skill package) and tests/ are on sys.path through pytest.ini's ``pythonpath``.
os.environ.setdefault("TORCHRL_CONSOLE_STREAM", "stderr")
# The tests reproduce torchrl's default behaviour, which warns: RL_WARNINGS=0 in a developer's
# shell turns off the warnings four of them prove ("No target network updater ...", the
# ParallelEnv lambda's EnvCreator warning; torchrl/_utils.py reads it once, at import). Set
# before torchrl is imported here, in the warm interpreters and in every child, which inherit it.
os.environ["RL_WARNINGS"] = "1"
# Small networks on 2 busy cores run several times faster with one torch thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A suite started as a background job of a non-interactive shell (`cmd &` in a script) inherits
# SIGINT ignored, and every interpreter below keeps it ignored: the Ctrl-C tests' children
# would never see their interrupt. A handled SIGINT is reset to the default across exec, so
# the processes the tests start get a real Ctrl-C again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from torchrl_skill.report import skill_report  # noqa: E402
import zygote  # noqa: E402
from torchrl_skill.audit import runner as _audit_runner  # noqa: E402

SCRIPTS = skill_report.discover_scripts(BUNDLE)

# Warm interpreters (tests/zygote.py): what they import before forking, which is what nearly
# every script, audited child and documentation block imports first.
PRELOAD = ("torchrl", "torchrl.envs", "torchrl.collectors", "torchrl.data", "torchrl.modules", "torchrl.objectives",
           "gymnasium")
# In-process audits (run_main on audit_run.py) fork their child.py from one; audits started as
# a real audit_run.py process (the CLI tests, the documented commands) keep the cold start.
_AUDIT_ZYGOTE = zygote.Zygote(PRELOAD, dict(os.environ))


def _start_audited_child(config: Path, log: Path, env: dict) -> zygote.Forked:
    return _AUDIT_ZYGOTE.start([*_audit_runner.CHILD_ARGS, str(config)], cwd=os.getcwd(), env=env,
                               stdout=str(log), stderr=str(log))


if zygote.enabled():
    _audit_runner.START = _start_audited_child


def script_id(path: Path) -> str:
    return path.relative_to(BUNDLE).as_posix()


def script_path(rel: str) -> Path:
    """``"envs-and-transforms/check_user_env"`` or ``"scripts/explain"`` -> the script's path."""
    area, _, name = rel.partition("/")
    folder = BUNDLE / "scripts" if area in ("scripts", "root") else BUNDLE / "sub-skills" / area / "scripts"
    path = folder / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(path)
    return path


# sub-skill folder -> its package under torchrl_skill.checks (a private helper "AREA/_name" is
# torchrl_skill.checks.PKG.name)
CHECK_PACKAGES = {"envs-and-transforms": "envs", "collectors-and-replay": "collectors", "modules-and-policies": "modules",
                  "objectives-and-training": "objectives", "llm-vla-and-services": "llm",
                  "development-and-testing": "development"}


def load_module(path: Path | str):
    """The module behind a bundle script: ``"AREA/name"`` or an entry point's path -> the
    package module it runs (``skill_report.entry_module``), the one the all-checks runner
    imports, so spawned workers can unpickle module-level classes; ``"AREA/_helper"`` -> the
    helper in ``torchrl_skill.checks.PKG``. Any other file (a fixture) is imported by its
    plain name, its folder on sys.path, as a user's file is."""
    if isinstance(path, str) and path.partition("/")[2].startswith("_"):
        area, _, name = path.partition("/")
        return importlib.import_module(f"torchrl_skill.checks.{CHECK_PACKAGES[area]}.{name[1:]}")
    path = script_path(path) if isinstance(path, str) else Path(path)
    if path.resolve() in {p.resolve() for p in SCRIPTS}:
        return importlib.import_module(skill_report.entry_module(path))
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(path.stem)


def run_main(script: Path | str, *argv: str, stderr: bool = False):
    """Run a script's ``main(["--json", *argv])`` in this process: ``(exit code, report)``,
    or ``(exit code, report, stderr text)`` with ``stderr=True``.

    ``--json`` goes first, so argv may end with ``-- ARGS`` for the target. Exit 2
    (``CannotRun``) gives an empty report: there is none then.
    """
    module = load_module(script)
    out, err = io.StringIO(), io.StringIO()
    # stderr stays where it was (pytest's capsys) unless the caller asks for it here
    catch_err = contextlib.redirect_stderr(err) if stderr else contextlib.nullcontext()
    try:
        with contextlib.redirect_stdout(out), catch_err:
            code = module.main(["--json", *argv])
        report = json.loads(out.getvalue())
    except skill_report.CannotRun as stop:
        code, report = stop.code, {}
    return (code, report, err.getvalue()) if stderr else (code, report)


def rows(report: dict) -> dict[str, tuple[str, str]]:
    """``{check name: (status, detail)}`` of a JSON report."""
    return {c["name"]: (c["status"], c["detail"]) for c in report["checks"]}


def run_in_process(script: Path | str, *argv: str, timeout: float | None = None) -> dict[str, tuple[str, str]]:
    """Run a script's checks in this process with ``argv``; ``{name: (status, detail)}``.

    Faster than a subprocess (torchrl is imported once); for exit codes, stderr and
    leftovers use :func:`run_python`.
    """
    module = load_module(script)
    args = module.build_parser().parse_args(list(argv))
    path = Path(module.__file__)
    report = skill_report.Report(str(path), json_mode=True, timeout=timeout or getattr(args, "timeout", None))
    module.run_checks(args, report)
    return {c.name: (c.status, c.detail) for c in report.checks}


def _python_env(env: dict | None = None) -> dict:
    full_env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    full_env.pop("TORCHRL_CONSOLE_STREAM", None)  # the scripts must keep stdout clean by themselves
    return full_env


_PYTHON_ZYGOTE: list = []  # made on first use: its environment is run_python's


def run_python(args: list[str], timeout: int = 300, cwd: Path | None = None, env: dict | None = None,
               warm: bool = False) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` from an unrelated working directory (scripts must not depend on cwd;
    without ``cwd``, an empty temporary folder, removed after).

    ``timeout`` only guards against a hung child; pick it generously (a 3x slower machine
    must still pass). ``warm=True`` forks it from a zygote that already imported
    :data:`PRELOAD` (tests/zygote.py says what that cannot show: what those imports print or
    read from the environment, hidden distributions); ``env`` must then hold nothing those
    imports read.
    """
    if cwd is None:
        # a folder of its own, removed after: a script that writes into its working folder
        # (the contract's negative fixtures do) must not leave files beside the clone
        with tempfile.TemporaryDirectory(prefix="run-python-") as folder:
            return run_python(args, timeout=timeout, cwd=Path(folder), env=env, warm=warm)
    full_env, folder = _python_env(env), str(cwd)
    if warm and zygote.enabled():
        if not _PYTHON_ZYGOTE:
            _PYTHON_ZYGOTE.append(zygote.Zygote(PRELOAD, _python_env()))
        return _PYTHON_ZYGOTE[0].run(list(args), cwd=folder, env=full_env, timeout=timeout)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout,
        cwd=folder, env=full_env,
    )


@pytest.fixture(autouse=True)
def _drop_user_folders_from_sys_path():
    """Take out of sys.path (and PYTHONPATH) the folders outside the bundle that a test's in-process run put
    there (the user-code loader puts a target's folder first, as Python does for a script),
    so one test's files never shadow modules for the next test or the workers it spawns.
    Bundle folders stay: modules imported from them are cached and may import siblings."""
    saved, saved_env = set(sys.path), os.environ.get("PYTHONPATH")
    yield
    bundle = str(BUNDLE)
    sys.path[:] = [p for p in sys.path if p in saved or p == "" or p.startswith(bundle)]
    # the loader also puts those folders on PYTHONPATH, for worker processes
    if saved_env is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = saved_env


@pytest.fixture
def run_without():
    """``run_without(["hoptorch"], [script, *argv])`` (or ``[..., "-c", code]``): :func:`run_python`
    with those distributions absent for the child only (tests/hide_distributions.py)."""

    def run(names: list[str], args: list[str], **kwargs) -> subprocess.CompletedProcess:
        return run_python([str(TESTS / "hide_distributions.py"), ",".join(names), *args], **kwargs)

    return run
