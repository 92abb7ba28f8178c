"""Every bundled check script keeps the CLI / JSON / exit-code contract (CONTRIBUTING.md, "Scripts").

Scripts are discovered, so a script added later is tested with no edit here. The checks
live in tests/scriptcheck.py; tests/test_contract_negative.py shows each one failing on a
broken script.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import scriptcheck as sc
from conftest import SCRIPTS, script_id


def test_scripts_discovered():
    assert {"check_torchrl_env.py", "run_all_checks.py"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_structure(script: Path):
    assert sc.check_structure(script) + sc.check_no_bare_assert(script) == []


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_help_shows_example_and_exit_codes(script: Path):
    assert sc.check_help(script) == []


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_unknown_flag_exits_2_with_one_line(script: Path):
    assert sc.check_bad_flag(script) == []


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_missing_torchrl_exits_2_with_one_line(script: Path):
    assert sc.check_missing_torchrl(script) == []


# The all-checks runner runs every script: its --json run is
# test_run_all_checks.py::test_full_run_covers_every_script_and_passes and its text run
# test_only_narrows_to_one_area_in_text_mode; running every check again here costs ~30 s.
CHECK_SCRIPTS = [s for s in SCRIPTS if s.name != "run_all_checks.py"]


# One script runs in a cold interpreter: what importing torch, tensordict, torchrl and
# gymnasium prints must stay off stdout too. The others fork from a warm one (tests/zygote.py):
# the same run, without a ~5 s import each.
COLD_JSON_RUN = "check_torchrl_env.py"


@pytest.mark.parametrize("script", CHECK_SCRIPTS, ids=script_id)
def test_json_run_passes_and_validates(script: Path):
    assert sc.check_json_run(script, warm=script.name != COLD_JSON_RUN) == []


@pytest.mark.parametrize("script", CHECK_SCRIPTS, ids=script_id)
def test_default_run_passes_with_one_row_per_check(script: Path):
    assert sc.check_text_run_in_process(script) == []
