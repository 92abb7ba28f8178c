"""modules-and-policies: the real reports reproduce, the policy helpers catch each broken
fixture, and every smoke check fails when the behaviour it verifies is broken.

The helpers of src/torchrl_skill/checks/modules/policy_checks.py are the
documented way to check a user's own policy (its SKILL.md), so the tests call them.
"""

from __future__ import annotations

import functools
import importlib.util
import warnings

import pytest
from conftest import FIXTURES, load_module, run_in_process

broken = load_module(FIXTURES / "modules" / "broken_policies.py")
policy_checks = load_module("modules-and-policies/_policy_checks")
needs_gym = pytest.mark.skipif(importlib.util.find_spec("gymnasium") is None, reason="gymnasium not installed")


# --- Report 1: LSTM policy in a collector without InitTracker and primer -------------------
@needs_gym
def test_lstm_without_init_tracker_reproduces_and_is_flagged():
    from torchrl.collectors import Collector

    env, policy = broken.broken_lstm_env_without_init_tracker()
    findings = policy_checks.find_missing_recurrent_transforms(env, policy)
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
    env, policy = broken.fixed_lstm_env_with_transforms()
    assert policy_checks.find_missing_recurrent_transforms(env, policy) == []
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
    assert policy_checks.hidden_state_trace(good, "h") == (True, 5, 1)
    reset_every_step = good.clone()
    reset_every_step["h"] = torch.zeros(6, 1, 3)  # not carried, never changes
    carried, changed, _ = policy_checks.hidden_state_trace(reset_every_step, "h")
    assert not carried and changed == 0


def test_loss_forward_runs_recurrent_modules_in_recurrent_mode():
    """recurrent-and-multiagent.md: a loss's forward sets set_recurrent_mode(True) itself
    (torchrl/objectives/common.py, _forward_wrapper), so an LSTM inside a loss unrolls [B, T]."""
    import torch
    from tensordict import TensorDict
    from torchrl.modules import LSTMModule, recurrent_mode
    from torchrl.objectives import LossModule

    seen = []

    class Probe(LossModule):
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, td):
            seen.append(recurrent_mode())
            return TensorDict(loss=self.module(td)["embed"].sum())

    probe = Probe(LSTMModule(input_size=2, hidden_size=3, in_key="observation", out_key="embed"))
    assert not recurrent_mode()  # None outside any context
    batch = TensorDict(observation=torch.randn(2, 4, 2), is_init=torch.zeros(2, 4, 1, dtype=torch.bool), batch_size=[2, 4])
    batch["is_init"][:, 0] = True
    probe(batch)
    assert seen == [True] and not recurrent_mode()


# --- Report 2: TanhNormal log-prob has an event dim -----------------------------------------
def test_tanh_normal_log_prob_comparison():
    event_lp, elementwise = broken.broken_log_prob_comparison()
    assert event_lp.shape == (6,) and elementwise.shape == (6, 1)
    assert (event_lp - elementwise).shape == (6, 6)  # the silent broadcast the report hit
    assert policy_checks.find_log_prob_comparison_fault(event_lp, elementwise)
    lp, ref = broken.fixed_log_prob_comparison()
    assert policy_checks.find_log_prob_comparison_fault(lp, ref) == []
    assert (lp - ref).abs().max() < 1e-4


# --- Report 3: QValueModule with a MultiOneHot spec ------------------------------------------
def test_qvalue_spec_in_action_space_raises_exact_text():
    with pytest.raises(TypeError, match="Using specs in action_space is deprecated"):
        broken.broken_qvalue_spec_as_action_space()


def test_qvalue_without_var_nums_flagged_and_raises_on_call():
    import torch
    from tensordict import TensorDict

    module = broken.broken_qvalue_without_var_nums()
    findings = policy_checks.find_qvalue_action_space_faults(module)
    assert findings and "var_nums=[2, 3]" in findings[0] and "var_nums must be provided" in findings[0]
    with pytest.raises(ValueError, match="var_nums must be provided to the constructor for multi one-hot action spaces"):
        module(TensorDict(action_value=torch.randn(2, 5), batch_size=[2]))


def test_qvalue_wrong_var_nums_is_silent_but_flagged():
    import torch
    from tensordict import TensorDict

    module = broken.broken_qvalue_wrong_var_nums()
    action = module(TensorDict(action_value=torch.randn(4, 5), batch_size=[4]))["action"]
    assert (action.sum(-1) == 3).all()  # three "ones" for two components, no error raised
    findings = policy_checks.find_qvalue_action_space_faults(module)
    assert findings and "[2, 2, 1]" in findings[0]
    assert policy_checks.find_qvalue_action_space_faults(broken.fixed_qvalue_var_nums()) == []


# --- Stochastic actors --------------------------------------------------------------------
def test_actor_without_log_prob_flagged():
    findings = policy_checks.audit_probabilistic_actor(broken.broken_actor_without_log_prob(), broken.obs_batch())
    assert len(findings) == 1 and "return_log_prob=True" in findings[0] and "action_log_prob" in findings[0]


def test_deterministic_actor_flagged():
    findings = policy_checks.audit_probabilistic_actor(broken.broken_deterministic_actor_for_exploration(), broken.obs_batch())
    assert findings and "ProbabilisticActor" in findings[0]


def test_stochastic_actor_passes_and_rollout_default_explained():
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    actor = broken.fixed_stochastic_actor()
    assert policy_checks.audit_probabilistic_actor(actor, broken.obs_batch()) == []
    outside = policy_checks.explain_rollout_determinism(actor)
    assert outside and "set_exploration_type(ExplorationType.RANDOM)" in outside[0]
    with set_exploration_type(ExplorationType.RANDOM):
        assert policy_checks.explain_rollout_determinism(actor) == []
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        assert policy_checks.explain_rollout_determinism(actor)


def test_actor_spec_is_not_projected_without_safe():
    """policy-api.md#deterministic-actors-and-spec-projection: Actor(spec=Bounded) keeps the
    spec but does not clip unless safe=True."""
    import torch
    from tensordict import TensorDict
    from torchrl.data import Bounded
    from torchrl.modules import MLP, Actor

    torch.manual_seed(0)
    td = TensorDict(observation=torch.randn(64, 4) * 100, batch_size=[64])
    net = MLP(in_features=4, out_features=2, num_cells=[16])
    assert Actor(net, spec=Bounded(-1.0, 1.0, (2,)))(td.clone())["action"].abs().max() > 1.0
    assert Actor(net, spec=Bounded(-1.0, 1.0, (2,)), safe=True)(td.clone())["action"].abs().max() <= 1.0


# --- The smoke checks pass here and fail on broken behaviour ---------------------------------
def test_smoke_actor_passes():
    rows = run_in_process("modules-and-policies/smoke_actor")
    assert {status for status, _ in rows.values()} == {"pass"}, rows
    assert "noisy:exploration-type" in rows


def test_smoke_actor_fails_without_log_prob(monkeypatch):
    smoke_actor = load_module("modules-and-policies/smoke_actor")
    original = smoke_actor.make_tanh_normal_actor
    monkeypatch.setattr(smoke_actor, "make_tanh_normal_actor", lambda **kw: original(return_log_prob=False))
    status, detail = run_in_process("modules-and-policies/smoke_actor")["actor:probabilistic"]
    assert status == "fail" and "return_log_prob=True" in detail


def test_smoke_actor_noisy_check_fails_on_train_eval_noise(monkeypatch):
    """Before pytorch/rl#3082 NoisyLinear followed train()/eval(); that layer fails the check."""
    import torchrl.modules

    legacy = functools.partial(torchrl.modules.NoisyLinear, use_exploration_type=False)
    monkeypatch.setattr(torchrl.modules, "NoisyLinear", legacy)
    status, detail = run_in_process("modules-and-policies/smoke_actor")["noisy:exploration-type"]
    assert status == "fail" and "eval() switched the noise off" in detail


def test_smoke_multiagent_passes_and_fails_when_centralized_is_ignored(monkeypatch):
    rows = run_in_process("modules-and-policies/smoke_multiagent", "--agents", "3")
    assert len(rows) == 6 and {status for status, _ in rows.values()} == {"pass"}, rows
    smoke_multiagent = load_module("modules-and-policies/smoke_multiagent")
    original = smoke_multiagent.make_mlp
    monkeypatch.setattr(smoke_multiagent, "make_mlp", lambda n, c, s: original(n, False, s))
    status, detail = run_in_process("modules-and-policies/smoke_multiagent")["mlp:centralized=True,share_params=False"]
    assert status == "fail" and "did not change agent 1" in detail


@needs_gym
def test_smoke_recurrent_passes_and_gru_collector_is_opt_in():
    rows = run_in_process("modules-and-policies/smoke_recurrent_actor", "--steps", "9")
    assert rows["collector:lstm"][0] == "pass" and rows["recurrent:set_recurrent_mode"][0] == "pass", rows
    assert rows["collector:gru"] == ("skip", "not asked for (pass --gru-collector)")
    assert [name for name, (status, _) in rows.items() if status == "fail"] == []


@needs_gym
def test_smoke_recurrent_fails_when_the_collector_drops_the_hidden_state(monkeypatch):
    """A collector batch whose hidden state is reset every step fails collector:lstm, and
    set_recurrent_mode is then skipped naming the check it needed."""
    smoke_recurrent = load_module("modules-and-policies/smoke_recurrent_actor")
    original = smoke_recurrent.collect

    def dropping(kind, steps):
        policy, data = original(kind, steps)
        data["recurrent_state_h"] = data["recurrent_state_h"].zero_()
        return policy, data

    monkeypatch.setattr(smoke_recurrent, "collect", dropping)
    rows = run_in_process("modules-and-policies/smoke_recurrent_actor")
    assert rows["collector:lstm"][0] == "fail" and "not carried" in rows["collector:lstm"][1]
    assert rows["recurrent:set_recurrent_mode"][0] == "skip" and "collector:lstm" in rows["recurrent:set_recurrent_mode"][1]
