"""Each run-time audit detector fails its broken fixture and passes the fixed one
(tests/fixtures/audit/<detector>/, each built from a public report); two multi-file projects
with four hidden faults each are named in full by one run; the bundle's known-good recipes
audit clean.

Every fixture run is a real audit (a child process with torchrl instrumented), bounded by
--max-frames or by the fixture's own end, never by wall time; runs are cached so that tests
sharing one read it once. Only tests that share a run are grouped (xdist_group), so that
run is made once on one worker; the others spread over the workers.
"""

from __future__ import annotations

import functools
import re

import pytest
from torchrl_skill.report import skill_report as sr
from conftest import BUNDLE, FIXTURES, load_module, rows, run_main

AUDIT = FIXTURES / "audit"
pytestmark = pytest.mark.slow


@functools.lru_cache(maxsize=None)
def audit(target: str, *argv: str) -> tuple[int, dict]:
    """``(exit code, {row: (status, detail)})`` of ``audit_run.py --json TARGET ARGV``, run
    in this process (the target itself runs in the auditor's child process)."""
    code, report = run_main("scripts/audit_run", "--seconds", "240", str(target), *argv)
    return code, rows(report)


def row(target, row_name, *argv):
    return audit(str(target), *argv)[1][row_name]


def fails(target, row_name, *argv, says=()):
    status, detail = row(target, row_name, *argv)
    assert status == "fail", detail
    for text in says:
        assert text in detail, detail
    return detail


def passes(target, row_name, *argv, says=()):
    status, detail = row(target, row_name, *argv)
    assert status == "pass", detail
    for text in says:
        assert text in detail, detail
    return detail


TN = AUDIT / "target_network"


@pytest.mark.parametrize("variant, says", [
    ("never", ["step() never called", "updater.step() right after optimizer.step() (at broken.py:51"]),
    ("inside", ["each construction copies the online weights into the target", "equalled the online net"]),
    ("per-batch", ["HardUpdate(value_network_update_interval=10) is stepped 12 times over 48 optimizer steps", "not every 11",
                   "called at broken.py:55"]),
])
def test_target_network_fails_broken(variant, says):
    fails(TN / "broken.py", "target-network", "--max-frames", "600", "--", "--variant", variant, says=says)


@pytest.mark.xdist_group("audit-target-network-fixed")
def test_target_network_passes_fixed_soft_and_hard():
    passes(TN / "fixed.py", "target-network", "--max-frames", "600", says=["SoftUpdate(tau=0.05) stepped 48 times"])
    # HardUpdate copies on the call after its counter reaches the interval: N=10 -> every 11 steps
    passes(TN / "fixed.py", "target-network", "--max-frames", "600", "--", "--variant", "hard", says=["copied every 11 optimizer steps"])


def test_optimizer_coverage_broken_and_fixed():
    path = AUDIT / "optimizer_coverage"
    fails(path / "broken.py", "optimizer-coverage", "--max-frames", "300",
          says=["log_alpha", "qvalue_network_params", "never received a gradient", "torch.optim.Adam(loss.parameters()",
                "torch.optim.Adam(loss.qvalue_network_params.parameters(), lr=...)"])
    # the critic copies never change, so the target's updater is not seen at work: not a
    # target fault, and not a pass either (a target that stays put proves nothing)
    status, detail = row(path / "broken.py", "target-network", "--max-frames", "300")
    assert status == "skip" and "never changed" in detail and "was not seen" in detail, detail
    passes(path / "fixed.py", "optimizer-coverage", "--max-frames", "300")


def test_exploration_deterministic_rollouts_broken_and_fixed():
    path = AUDIT / "exploration"
    fails(path / "broken.py", "exploration", "--max-frames", "300",
          says=["every checked action equals the policy's deterministic action", "set_exploration_type(ExplorationType.RANDOM)"])
    passes(path / "fixed.py", "exploration", "--max-frames", "300", says=["differ from the deterministic action"])


@pytest.mark.xdist_group("audit-target-network-fixed")
def test_exploration_annealing_never_stepped_fails_and_per_frame_passes():
    fails(AUDIT / "exploration" / "broken_annealing.py", "exploration", "--max-frames", "600", "--", "--variant", "never",
          says=["stayed at 1 (its initial value) over 600 collected frames", "step(data.numel())"])
    fails(AUDIT / "exploration" / "broken_annealing.py", "exploration", "--max-frames", "600",
          says=["counted 48 over 600 collected frames", "curve:"])
    passes(TN / "fixed.py", "exploration", "--max-frames", "600", says=["EGreedyModule 1 -> 0.43 over 600 frames"])


def test_transforms_broken_and_fixed():
    path = AUDIT / "transforms"
    fails(path / "broken.py", "transforms", says=["append_transform(...) returns a new TransformedEnv", "overrides _call but not _reset"])
    fails(path / "broken_norm.py", "transforms", says=["Loc/Scale have not been initialized", "init_stats"])
    assert row(path / "broken_norm.py", "exit")[0] == "fail"
    passes(path / "fixed.py", "transforms", says=["RewardScaling+ScaleObservationFixed+ObservationNorm+StepCounter"])


def test_eval_env_with_its_own_running_statistics_fails():
    # pytorch/rl#337's class, found by a newcomer trial: the row said PASS while listing both envs
    path = AUDIT / "transforms" / "eval_norm.py"
    fails(path, "transforms", "--", "--variant", "own",
          says=["VecNormV2(in_keys=['observation'])", "(400 steps)", "keeps running statistics of its own",
                "eval_norm.load_state_dict(train_norm.state_dict()) then eval_norm.freeze()"])
    passes(path, "transforms", "--", "--variant", "shared", says=["VecNormV2 (400 steps"])
    passes(path, "transforms", "--", "--variant", "snapshot", says=["VecNormV2 (400 steps"])


def test_own_statistics_spare_envs_stepped_alike_or_frozen():
    """The nearest cases the rule excludes: SerialEnv sub-envs or a spec check's throwaway env
    (never rolled out with a policy by the user), a frozen snapshot, the training statistics
    themselves, another base env; and the case it must keep: an evaluation env however often
    it was stepped, read when it was rolled out."""
    from torchrl_skill.audit import d_transforms as transforms

    def env(steps, stats, frozen=False, rolled_out=True, base="GymEnv"):
        return {"site": "envs.py:3", "steps": steps, "base_cls": base, "rolled_out": rolled_out,
                "running": [{"cls": "VecNormV2", "keys": ["observation"], "stats": stats, "frozen": frozen}]}

    assert transforms._own_statistics([env(200, [1], rolled_out=False), env(200, [2], rolled_out=False)]) == []  # sub-envs
    assert transforms._own_statistics([env(400, [1]), env(3, [2], rolled_out=False)]) == []  # check_env_specs' env
    assert transforms._own_statistics([env(400, [1]), env(40, [2], frozen=True)]) == []  # a frozen snapshot
    assert transforms._own_statistics([env(400, [1]), env(40, [1])]) == []  # the training statistics, shared
    assert transforms._own_statistics([env(400, [1]), env(40, [2], base="PendulumEnv")]) == []  # another task
    (fault,) = transforms._own_statistics([env(400, [1], rolled_out=False), env(390, [2])])
    assert "(390 steps), rolled out with a policy, keeps running statistics of its own" in fault and "(400 steps)" in fault


def test_time_limit_broken_and_fixed():
    path = AUDIT / "time_limit"
    detail = fails(path / "broken.py", "time-limit", "--max-frames", "300", says=["`terminated` at exactly step 20", "StepCounter(max_steps=20)"])
    passes(path / "fixed.py", "time-limit", "--max-frames", "300", says=["truncated (lengths 20"])
    # how to decide, and the cause as the error index words it (written once, read here)
    from torchrl_skill.explain import error_index as _error_index

    entry = _error_index.by_id()["time-limit-as-terminated"]
    assert entry.plain("cause").rstrip(".") in detail, detail
    assert "terminated is right only when the step count is part of the observation and reaching step 20 is a real end" in detail, detail
    assert "ignore this row" not in detail


@pytest.mark.parametrize("variant, says", [
    ("flatten", ["ran at broken.py:56 in ppo on [[100]] data although the collector produced [[4, 25]]", "before reshape(-1)"]),
    ("recompute", ["ClipPPOLoss (built at broken.py:42 in ppo) computed advantages itself", "called at broken.py:58 in ppo that writes 'adv'",
                   "loss.set_keys(advantage='adv')"]),
    ("slice", ["SliceSampler of the buffer built at broken.py:75 in slices returned slices that cross trajectories", "ndim=2"]),
])
def test_batched_layout_fails_broken(variant, says):
    fails(AUDIT / "batched_layout" / "broken.py", "batched-layout", "--max-frames", "400", "--", "--variant", variant, says=says)


def test_batched_layout_passes_fixed():
    # both parts of the script: without --max-frames the run would stop once the first part's verdicts are in
    passes(AUDIT / "batched_layout" / "fixed.py", "batched-layout", "--max-frames", "100000", says=["trajectories intact", "slices intact"])


def test_vector_autoreset_broken_and_fixed():
    path = AUDIT / "vector_autoreset"
    fails(path / "broken.py", "vector-autoreset", "--max-frames", "400", says=["autoreset_mode=NEXT_STEP", "had reward [0.0]", "SAME_STEP"])
    passes(path / "fixed.py", "vector-autoreset", "--max-frames", "400", says=["autoreset_mode=SAME_STEP", "no junk step"])
    assert row(path / "fixed.py", "transforms", "--max-frames", "400")[0] != "fail"  # torchrl's own wrapping is not a dropped env


def test_identical_workers_broken_and_fixed():
    path = AUDIT / "identical_workers"
    fails(path / "broken.py", "identical-workers", "--max-frames", "240", says=["1 distinct first resets for 4 workers", "env.set_seed(seed)"])
    passes(path / "fixed.py", "identical-workers", "--max-frames", "240", says=["4 distinct first resets for 4 workers"])


def test_prioritized_replay_broken_and_fixed():
    path = AUDIT / "prioritized_replay"
    fails(path / "broken.py", "prioritized-replay", "--max-frames", "300", says=["priorities never updated", "update_tensordict_priority"])
    fails(path / "broken.py", "prioritized-replay", "--max-frames", "300", "--", "--variant", "signed",
          says=["negative", "td_error.abs()", "OverflowError"])
    passes(path / "fixed.py", "prioritized-replay", "--max-frames", "300", says=["24 priority updates"])


def test_episode_stats_broken_and_fixed():
    path = AUDIT / "episode_stats"
    fails(path / "broken.py", "episode-stats", "--max-frames", "300", says=["reads data['done']", "data['next', 'done']"])
    passes(path / "fixed.py", "episode-stats", "--max-frames", "300")


def test_dqn_project_one_run_names_all_four_faults():
    code, rows = audit(str(AUDIT / "project_dqn" / "train.py"), "--max-frames", "600")
    assert code == 1
    failed = {name for name, (status, _) in rows.items() if status == "fail"}
    assert failed == {"target-network", "exploration", "prioritized-replay", "episode-stats"}, rows
    assert "updates another DQNLoss object" in rows["target-network"][1]
    assert "per update" in rows["exploration"][1]
    # the project's own numbers: UPDATES_PER_BATCH samples of BATCH_SIZE per FRAMES_PER_BATCH frames
    config = load_module(AUDIT / "project_dqn" / "config.py")
    status, detail = rows["info:update-to-data"]
    measured = float(detail.split(" optimizer steps per frame", 1)[0])
    # the run stops at a frame budget, so its last batch may lack some of its updates
    assert status == "pass" and abs(measured - config.UPDATES_PER_BATCH / config.FRAMES_PER_BATCH) < 0.01, detail
    assert f"replay-buffer samples of {config.BATCH_SIZE} elements each" in detail and "low for" not in detail


def test_ppo_project_one_run_names_all_four_faults():
    code, rows = audit(str(AUDIT / "project_ppo" / "train.py"), "--max-frames", "600", "--", "--envs", "4")
    assert code == 1
    failed = {name for name, (status, _) in rows.items() if status == "fail"}
    assert failed == {"transforms", "time-limit", "batched-layout", "identical-workers"}, rows


@pytest.mark.parametrize("target, code, trained", [
    # a wiring to check, not a training run: no fault, and exit 5 since nothing was trained
    ("sub-skills/objectives-and-training/assets/ppo_user_env_wiring.py:build_wiring", 5, False),
    ("sub-skills/development-and-testing/assets/modern_example.py", 0, True),
])
def test_bundled_known_good_recipes_audit_clean(target, code, trained):
    got, rows = audit(str(BUNDLE / target))
    assert got == code and not [n for n, (s, _) in rows.items() if s == "fail"], rows
    assert rows["batched-layout"][0] == "pass"
    if trained:
        assert rows["training"][0] == "pass" and rows["optimizer-coverage"][0] == "pass" and rows["exploration"][0] == "pass", rows
    else:
        assert rows["training"][0] == "skip" and "no optimizer stepped" in rows["training"][1], rows["training"]


PROBE_SHAPES = AUDIT / "probe_shapes" / "train.py"


@pytest.mark.xdist_group("audit-probe-shapes")
def test_probes_measure_scalar_leaves_and_flat_slices_of_ndim2_storage():
    # SerialEnv of PendulumEnv: "th"/"thdot" have no feature dim; [4, 1] batches in
    # LazyTensorStorage(ndim=2), flat [64] SliceSampler samples: both rows measure
    args = ("--max-frames", "2000")
    assert "probe" not in row(PROBE_SHAPES, "run", *args)[1]
    passes(PROBE_SHAPES, "identical-workers", *args, says=["TransformedEnv(SerialEnv) built at train.py:42 in main: 4 distinct first resets for 4 workers",
                                                           "Collector: 4 checks of 4 rows x 8 steps, all distinct"])
    passes(PROBE_SHAPES, "batched-layout", *args, says=["SliceSampler: ", "slices intact"])


@pytest.mark.xdist_group("audit-probe-shapes")
def test_transforms_counts_the_steps_a_serial_env_makes_through_its_sub_envs():
    detail = passes(PROBE_SHAPES, "transforms", "--max-frames", "2000", says=["4 x StepCounter", "ScaleObs (500 steps, 3 resets)"])
    # 2000 frames over 4 sub-envs: 500 steps each, truncated at 200 -> 2 resets after the first
    assert re.search(r"4 x StepCounter \(500 steps, 3 resets each\)", detail), detail


def test_transforms_says_the_envs_inside_worker_processes_are_not_counted():
    # ParallelEnv sub-envs run in uninstrumented workers: the row must not pass their counts off as measured
    audit_run = load_module("scripts/audit_run")
    module = next(m for m in audit_run.MODULES if m.NAME == "transforms")
    env = {"site": "train.py:9 in main", "base_cls": "ParallelEnv", "base_id": 1, "steps": 50, "resets": 1, "base_steps": 0,
           "appended_at": None, "transforms": ["ScaleObs"], "reset_skipped": [], "norms": []}
    observed = {"meta": {"probe_errors": {}, "workers": ["ParallelEnv(2 workers)"]}, "sections": {"transforms": {"envs": [env]}},
                "end": {"how": "finished"}}
    detail = audit_run.detector_check(module)(observed)
    assert "ScaleObs (50 steps, 1 resets)" in detail, detail
    assert detail.endswith("not counted: the envs inside the worker processes of ParallelEnv(2 workers) (not instrumented)"), detail


def test_a_probe_error_shows_in_its_detectors_row_as_not_measured():
    audit_run = load_module("scripts/audit_run")
    module = next(m for m in audit_run.MODULES if m.NAME == "identical-workers")
    error = "IndexError: Dimension out of range at d_identical_workers.py:39"
    observed = {"meta": {"probe_errors": {"env_reset:torchrl_skill.audit.d_identical_workers": error}}, "sections": {}, "end": {"how": "finished"}}
    with pytest.raises(sr.CheckSkipped) as skipped:
        audit_run.detector_check(module)(observed)
    assert str(skipped.value) == f"not measured: its env_reset probe raised {error} (an auditor bug)"
    # a detector with data of its own keeps its verdict and says what it could not measure
    observed["sections"]["identical-workers"] = {"resets": [{"cls": "SerialEnv", "n": 4, "unique": 4, "seeded": True}], "sources": []}
    detail = audit_run.detector_check(module)(observed)
    assert detail.startswith("SerialEnv built at ?: 4 distinct first resets") and "partly not measured: its env_reset probe raised" in detail
    # another detector's row is not touched by it
    other = next(m for m in audit_run.MODULES if m.NAME == "batched-layout")
    with pytest.raises(sr.CheckSkipped, match="no value estimator call"):
        audit_run.detector_check(other)(observed)


def test_env_seeding_broken_and_fixed():
    path = AUDIT / "env_seeding"
    from torchrl_skill.explain import error_index as _error_index

    entry = _error_index.by_id()["env-reseeds-global-rng"]
    lines = (path / "broken.py").read_text().splitlines()
    at = next(i for i, line in enumerate(lines, 1) if line.strip() == "torch.manual_seed(seed)")
    detail = fails(path / "broken.py", "env-seeding", "--max-frames", "300",
                   says=["Reach._set_seed called torch.manual_seed", f"broken.py:{at} in _set_seed", "after collection started"])
    assert entry.plain("cause").rstrip(".") in detail and entry.plain("fix").rstrip(".") in detail, detail
    # a _reset that re-seeds: every episode restarts the global stream
    detail = fails(path / "broken.py", "env-seeding", "--max-frames", "300", "--", "--variant", "reset",
                   says=["Reach._reset called torch.manual_seed", "in _reset", "after collection started"])
    assert entry.plain("fix").rstrip(".") in detail and "cause:" not in detail, detail
    passes(path / "fixed.py", "env-seeding", "--max-frames", "300", says=["none re-seeded torch's global RNG"])


def test_observation_scale_names_an_unscaled_step_count_and_not_a_scaled_one():
    path = AUDIT / "observation_scale"
    detail = passes(path / "broken.py", "info:observation-scale", "--max-frames", "300",
                    says=["a heuristic, not a fault", "observation[2] spans 0..50", "ObservationNorm", "standard_normal=True",
                          "init_stats", "VecNormV2"])
    assert "observation[0]" in detail and "observation[1]" in detail, detail
    detail = passes(path / "fixed.py", "info:observation-scale", "--max-frames", "300", says=["observation[2] spans 0..1"])
    assert "ObservationNorm" not in detail and "VecNormV2" not in detail, detail


def test_observation_scale_with_a_normalizer_in_the_env_names_its_statistics():
    # pytorch/rl#1694's fault class (newcomer trial): ObservationNorm is in place, its
    # init_stats rollout held a per-episode goal fixed, so its outputs reach +-1e6
    from torchrl_skill.audit import i_observation_scale as obs_scale

    key = {"key": "observation", "rows": 512, "std": [0.6, 4.1e5, 0.7], "min": [-1.0, -1.3e6, -1.0],
           "max": [1.0, 7.2e5, 1.0]}
    observed = {"sections": {obs_scale.NAME: {"keys": [key]},
                             "transforms": {"envs": [{"transforms": ["StepCounter", "ObservationNorm"]}]}}}
    detail = obs_scale.judge(observed)
    assert "ObservationNorm is in the env" in detail and "1/std.clamp_min(eps)" in detail and "several episodes" in detail
    assert "standard_normal=True" not in detail, detail
    observed["sections"]["transforms"]["envs"][0]["transforms"] = ["StepCounter"]  # nothing normalizes: add one
    detail = obs_scale.judge(observed)
    assert "ObservationNorm(in_keys=['observation'], standard_normal=True)" in detail and "is in the env" not in detail
