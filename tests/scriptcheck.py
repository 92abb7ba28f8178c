"""Checks behind the script contract tests (CONTRIBUTING.md, "Scripts").

Each ``check_*`` runs a script as a user would (a fresh interpreter, an unrelated and
empty working directory) and returns a list of problems; empty means the rule holds.
tests/test_contract_negative.py runs them on a broken script to show they can fail.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import tempfile
from pathlib import Path

import jsonschema
from conftest import BUNDLE, load_module, run_python, script_id
from torchrl_skill import data

SCHEMA = json.loads(data.REPORT_SCHEMA.read_text())
HIDE_TORCHRL = (
    "import runpy, sys; sys.modules['torchrl'] = None; p = sys.argv[1]; sys.argv = sys.argv[1:]; "
    "runpy.run_path(p, run_name='__main__')"
)


def _one_line_problems(stderr: str, must_contain: list[str]) -> list[str]:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    problems = []
    if "Traceback" in stderr:
        problems.append("stderr holds a traceback")
    if len(lines) != 1:
        problems.append(f"expected one stderr line, got {len(lines)}: {stderr[-500:]!r}")
    for text in must_contain:
        if lines and text not in lines[-1]:
            problems.append(f"stderr line lacks {text!r}: {lines[-1][:300]!r}")
    return problems


def check_help(script: Path) -> list[str]:
    proc = run_python([str(script), "--help"], timeout=120)
    problems = [] if proc.returncode == 0 else [f"--help exited {proc.returncode}"]
    for text in ("example:", "exit codes:", "  0 ", "  1 ", "  2 "):
        if text not in proc.stdout:
            problems.append(f"--help lacks {text!r}")
    return problems


def check_bad_flag(script: Path) -> list[str]:
    proc = run_python([str(script), "--no-such-flag"], timeout=120)
    problems = [] if proc.returncode == 2 else [f"unknown flag exited {proc.returncode}, expected 2"]
    return problems + _one_line_problems(proc.stderr, ["--no-such-flag", "fix:"])


def check_missing_torchrl(script: Path) -> list[str]:
    proc = run_python(["-c", HIDE_TORCHRL, str(script)], timeout=120)
    problems = [] if proc.returncode == 2 else [f"with torchrl hidden it exited {proc.returncode}, expected 2"]
    return problems + _one_line_problems(proc.stderr, ["torchrl", "pip install"])


def check_json_run(script: Path, extra_args: tuple = (), warm: bool = False) -> list[str]:
    """``warm``: forked from an interpreter that already imported torchrl (conftest.run_python)."""
    with tempfile.TemporaryDirectory() as cwd:
        proc = run_python([str(script), "--json", *extra_args], cwd=Path(cwd), warm=warm)
        left = [p.name for p in Path(cwd).iterdir()]
    problems = [f"left files in its working directory: {left}"] if left else []
    if proc.stdout.count("\n") != 1:
        return problems + [f"stdout must be exactly one JSON line, got: {proc.stdout[:500]!r}"]
    try:
        report = json.loads(proc.stdout)
        jsonschema.validate(report, SCHEMA)
    except (ValueError, jsonschema.ValidationError) as err:
        return problems + [f"--json output invalid: {str(err)[:300]}"]
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    if proc.returncode != 0 or not report["ok"]:
        problems.append(f"--json run exited {proc.returncode}; failed checks: {failed}; stderr: {proc.stderr[-1500:]}")
    if report["ok"] != (proc.returncode == 0) or (proc.returncode not in (0, 1)):
        problems.append(f"exit code {proc.returncode} disagrees with ok={report['ok']}")
    if report["script"] != script_id(script):
        problems.append(f"report names {report['script']!r}, expected {script_id(script)!r}")
    if not report["checks"]:
        problems.append("no check ran")
    if sum(report["summary"].values()) != len(report["checks"]):
        problems.append("summary counts do not add up to the checks")
    return problems


def _text_run_problems(code: int, stdout: str, left: list[str]) -> list[str]:
    problems = [f"left files in its working directory: {left}"] if left else []
    if code != 0:
        problems.append(f"default run exited {code}: {stdout[-2000:]}")
    rows = [ln for ln in stdout.splitlines() if ln.split(" ")[0] in ("PASS", "FAIL", "SKIP", "MISSING")]
    if not rows:
        problems.append("no PASS/FAIL/SKIP/MISSING rows on stdout")
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    if not (last.startswith(("OK: ", "FAILED: ")) and " fail, " in last):
        problems.append(f"last line is not the summary: {last!r}")
    return problems


def check_text_run(script: Path, extra_args: tuple = ()) -> list[str]:
    with tempfile.TemporaryDirectory() as cwd:
        proc = run_python([str(script), *extra_args], cwd=Path(cwd))
        left = [p.name for p in Path(cwd).iterdir()]
    problems = _text_run_problems(proc.returncode, proc.stdout, left)
    return problems + ([f"stderr: {proc.stderr[-1500:]}"] if proc.returncode != 0 else [])


def check_text_run_in_process(script: Path) -> list[str]:
    """:func:`check_text_run` through the script's ``main([])`` in this interpreter, from an
    empty working directory: the same rows, summary, exit code and leftovers, without the
    ~5 s torchrl import of a fresh process (the fresh-process run is :func:`check_json_run`)."""
    module = load_module(script)
    out, here = io.StringIO(), os.getcwd()
    with tempfile.TemporaryDirectory() as cwd:
        os.chdir(cwd)
        try:
            with contextlib.redirect_stdout(out):
                code = module.main([])
        except BaseException as err:  # noqa: BLE001 - reported as the problem it is
            return [f"main([]) raised {type(err).__name__}: {err}"]
        finally:
            os.chdir(here)
        left = [p.name for p in Path(cwd).iterdir()]
    return _text_run_problems(code, out.getvalue(), left)


def body_file(script: Path) -> Path:
    """The package module file an entry point runs (src/torchrl_skill/...py): the script's body;
    a script that is no entry point (a fixture written whole) is its own body."""
    from torchrl_skill.report import skill_report

    try:
        return BUNDLE / "src" / (skill_report.entry_module(script).replace(".", "/") + ".py")
    except ValueError:
        return script


def check_no_bare_assert(script: Path) -> list[str]:
    tree = ast.parse(body_file(script).read_text())
    lines = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert)]
    return [f"bare assert (stripped by python -O) at lines {lines}; use skill_report.expect"] if lines else []


def check_structure(script: Path) -> list[str]:
    """Module-level torch/tensordict/torchrl imports break the exit-2 probe; the runner
    needs build_parser/run_checks/main (in the body the entry point runs)."""
    tree = ast.parse(body_file(script).read_text())
    problems = []
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for fn in ("build_parser", "run_checks", "main"):
        if fn not in names:
            problems.append(f"no module-level function {fn}()")
    for node in tree.body:
        mods = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            mods = [node.module]
        for mod in mods:
            if mod.split(".")[0] in ("torch", "tensordict", "torchrl"):
                problems.append(f"module-level import of {mod} (line {node.lineno}); import inside functions")
    return problems
