"""benchmarks/check_budget.py: the budget meter's CLI (what it measures is never asserted)."""

from __future__ import annotations

import re

import pytest
from conftest import BUNDLE, SCRIPTS, load_module, run_python

BUDGET = BUNDLE / "benchmarks" / "check_budget.py"


def test_help_lists_example_and_exit_codes():
    proc = run_python([str(BUDGET), "--help"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    for text in ("example:", "exit codes:", "  0 ", "  1 ", "  2 ", "  130 ", "2.5 x import", "import + 1 s", "floor + 2 s"):
        assert text in proc.stdout, text


def test_bad_repeat_exits_2():
    proc = run_python([str(BUDGET), "--repeat", "0"], timeout=120)
    assert proc.returncode == 2 and "--repeat" in proc.stderr


@pytest.mark.slow
def test_one_script_side_by_side_with_the_bare_import(tmp_path):
    # one round: bare import and check_torchrl_env.py, each a fresh process; exit 0 or 1
    # depends on the machine's load, so only the report's shape is asserted
    proc = run_python([str(BUDGET), "--repeat", "1", "--only", "scripts/check_torchrl_env"], cwd=tmp_path, timeout=570)
    assert proc.returncode in (0, 1), proc.stderr[-1500:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("bare import torchrl") and lines[0].endswith("1.00x")
    assert re.match(r"scripts/check_torchrl_env\.py\s+[\d.]+s\s+[\d.]+x\s+budget import \+ 2 s = ", lines[1]), lines[1]
    assert lines[-1].endswith("over budget; medians of 1 round(s), bare import " + lines[0].split()[-2].rstrip("s") + "s")
    assert list(tmp_path.iterdir()) == []


def test_a_script_with_a_floor_is_budgeted_from_that_floor_and_the_others_from_the_import():
    """FLOORS names bundled scripts; their budget is the floor's measured median + 2 s, every
    other script's is the bare import + 2 s (explain.py + 1 s), the runner's 2.5x the import."""
    budget = load_module(BUDGET)
    labels = {p.relative_to(BUNDLE).as_posix() for p in SCRIPTS}
    assert set(budget.FLOORS) <= labels and budget.FLOORS
    floors = {label: 10.0 + i for i, label in enumerate(sorted({floor for floor, _ in budget.FLOORS.values()}))}
    for label, (floor, _) in budget.FLOORS.items():
        assert budget.Command(label, [], []).budget(4.0, floors) == (floors[floor] + 2.0, "floor + 2 s")
    assert budget.Command("scripts/check_torchrl_env.py", [], []).budget(4.0, floors) == (6.0, "import + 2 s")
    assert budget.Command("scripts/explain.py", [], []).budget(4.0, floors) == (5.0, "import + 1 s")
    assert budget.Command(budget.RUNNER, [], []).budget(4.0, floors) == (10.0, "2.5 x import")
