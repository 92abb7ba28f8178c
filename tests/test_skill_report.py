"""scripts/skill_report.py: how Report.run turns what a check raised into its row."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest
from torchrl_skill.report import skill_report as sr
from torchrl_skill.runtime.user_code import TimeLimitExceeded

SCHEMA = json.loads(sr.SCHEMA_PATH.read_text())


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


def _declared_env_checks(first_step):
    """A builder giving ``env``, a first check that steps it (``first_step``), and after it a
    check taking ``env``, one taking nothing given and one taking a value with a default."""
    calls = []

    def build():
        return sr.Passed("built", {"steps": 0})

    def step_later(env):
        calls.append("step_later")
        return "stepped"

    def no_env(args):
        calls.append("no_env")
        return "ran"

    def optional_env(args, env=None):
        calls.append("optional_env")
        return "ran"

    checks = [sr.Check("build", build, gives="env"), sr.Check("first", first_step), sr.Check("later", step_later),
              sr.Check("plain", no_env), sr.Check("optional", optional_env)]
    return checks, calls


def test_a_timed_out_check_hands_nothing_it_held_to_later_checks():
    def hangs(env):
        time.sleep(30)

    checks, calls = _declared_env_checks(hangs)
    report = sr.Report("x.py", json_mode=True, timeout=1)
    sr.run_declared(checks, report, args=None)
    rows = {c.name: (c.status, c.detail) for c in report.checks}
    assert rows["first"][0] == "fail" and "still running after 1 s" in rows["first"][1]
    for name in ("later", "optional"):  # a value taken with a default is held too
        assert rows[name] == ("skip", "not run: first timed out inside env (its state is unknown after the interrupt; "
                                      "fix that hang first)"), rows[name]
    assert rows["plain"] == ("pass", "ran") and calls == ["no_env"] and report.timed_out == {"first"}


def test_a_check_that_fails_without_timing_out_still_hands_its_values_on():
    # the nearest case the rule excludes: a failure is no interrupt, the env is still usable
    def fails(env):
        raise sr.CheckFailed("wrong spec")

    checks, calls = _declared_env_checks(fails)
    report = sr.Report("x.py", json_mode=True, timeout=1)
    sr.run_declared(checks, report, args=None)
    assert [c.status for c in report.checks] == ["pass", "fail", "pass", "pass", "pass"]
    assert calls == ["step_later", "no_env", "optional_env"] and report.timed_out == set()


# ---------------------------------------------------------------------------- versions
OLDER = {"python": "3.11.7", "torch": "2.12.1", "tensordict": "0.13.0", "torchrl": "0.13.3"}


def test_an_older_line_opens_the_report_with_one_stack_row_and_the_verified_stack_does_not(capsys):
    report = sr.Report("x.py", json_mode=True, versions=OLDER)
    report.note_stack()
    report.run("one", lambda: "done")
    first = report.checks[0]
    assert (first.name, first.status) == ("stack:version", "pass") and len(report.checks) == 2
    assert "runs on torchrl 0.13.3, tensordict 0.13.0, torch 2.12.1" in first.detail
    assert "verified on torchrl 0.14.1, tensordict 0.14.3, torch 2.14.1" in first.detail
    verified = sr.Report("x.py", json_mode=True, versions={**OLDER, **sr.VERIFIED})
    verified.note_stack()
    assert verified.checks == []


def test_the_stack_row_says_what_the_version_matrix_ran_on_that_line(monkeypatch):
    from torchrl_skill.stack import probe as _stack

    lines = {"lines": {"0.13": {"torchrl": "0.13.3", "tensordict": "0.13.0", "torch": "2.12.1",
                                "matrix": {"date": "2026-12-01", "summary": "contract tests 40/41"}}}}
    monkeypatch.setattr(_stack, "stack_lines", lambda: lines)
    assert "the version matrix (2026-12-01) ran line 0.13 as torchrl 0.13.3" in sr.stack_note(OLDER)
    assert "contract tests 40/41" in sr.stack_note(OLDER)
    assert "has not run line 0.12" in sr.stack_note({**OLDER, "torchrl": "0.12.0", "tensordict": "0.12.4"})


def _row_quoting_an_entry(verified_on, installed, monkeypatch):
    import dataclasses

    from torchrl_skill.explain import error_index as ei
    from torchrl_skill.stack import probe as _stack

    monkeypatch.setattr(_stack, "installed_version", lambda dist: installed)
    entry = dataclasses.replace(ei.load()[0], verified_on=tuple(verified_on))
    report = sr.Report("x.py", json_mode=True)
    report.run("quote", lambda: f"cause: {entry.plain('cause')}")
    report.run("own", lambda: "read from the installed library")
    return report


def test_a_row_quoting_the_bundles_text_is_marked_off_the_line_it_was_verified_on(monkeypatch):
    report = _row_quoting_an_entry(["0.14.1"], "0.13.3", monkeypatch)
    assert report.result("quote").detail.endswith("[unverified on torchrl 0.13.3: the bundle's text, verified on torchrl 0.14.1]")
    assert "unverified" not in report.result("own").detail  # only the row that quoted it


@pytest.mark.parametrize("verified_on, installed", [(["0.14.1"], "0.14.1"), (["0.14.1"], "0.14.0"), (["0.13.3", "0.14.1"], "0.13.1")])
def test_no_mark_on_a_line_the_entry_was_verified_on(monkeypatch, verified_on, installed):
    report = _row_quoting_an_entry(verified_on, installed, monkeypatch)
    assert "unverified" not in report.result("quote").detail


def test_helpers_import_in_one_direction():
    """report.base at the bottom (imports no bundle module), the helpers above it (and the
    data paths), skill_report on top: no helper imports skill_report, even inside a function."""
    import ast

    from conftest import BUNDLE

    src = BUNDLE / "src"

    def imported(module):
        tree = ast.parse((src / (module.replace(".", "/") + ".py")).read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:  # ``from torchrl_skill.report import base``: the module base
                    sub = f"{node.module}.{alias.name}"
                    path = src / sub.replace(".", "/")
                    found.add(sub if path.with_suffix(".py").is_file() or path.is_dir() else node.module)
        return {m for m in found if m.startswith("torchrl_skill")}

    base, data = "torchrl_skill.report.base", "torchrl_skill.data"
    below = {"torchrl_skill.report.cli", "torchrl_skill.stack.probe", "torchrl_skill.runtime.processes",
             "torchrl_skill.runtime.user_code"}
    assert imported(base) == set()
    for helper in (*below, "torchrl_skill.explain.error_index"):
        assert imported(helper) <= {base, data}, (helper, imported(helper))
    assert {base, *below} <= imported("torchrl_skill.report.skill_report")


def test_sigterm_becomes_terminated_and_an_ignored_sighup_stays_ignored():
    # main_guard's stop_on_termination: SIGTERM (timeout, a tool's limit) runs the Ctrl-C
    # clean-up; a SIGHUP that `nohup` ignored must stay ignored
    import os
    import signal

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        sr.stop_on_termination()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        with pytest.raises(sr.Terminated) as raised:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises on the next bytecode
        assert raised.value.signum == signal.SIGTERM and isinstance(raised.value, KeyboardInterrupt)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


# --- evidence: a declared property passes only on counted evidence -------------------------

def _counting(n, unit="steps compared"):
    def check():
        sr.evidence(n, unit)
        return sr.Passed(f"checked {n}", "value")
    return check


def test_a_declared_property_on_zero_evidence_is_a_skip_naming_it_and_hands_nothing_on():
    report = sr.Report("x.py", json_mode=True)
    namespace = sr.run_declared([sr.Check("empty", _counting(0), gives="v", proves="rewards match the reference"),
                                 sr.Check("later", lambda v: "ran")], report)
    row = report.result("empty")
    assert row.status == "skip" and "no evidence for 'rewards match the reference'" in row.detail, row.detail
    assert "0 steps compared" in row.detail and "checked 0" in row.detail
    assert (row.proves, row.evidence) == ("rewards match the reference", 0)
    assert "v" not in namespace and report.result("later").status == "skip"


def test_a_declared_property_that_counts_nothing_is_a_skip():
    report = sr.Report("x.py", json_mode=True)
    sr.run_declared([sr.Check("silent", lambda: "looks fine", proves="the env steps")], report)
    row = report.result("silent")
    assert row.status == "skip" and "counted no evidence" in row.detail and row.evidence is None


def test_counted_evidence_passes_adds_up_and_reaches_the_json_row():
    def twice():
        sr.evidence(3, "rows")
        sr.evidence(True, "rows")  # a bool or 0-d tensor counts as an int
        return "ok"

    report = sr.Report("x.py", json_mode=True)
    sr.run_declared([sr.Check("rows", twice, proves="rows read back equal what was written")], report)
    row = report.as_dict()["checks"][0]
    assert (row["status"], row["evidence"], row["proves"]) == ("pass", 4, "rows read back equal what was written")
    jsonschema.validate(report.as_dict(), SCHEMA)


def test_a_failure_stays_a_failure_and_undeclared_checks_keep_their_status():
    def fails():
        sr.evidence(0)
        raise sr.CheckFailed("broken")

    report = sr.Report("x.py", json_mode=True)
    sr.run_declared([sr.Check("f", fails, proves="p"), sr.Check("legacy", lambda: "ok")], report)
    assert report.result("f").status == "fail"
    assert (report.result("legacy").status, report.result("legacy").proves) == ("pass", None)


def test_a_nested_check_keeps_its_own_count():
    report = sr.Report("x.py", json_mode=True)

    def outer():
        sr.evidence(2, "outer items")
        report.run_check("inner", _counting(0), "inner property")
        return "ok"

    report.run_check("outer", outer, "outer property")
    assert report.result("inner").status == "skip" and report.result("outer").evidence == 2


def test_negative_evidence_is_a_defect_of_the_check():
    report = sr.Report("x.py", json_mode=True)
    report.run_check("neg", _counting(-1), "p")
    assert report.result("neg").status == "fail" and "must be >= 0" in report.result("neg").detail


def test_the_schema_rejects_a_pass_on_zero_evidence_for_a_declared_property():
    report = sr.Report("x.py", json_mode=True)
    report.add("forged", "pass", "ok")
    doc = report.as_dict()
    doc["checks"][0].update(proves="p", evidence=0)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


def test_a_direct_pass_row_with_a_property_and_no_evidence_is_a_skip():
    report = sr.Report("x.py", json_mode=True)
    assert report.add("direct", "pass", "fine", proves="p", evidence=0).status == "skip"
    assert report.add("direct2", "pass", "fine", proves="p", evidence=2).status == "pass"
