"""Every SKILL.md and reference keeps the docs contract (CONTRIBUTING.md, "SKILL.md files" and "References").

Files are discovered, so a doc added later is tested with no edit here. The checking
functions live in tests/doccheck.py; tests/test_contract_negative.py shows each one
rejecting a broken fixture.
"""

from __future__ import annotations

from pathlib import Path

import doccheck as dc
import doccheck_defaults as dd
import pytest
from conftest import BUNDLE, SCRIPTS

MARKDOWN = dc.bundle_markdown()
AGENT_MARKDOWN = dc.agent_markdown()
REFERENCES = dc.reference_files()
SKILL_DIRS = dc.skill_dirs()
SUB_SKILLS = [
    "envs-and-transforms", "collectors-and-replay", "modules-and-policies",
    "objectives-and-training", "llm-vla-and-services", "development-and-testing",
]


def md_id(path: Path) -> str:
    return path.relative_to(BUNDLE).as_posix()


def test_layout():
    for rel in ("SKILL.md", "README.md", "LICENSE", "requirements.txt", ".ci/run", "src/torchrl_skill/data/report.schema.json",
                "references/install-and-extras.md", "references/backend-compatibility.md",
                "references/repo-provenance.md", "references/troubleshooting.md"):
        assert (BUNDLE / rel).is_file(), rel
    for name in SUB_SKILLS:
        assert (BUNDLE / "sub-skills" / name / "SKILL.md").is_file(), name
    assert "MIT License" in (BUNDLE / "LICENSE").read_text()


@pytest.mark.parametrize("skill_dir", SKILL_DIRS, ids=lambda d: d.name)
def test_frontmatter(skill_dir: Path):
    name = "torchrl" if skill_dir == BUNDLE else None
    assert dc.check_frontmatter(skill_dir, name) == []


@pytest.mark.parametrize("skill_dir", SKILL_DIRS[1:], ids=lambda d: d.name)
def test_compatibility_agrees_with_the_root(skill_dir: Path):
    assert dc.check_compatibility_agrees(skill_dir) == []


@pytest.mark.parametrize("skill_dir", SKILL_DIRS, ids=lambda d: d.name)
def test_references_linked_with_when_to_read(skill_dir: Path):
    assert dc.check_references_linked(skill_dir) == []


@pytest.mark.parametrize("skill_dir", SKILL_DIRS, ids=lambda d: d.name)
def test_skill_names_its_scripts(skill_dir: Path):
    scripts = [s for s in SCRIPTS if dc.nearest_skill_dir(s) == skill_dir]
    assert dc.check_scripts_named(skill_dir, scripts) == []


def test_root_routes_to_every_sub_skill():
    assert dc.check_root_routes() == []


@pytest.mark.parametrize("md", MARKDOWN, ids=md_id)
def test_links_resolve(md: Path):
    assert dc.check_links(md) == []


@pytest.mark.parametrize("md", MARKDOWN, ids=md_id)
def test_size_budgets(md: Path):
    assert dc.check_size(md, is_root=md == BUNDLE / "SKILL.md") == []


@pytest.mark.parametrize("skill_dir", SKILL_DIRS, ids=lambda d: d.name)
def test_route_token_budget(skill_dir: Path):
    problems = dc.check_route_budget(skill_dir)
    assert not problems, "\n".join(problems)


def test_agent_markdown_budget():
    problems = dc.check_agent_budget()
    assert not problems, "\n".join(problems)


def test_agent_markdown_budget_rejects_a_bundle_over_it(monkeypatch):
    monkeypatch.setattr(dc, "AGENT_MAX_TOKENS", dc.tokens(dc.BUNDLE.joinpath("SKILL.md").read_text()))
    assert dc.check_agent_budget() and "max" in dc.check_agent_budget()[0]


@pytest.mark.parametrize("md", REFERENCES, ids=md_id)
def test_every_section_proves_itself(md: Path):
    problems = dc.check_proofs(md)
    assert not problems, f"{len(problems)} section(s) of {md_id(md)} lack a proof:\n" + "\n".join(problems)


def test_the_proof_sidecar_names_files_and_tests_that_exist():
    problems = dc.check_proof_sidecar()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("md", AGENT_MARKDOWN, ids=md_id)
def test_no_proof_bookkeeping_in_agent_text(md: Path):
    assert dc.check_bookkeeping_comments(md) == []


@pytest.mark.parametrize("md", MARKDOWN, ids=md_id)
def test_inline_names_resolve(md: Path):
    assert dc.check_inline_names(md) == []


@pytest.mark.parametrize("md", MARKDOWN, ids=md_id)
def test_stated_defaults_are_the_live_ones(md: Path):
    assert dd.check_stated_defaults(md) == []


@pytest.mark.parametrize("md", MARKDOWN, ids=md_id)
def test_code_blocks_resolve_statically(md: Path):
    assert dc.check_code_blocks_static(md) == []


@pytest.mark.parametrize("md", MARKDOWN, ids=md_id)
def test_block_markers(md: Path):
    assert dc.check_markers(md) == []


@pytest.mark.parametrize("md", [m for m in MARKDOWN if dc.runnable_blocks(m)], ids=md_id)
def test_python_blocks_run(md: Path):
    assert dc.run_blocks(md) == []


@pytest.mark.parametrize("md", MARKDOWN, ids=md_id)
def test_commands_name_real_scripts_and_flags(md: Path):
    assert dc.check_commands(md) == []


@pytest.mark.parametrize("md", AGENT_MARKDOWN, ids=md_id)
def test_commands_run_from_the_users_project(md: Path):
    problems = dc.check_skill_dir_commands(md)
    assert not problems, "\n".join(problems)


def test_readme_script_table_is_current():
    assert dc.check_script_table(BUNDLE / "README.md") == []


@pytest.mark.parametrize("md", [m for m in MARKDOWN if m.name == "troubleshooting.md"], ids=md_id)
def test_troubleshooting_entries_complete(md: Path):
    assert dc.check_troubleshooting(md) == []


def test_api_change_rows_hold():
    assert dc.check_api_change_rows() == []
