"""modules-and-policies: the real reports reproduce, the helpers catch each broken fixture,
and the smoke checks fail when the behaviour they verify is broken."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

BUNDLE = Path(__file__).resolve().parent.parent
SCRIPTS = BUNDLE / "sub-skills" / "modules-and-policies" / "scripts"
sys.path.insert(0, str(BUNDLE / "scripts"))
sys.path.insert(0, str(SCRIPTS))

import skill_report as sr  # noqa: E402


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bp = _load("modules_broken_policies", BUNDLE / "tests" / "fixtures" / "modules" / "broken_policies.py")
pc = _load("_policy_checks", SCRIPTS / "_policy_checks.py")
smoke_actor = _load("smoke_actor", SCRIPTS / "smoke_actor.py")
smoke_rec = _load("smoke_recurrent_actor", SCRIPTS / "smoke_recurrent_actor.py")
smoke_ma = _load("smoke_multiagent", SCRIPTS / "smoke_multiagent.py")

needs_gym = pytest.mark.skipif(importlib.util.find_spec("gymnasium") is None, reason="gymnasium not installed")


# --- Report 1: LSTM policy in a collector without InitTracker and primer -------------------
@needs_gym
def test_lstm_without_init_tracker_reproduces_and_is_flagged():
    from torchrl.collectors import Collector

    env, policy = bp.broken_lstm_env_without_init_tracker()
    findings = pc.find_missing_recurrent_transforms(env, policy)
    assert any("is_init" in f and "auto_register_policy_transforms=True" in f for f in findings), findings
    assert any("recurrent_state_h" in f for f in findings), findings
    collector = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyError, match='key "is_init" not found'):
            collector = Collector(env, policy, frames_per_batch=4, total_frames=4)
            next(iter(collector))
    if collector is not None:
        collector.shutdown()
    assert any("missing transforms required by the policy" in str(w.message) and w.category is FutureWarning for w in caught)
    env.close()


@needs_gym
def test_lstm_with_transforms_passes():
    env, policy = bp.fixed_lstm_env_with_transforms()
    assert pc.find_missing_recurrent_transforms(env, policy) == []
    data = env.rollout(5, policy)
    assert data["recurrent_state_h"].shape[-2:] == (1, 8)
    env.close()


def test_hidden_state_trace_detects_state_not_carried():
    import torch
    from tensordict import TensorDict

    h = torch.randn(6, 1, 3)
    good = TensorDict(
        {
            "h": torch.cat([torch.zeros(1, 1, 3), h[:-1]]),
            "is_init": torch.tensor([True, False, False, False, False, False]).unsqueeze(-1),
            ("next", "h"): h,
            ("collector", "traj_ids"): torch.zeros(6, dtype=torch.long),
        },
        batch_size=[6],
    )
    assert pc.hidden_state_trace(good, "h") == (True, 5, 1)
    broken = good.clone()
    broken["h"] = torch.zeros(6, 1, 3)  # state reset every step: not carried, never changes
    carried, changed, _ = pc.hidden_state_trace(broken, "h")
    assert not carried and changed == 0


# --- Report 2: TanhNormal log-prob has an event dim -----------------------------------------
def test_tanh_normal_log_prob_comparison():
    event_lp, elementwise = bp.broken_log_prob_comparison()
    assert event_lp.shape == (6,) and elementwise.shape == (6, 1)
    assert (event_lp - elementwise).shape == (6, 6)  # the silent broadcast the report hit
    assert pc.find_log_prob_comparison_fault(event_lp, elementwise)
    lp, ref = bp.fixed_log_prob_comparison()
    assert pc.find_log_prob_comparison_fault(lp, ref) == []
    assert (lp - ref).abs().max() < 1e-4


# --- Report 3: QValueModule with a MultiOneHot spec ------------------------------------------
def test_qvalue_spec_in_action_space_raises_exact_text():
    with pytest.raises(TypeError, match="Using specs in action_space is deprecated"):
        bp.broken_qvalue_spec_as_action_space()


def test_qvalue_without_var_nums_flagged_and_raises_on_call():
    import torch
    from tensordict import TensorDict

    module = bp.broken_qvalue_without_var_nums()
    findings = pc.find_qvalue_action_space_faults(module)
    assert findings and "var_nums=[2, 3]" in findings[0] and "var_nums must be provided" in findings[0]
    with pytest.raises(ValueError, match="var_nums must be provided to the constructor for multi one-hot action spaces"):
        module(TensorDict(action_value=torch.randn(2, 5), batch_size=[2]))


def test_qvalue_wrong_var_nums_is_silent_but_flagged():
    import torch
    from tensordict import TensorDict

    module = bp.broken_qvalue_wrong_var_nums()
    action = module(TensorDict(action_value=torch.randn(4, 5), batch_size=[4]))["action"]
    assert (action.sum(-1) == 3).all()  # three "ones" for two components, no error raised
    findings = pc.find_qvalue_action_space_faults(module)
    assert findings and "[2, 2, 1]" in findings[0]
    assert pc.find_qvalue_action_space_faults(bp.fixed_qvalue_var_nums()) == []


# --- Stochastic actors --------------------------------------------------------------------
def test_actor_without_log_prob_flagged():
    findings = pc.audit_probabilistic_actor(bp.broken_actor_without_log_prob(), bp.obs_batch())
    assert len(findings) == 1 and "return_log_prob=True" in findings[0] and "action_log_prob" in findings[0]


def test_deterministic_actor_flagged():
    findings = pc.audit_probabilistic_actor(bp.broken_deterministic_actor_for_exploration(), bp.obs_batch())
    assert findings and "ProbabilisticActor" in findings[0]


def test_stochastic_actor_passes_and_rollout_default_explained():
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    actor = bp.fixed_stochastic_actor()
    assert pc.audit_probabilistic_actor(actor, bp.obs_batch()) == []
    outside = pc.explain_rollout_determinism(actor)
    assert outside and "set_exploration_type(ExplorationType.RANDOM)" in outside[0]
    with set_exploration_type(ExplorationType.RANDOM):
        assert pc.explain_rollout_determinism(actor) == []
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        assert pc.explain_rollout_determinism(actor)


# --- The smoke checks pass here and fail on broken behaviour ---------------------------------
def _run(module, argv=()):
    report = sr.Report(str(module.__file__))
    module.run_checks(module.build_parser().parse_args(list(argv)), report)
    return report


def test_smoke_actor_passes():
    report = _run(smoke_actor)
    assert report.ok, [(c.name, c.detail) for c in report.checks if c.status != "pass"]
    assert all(c.status == "pass" for c in report.checks)


def test_smoke_actor_fails_without_log_prob(monkeypatch):
    original = smoke_actor.make_tanh_normal_actor
    monkeypatch.setattr(smoke_actor, "make_tanh_normal_actor", lambda **kw: original(return_log_prob=False))
    with pytest.raises(sr.CheckFailed, match="return_log_prob=True"):
        smoke_actor.check_probabilistic_actor(4)


def test_smoke_multiagent_passes_and_fails_when_centralized_is_ignored(monkeypatch):
    report = _run(smoke_ma)
    assert report.ok and len(report.checks) == 6
    original = smoke_ma.make_mlp
    monkeypatch.setattr(smoke_ma, "make_mlp", lambda n, c, s: original(n, False, s))
    with pytest.raises(sr.CheckFailed, match="did not change agent 1"):
        smoke_ma.check_mlp(3, True, False)


@needs_gym
def test_smoke_recurrent_passes():
    report = _run(smoke_rec)
    statuses = {c.name: c.status for c in report.checks}
    assert report.ok, [(c.name, c.detail) for c in report.checks if c.status == "fail"]
    assert statuses["collector:lstm"] == "pass" and statuses["recurrent:set_recurrent_mode"] == "pass"
    assert statuses["collector:gru"] == "skip"
