"""objectives-and-training scripts: inspect_loss_keys.py and smoke_training_step.py on real
losses, real forward passes and real updates (check_loss_wiring.py: test_objectives_and_training_wiring.py).

``_loss_builders`` (the tiny-module builders the scripts share) is used directly to build
an independent forward pass: the key report must be enough for it.
"""

from __future__ import annotations

import warnings

import pytest
from conftest import load_module, run_in_process, run_python, script_path

warnings.filterwarnings("ignore")
builders = load_module("objectives-and-training/_loss_builders")
inspect_loss_keys = load_module("objectives-and-training/inspect_loss_keys")


@pytest.mark.parametrize("name", ["ClipPPOLoss", "SACLoss", "DQNLoss"])
def test_key_report_matches_real_forward(name):
    report = inspect_loss_keys.verify_forward(name)["report"]
    loss, kind, actor = builders.build(name)
    batch = builders.forward_batch(kind, actor)
    reported = set(report["in_keys"])
    keep = [k for k in batch.keys(True, True) if builders.fmt_key(k) in reported]
    out = loss(batch.select(*keep))  # the reported in_keys are enough
    assert set(report["out_keys"]) <= {builders.fmt_key(k) for k in out.keys(True, True)}
    for field, key in report["tensor_keys"].items():
        assert builders.fmt_key(getattr(loss.tensor_keys, field)) == key
    with pytest.raises(Exception):  # and "observation", an in_key of each, is needed
        loss(batch.exclude("observation"))


def test_ppo_log_prob_default_is_action_log_prob():
    """loss-keys.md#the-log-prob-key: ClipPPOLoss reads tensor_keys.sample_log_prob = "action_log_prob"."""
    report = inspect_loss_keys.verify_forward("ClipPPOLoss")["report"]
    assert report["tensor_keys"]["sample_log_prob"] == "action_log_prob"
    assert "action_log_prob" in report["in_keys"]


def test_list_covers_every_exported_loss():
    import inspect

    import torchrl.objectives

    expected = sorted(
        n for n in torchrl.objectives.__all__
        if inspect.isclass(getattr(torchrl.objectives, n)) and issubclass(getattr(torchrl.objectives, n), torchrl.objectives.LossModule)
        and n != "LossModule"
    )
    status, detail = run_in_process("objectives-and-training/inspect_loss_keys", "--list")["losses:list"]
    assert status == "pass" and all(name in detail for name in expected)
    assert inspect_loss_keys.resolve_names(["all"], expected) == expected


def test_every_constructible_loss_reports_and_runs():
    rows = run_in_process("objectives-and-training/inspect_loss_keys", "--loss", "all")
    assert [name for name, (status, _) in rows.items() if status == "fail"] == []
    assert rows["keys:MAPPOLoss"][0] == "pass" and "forward output" in rows["keys:MAPPOLoss"][1]


def test_unknown_loss_exits_2_with_suggestion():
    proc = run_python([str(script_path("objectives-and-training/inspect_loss_keys")), "--loss", "ClipPPO"], timeout=300, warm=True)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "ClipPPOLoss" in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_target_must_move_after_updater_step():
    """value-and-targets.md#target-networks: without updater.step() the target never moves."""
    rows = run_in_process("objectives-and-training/smoke_training_step", "--only", "sac", "--only", "dqn")
    assert rows["sac:update+SoftUpdate"][0] == "pass" and "moved" in rows["sac:update+SoftUpdate"][1]
    assert rows["dqn:update+HardUpdate"][0] == "pass" and "copied on the 2nd step()" in rows["dqn:update+HardUpdate"][1]
    assert rows["ppo:one-iteration-pendulum"] == ("skip", "not asked for (pass --only ppo)")
    frozen = run_in_process("objectives-and-training/smoke_training_step", "--only", "sac", "--only", "dqn", "--skip-updater-step")
    assert frozen["sac:update+SoftUpdate"][0] == "fail" and "SoftUpdate.step()" in frozen["sac:update+SoftUpdate"][1]
    assert frozen["dqn:update+HardUpdate"][0] == "fail" and "did not move" in frozen["dqn:update+HardUpdate"][1]


def test_ppo_iteration_on_pendulum():
    rows = run_in_process("objectives-and-training/smoke_training_step", "--only", "ppo", "--frames", "16")
    status, detail = rows["ppo:one-iteration-pendulum"]
    assert status == "pass" and "Collector [16]" in detail and "GAE advantage [16, 1]" in detail


def test_unstepped_soft_update_is_silent():
    """value-and-targets.md#target-networks: a built, never-stepped SoftUpdate silences the
    "No target network updater" warning and raises nothing; the target stays put."""
    import torch
    from torchrl.objectives import DQNLoss, SoftUpdate

    def forward_warnings(loss):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = loss(builders.make_batch("discrete", 8))
        return out, [str(w.message) for w in caught if "target network updater" in str(w.message)]

    bare = DQNLoss(builders.q_actor(), action_space="one-hot", delay_value=True)
    assert forward_warnings(bare)[1]  # no updater: warned
    loss = DQNLoss(builders.q_actor(), action_space="one-hot", delay_value=True)
    SoftUpdate(loss, tau=0.5)
    target, online = (loss.target_value_network_params.detach().clone(), loss.value_network_params.detach().clone())
    out, warned = forward_warnings(loss)
    optimizer = torch.optim.Adam(loss.parameters(), lr=0.1)
    out["loss"].backward()
    optimizer.step()
    assert warned == []

    def same(a, b):
        return all(torch.equal(x, y) for x, y in zip(a.values(True, True), b.values(True, True)))

    assert not same(online, loss.value_network_params) and same(target, loss.target_value_network_params)


def test_soft_update_takes_exactly_one_of_eps_and_tau():
    """value-and-targets.md#target-networks: SoftUpdate needs eps or tau, not both."""
    from torchrl.objectives import DQNLoss, SoftUpdate

    loss = DQNLoss(builders.q_actor(), action_space="one-hot", delay_value=True)
    with pytest.raises(ValueError, match="One and only one argument"):
        SoftUpdate(loss, eps=0.99, tau=0.01)
    with pytest.raises(RuntimeError, match="Neither eps nor tau was provided"):
        SoftUpdate(loss)
    assert SoftUpdate(loss, tau=0.01) is not None


def test_hard_update_copies_on_the_step_after_the_interval():
    """value-and-targets.md#target-networks: HardUpdate(N) first copies on the (N+1)-th step()."""
    import torch
    from torchrl.objectives import DQNLoss, HardUpdate

    loss = DQNLoss(builders.q_actor(), action_space="one-hot", delay_value=True)
    updater = HardUpdate(loss, value_network_update_interval=2)
    moved = []
    for _ in range(6):
        with torch.no_grad():  # stands for one optimizer step
            for p in loss.value_network_params.values(True, True):
                p.add_(1.0)
        before = loss.target_value_network_params.detach().clone()
        updater.step()
        moved.append(any(not torch.equal(a, b) for a, b in zip(before.values(True, True), loss.target_value_network_params.values(True, True))))
    assert moved == [False, False, True, False, False, True]  # then every N+1 calls


@pytest.mark.parametrize("name", ["SACLoss", "REDQLoss", "TD3Loss", "CQLLoss", "IQLLoss", "DiscreteIQLLoss"])
def test_q_copies_are_fresh_and_separate(name):
    """value-and-targets.md#parameter-copies: these losses keep their Q-network as
    [num_qvalue_nets, ...] copies that share no memory with the module passed in and
    differ from it right after construction."""
    import torch
    import torchrl.objectives
    from tensordict import TensorDict

    torch.manual_seed(0)
    discrete = name.startswith("Discrete")
    qnet = builders.action_value_module("state_action_value") if discrete else builders.qsa_value()
    actor = builders.discrete_actor() if discrete else (builders.deterministic_actor() if name == "TD3Loss" else builders.continuous_actor())
    extra = {"action_space": "one-hot"} if discrete else ({} if name == "IQLLoss" else {"action_spec": builders.bounded_action_spec()})
    value = [builders.state_value()] if "IQL" in name else []
    loss = getattr(torchrl.objectives, name)(actor, qnet, *value, **extra)
    assert loss.qvalue_network_params.batch_dims == 1 and loss.qvalue_network_params.batch_size[0] >= 1
    mine = TensorDict.from_module(qnet)
    pairs = list(zip(loss.qvalue_network_params[0].values(True, True), mine.values(True, True)))
    assert pairs and not any(a.data_ptr() == b.data_ptr() for a, b in pairs)
    assert max(float((a - b).abs().max()) for a, b in pairs) > 0


def test_ppo_shares_actor_and_critic_with_the_user_modules():
    """value-and-targets.md#parameter-copies: PPO's actor and critic parameters are the user's."""
    from tensordict import TensorDict
    from torchrl.objectives import ClipPPOLoss

    actor, critic = builders.continuous_actor(), builders.state_value()
    loss = ClipPPOLoss(actor, critic)
    for params, module in ((loss.actor_network_params, actor), (loss.critic_network_params, critic)):
        pairs = zip(params.values(True, True), TensorDict.from_module(module).values(True, True))
        assert all(a.data_ptr() == b.data_ptr() for a, b in pairs)
