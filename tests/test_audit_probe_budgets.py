"""The probe ladder's frame budgets rest on measurements: benchmarks/probe_budgets.json.

The ladder's ``FRAMES`` (the one place the budgets live) are at least twice the largest
"settled at" count measured for each family and rung; the tables of
references/probe-ladder.md and README.md are generated from the data and the ladder's
``FRAMES`` (``benchmarks/probe_budgets.py --check``); each reference fixture added for a
family (DDPGLoss, DiscreteSACLoss, A2CLoss) passes every rung of the ladder at its
family's budget. Runs get ``--seconds`` far above their need: a slower machine changes
nothing but the wall time.
"""

from __future__ import annotations

import json

import pytest
from conftest import BUNDLE, FIXTURES, load_module, rows, run_main

from torchrl_skill.audit import ladder_rungs

REFERENCE = FIXTURES / "audit" / "reference"
GENERATOR = BUNDLE / "benchmarks" / "probe_budgets.py"


def _generator():
    return load_module(GENERATOR)


def _data():
    return json.loads((BUNDLE / "benchmarks" / "probe_budgets.json").read_text())


def test_the_generated_budget_and_pass_rate_tables_are_current():
    assert _generator().main(["--check"]) == 0


def test_the_check_fails_on_a_stale_table_and_names_the_file(tmp_path, monkeypatch, capsys):
    gen = _generator()
    ppo = ladder_rungs.FRAMES["ppo"]
    row = f"| ppo | {' | '.join(str(ppo[k]) for k in sorted(ppo))} |"
    doc, readme = tmp_path / "probe-ladder.md", tmp_path / "README.md"
    doc.write_text(gen.DOC.read_text().replace(row, row.replace(f"| {ppo[1]} |", "| 1 |", 1)))
    readme.write_text(gen.README.read_text())
    assert row not in doc.read_text()
    monkeypatch.setattr(gen, "BLOCKS", [(doc if path == gen.DOC else readme, *rest) for path, *rest in gen.BLOCKS])
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--check"]) == 1
    assert "stale generated blocks in probe-ladder.md" in capsys.readouterr().err
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0  # rewritten: current again
    assert row in doc.read_text()


def test_every_budget_is_at_least_twice_the_largest_settled_count_measured():
    gen = _generator()
    assert gen.rule_violations(_data(), ladder_rungs) == []


def test_the_rule_names_a_run_settling_past_half_the_budget_and_one_never_settling():
    gen = _generator()
    budget = ladder_rungs.frames("sac", 1)
    run = {"recipe": "r", "rung": 1, "seed": 0, "loss": "SACLoss", "budget": 2 * budget, "frames": 2 * budget, "passed": True}
    late = {**run, "settled_at": budget // 2 + 1}
    assert "more than half the sac budget" in gen.rule_violations({"runs": [late]}, ladder_rungs)[0]
    assert gen.rule_violations({"runs": [{**run, "settled_at": budget // 2}]}, ladder_rungs) == []
    never = {**run, "settled_at": None, "passed": False}
    assert "never settled" in gen.rule_violations({"runs": [never]}, ladder_rungs)[0]
    # an exception listed with why holds the rung to less (every seed passes at the budget),
    # never to nothing: a seed failing at the budget is named
    excepted = [{"family": "sac", "rung": 1, "why": "test"}]
    assert gen.rule_violations({"runs": [late], "exceptions": excepted}, ladder_rungs) == []
    failing = {**late, "budget": budget, "frames": budget, "settled_at": None, "passed": False, "loss": "SACLoss"}
    assert "listed in exceptions, but a seed measured fails" in gen.rule_violations(
        {"runs": [failing], "exceptions": excepted}, ladder_rungs)[0]


def test_a_longer_run_is_judged_at_the_budget_where_the_ladder_stops():
    gen = _generator()
    run = {"budget": 400, "judged": [100, 200, 300, 400], "ok": "0110", "passed": False, "settled_at": None}
    assert gen.judged_at(run, 200) == (True, 200)  # the judgment at 200 passed, settled from 200
    assert gen.judged_at(run, 150) == (True, 200)  # the ladder stops at the first step at or past 150
    assert gen.judged_at(run, 400) == (False, None)
    assert gen.judged_at(run, 401) is None  # the run tells nothing past its end


def test_every_loss_family_has_a_budget_and_the_table_says_which_are_not_measured():
    gen, data = _generator(), _data()
    for fam in set(ladder_rungs.FAMILIES.values()):
        assert set(ladder_rungs.FRAMES[fam]) == {1, 2, 3, 4, 5}, fam
    assert {"DDPGLoss", "DiscreteSACLoss", "A2CLoss"} <= {r["loss"] for r in data["runs"]}
    judged = {(r["family"], r["rung"]) for r in gen.at_budget(data, ladder_rungs)}
    table = gen.family_rates(data, ladder_rungs)
    for fam in ladder_rungs.FRAMES:
        row = next(line for line in table.splitlines() if line.startswith(f"| {fam} |")).split("|")[2:7]
        for rung, cell in zip(sorted(ladder_rungs.FRAMES[fam]), row):
            assert ("not measured" in cell) == ((fam, rung) not in judged), (fam, rung, cell)


RUNG_ROWS = ["rung-1:constant-reward", "rung-2:observation-reward", "rung-3:two-step", "rung-4:action-reward",
             "rung-5:action-observation"]


@pytest.mark.slow
@pytest.mark.parametrize("fixture, loss", [("ddpg.py", "DDPGLoss"), ("discrete_sac.py", "DiscreteSACLoss"), ("a2c.py", "A2CLoss")])
def test_each_new_reference_fixture_passes_every_rung_at_its_family_budget(fixture, loss):
    code, report = run_main("scripts/audit_run", "--probe", "--seconds", "1800", str(REFERENCE / fixture))
    got = rows(report)
    assert code == 0, got
    for name in RUNG_ROWS:
        assert got[name][0] == "pass" and f"{loss} ({ladder_rungs.family(loss)})" in got[name][1], (name, got[name])
