"""The auditor on a correct loop whose observations repeat a lot, and on its broken twin
(tests/fixtures/audit/small_discrete: 32 batched customers, 5 engagement levels x 10 steps,
noisy rewards, PPO with the script's own GAE(gamma=0.5, lmbda=0.9); from a newcomer trial of
the pytorch/rl#2462 class).

- The broken run (``--broken``) fills its replay buffer before the script's GAE runs, so ClipPPOLoss
  computes advantages with its own GAE(gamma=0.99, lmbda=0.95): value-estimator names both
  estimators and their gamma/lmbda (it passed the loss's estimator before), batched-layout
  names the missing 'advantage'.
- The correct run: a reset space smaller than the worker count (5 distinct first resets for 32
  workers), repeated rows within a batch and noisy rewards per state-action pair were read
  as identical workers, a loss that saw 8% of its batch and permuted rewards; none is a
  fault, and each row passes with its evidence.

Judges are also driven directly on the evidence they read (fast lane).
"""

from __future__ import annotations

import functools

import pytest
from conftest import FIXTURES, rows, run_main

from torchrl_skill.audit import d_identical_workers, v_value_estimator
from torchrl_skill.report import skill_report as sr

SMALL = FIXTURES / "audit" / "small_discrete"


@functools.lru_cache(maxsize=None)
def audit(*argv: str) -> dict:
    _, report = run_main("scripts/audit_run", "--seconds", "300", "--max-frames", "3200", str(SMALL / "train.py"), "--", *argv)
    return rows(report)


@pytest.mark.slow
def test_broken_twin_fails_value_estimator_with_both_estimators_named():
    status, detail = audit("--broken")["value-estimator"]
    assert status == "fail", detail
    for text in ("ClipPPOLoss computed advantages itself", "gamma 0.99 vs 0.5", "lmbda 0.95 vs 0.9", "train.py:"):
        assert text in detail, detail
    status, detail = audit("--broken")["batched-layout"]
    assert status == "fail" and "lack 'advantage'" in detail, detail


@pytest.mark.slow
@pytest.mark.parametrize("row", ["value-estimator", "batched-layout", "identical-workers", "data-freshness", "transitions"])
def test_fixed_twin_passes_the_rows_repeats_used_to_fail(row):
    status, detail = audit()[row]
    assert status == "pass", f"{row}: {status}: {detail}"


def _est(loss, calls, gamma, lmbda, site):
    return {"cls": "GAE", "loss": loss, "calls": calls, "gamma": gamma, "lmbda": lmbda, "site": site}


def test_two_estimators_with_other_settings_fail_and_agreeing_ones_do_not():
    ests = [_est(None, 20, 0.5, 0.9, "train.py:77"), _est("ClipPPOLoss", 40, 0.99, 0.95, "train.py:80")]
    (fault,) = v_value_estimator._two_estimators(ests)
    assert "gamma 0.99 vs 0.5" in fault and "lmbda 0.95 vs 0.9" in fault and "ValueEstimators.GAE" in fault
    assert v_value_estimator._two_estimators([ests[0], _est("ClipPPOLoss", 40, 0.5, 0.9, "train.py:80")]) == []
    assert v_value_estimator._two_estimators([_est("ClipPPOLoss", 40, 0.99, 0.95, "x")]) == []  # the loss's own alone
    assert v_value_estimator._two_estimators([ests[0], _est("ClipPPOLoss", 0, 0.99, 0.95, "x")]) == []  # never called


def _workers(unique, identical_rows, random_reset=True):
    return {"sections": {d_identical_workers.NAME: {
        "resets": [{"cls": "CustomerEnv", "site": "env.py:25", "unique": unique, "n": 32, "seeded": False}],
        "sources": [{"kind": "Collector", "site": "train.py:59", "batches": 4, "rows": 32, "steps": 20,
                     "identical": identical_rows, "random_reset": random_reset, "repeated_reset": 0}]}}}


def test_identical_workers_small_reset_space_with_distinct_rows_passes():
    assert "fewer states than there are workers" in d_identical_workers.judge(_workers(5, 0))


@pytest.mark.parametrize("unique, identical", [(1, 0), (5, 3)])
def test_identical_workers_one_reset_or_identical_rows_fail(unique, identical):
    with pytest.raises(sr.CheckFailed):
        d_identical_workers.judge(_workers(unique, identical))


def test_identical_rows_in_a_batch_of_few_distinct_states_are_not_judged():
    few = _workers(5, 43)
    few["sections"][d_identical_workers.NAME]["sources"][0].update(rows=64, steps=10, states=20)
    assert "rows meet by chance" in d_identical_workers.judge(few)
    many = _workers(5, 43)
    many["sections"][d_identical_workers.NAME]["sources"][0].update(rows=64, steps=10, states=640)
    with pytest.raises(sr.CheckFailed):
        d_identical_workers.judge(many)


def _time_limit(done_keys):
    from torchrl_skill.audit import d_time_limit

    return d_time_limit.judge({"sections": {d_time_limit.NAME: {
        "n_terminated": 0, "n_truncated": 0, "n_done_only": 640, "max_terminated": 0, "terminated": {}, "truncated": {},
        "sources": [{"kind": "Collector", "site": "train.py:59", "env": None, "done_keys": done_keys}]}}})


def test_time_limit_names_a_done_spec_without_truncated():
    assert "declares done, terminated and no truncated" in _time_limit(["done", "terminated"])
    assert "no truncated" not in _time_limit(["done", "terminated", "truncated"])
    assert "no truncated" not in _time_limit(None)


@pytest.mark.slow
def test_the_collector_drops_a_truncated_flag_the_done_spec_does_not_declare():
    """The fact the time-limit row states (torchrl 0.14.1): env.rollout keeps a 'truncated' that
    _step writes without a spec entry; a Collector's batch does not."""
    import importlib.util

    import torch
    from torchrl.collectors import Collector

    spec = importlib.util.spec_from_file_location("small_discrete_env", SMALL / "env.py")  # not "env": other fixtures have one
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    env = module.CustomerEnv(num_envs=4, churn_prob=0.0, seed=0)
    assert "truncated" not in [k for k in env.full_done_spec.keys()]

    def policy(td):
        return td.set("action", torch.nn.functional.one_hot(torch.randint(0, 3, (4,)), 3))

    assert ("next", "truncated") in env.rollout(12, policy, break_when_any_done=False).keys(True)
    batch = next(iter(Collector(env, policy, frames_per_batch=48, total_frames=48)))
    assert ("next", "truncated") not in batch.keys(True) and batch["next", "done"].any()
