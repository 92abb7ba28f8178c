"""Negative controls: every contract check rejects a broken fixture (tests/fixtures/contract/).

A check that cannot fail proves nothing; each test here feeds the same function the
positive contract tests use a file that breaks its rule, and requires the problem named.
"""

from __future__ import annotations

import doccheck as dc
import pytest
import scriptcheck as sc
from conftest import BUNDLE

FIX = BUNDLE / "tests" / "fixtures" / "contract"


def joined(problems: list[str]) -> str:
    assert problems, "the check accepted a broken fixture"
    return "\n".join(problems)


def test_frontmatter_rejects_bad_skill():
    text = joined(dc.check_frontmatter(FIX / "bad-skill"))
    assert "lowercase" in text or "must match" in text
    assert "disco-role" in text and "torchrl-version" in text
    assert "disable-model-invocation" in text
    assert "< or >" in text


def test_size_rejects_long_skill_and_reference_without_contents():
    assert "lines (max 200)" in joined(dc.check_size(FIX / "bad-skill" / "SKILL.md"))
    assert "## Contents" in joined(dc.check_size(FIX / "long_reference.md"))


def test_routing_rejects_unlinked_reference():
    text = joined(dc.check_references_linked(FIX / "bad-skill"))
    assert "references/unlinked.md" in text
    assert "when to read" in text  # linked.md's link line has no "read when" text


def test_links_reject_missing_machine_and_outside_paths():
    text = joined(dc.check_links(FIX / "bad_links.md"))
    assert "broken link does/not/exist.md" in text
    assert "machine path link /root/somewhere/file.md" in text
    assert "leaves the bundle" in text
    assert "no heading for anchor #no-such-heading" in text and "#bad-links" not in text


def test_inline_names_reject_unknown_names_and_keywords():
    text = joined(dc.check_inline_names(FIX / "bad_names.md"))
    for needle in ("`SyncCollectorz`", "`torchrl.envs.NoSuchThing`", "`frames_per_batchx`",
                   "['keep_otherz']", "no_such_method"):
        assert needle in text, needle


def test_static_block_check_rejects_bad_import_and_keyword():
    text = joined(dc.check_code_blocks_static(FIX / "bad_blocks.md"))
    assert "cannot import SyncDataCollector from torchrl.collectors" in text
    assert "['no_such_kw']" in text


def test_not_run_marker_is_capped():
    assert "5 not-run python blocks (max 4)" in joined(dc.check_markers(FIX / "bad_blocks.md"))


def test_block_execution_rejects_failing_and_non_raising_blocks():
    text = joined(dc.run_blocks(FIX / "bad_blocks.md"))
    assert "KeyError" in text
    assert "block ran without one" in text


def test_commands_reject_unknown_flag_and_script():
    text = joined(dc.check_commands(FIX / "bad_commands.md"))
    assert "no flag --no-such-flag" in text
    assert "names no bundled script" in text


def test_troubleshooting_rejects_incomplete_entry():
    text = joined(dc.check_troubleshooting(FIX / "ts" / "troubleshooting.md"))
    assert "lacks 'Verify:'" in text and "lacks 'Versions:'" in text


def test_api_change_row_that_still_exists_is_rejected(monkeypatch):
    rows = {"names": [{"old": "torchrl.collectors.Collector", "new": "torchrl.collectors.NoSuchThing", "changed_in": "0.14"}]}
    monkeypatch.setattr(dc, "api_changes", lambda: rows)
    text = joined(dc.check_api_change_rows())
    assert "still exists" in text and "does not resolve" in text


@pytest.mark.parametrize(
    "check, needle",
    [
        (sc.check_structure, "module-level import of torch"),
        (sc.check_no_bare_assert, "bare assert"),
        (sc.check_help, "lacks 'example:'"),
        (sc.check_bad_flag, "expected one stderr line"),
        (sc.check_json_run, "stdout must be exactly one JSON line"),
        (sc.check_text_run, "last line is not the summary"),
        (sc.check_missing_torchrl, "expected 2"),
    ],
    ids=lambda v: getattr(v, "__name__", "needle"),
)
def test_script_checks_reject_bad_script(check, needle):
    assert needle in joined(check(FIX / "bad_script.py"))
