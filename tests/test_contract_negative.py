"""Negative controls: every contract check rejects a broken fixture (tests/fixtures/contract/).

A check that cannot fail proves nothing; each test here feeds the same function the
positive contract tests use a file that breaks its rule, and requires the problem named.
"""

from __future__ import annotations

import json

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


def test_size_rejects_root_over_150_lines_and_1500_tokens():
    text = joined(dc.check_size(FIX / "fat-route" / "SKILL.md", is_root=True))
    assert "lines (max 150)" in text and "tokens (max 1500)" in text
    assert dc.check_size(FIX / "fat-route" / "SKILL.md", is_root=False) == []  # a sub-skill may be that long


def test_route_budget_rejects_a_route_over_its_cap():
    root = FIX / "fat-route"
    text = joined(dc.check_route_budget(root / "sub-skills" / "fat", root))
    assert "route SKILL.md + sub-skills/fat/SKILL.md + sub-skills/fat/references/big.md" in text
    assert f"(max {dc.ROUTE_MAX_TOKENS})" in text and "small.md" not in text


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
    assert "`python scripts/does_not_exist.py` names no bundled script" in text
    # $SKILL_DIR is the bundle root: a path relative to a sub-skill or to the file is wrong
    assert "`python $SKILL_DIR/check_torchrl_env.py` names no bundled script" in text
    assert "--steps" not in text


def test_commands_reject_a_bundled_script_without_skill_dir():
    problems = dc.check_skill_dir_commands(FIX / "bad_commands.md")
    assert problems == ["bad_commands.md:4: write `python $SKILL_DIR/scripts/check_torchrl_env.py`, not "
                        "`python scripts/check_torchrl_env.py` (the command runs from the user's project)"]


def test_a_script_whose_parser_breaks_fails_the_command_check():
    # doccheck.script_help raises instead of reporting "no flag": a broken script must
    # fail the docs test that reads its --help, not look like a missing flag.
    with pytest.raises(RuntimeError, match="planted: this parser cannot be built"):
        dc.check_commands(FIX / "broken_help.md")


def _fixture_sidecar() -> dict:
    return json.loads((FIX / "unproven.proofs.json").read_text())


def test_compatibility_rejects_a_sub_skill_stating_another_stack(tmp_path):
    good = f"---\nname: x\ncompatibility: {dc.supported_stack()}; CPU only.\n---\n# x\n"
    (tmp_path / "SKILL.md").write_text(good)
    assert dc.check_compatibility_agrees(tmp_path) == []
    (tmp_path / "SKILL.md").write_text(good.replace("torchrl 0.11+", "torchrl 0.14.1"))
    assert "differs from the root's" in joined(dc.check_compatibility_agrees(tmp_path))


def test_proofs_reject_unproven_sections():
    # the proofs of unproven.md live in its sidecar (as tests/proofs.json holds the bundle's)
    text = joined(dc.check_proofs(FIX / "unproven.md", sidecar=_fixture_sidecar()))
    problems = text.splitlines()
    flagged = {line.split("'")[1] for line in problems}
    assert flagged == {
        "## A gotcha without proof", "## A proof naming a missing test", "## A proof naming a missing file",
        "## A proof that is no test id", "## Only a block that does not run",
        "## A heading in a code block does not start a section", "## A heading renamed away",
    }
    assert "no test function test_no_such_test in tests/test_contract_negative.py" in text
    assert "no file tests/test_no_such_file.py" in text
    assert "is not a test id of the form tests/test_x.py::test_y" in text
    assert "names a section that is not there: '## A heading renamed away'" in text
    assert "not a heading" not in text and "Generated from data" not in text and "Contents" not in text
    # the same sections with no sidecar: what only the sidecar proved is unproven now
    bare = {line.split("'")[1] for line in dc.check_proofs(FIX / "unproven.md", sidecar={})}
    assert {"## Proven by tests", "## States nothing"} <= bare and "## Proven by a comment not yet moved" not in bare


def test_proof_sidecar_rejects_missing_files_and_malformed_entries():
    text = joined(dc.check_proof_sidecar(sidecar=_fixture_sidecar()))
    assert "tests/fixtures/contract/no_such_file.md does not exist" in text
    assert "broken_help.md > Anything: expected a list of test ids or \"no-claims\"" in text
    assert "no test function test_no_such_test" in text
    assert "Proven by tests" not in text and "States nothing" not in text


def test_bookkeeping_comments_in_agent_text_are_flagged(tmp_path):
    flagged = dc.check_bookkeeping_comments(FIX / "unproven.md")
    assert len(flagged) == 1 and "run python tests/move_proofs.py" in flagged[0], flagged
    md = tmp_path / "ref.md"
    md.write_text("## A\ntext\n\n```markdown\n<!-- proof: tests/x.py::y -->\n```\n")  # inside a code block: content
    assert dc.check_bookkeeping_comments(md) == []


def test_move_proofs_moves_every_comment_once_and_leaves_code_alone(tmp_path):
    import move_proofs

    ref = tmp_path / "references" / "x.md"
    ref.parent.mkdir()
    ref.write_text("# X\n\n## A\nClaim.\n<!-- proof: tests/test_a.py::t1, tests/test_a.py::t2 -->\n\n## B\n<!-- no-claims -->\n"
                   "Routing.\n\n## C\nInline <!-- proof: tests/test_a.py::t3 --> claim.\n<!-- proof: tests/test_a.py::t1 -->\n\n"
                   "```markdown\n<!-- proof: tests/kept.py::k -->\n```\n")
    (tmp_path / "SKILL.md").write_text("# root\n")
    (tmp_path / "tests").mkdir()
    moved, stale = move_proofs.move(tmp_path)
    assert len(moved) == 4 and stale == []
    assert ref.read_text() == ("# X\n\n## A\nClaim.\n\n## B\nRouting.\n\n## C\nInline claim.\n\n"
                               "```markdown\n<!-- proof: tests/kept.py::k -->\n```\n")
    files = json.loads((tmp_path / "tests" / "proofs.json").read_text())["files"]
    assert files == {"references/x.md": {"A": ["tests/test_a.py::t1", "tests/test_a.py::t2"], "B": "no-claims",
                                         "C": ["tests/test_a.py::t3", "tests/test_a.py::t1"]}}
    before = (tmp_path / "tests" / "proofs.json").read_text()
    assert move_proofs.move(tmp_path) == ([], []) and (tmp_path / "tests" / "proofs.json").read_text() == before
    # a heading renamed after the move: the entry is kept and reported stale
    ref.write_text(ref.read_text().replace("## B", "## B renamed"))
    assert move_proofs.move(tmp_path) == ([], ["references/x.md: B"])


def test_script_table_rejects_a_stale_readme(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n")
    assert "no generated script table" in joined(dc.check_script_table(readme))
    fresh = dc.render_script_table()
    readme.write_text(f"# x\n\n{fresh}\n")
    assert dc.check_script_table(readme) == []
    readme.write_text(f"# x\n\n{fresh.replace('Run every bundled check script', 'Run some checks')}\n")
    assert "script table is stale" in joined(dc.check_script_table(readme))


def test_troubleshooting_rejects_incomplete_entry():
    text = joined(dc.check_troubleshooting(FIX / "ts" / "troubleshooting.md"))
    assert "lacks 'Verify:'" in text and "lacks 'Versions:'" in text


def test_api_change_row_that_still_exists_is_rejected(monkeypatch):
    rows = {"names": [{"old": "torchrl.collectors.Collector", "new": "torchrl.collectors.NoSuchThing", "changed_in": "0.14"}]}
    monkeypatch.setattr(dc, "api_changes", lambda: rows)
    text = joined(dc.check_api_change_rows())
    assert "still exists" in text and "does not resolve" in text


@pytest.mark.slow
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


def test_in_process_text_run_rejects_bad_main():
    text = joined(sc.check_text_run_in_process(FIX / "bad_main.py"))
    assert "left files" in text and "exited 1" in text and "last line is not the summary" in text


def test_stated_defaults_rejects_wrong_defaults_and_unowned_ones():
    """tests/doccheck_defaults.py: each form of a stated default is read, compared with the
    live signature, and the twin with the installed defaults passes."""
    import doccheck_defaults as dd

    text = joined(dd.check_stated_defaults(FIX / "bad_defaults.md"))
    for seen in ("`strict_length=False` of SliceSampler; the installed default is True",
                 "`end_key=(\"next\", \"done\")` of SliceSampler; the installed default is None",
                 "`ndim=2` of LazyTensorStorage; the installed default is 1",
                 "`cat_results=\"stack\"` of MultiSyncCollector; the installed default is None",
                 "a default of `prefetch_depth` is stated, but no callable named before it"):
        assert seen in text, (seen, text)
    assert len(dd.stated_defaults((FIX / "good_defaults.md").read_text())) == 5
    assert dd.check_stated_defaults(FIX / "good_defaults.md") == []


def test_stated_defaults_reads_the_bundle():
    """The rule is not vacuous on the real docs: it reads at least 15 stated defaults there."""
    import doccheck_defaults as dd

    assert sum(len(dd.stated_defaults(md.read_text())) for md in dc.bundle_markdown()) >= 15
