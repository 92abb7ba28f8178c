"""The auditor's LLM rows (src/torchrl_skill/audit/l_*.py) on a user's own GRPO loop around
TransformersWrapper and GRPOLoss (tests/fixtures/audit/llm_grpo/train.py, a tiny Qwen2):
each row fails the loop variant that has its fault and passes the known-good loop; every
row skips, with the reason, when no LLM loss ran; the judges' other rules on recorded
sections. Every run is a real audit (a child process, torchrl instrumented), bounded by
the loop's own 8 steps, never by wall time."""

from __future__ import annotations

import functools
import importlib

import pytest
from torchrl_skill.report import skill_report as sr
from conftest import FIXTURES, rows, run_main

LOOP = FIXTURES / "audit" / "llm_grpo" / "train.py"
LLM_ROWS = ["llm-first-step-ratio", "llm-mask-coverage", "llm-zero-advantage-groups", "llm-kl-to-reference", "llm-reward-variance"]


@functools.lru_cache(maxsize=None)
def audit(fault: str) -> dict:
    code, report = run_main("scripts/audit_run", "--seconds", "300", str(LOOP), "--", "--fault", fault)
    return rows(report)


@pytest.mark.slow
@pytest.mark.xdist_group("audit-llm-good")
def test_known_good_loop_passes_every_llm_row():
    found = audit("none")
    assert found["exit"][0] == "pass", found["exit"]
    assert {name: found[name][0] for name in LLM_ROWS} == dict.fromkeys(LLM_ROWS, "pass"), found
    assert "8 GRPO steps on fresh data" in found["llm-first-step-ratio"][1]
    assert "no prompt token, no padding" in found["llm-mask-coverage"][1]


@pytest.mark.slow
@pytest.mark.parametrize("fault, failing, says", [
    ("dropout", ["llm-first-step-ratio"], ["GRPO steps on fresh data had a log ratio", "dropout off"]),
    ("mask", ["llm-mask-coverage", "llm-first-step-ratio"], ["50 prompt tokens", "masking_strategy='rlhf'"]),
    ("flat", ["llm-zero-advantage-groups", "llm-reward-variance"], ["16 of 16 groups", "a constant reward"]),
    ("kl-runaway", ["llm-kl-to-reference"], ["still rising", "raise kl_to_ref_coeff"]),
    ("shared-ref", ["llm-kl-to-reference"], ["exactly 0 at all 7 calls after optimizer steps", "shares its weights"]),
])
def test_each_fault_fails_its_row_and_only_its_rows(fault, failing, says):
    found = audit(fault)
    assert found["exit"][0] == "pass", found["exit"]
    assert sorted(n for n in LLM_ROWS if found[n][0] == "fail") == sorted(failing), {n: found[n] for n in LLM_ROWS}
    details = " ".join(found[n][1] for n in failing)
    for text in says:
        assert text in details, details


def _module(name):
    return importlib.import_module(f"torchrl_skill.audit.{name}")


@pytest.mark.parametrize("name", ["l_ratio", "l_mask", "l_groups", "l_kl", "l_reward"])
def test_rows_skip_when_no_llm_loop_ran(name):
    with pytest.raises(sr.CheckSkipped, match="no GRPOLoss or SFTLoss was called"):
        _module(name).judge({"sections": {}})


def test_llm_rows_are_registered_with_the_auditor():
    from torchrl_skill.audit import DETECTORS

    names = [_module(n).NAME for n in DETECTORS if n.startswith("l_")]
    assert names == LLM_ROWS


def _reward(means, stds, values=(0.0, 1.0)):
    return {"sections": {"llm-reward-variance": {"calls": len(means), "means": means, "stds": stds,
                                                 "values": list(values), "nonfinite": 0, "rows": 8 * len(means)}}}


def test_reward_row_fails_when_the_variance_collapses_at_the_end():
    judge = _module("l_reward").judge
    with pytest.raises(sr.CheckFailed, match="entropy collapse"):
        judge(_reward([0.2, 0.3, 0.5, 0.9, 1.0, 1.0], [0.1, 0.2, 0.1, 0.0, 0.0, 0.0]))
    assert "std within batches" in judge(_reward([0.2, 0.3, 0.5, 0.9, 1.0, 1.0], [0.1, 0.2, 0.1, 0.05, 0.0, 0.02]))


def test_kl_row_fails_past_the_ceiling_and_on_nan_but_not_on_a_plateau():
    judge = _module("l_kl").judge

    def obs(values):
        return {"sections": {"llm-kl-to-reference": {"calls": len(values), "values": values, "steps": list(range(len(values)))}}}

    with pytest.raises(sr.CheckFailed, match="still rising"):
        judge(obs([0.5, 3.0, 12.0]))
    with pytest.raises(sr.CheckFailed, match="not finite"):
        judge(obs([0.0, float("nan")]))
    assert "bounded" in judge(obs([0.0, 0.2, 0.3, 0.31, 0.3, 0.29, 0.3, 0.3, 0.31]))
