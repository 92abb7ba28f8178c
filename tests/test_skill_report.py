"""scripts/skill_report.py: how Report.run turns what a check raised into its row."""

from __future__ import annotations

import time

import pytest
import skill_report as sr
from _user_code import TimeLimitExceeded


def _reraised_by_compiled_code(exc_type):
    """What a C extension does when a signal handler raised inside it: Ray's serializer, for
    one, reports "SystemError: ... returned a result with an exception set", chained to it."""
    def check():
        try:
            if exc_type is KeyboardInterrupt:
                raise KeyboardInterrupt
            time.sleep(30)
        except exc_type as err:
            raise SystemError("<built-in method __new__> returned a result with an exception set") from err
    return check


def test_a_time_limit_surfacing_as_another_error_is_reported_as_the_time_limit():
    report = sr.Report("x.py", json_mode=True, timeout=1)
    report.run("slow", _reraised_by_compiled_code(TimeLimitExceeded))
    row = report.result("slow")
    assert row.status == "fail" and "1 s" in row.detail and "surfaced as SystemError" in row.detail, row.detail


def test_ctrl_c_surfacing_as_another_error_still_interrupts():
    report = sr.Report("x.py", json_mode=True)
    with pytest.raises(KeyboardInterrupt):
        report.run("interrupted", _reraised_by_compiled_code(KeyboardInterrupt))


def test_any_other_crash_is_the_checks_failure_with_its_site():
    def boom():
        raise ValueError("bad shape")

    report = sr.Report("x.py", json_mode=True)
    report.run("crash", boom)
    row = report.result("crash")
    assert row.status == "fail" and row.detail.startswith("ValueError: bad shape (raised at ")


def test_helpers_import_in_one_direction():
    """_base at the bottom (imports no bundle module), the helpers above it, skill_report on
    top: no helper imports skill_report, even inside a function (issue 22)."""
    import ast

    from conftest import BUNDLE

    bundle_modules = {p.stem for p in (BUNDLE / "scripts").glob("*.py")}

    def imported(name):
        tree = ast.parse((BUNDLE / "scripts" / f"{name}.py").read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
        return found & bundle_modules

    assert imported("_base") == set()
    for helper in ("_cli", "_stack", "_processes", "_user_code", "_error_index"):
        assert imported(helper) <= {"_base"}, (helper, imported(helper))
    assert {"_base", "_cli", "_stack", "_processes", "_user_code"} <= imported("skill_report")
