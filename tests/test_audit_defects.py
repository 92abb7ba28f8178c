"""The auditor's defects found in its review, each reproduced by a real audited run (written before
its fix, seen failing) beside its nearest correct case: a PASS is a proof, a run that
trained nothing is not OK.

1. an updater stepped at another rate than the optimizer fails on its rate, copy or no copy;
2. fewer distinct first resets than workers fails unless the reset is shown deterministic;
3. one priority broadcast over the sampled batch fails; a priority update that raised is not counted;
4. a loss called through its sub-methods (loss.value_loss, loss.actor_loss) is registered;
5. the target is read after the updater's own step (a last-call copy is seen);
6. a run that ended inside init_random_frames exits 5, and the exploration row names the policy;
7. transforms of an env the collector wraps (max_frames_per_traj) are seen.

Fixtures: tests/fixtures/audit/mutations/ (one per detector, ``--variant`` and ``--fixed``),
tests/fixtures/audit/coverage/. Every run is bounded by --max-frames or the fixture's end.
"""

from __future__ import annotations

import functools

import pytest
from conftest import FIXTURES, rows, run_main

MUT = FIXTURES / "audit" / "mutations"
pytestmark = pytest.mark.slow


@functools.lru_cache(maxsize=None)
def audit(target, *argv: str) -> tuple[int, dict]:
    code, report = run_main("scripts/audit_run", "--seconds", "300", str(target), *argv)
    return code, rows(report)


def verdict(target, name, *argv) -> tuple[str, str]:
    return audit(str(target), *argv)[1][name]


def expect(target, name, status, *argv, says=(), never=()):
    got, detail = verdict(target, name, *argv)
    assert got == status, detail
    for text in says:
        assert text in detail, detail
    for text in never:
        assert text not in detail, detail
    return detail


# 1 ---------------------------------------------------------------------------------------
def test_hard_update_stepped_per_batch_fails_on_its_rate_before_any_copy_is_due():
    # the numbers: 64 optimizer steps, the updater stepped 16 times, no copy due yet
    expect(MUT / "target_network.py", "target-network", "fail", "--max-frames", "800", "--", "--variant", "hard-per-batch",
           says=["stepped 16 times", "64 optimizer steps", "0.25 per optimizer step", "target_network.py:"], never=["not due yet"])
    expect(MUT / "target_network.py", "target-network", "pass", "--max-frames", "800", "--", "--variant", "hard-per-batch", "--fixed",
           says=["1.00 per optimizer step"])


# 2 ---------------------------------------------------------------------------------------
def test_workers_built_with_one_seed_fail_and_a_reset_deterministic_by_design_passes():
    expect(MUT / "identical_workers.py", "identical-workers", "fail", "--max-frames", "240", "--", "--variant", "kwargs-dict",
           says=["1 distinct first resets for 4 workers", "create_env_kwargs", "identical_workers.py:"])
    expect(MUT / "identical_workers.py", "identical-workers", "pass", "--max-frames", "240", "--", "--variant", "kwargs-dict", "--fixed",
           says=["4 distinct first resets for 4 workers"])
    expect(MUT / "identical_workers.py", "identical-workers", "pass", "--max-frames", "240", "--", "--variant", "deterministic",
           says=["deterministic"])


# 3 ---------------------------------------------------------------------------------------
def test_one_priority_broadcast_over_the_batch_fails_and_a_raised_update_is_not_counted():
    expect(MUT / "prioritized_replay.py", "prioritized-replay", "fail", "--max-frames", "300", "--", "--variant", "mean-loss",
           says=["one value for every sampled index", "prioritized_replay.py:"])
    expect(MUT / "prioritized_replay.py", "prioritized-replay", "fail", "--max-frames", "300", "--", "--variant", "raised",
           says=["never updated", "raised"])
    expect(MUT / "prioritized_replay.py", "prioritized-replay", "pass", "--max-frames", "300", "--", "--variant", "mean-loss", "--fixed",
           says=["24 priority updates"])


# 4 and 6: the "done when" ----------------------------------------------------------
TD3 = MUT / "td3_hydra" / "train.py"


@pytest.mark.xdist_group("audit-td3-hydra")
def test_td3_hydra_script_calling_its_loss_through_sub_methods_audits_clean():
    code, got = audit(str(TD3), "--max-frames", "600")
    assert code == 0 and not [n for n, (s, _) in got.items() if s == "fail"], got
    assert got["target-network"][0] == "pass" and "TD3Loss" in got["target-network"][1], got["target-network"]
    assert got["optimizer-coverage"][0] == "pass" and "TD3Loss" in got["optimizer-coverage"][1], got["optimizer-coverage"]


@pytest.mark.xdist_group("audit-td3-hydra")
def test_td3_hydra_script_without_its_target_updater_fails():
    expect(TD3, "target-network", "fail", "--max-frames", "600", "--", "loss.target_update=none",
           says=["TD3Loss", "no SoftUpdate/HardUpdate was built for it"])


# 5 ---------------------------------------------------------------------------------------
def test_a_copy_made_by_the_last_updater_call_is_seen():
    # HardUpdate(value_network_update_interval=50) stepped after each of exactly 51 updates:
    # its one copy is the last call, after the last optimizer step
    expect(MUT / "target_network.py", "target-network", "pass", "--max-frames", "5000", "--", "--variant", "hard-last-copy",
           says=["target changed 1 times"], never=["never changed"])


# 6 ---------------------------------------------------------------------------------------
DDPG = FIXTURES / "audit" / "coverage" / "ddpg.py"


def test_a_run_that_ends_inside_init_random_frames_exits_5_and_names_the_budget():
    code, got = audit(str(DDPG), "--max-frames", "1000")
    assert code == 5, got
    status, detail = got["training"]
    assert status == "skip" and "init_random_frames=25000" in detail and "--max-frames" in detail, detail
    exploration = got["exploration"][1]
    assert "no collector or env.rollout with a policy" not in exploration and "init_random_frames" in exploration, exploration
    code, got = audit(str(DDPG), "--max-frames", "1000", "--", "--init-random-frames", "400")
    assert code == 0 and got["training"][0] == "pass", got["training"]


def test_a_run_in_which_no_optimizer_stepped_exits_5():
    code, got = audit(str(DDPG), "--max-frames", "1000", "--", "--init-random-frames", "400", "--no-optimizer")
    assert code == 5, got
    assert "no optimizer stepped" in got["training"][1], got["training"]


# 7 ---------------------------------------------------------------------------------------
def test_transforms_of_an_env_the_collector_wraps_are_seen():
    expect(MUT / "transforms.py", "transforms", "fail", "--max-frames", "300", "--", "--variant", "wrapped-dropped",
           says=["RewardScaling", "never stepped", "transforms.py:"])
    expect(MUT / "transforms.py", "transforms", "pass", "--max-frames", "300", "--", "--variant", "wrapped-dropped", "--fixed",
           says=["RewardScaling+StepCounter"])
