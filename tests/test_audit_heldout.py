"""Run-time auditor rows for fault classes beyond those its first rows were built for (the
held-out set of benchmarks/third_party_heldout.py): each fixture under
tests/fixtures/audit/heldout/ trains without an error, correct by default or with one
planted fault (``--fault``). The broken run fails the row about the broken part; its
correct twin passes that row (a verdict with its evidence, not a SKIP).

- transitions: the rows a loss trains on carry the next observation, terminated flag and
  reward the env returned (a next observation overwritten with the current one; a reward
  column rolled by one row); a reward rewritten with new values (a shaping bonus) passes.
- data-freshness: an off-policy loss replays rows collected after training began (``rb[:64]``
  never does); an on-policy loss sees most of each batch (16 of 256 rows does not).
- policy-update: a log-prob hooked on advantage data that no backward pass reaches while
  the optimizer steps (the clipped objective detached).
- action-bounds: the policy's own distribution support against the spec (TanhNormal from 0
  on a [-2, 2] spec).

Runs are real audits bounded by --max-frames (never by wall time), cached per argument set.
"""

from __future__ import annotations

import functools

import pytest
from conftest import FIXTURES, rows, run_main

HELDOUT = FIXTURES / "audit" / "heldout"


@functools.lru_cache(maxsize=None)
def audit(script: str, fault: str, frames: int) -> dict:
    _, report = run_main("scripts/audit_run", "--seconds", "300", "--max-frames", str(frames), str(HELDOUT / script),
                         "--", "--fault", fault, "--frames", str(frames))
    return rows(report)


def expect(script, fault, frames, row, status, says=()):
    got, detail = audit(script, fault, frames)[row]
    assert got == status, f"{row}: {got}: {detail}"
    for text in says:
        assert text in detail, detail
    return detail


@pytest.mark.slow
def test_transitions_next_observation_overwritten_with_the_current_one_fails():
    expect("dqn.py", "next-is-current", 1536, "transitions", "fail", says=("another next observation", "own observation"))


@pytest.mark.slow
def test_transitions_pass_on_the_dqn_twin_that_stores_the_collected_batch():
    expect("dqn.py", "none", 1536, "transitions", "pass", says=("rows found in collected batches",))


@pytest.mark.slow
def test_transitions_reward_rolled_by_one_row_fails():
    expect("ppo.py", "rewards-rolled", 1024, "transitions", "fail", says=("another row's reward",))


@pytest.mark.slow
def test_transitions_pass_when_the_reward_is_rewritten_with_new_values_its_own_row_each():
    detail = expect("ppo.py", "shaped", 1024, "transitions", "pass")
    assert "rewritten after collection" in detail, detail


@pytest.mark.slow
def test_data_freshness_off_policy_loss_replaying_only_pre_training_rows_fails():
    expect("dqn.py", "fixed-rows", 1536, "data-freshness", "fail", says=("none collected after the first optimizer step",))


@pytest.mark.slow
def test_data_freshness_passes_the_dqn_twin_that_samples_its_buffer():
    expect("dqn.py", "none", 1536, "data-freshness", "pass", says=("collected after training began",))


@pytest.mark.slow
def test_data_freshness_on_policy_loss_seeing_a_slice_of_each_batch_fails():
    expect("ppo.py", "slice", 1024, "data-freshness", "fail", says=("of each collected batch's rows",))


@pytest.mark.slow
def test_data_freshness_passes_the_ppo_twin_whose_epochs_see_the_whole_batch():
    expect("ppo.py", "none", 1024, "data-freshness", "pass", says=("of each batch's rows",))


@pytest.mark.slow
def test_policy_update_objective_cut_from_the_graph_fails():
    expect("ppo.py", "detached", 1024, "policy-update", "fail", says=("no backward pass reached any of them",))


@pytest.mark.slow
def test_policy_update_passes_the_ppo_twin():
    expect("ppo.py", "none", 1024, "policy-update", "pass")


@pytest.mark.slow
def test_action_bounds_distribution_reaching_half_the_spec_fails():
    expect("ppo.py", "half-range", 1024, "action-bounds", "fail", says=("50% of the spec's [-2, 2]",))


@pytest.mark.slow
def test_action_bounds_passes_the_ppo_twin_whose_tanh_normal_spans_the_spec():
    expect("ppo.py", "none", 1024, "action-bounds", "pass", says=("span the spec's range",))


def test_probe_runs_a_spawn_parallel_env_as_a_serial_env():
    # coding_ddpg.py builds ParallelEnv(..., mp_start_method="spawn"); SerialEnv's signature
    # takes that keyword (BatchedEnvBase's) and raises on "spawn": the probe drops it
    from torchrl.envs import GymEnv, ParallelEnv, SerialEnv
    from torchrl_skill.audit import ladder_child

    saved = ParallelEnv.__dict__.get("__new__")
    try:
        ladder_child._parallel_as_serial()
        env = ParallelEnv(2, lambda: GymEnv("Pendulum-v1"), mp_start_method="spawn")
        assert type(env) is SerialEnv and env.batch_size == (2,)
        assert env.rollout(3).batch_size == (2, 3)
        env.close()
    finally:
        if saved is None:
            del ParallelEnv.__new__
        else:
            ParallelEnv.__new__ = saved


def test_transitions_judge_needs_its_evidence_and_names_a_flag_changed_after_collection():
    from torchrl_skill.audit import evidence, v_transitions as vt
    from torchrl_skill.report import skill_report as sr

    def site(rows, **bad):
        return {"where": "loss:DQNLoss", "site": "train.py:9 in main", "rows": rows, "next_is_root": 0, "changed_rewards": 0,
                "bad": {**dict.fromkeys(vt.FIELDS, 0), **bad}}

    with pytest.raises(evidence.Short, match="saw 50 rows found"):
        vt.judge({"sections": {vt.NAME: {"sites": [site(50)]}}})
    with pytest.raises(sr.CheckFailed, match="another terminated than the env returned"):
        vt.judge({"sections": {vt.NAME: {"sites": [site(300, terminated=120)]}}})
    # 10% or fewer rows off: a pass that counts them
    assert "300 rows found" in vt.judge({"sections": {vt.NAME: {"sites": [site(300, terminated=30)]}}})
    with pytest.raises(sr.CheckSkipped, match="no loss call"):
        vt.judge({"sections": {vt.NAME: {"sites": []}}})


@pytest.mark.slow
def test_an_env_built_for_its_statistics_and_a_trajectory_storage_are_not_misread():
    # coding_ddpg.py's layout (its clean run failed both rows before): the broken sides are
    # test_audit_detectors.py's unused TransformedEnv and test_audit_invariants.py's one-batch buffer
    _, report = run_main("scripts/audit_run", "--seconds", "300", "--max-frames", "1536", str(HELDOUT / "stats_env.py"))
    got = rows(report)
    assert got["transforms"][0] == "pass", got["transforms"]
    status, detail = got["data-freshness"]
    assert status == "pass" and "24.0x the newest batch" in detail, detail
