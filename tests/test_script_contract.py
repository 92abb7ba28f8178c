"""Every bundled check script keeps the CLI / JSON / exit-code contract (BUNDLE_CONTRACT.md s4).

Scripts are discovered, so a script added later is tested with no edit here.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from conftest import BUNDLE, SCRIPTS, run_python, script_id

SCHEMA = json.loads((BUNDLE / "scripts" / "report.schema.json").read_text())
HIDE_TORCHRL = (
    "import runpy, sys; sys.modules['torchrl'] = None; p = sys.argv[1]; sys.argv = sys.argv[1:]; "
    "runpy.run_path(p, run_name='__main__')"
)


def test_scripts_discovered():
    names = {p.name for p in SCRIPTS}
    assert {"check_torchrl_env.py", "run_all_checks.py"} <= names


def _one_clean_line(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one stderr line, got:\n{stderr}"
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_help_shows_example_and_exit_codes(script: Path):
    proc = run_python([str(script), "--help"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "example:" in proc.stdout and "exit codes:" in proc.stdout
    for code in ("0 ", "1 ", "2 "):
        assert f"  {code}" in proc.stdout


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_unknown_flag_exits_2_with_one_line(script: Path):
    proc = run_python([str(script), "--no-such-flag"], timeout=120)
    assert proc.returncode == 2
    line = _one_clean_line(proc.stderr)
    assert "--no-such-flag" in line and "fix:" in line


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_missing_torchrl_exits_2_with_one_line(script: Path):
    proc = run_python(["-c", HIDE_TORCHRL, str(script)], timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_clean_line(proc.stderr)
    assert "torchrl" in line and "pip install" in line


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_json_run_passes_and_validates(script: Path, tmp_path: Path):
    proc = run_python([str(script), "--json"], cwd=tmp_path)
    assert proc.stdout.count("\n") == 1, f"stdout must be one JSON line:\n{proc.stdout[:2000]}"
    report = json.loads(proc.stdout)
    jsonschema.validate(report, SCHEMA)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert proc.returncode == 0 and report["ok"], f"{failed}\n{proc.stderr[-3000:]}"
    assert report["script"] == script_id(script)
    assert report["checks"], "a script must run at least one check"
    assert sum(report["summary"].values()) == len(report["checks"])
    assert report["versions"]["torchrl"] == "0.14.1"
    assert list(tmp_path.iterdir()) == [], "the script left files in its working directory"


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_default_run_passes_with_one_row_per_check(script: Path, tmp_path: Path):
    proc = run_python([str(script)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [ln for ln in proc.stdout.splitlines() if ln.split(" ")[0] in ("PASS", "FAIL", "SKIP", "MISSING")]
    assert rows, proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("OK: ") and "fail" in last
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_script_has_no_bare_assert(script: Path):
    import ast

    tree = ast.parse(script.read_text())
    asserts = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert)]
    assert not asserts, f"bare assert (stripped by python -O) at lines {asserts}; use skill_report.expect"
