"""objectives-and-training: the behaviour the references state, reproduced on the verified stack.

Each test names the sentence it proves (tests/proofs.json lists these tests under the
reference sections they prove). The multi-agent
tests run on a VMAS-shaped env built here (tests/fixtures/objectives/team_env.py): vmas
itself is not installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings

import pytest
from conftest import FIXTURES, load_module

team = load_module(FIXTURES / "objectives" / "team_env.py")
AGENT_KEYS = {"value": ("agents", "state_value")}


@pytest.fixture(scope="module")
def team_batch():
    warnings.simplefilter("ignore")
    return team.rollout()


# --- multi-agent PPO: root-only team done against per-agent reward and value ---------------
def test_clip_ppo_rejects_root_done_with_per_agent_reward(team_batch):
    """recipes.md#multi-agent-ppo: ClipPPOLoss does NOT expand a root "done" to the agent dim
    (the sentence in recurrent-and-multiagent.md that said losses do was false)."""
    from torchrl.objectives import ClipPPOLoss

    _, actor, critic, batch = team_batch
    assert batch["next", "done"].shape == (2, 6, 1) and batch["next", "agents", "reward"].shape == (2, 6, 3, 1)
    loss = ClipPPOLoss(actor, critic)
    loss.set_keys(reward=("agents", "reward"), **AGENT_KEYS)
    with pytest.raises(RuntimeError, match=r"All input tensors \(value, reward and done states\) must share a unique shape"):
        loss(batch.clone())


def test_mappo_without_reward_key_fails_on_vmas_layout(team_batch):
    """recipes.md#multi-agent-ppo: MAPPOLoss left at reward="reward" finds no root reward."""
    from torchrl.objectives import MAPPOLoss

    _, actor, critic, batch = team_batch
    loss = MAPPOLoss(actor, critic)
    loss.set_keys(**AGENT_KEYS)
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'device'"):
        loss(batch.clone())


def test_mappo_broadcasts_root_done_when_reward_key_is_set(team_batch):
    """recipes.md#multi-agent-ppo: MAPPOLoss/IPPOLoss default to MultiAgentGAE, which meets a
    root done with per-agent reward and value; the action and log-prob keys come from the actor."""
    import torch
    from torchrl.objectives import IPPOLoss, MAPPOLoss

    _, actor, critic, batch = team_batch
    for cls in (MAPPOLoss, IPPOLoss):
        loss = cls(actor, critic)
        loss.set_keys(reward=("agents", "reward"), **AGENT_KEYS)
        assert loss.tensor_keys.sample_log_prob == ("agents", "action_log_prob")
        assert loss.tensor_keys.action == ("agents", "action")
        out = loss(batch.clone())
        assert all(torch.isfinite(out[k]) for k in ("loss_objective", "loss_critic", "loss_entropy"))
        assert type(loss.value_estimator).__name__ == "MultiAgentGAE"


def test_expand_as_done_fixes_clip_ppo_and_matches_mappo():
    """recipes.md#multi-agent-ppo: ExpandAs copies the team done under ("agents", ...) with the
    reward's shape; ClipPPOLoss told those keys gives MAPPO's advantages."""
    import torch
    from torchrl.envs import Compose, ExpandAs, TransformedEnv
    from torchrl.envs.utils import check_env_specs
    from torchrl.objectives import ClipPPOLoss, MAPPOLoss

    env = TransformedEnv(team.TeamEnv(), Compose(
        ExpandAs("done", ("agents", "reward"), out_key=("agents", "done")),
        ExpandAs("terminated", ("agents", "reward"), out_key=("agents", "terminated")),
    ))
    check_env_specs(env)
    _, actor, critic, batch = team.rollout(env)
    assert batch["next", "agents", "done"].shape == (2, 6, 3, 1)
    clip = ClipPPOLoss(actor, critic)
    clip.set_keys(reward=("agents", "reward"), done=("agents", "done"), terminated=("agents", "terminated"), **AGENT_KEYS)
    mappo = MAPPOLoss(actor, critic, normalize_advantage=False)
    mappo.set_keys(reward=("agents", "reward"), **AGENT_KEYS)
    a, b = batch.clone(), batch.clone()
    with torch.no_grad():
        clip.value_estimator(a)
        mappo.value_estimator(b)
    assert torch.allclose(a["advantage"], b["advantage"]) and a["advantage"].shape == (2, 6, 3, 1)
    assert torch.isfinite(clip(batch.clone())["loss_objective"])


def test_mappo_without_an_agent_dim_gives_nan():
    """troubleshooting: MAPPOLoss/IPPOLoss normalise advantages excluding dim -2; with no agent
    dim that is the sample dim and loss_objective is nan; normalize_advantage=False is finite."""
    import torch
    from torchrl.objectives import IPPOLoss, MAPPOLoss

    builders = load_module("objectives-and-training/_loss_builders")
    actor = builders.continuous_actor()
    batch = builders.forward_batch("onpolicy", actor)  # [8]: one agent, no agent dim
    for cls in (MAPPOLoss, IPPOLoss):
        assert torch.isnan(cls(actor, builders.state_value())(batch.clone())["loss_objective"])
        assert torch.isfinite(cls(actor, builders.state_value(), normalize_advantage=False)(batch.clone())["loss_objective"])


# --- value estimators the PPO family builds by itself --------------------------------------
def test_ppo_family_default_estimator_is_gae_099_095():
    """value-and-targets.md: a PPO/A2C/Reinforce loss never given make_value_estimator builds
    GAE(gamma=0.99, lmbda=0.95) on first use; MAPPO/IPPO build MultiAgentGAE."""
    import torch
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import A2CLoss, ClipPPOLoss, IPPOLoss, MAPPOLoss, PPOLoss, ReinforceLoss

    net = torch.nn.Sequential(torch.nn.Linear(3, 2), NormalParamExtractor())
    actor = ProbabilisticActor(TensorDictModule(net, ["observation"], ["loc", "scale"]), in_keys=["loc", "scale"],
                               distribution_class=TanhNormal, return_log_prob=True)
    critic = ValueOperator(torch.nn.Linear(3, 1), in_keys=["observation"])
    for cls, name in ((ClipPPOLoss, "GAE"), (PPOLoss, "GAE"), (A2CLoss, "GAE"), (ReinforceLoss, "GAE"),
                      (MAPPOLoss, "MultiAgentGAE"), (IPPOLoss, "MultiAgentGAE")):
        loss = cls(actor, critic)
        assert loss._value_estimator is None  # nothing is built until first use
        estimator = loss.value_estimator
        assert type(estimator).__name__ == name, cls
        assert (round(float(estimator.gamma), 4), round(float(estimator.lmbda), 4)) == (0.99, 0.95), cls
    builders = load_module("objectives-and-training/_loss_builders")
    for name in ("DQNLoss", "SACLoss"):
        estimator = builders.build(name)[0].value_estimator
        assert type(estimator).__name__ == "TD0Estimator" and round(float(estimator.gamma), 4) == 0.99, name


def test_gae_terminated_stops_bootstrap_truncated_does_not():
    """value-and-targets.md#value-estimators: with V(s) = c and no reward, GAE's one-step term
    is gamma*c - c after a truncation (bootstraps) and -c after a termination; a done step
    cuts the recursion (its predecessor's advantage no longer adds the next one)."""
    import torch
    from tensordict import TensorDict
    from torchrl.modules import ValueOperator
    from torchrl.objectives.value import GAE

    critic = ValueOperator(torch.nn.Linear(1, 1), in_keys=["observation"])
    with torch.no_grad():
        critic.module.weight.zero_()
        critic.module.bias.fill_(1.0)
    gamma, lmbda, c = 0.9, 0.5, 1.0

    def advantage(done, terminated):
        n = len(done)
        flags = dict(done=torch.tensor(done).unsqueeze(-1), terminated=torch.tensor(terminated).unsqueeze(-1))
        td = TensorDict({"observation": torch.zeros(n, 1), "next": {"observation": torch.zeros(n, 1), "reward": torch.zeros(n, 1), **flags}}, [n])
        with torch.no_grad():
            return GAE(gamma=gamma, lmbda=lmbda, value_network=critic)(td)["advantage"].squeeze(-1)

    step = gamma * c - c
    truncated = advantage([False, True, False], [False, False, False])
    terminated = advantage([False, True, False], [False, True, False])
    assert torch.allclose(truncated[1], torch.tensor(step)) and torch.allclose(terminated[1], torch.tensor(-c))
    assert torch.allclose(truncated[0], torch.tensor(step + gamma * lmbda * step))  # t=0 is not done: it recurses
    cut = advantage([True, False, False], [False, False, False])
    assert torch.allclose(cut[0], torch.tensor(step))  # done at t=0: no term from t=1


def test_ppo_recomputes_advantage_only_when_the_batch_lacks_it():
    """value-and-targets.md: ClipPPOLoss.forward calls its own estimator only when the batch
    holds no "advantage"; a precomputed advantage is used as it is."""
    import torch

    wiring = load_module(FIXTURES / "objectives" / "own_estimator_broken.py")
    w = wiring.build_wiring()
    loss, batch, user_gae = w["loss"], w["batch"], w["value_estimator"]
    calls = []
    own = loss.value_estimator
    original = own.forward
    own.forward = lambda *a, **k: calls.append(1) or original(*a, **k)
    loss(batch.clone())
    assert calls == [1]  # no advantage in the batch: recomputed with GAE(0.99, 0.95)
    with torch.no_grad():
        user_gae(batch)
    loss(batch)
    assert calls == [1]  # the user's advantage (gamma 0.9, lambda 0.8) is used, no recomputation


def test_gae_on_flattened_env_batch_leaks_across_envs():
    """value-and-targets.md: GAE on a [env, time] collector batch flattened to [env*time]
    carries env 1's first advantages into env 0's last steps; env 1's own row is unchanged."""
    import torch
    from torchrl.collectors import Collector
    from torchrl.envs import SerialEnv
    from torchrl.objectives.value import GAE

    user = load_module(FIXTURES.parent.parent / "sub-skills" / "objectives-and-training" / "assets" / "ppo_user_env_wiring.py")
    torch.manual_seed(0)
    env = SerialEnv(2, user.make_env)
    env.set_seed(0)
    actor, critic = user.make_actor_critic(user.make_env())
    collector = Collector(env, actor, frames_per_batch=32, total_frames=32)
    try:
        batch = next(iter(collector))
    finally:
        collector.shutdown()
    assert batch.shape == (2, 16) and not batch["next", "done"][0, -1].any()
    gae = GAE(gamma=0.9, lmbda=0.9, value_network=critic)
    with torch.no_grad():
        right = gae(batch.clone())["advantage"]
        flat = gae(batch.clone().reshape(-1))["advantage"].reshape(2, 16, 1)
    diff = (right - flat).abs().squeeze(-1)
    assert diff[0, -1] > 0 and torch.equal(diff[1], torch.zeros(16))


# --- replay: flattening before extend --------------------------------------------------------
def _collect_into(rb, frames_per_batch: int, flatten: bool, batches: int = 4):
    import torch
    from torchrl.collectors import Collector
    from torchrl.envs import PendulumEnv, SerialEnv

    torch.manual_seed(0)
    collector = Collector(SerialEnv(2, PendulumEnv), None, frames_per_batch=frames_per_batch,
                          total_frames=frames_per_batch * batches)
    stored = []
    try:
        for batch in collector:
            stored.append(batch.reshape(-1) if flatten else batch)
            rb.extend(stored[-1])
    finally:
        collector.shutdown()
    return stored


def test_flatten_before_extend_cuts_trajectories_for_slice_sampler():
    """recipes.md#sac-and-dqn: after batch.reshape(-1) + extend, a SliceSampler sees every
    trajectory cut at each batch boundary (frames_per_batch / envs steps long); ndim=2
    storage keeps them whole."""
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler

    def buffer(ndim):
        return ReplayBuffer(storage=LazyTensorStorage(500, ndim=ndim), batch_size=24,
                            sampler=SliceSampler(slice_len=12, traj_key=("collector", "traj_ids")))

    flat = buffer(1)
    _collect_into(flat, frames_per_batch=16, flatten=True)  # 8 steps per env per batch
    with pytest.raises(RuntimeError, match="Did not find a single trajectory with sufficient length"):
        flat.sample()
    whole = buffer(2)
    _collect_into(whole, frames_per_batch=16, flatten=False)
    sample = whole.sample()
    ids = sample["collector", "traj_ids"].view(-1, 12)
    assert (ids == ids[:, :1]).all()


def test_flatten_before_extend_keeps_transitions_for_uniform_sampling():
    """recipes.md#sac-and-dqn: for uniform sampling (SAC, DQN) reshape(-1) before extend is
    fine: every stored row is one whole transition, exactly as collected."""
    import torch
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyTensorStorage(500), batch_size=16)
    stored = _collect_into(rb, frames_per_batch=16, flatten=True)
    everything = torch.cat(stored)
    assert len(rb) == everything.shape[0]
    assert torch.equal(rb.storage[: len(rb)]["next", "th"], everything["next", "th"])
    assert torch.equal(rb.storage[: len(rb)]["action"], everything["action"])


# --- what a loss's forward sets -------------------------------------------------------------
def test_loss_forward_uses_deterministic_sampling_mode():
    """loss-keys.md: every loss forward runs under set_exploration_type(loss.deterministic_sampling_mode)
    (DETERMINISTIC by default, even inside a RANDOM context): a NoisyLinear Q-network has no
    noise in DQNLoss unless that attribute is set to ExplorationType.RANDOM."""
    import torch
    from tensordict import TensorDict
    from torchrl.data import OneHot
    from torchrl.envs.utils import ExplorationType, exploration_type, set_exploration_type
    from torchrl.modules import NoisyLinear, QValueActor
    from torchrl.objectives import DQNLoss

    seen = []

    class Probe(NoisyLinear):
        def forward(self, x):
            seen.append(exploration_type())
            return super().forward(x)

    torch.manual_seed(0)
    loss = DQNLoss(QValueActor(Probe(3, 2), in_keys=["observation"], spec=OneHot(2)), action_space="one-hot")
    n = 6
    batch = TensorDict({"observation": torch.randn(n, 3), "action": torch.nn.functional.one_hot(torch.randint(0, 2, (n,)), 2),
                        "next": {"observation": torch.randn(n, 3), "reward": torch.randn(n, 1),
                                 "done": torch.zeros(n, 1, dtype=torch.bool), "terminated": torch.zeros(n, 1, dtype=torch.bool)}}, [n])
    assert loss.deterministic_sampling_mode == ExplorationType.DETERMINISTIC
    with set_exploration_type(ExplorationType.RANDOM):
        mean_loss = loss(batch.clone())["loss"]
    assert set(seen) == {ExplorationType.DETERMINISTIC}
    seen.clear()
    loss.deterministic_sampling_mode = ExplorationType.RANDOM
    noisy_loss = loss(batch.clone())["loss"]
    assert set(seen) == {ExplorationType.RANDOM} and not torch.equal(mean_loss, noisy_loss)


def test_loss_outputs_sum_and_diagnostics_are_detached():
    """loss-keys.md#combining-outputs: only "loss*" entries carry a graph; the others are
    detached diagnostics; SACLoss.parameters() holds the Q copies and log_alpha."""
    builders = load_module("objectives-and-training/_loss_builders")
    for name in ("ClipPPOLoss", "SACLoss", "KLPENPPOLoss"):
        loss, kind, actor = builders.build(name)
        out = loss(builders.forward_batch(kind, actor))
        assert {k for k, v in out.items() if v.requires_grad} == {k for k in out.keys() if k.startswith("loss")}, name
        assert sum(v for k, v in out.items() if k.startswith("loss")).requires_grad
    loss, _, _ = builders.build("SACLoss")
    names = [n for n, _ in loss.named_parameters()]
    assert "log_alpha" in names and any(n.startswith("qvalue_network_params") for n in names)


@pytest.mark.skipif(importlib.util.find_spec("hydra") is not None, reason="hydra-core is installed: the configs import")
def test_trainer_configs_need_hydra():
    """recipes.md#trainers-hooks-and-hydra-configs: without hydra-core the configs do not import."""
    with pytest.raises(ImportError, match="hydra-core"):
        importlib.import_module("torchrl.trainers.algorithms.configs")


# --- the PPO outer-product error: which advantage shapes raise it (claims sweep) -----------
def _ppo_loss(per_agent: bool, advantage_key="advantage"):
    import torch
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.modules import ProbabilisticActor, TanhNormal
    from torchrl.objectives import ClipPPOLoss

    torch.manual_seed(1)
    a = (lambda k: ("agents", k)) if per_agent else (lambda k: k)
    actor = ProbabilisticActor(
        TensorDictModule(torch.nn.Sequential(torch.nn.Linear(4, 4), NormalParamExtractor()), [a("observation")], [a("loc"), a("scale")]),
        in_keys={"loc": a("loc"), "scale": a("scale")}, out_keys=[a("action")], distribution_class=TanhNormal,
        return_log_prob=True, log_prob_key=a("action_log_prob"))
    loss = ClipPPOLoss(actor, TensorDictModule(torch.nn.Linear(4, 1), [a("observation")], [a("state_value")]), entropy_bonus=False)
    loss.set_keys(action=a("action"), sample_log_prob=a("action_log_prob"), value=a("state_value"), advantage=advantage_key)
    return loss


def _ppo_batch(per_agent: bool, advantage_key, advantage, B=10, n=3):
    import torch
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(3)
    lead = (B, n) if per_agent else (B,)
    leaves = TensorDict({"observation": torch.randn(*lead, 4, generator=g), "action": torch.rand(*lead, 2, generator=g) * 1.8 - 0.9,
                         "action_log_prob": torch.randn(*lead, generator=g)}, list(lead))
    data = TensorDict({"agents": leaves} if per_agent else leaves.to_dict(), [B])
    data["value_target"] = torch.randn(*lead, 1, generator=g)
    data.set(advantage_key, advantage)
    return data


@pytest.mark.parametrize("per_agent,key,shape,raises", [
    (False, "advantage", (10,), True),                 # single agent, no value dim: the case
    (False, "advantage", (10, 1), False),              # its fix
    (True, "advantage", (10,), True),                  # root advantage without value dim, per-agent log-prob
    (True, "advantage", (10, 1), False),               # a root [B, 1] advantage runs (the entry once said it raised)
    (True, ("agents", "advantage"), (10, 3, 1), False),
    (True, ("agents", "advantage"), (10, 3), "size"),  # per agent without value dim: another error
], ids=["single-B", "single-B1", "root-B-agents", "root-B1-agents", "agents-Bn1", "agents-Bn"])
def test_ppo_outer_product_error_only_without_the_value_dim(per_agent, key, shape, raises):
    """troubleshooting: ppo-advantage-missing-value-dim. The ValueError comes exactly when the
    advantage is shaped like the batch, with no trailing value dim; a root (B, 1) advantage
    with a per-agent (B, n_agents, 1) log-weight runs; a per-agent (B, n_agents) advantage
    raises a size mismatch, not this error."""
    import torch

    loss, data = _ppo_loss(per_agent, key), _ppo_batch(per_agent, key, torch.randn(shape))
    if raises == "size":
        with pytest.raises(RuntimeError, match=r"The size of tensor a \(3\) must match the size of tensor b \(10\)"):
            loss(data)
    elif raises:
        with pytest.raises(ValueError, match="turning the PPO objective into an outer product over samples"):
            loss(data)
    else:
        assert torch.isfinite(loss(data)["loss_objective"])


def test_root_b1_advantage_is_the_per_agent_advantage_copied_over_agents():
    """The root (B, 1) advantage that runs means what it looks like: the same loss as the
    per-agent (B, n_agents, 1) advantage holding that value for every agent."""
    import torch

    adv = torch.randn(10, 1)
    root = _ppo_loss(True)(_ppo_batch(True, "advantage", adv))["loss_objective"]
    key = ("agents", "advantage")
    per_agent = _ppo_loss(True, key)(_ppo_batch(True, key, adv.unsqueeze(1).expand(10, 3, 1)))["loss_objective"]
    assert torch.allclose(root, per_agent)
    other = _ppo_loss(True, key)(_ppo_batch(True, key, torch.randn(10, 3, 1)))["loss_objective"]
    assert not torch.allclose(root, other)  # the comparison can tell losses apart


# --- critic-passed-sacloss-never-changes-after: which losses train copies (claims sweep) ---
def _shares_memory(loss, attr: str, module) -> bool:
    return bool({t.data_ptr() for t in getattr(loss, attr).values(True, True)} & {p.data_ptr() for p in module.parameters()})


def _q_losses():
    import torch
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.data import Bounded, OneHot
    from torchrl.modules import Actor, OneHotCategorical, ProbabilisticActor, QValueActor, TanhNormal, ValueOperator
    from torchrl.objectives import CQLLoss, DDPGLoss, DiscreteIQLLoss, DQNLoss, IQLLoss, REDQLoss, SACLoss, TD3Loss

    nn, spec = torch.nn, Bounded(-1, 1, (1,))

    def actor():
        return ProbabilisticActor(TensorDictModule(nn.Sequential(nn.Linear(3, 2), NormalParamExtractor()), ["observation"], ["loc", "scale"]),
                                  in_keys=["loc", "scale"], distribution_class=TanhNormal, spec=spec)

    def q():
        return ValueOperator(nn.Linear(4, 1), in_keys=["observation", "action"])

    v = lambda: ValueOperator(nn.Linear(3, 1), in_keys=["observation"])  # noqa: E731
    made = {}
    for name, build in {
        "SACLoss": lambda q: SACLoss(actor(), q, action_spec=spec),
        "TD3Loss": lambda q: TD3Loss(Actor(nn.Linear(3, 1), spec=spec), q, action_spec=spec),
        "CQLLoss": lambda q: CQLLoss(actor(), q, action_spec=spec),
        "IQLLoss": lambda q: IQLLoss(actor(), q, v()),
        "REDQLoss": lambda q: REDQLoss(actor(), q, action_spec=spec),
    }.items():
        net = q()
        made[name] = (build(net), "qvalue_network_params", net)
    dq = ValueOperator(nn.Linear(3, 2), in_keys=["observation"], out_keys=["state_action_value"])
    dactor = ProbabilisticActor(TensorDictModule(nn.Linear(3, 2), ["observation"], ["logits"]), in_keys=["logits"],
                                distribution_class=OneHotCategorical, spec=OneHot(2))
    made["DiscreteIQLLoss"] = (DiscreteIQLLoss(dactor, dq, v(), action_space="one-hot"), "qvalue_network_params", dq)
    net = q()
    made["DDPGLoss"] = (DDPGLoss(Actor(nn.Linear(3, 1), spec=spec), net), "value_network_params", net)
    qa = QValueActor(nn.Linear(3, 2), in_keys=["observation"], spec=OneHot(2))
    made["DQNLoss"] = (DQNLoss(qa, action_space="one-hot"), "value_network_params", qa)
    return made


def test_q_losses_train_copies_but_ddpg_and_dqn_train_the_module():
    """troubleshooting critic-passed-sacloss-never-changes-after: the losses it names train
    Q-network copies that share no memory with the module given; DDPGLoss and DQNLoss, the
    nearest losses it does not name, train the module's own parameters."""
    warnings.simplefilter("ignore")
    made = _q_losses()
    copies = {name for name, (loss, attr, module) in made.items() if not _shares_memory(loss, attr, module)}
    assert copies == {"SACLoss", "TD3Loss", "CQLLoss", "IQLLoss", "REDQLoss", "DiscreteIQLLoss"}
