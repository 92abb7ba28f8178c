"""The run-time auditor's invariant rows (src/torchrl_skill/audit/v_*.py and target-network's lag):
each fails a broken variant of a training loop and passes its nearest correct twin
(tests/fixtures/audit/invariants/: ppo_loop.py on-policy, dqn_loop.py off-policy), and the
torch/torchrl facts the rows rest on hold on the installed stack.

Fixture runs are real audits bounded by --max-frames or by the fixture's own end, never by
wall time, cached so that tests sharing one read it once.
"""

from __future__ import annotations

import functools

import pytest
from conftest import FIXTURES, rows, run_main

INV = FIXTURES / "audit" / "invariants"


@functools.lru_cache(maxsize=None)
def audit(target: str, *argv: str) -> dict:
    code, report = run_main("scripts/audit_run", "--seconds", "240", str(target), *argv)
    return rows(report)


def ppo(variant: str, name: str):
    return audit(str(INV / "ppo_loop.py"), "--max-frames", "2000", "--", "--variant", variant)[name]


def dqn(variant: str, name: str):
    return audit(str(INV / "dqn_loop.py"), "--max-frames", "600", "--", "--variant", variant)[name]


def expect(got, status: str, *says: str) -> str:
    assert got[0] == status, got[1]
    for text in says:
        assert text in got[1], got[1]
    return got[1]


@pytest.mark.slow
@pytest.mark.parametrize("variant, says", [
    ("accumulate", ["added to the gradient the previous step had used", "no zero_grad() between step() and the next backward()"]),
    ("clear-between", ["were cleared before step()", "zero_grad() ran between them (at ppo_loop.py:71"]),
    ("clear-module", ["were cleared before step()", "(at ppo_loop.py:73"]),
])
def test_grad_flow_names_accumulation_and_a_clear_between_backward_and_step(variant, says):
    detail = expect(ppo(variant, "grad-flow"), "fail", *says)
    assert "accumulate" not in detail or variant == "accumulate", detail  # a zeroed gradient is not accumulated into


@pytest.mark.slow
def test_grad_flow_passes_the_correct_loop_and_coverage_names_the_order_not_the_parameters():
    expect(ppo("ok", "grad-flow"), "pass", "79 of 79 steps had a fresh gradient", "on all 8 tensors")
    detail = expect(ppo("clear-between", "optimizer-coverage"), "fail", "although backward() wrote one", "zero_grad() before backward()")
    assert "loss.parameters()" not in detail, detail


@pytest.mark.slow
def test_learning_rate_names_a_schedule_reaching_zero_and_passes_its_floored_twin():
    expect(ppo("lr-to-zero", "learning-rate"), "fail", "lr of group 0 was 0 at step 21", "after LambdaLR (stepped at ppo_loop.py:")
    expect(ppo("lr-floor", "learning-rate"), "pass", "lr 0.001 -> 0.0001", "sampled updates descend the gradient")


@pytest.mark.slow
def test_acting_module_fails_a_copy_that_never_learns_and_passes_the_synced_copy():
    expect(ppo("acting-copy", "acting-module"), "fail", "holds none of the tensors the optimizers step", "never changed over")
    expect(ppo("acting-synced", "acting-module"), "pass", "it receives the learner's weights")
    expect(ppo("ok", "acting-module"), "pass", "it is the module that learns")


@pytest.mark.slow
def test_data_freshness_on_policy_fails_old_batches_and_passes_the_newest_batch():
    expect(ppo("stale", "data-freshness"), "fail", "collected by an older policy than the newest batch's", "rb.empty()")
    expect(ppo("ok", "data-freshness"), "pass", "came from the newest collection")


@pytest.mark.slow
def test_data_freshness_off_policy_fails_a_buffer_of_one_batch():
    expect(dqn("small-buffer", "data-freshness"), "fail", "no more than the newest batch written (50 rows)")
    expect(dqn("ok", "data-freshness"), "pass", "x the newest batch")


@pytest.mark.slow
@pytest.mark.parametrize("variant, key", [("trunc-as-term", "truncated"), ("done-as-term", "done")])
def test_value_estimator_fails_termination_read_from_another_flag(variant, key):
    expect(ppo(variant, "value-estimator"), "fail", f"reads termination from ('next', '{key}')", "were not terminated in the env's")


@pytest.mark.slow
def test_value_estimator_compares_gamma_with_the_config_and_recomputes_gae():
    expect(ppo("gamma", "value-estimator"), "fail", "uses gamma 0.9 but the script's configuration has args.gamma=0.99")
    expect(ppo("ok", "value-estimator"), "pass", "matches args.gamma=0.99, args.lmbda=0.95", "advantages recomputed independently",
           "truncated steps bootstrapped")


@pytest.mark.slow
def test_target_network_states_its_lag_and_fails_a_target_that_follows_at_once():
    expect(dqn("tau-swapped", "target-network"), "fail", "SoftUpdate(tau=0.95)", "trails the online net by only")
    expect(dqn("hard-soon", "target-network"), "fail", "no delay")
    expect(dqn("ok", "target-network"), "pass", "the target trails the online net by about", "about 1/tau = 20 steps")
    expect(dqn("hard", "target-network"), "pass", "HardUpdate copies every 11 steps")


@pytest.mark.slow
def test_an_integer_tensor_in_the_optimizer_does_not_break_the_gradient_probes():
    for name in ("non-finite", "grad-norms", "grad-flow", "learning-rate"):
        status, detail = dqn("int-buffer", name)
        assert status == "pass" and "not measured" not in detail, (name, detail)


# --- the facts the rows rest on -----------------------------------------------------------

def test_a_leaf_hook_runs_before_accumulation_and_zero_grad_sets_none():
    import torch

    p = torch.nn.Parameter(torch.ones(2))
    seen = []
    p.register_hook(lambda g: seen.append(None if p.grad is None else p.grad.clone()))
    opt = torch.optim.SGD([p], lr=0.1)
    (2 * p).sum().backward()
    (3 * p).sum().backward()
    assert seen[0] is None and torch.equal(seen[1], torch.full((2,), 2.0))  # the second sees the first's gradient, not its own
    version = p.grad._version
    opt.zero_grad(set_to_none=False)
    assert p.grad._version > version  # zeroing in place bumps the version the grad-flow row reads
    opt.zero_grad()
    assert p.grad is None


def test_lambda_lr_linear_decay_turns_negative_and_adam_steps_uphill():
    import torch

    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1 - t / 2)
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        opt.zero_grad()
        (p - 1).pow(2).sum().backward()  # descent moves p toward 1
        before = p.item()
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.1, 0.05, 0.0, -0.05])
    assert p.item() < before  # the last step, at lr -0.05, moved p away from 1


def test_soft_update_eps_is_one_minus_tau():
    from torch import nn
    from torchrl.modules import QValueActor
    from torchrl.objectives import DQNLoss, SoftUpdate
    from torchrl.data import Categorical

    spec = Categorical(2)
    loss = DQNLoss(QValueActor(nn.Linear(4, 2), in_keys=["observation"], spec=spec), action_space=spec, delay_value=True)
    assert SoftUpdate(loss, tau=0.005).eps == pytest.approx(0.995)
    assert SoftUpdate(loss, eps=0.005).eps == pytest.approx(0.005)  # the swapped coefficient: 99.5% of the online net per step


# --- premises and measured fix texts ----------------------------------------------------------

@pytest.mark.slow
def test_observation_norm_statistics_from_less_than_an_episode_fail_and_a_whole_episode_passes():
    short = audit(str(INV / "obs_norm.py"), "--max-frames", "1000", "--", "--num-iter", "10")["transforms"]
    expect(short, "fail", "init_stats(num_iter=10)", "shorter than the episodes this run ended (median length 100")
    whole = audit(str(INV / "obs_norm.py"), "--max-frames", "1000", "--", "--num-iter", "100")["transforms"]
    expect(whole, "pass")
    loaded = audit(str(INV / "obs_norm.py"), "--max-frames", "1000", "--", "--num-iter", "10", "--load-from", "1000")["transforms"]
    expect(loaded, "pass")  # the short init_stats only built the buffers: load_state_dict replaced its statistics


@pytest.mark.slow
def test_prioritized_replay_restored_from_a_checkpoint_skips_and_the_fix_reads_the_loss_live():
    restored = audit(str(INV / "restored_prb.py"), "--max-frames", "600")
    expect(restored["prioritized-replay"], "skip", "its priorities came from the checkpoint")
    assert restored["optimizer-coverage"][0] == "pass", restored["optimizer-coverage"]  # the probe's own DQNLoss stays hidden
    never = audit(str(FIXTURES / "audit" / "prioritized_replay" / "broken.py"), "--max-frames", "300")
    expect(never["prioritized-replay"], "fail", "priorities never updated", "the squared TD error (Q - target)^2, shape [B, 1]")


def test_the_priority_probe_reads_dqn_loss_live():
    import sys

    from conftest import BUNDLE

    from torchrl_skill.audit.d_prioritized_replay import dqn_priority_form

    assert dqn_priority_form() == {"key": "td_error", "shape": "[B, 1]", "form": "the squared TD error (Q - target)^2"}


def test_action_bounds_premise_needs_a_policy_that_learns():
    import sys

    from conftest import BUNDLE

    from torchrl_skill.audit import e_action_bounds

    scripted = {"meta": {"optimizer_steps": 40}, "sections": {"acting-module": {"policies": [{"cls": "BangBang", "tensors": 0}]}}}
    assert "scripted controller" in e_action_bounds.premise(scripted)
    assert "no optimizer stepped" in e_action_bounds.premise({"meta": {"optimizer_steps": 0}, "sections": {}})
    learned = {"meta": {"optimizer_steps": 40}, "sections": {"acting-module": {"policies": [{"cls": "ProbabilisticActor", "tensors": 4}]}}}
    assert e_action_bounds.premise(learned) is None


def test_exploration_does_not_pass_on_a_policy_it_could_not_rerun():
    import sys

    from torchrl_skill.report import skill_report as sr
    from conftest import BUNDLE

    from torchrl_skill.audit import d_exploration

    unchecked = {"kind": "Collector", "site": "train.py:9", "frames": 0, "equal": 0, "error": "RuntimeError: shape", "stochastic": True, "explorers": []}
    with pytest.raises(sr.CheckSkipped, match="policy not re-run"):
        d_exploration.judge({"sections": {d_exploration.NAME: {"sources": [unchecked], "modules": [], "frames": 500}}})


def test_vec_norm_in_eval_mode_still_updates_its_statistics():
    """benchmarks/third_party_audit.json: a2c_mujoco's test env (its own VecNorm, .eval()) is a
    true finding of the transforms row, not a false FAIL: eval() does not freeze VecNorm."""
    import warnings

    from torchrl.envs import GymEnv, TransformedEnv, VecNorm

    warnings.filterwarnings("ignore")
    env = TransformedEnv(GymEnv("Pendulum-v1"), VecNorm(in_keys=["observation"]))
    env.eval()
    env.rollout(5)
    before = env.transform._td.clone()
    env.rollout(50)
    assert not env.transform.training and not (env.transform._td == before).all()


def test_coverage_names_a_loss_term_missing_from_backward_when_the_optimizer_holds_the_tensor():
    import sys

    from torchrl_skill.report import skill_report as sr
    from conftest import BUNDLE

    from torchrl_skill.audit import d_optimizer_coverage as cov

    opt = {"cls": "Adam", "steps": 400, "tensors": 22, "site": "crossq.py:124", "never_grad": ["CrossQLoss.log_alpha"],
           "n_never_grad": 1, "never_grad_numel": 1}
    loss = {"cls": "CrossQLoss", "site": "utils.py:9", "trainable": 22, "missing": [], "n_missing": 0, "missing_numel": 0}
    with pytest.raises(sr.CheckFailed) as err:
        cov.judge({"sections": {cov.NAME: {"optimizers": [opt], "losses": [loss]}}})
    assert "not in the sum backward() is called on" in str(err.value) and "loss.parameters()" not in str(err.value)
    opt["never_grad"] = ["ValueOperator.module.0.weight"]  # the user's module, whose copy the loss trains
    with pytest.raises(sr.CheckFailed, match=r"optimize loss.parameters\(\)"):
        cov.judge({"sections": {cov.NAME: {"optimizers": [opt], "losses": [loss]}}})
