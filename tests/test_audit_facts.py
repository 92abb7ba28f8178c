"""The torchrl 0.14.1 behaviours the run-time auditor's detectors rest on, each reproduced
directly on the installed stack (src/torchrl_skill/audit/d_*.py cite these tests).

In-process and small: no auditor run here (tests/test_audit_detectors.py runs the auditor).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

warnings.filterwarnings("ignore", category=UserWarning)


def _point_env(limit=None, terminated_at_limit=True):
    from torchrl.data import Bounded, Composite, Unbounded
    from torchrl.envs import EnvBase

    class Point(EnvBase):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(observation=Unbounded(shape=(2,)))
            self.action_spec = Bounded(-1.0, 1.0, shape=(1,))
            self.reward_spec = Unbounded(shape=(1,))
            self.rng = torch.Generator()
            self.t = 0

        def _reset(self, td):
            self.t = 0
            return TensorDict(observation=torch.rand(2, generator=self.rng))

        def _step(self, td):
            self.t += 1
            done = torch.tensor([limit is not None and self.t >= limit])
            return TensorDict(observation=td["observation"] + td["action"], reward=torch.zeros(1), done=done)

        def _set_seed(self, seed):
            self.rng.manual_seed(seed)

    return Point()


def _actor(n_obs=2, spec=None):
    from torchrl.data import Bounded
    from torchrl.modules import ProbabilisticActor, TanhNormal

    spec = spec if spec is not None else Bounded(-1.0, 1.0, shape=(1,))
    net = TensorDictModule(nn.Sequential(nn.Linear(n_obs, 2), NormalParamExtractor()), ["observation"], ["loc", "scale"])
    return ProbabilisticActor(net, in_keys=["loc", "scale"], spec=spec, distribution_class=TanhNormal, return_log_prob=True)


def test_hard_update_copies_on_the_call_after_its_counter_reaches_the_interval():
    from torchrl.data import OneHot
    from torchrl.modules import QValueActor
    from torchrl.objectives import DQNLoss, HardUpdate

    def copies(interval) -> list[int]:
        loss = DQNLoss(QValueActor(nn.Linear(3, 2), in_keys=["observation"], spec=OneHot(2)), action_space="one-hot", delay_value=True)
        updater, calls = HardUpdate(loss, value_network_update_interval=interval), []
        for call in range(1, 10):
            for p in loss.value_network_params.values(True, True):
                p.data.add_(1.0)
            before = loss.target_value_network_params.clone()
            updater.step()
            if not (before == loss.target_value_network_params).all():
                calls.append(call)
        return calls

    assert copies(3) == copies(3.0) == [4, 8]  # every N+1 calls for value_network_update_interval=N
    assert copies(2.5) == []  # the counter is compared by equality: a fractional N never copies


def test_loss_without_updater_warns_no_target_network_updater():
    from torchrl.data import OneHot
    from torchrl.modules import QValueActor
    from torchrl.objectives import DQNLoss

    loss = DQNLoss(QValueActor(nn.Linear(3, 2), in_keys=["observation"], spec=OneHot(2)), action_space="one-hot", delay_value=True)
    n = 4
    z = torch.zeros(n, 1, dtype=torch.bool)
    td = TensorDict({"observation": torch.randn(n, 3), "action": torch.eye(2)[torch.randint(2, (n,))],
                     ("next", "observation"): torch.randn(n, 3), ("next", "reward"): torch.randn(n, 1),
                     ("next", "done"): z, ("next", "terminated"): z}, [n])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss(td)
    assert any("No target network updater has been associated with this loss module" in str(w.message) for w in caught)


def test_sac_loss_trains_its_own_critic_copies_and_log_alpha():
    from torchrl.data import Bounded
    from torchrl.modules import ValueOperator
    from torchrl.objectives import SACLoss

    class Q(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 1)

        def forward(self, obs, act):
            return self.lin(torch.cat([obs, act], -1))

    qnet = ValueOperator(Q(), in_keys=["observation", "action"])
    actor = _actor(spec=Bounded(-1.0, 1.0, shape=(1,)))
    loss = SACLoss(actor, qnet, num_qvalue_nets=2, action_spec=actor.spec)
    trained = {id(p): n for n, p in loss.named_parameters() if p.requires_grad}
    assert "log_alpha" in trained.values()
    assert not any(id(p) in trained for p in qnet.parameters())  # the user's critic is not what the loss trains
    assert all(id(p) in trained for p in actor.parameters())
    # the per-network fix optimizer-coverage offers: loss.qvalue_network_params holds exactly
    # the critic copies the loss trains, and stepping an optimizer over it moves the loss's critic
    copies = list(loss.qvalue_network_params.parameters())
    assert {trained[id(p)].split(".", 1)[0] for p in copies} == {"qvalue_network_params"}
    assert {id(p) for p in copies} == {i for i, n in trained.items() if n.startswith("qvalue_network_params.")}
    before = [p.detach().clone() for p in copies]
    opt = torch.optim.Adam(copies, lr=0.1)
    td = TensorDict({"observation": torch.randn(8, 2), "action": torch.rand(8, 1) * 2 - 1,
                     ("next", "observation"): torch.randn(8, 2), ("next", "reward"): torch.randn(8, 1),
                     ("next", "done"): torch.zeros(8, 1, dtype=torch.bool),
                     ("next", "terminated"): torch.zeros(8, 1, dtype=torch.bool)}, [8])
    loss(td)["loss_qvalue"].backward()
    opt.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, copies))


def test_rollout_outside_an_exploration_context_takes_the_deterministic_action():
    from torchrl.envs.utils import ExplorationType, exploration_type, set_exploration_type

    env, actor = _point_env(), _actor()
    assert exploration_type() is None
    torch.manual_seed(0)
    plain = env.rollout(5, actor)
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        det = actor(plain.exclude("next", "action").clone())["action"]
    assert torch.allclose(det, plain["action"])
    with set_exploration_type(ExplorationType.RANDOM):
        sampled = env.rollout(5, actor)
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        det = actor(sampled.exclude("next", "action").clone())["action"]
    assert not torch.allclose(det, sampled["action"])


def test_collector_samples_by_default_and_egreedy_anneals_by_frames():
    from torchrl.collectors import Collector
    from torchrl.data import Bounded
    from torchrl.envs.utils import ExplorationType
    from torchrl.modules import EGreedyModule

    collector = Collector(_point_env(), _actor(), frames_per_batch=4, total_frames=4)
    assert collector.exploration_type == ExplorationType.RANDOM
    collector.shutdown()
    module = EGreedyModule(Bounded(-1.0, 1.0, shape=(1,)), eps_init=1.0, eps_end=0.0, annealing_num_steps=100)
    module.step(25)
    assert float(module.eps) == pytest.approx(0.75)
    module.step()
    assert float(module.eps) == pytest.approx(0.74)


def test_append_transform_on_a_plain_env_returns_a_new_env():
    from torchrl.envs import StepCounter, TransformedEnv

    env = _point_env()
    out = env.append_transform(StepCounter(max_steps=3))
    assert isinstance(out, TransformedEnv) and out is not env and not isinstance(env, TransformedEnv)
    assert "step_count" not in env.rollout(5).keys()
    transformed = TransformedEnv(_point_env())
    assert transformed.append_transform(StepCounter()) is transformed


def test_call_only_transform_is_not_applied_at_reset():
    from torchrl.envs import Transform, TransformedEnv

    class Times100(Transform):
        def _call(self, td):
            return td.set("observation", td.get("observation") * 100)

    env = TransformedEnv(_point_env(), Times100(in_keys=["observation"], out_keys=["observation"]))
    env.set_seed(0)
    first = env.reset()["observation"]
    assert first.abs().max() <= 1.0  # torch.rand in [0, 1): not scaled at reset
    step = env.rand_step(env.reset())
    assert step["next", "observation"].abs().max() > 1.0 or step["action"].abs().max() < 0.01


def test_observation_norm_without_statistics_raises_at_reset():
    from torchrl.envs import ObservationNorm, TransformedEnv

    env = TransformedEnv(_point_env(), ObservationNorm(in_keys=["observation"]))
    with pytest.raises(RuntimeError, match="Loc/Scale have not been initialized"):
        env.reset()


def test_only_done_becomes_terminated_and_step_counter_truncates():
    from torchrl.envs import StepCounter, TransformedEnv

    own = _point_env(limit=3).rollout(3)
    assert own["next", "terminated"][-1].all() and ("next", "truncated") not in own.keys(True)
    limited = TransformedEnv(_point_env(), StepCounter(max_steps=3)).rollout(3)
    assert limited["next", "truncated"][-1].all() and not limited["next", "terminated"][-1].any()


def test_ppo_loss_computes_missing_advantages_on_a_copy_each_call():
    from torchrl.modules import ValueOperator
    from torchrl.objectives import ClipPPOLoss

    actor, critic = _actor(), ValueOperator(nn.Linear(2, 1), in_keys=["observation"])
    loss = ClipPPOLoss(actor, critic)
    calls = []
    original = type(loss.value_estimator).forward

    def counting(self, *a, **k):
        calls.append(1)
        return original(self, *a, **k)

    type(loss.value_estimator).forward = counting
    try:
        with torch.no_grad():
            from torchrl.envs.utils import ExplorationType, set_exploration_type

            with set_exploration_type(ExplorationType.RANDOM):
                data = _point_env(limit=4).rollout(8, actor, break_when_any_done=False)
        loss(data)
        loss(data)
    finally:
        type(loss.value_estimator).forward = original
    assert len(calls) == 2 and "advantage" not in data.keys()


def test_unseeded_generators_start_alike_and_set_seed_separates_workers():
    from torchrl.envs import SerialEnv

    assert torch.Generator().initial_seed() == torch.Generator().initial_seed()
    env = SerialEnv(3, _point_env)
    same = env.reset()["observation"]
    assert torch.unique(same, dim=0).shape[0] == 1
    env.set_seed(0)
    apart = env.reset()["observation"]
    assert torch.unique(apart, dim=0).shape[0] == 3
    # the seeds are chained by seed_generator, not seed, seed + 1, ...: worker 1 gets seed_generator(0)
    from torchrl._utils import seed_generator

    assert [e.rng.initial_seed() for e in env._envs] == [0, seed_generator(0), seed_generator(seed_generator(0))] and seed_generator(0) != 1
    env.close()


def test_negative_priority_is_stored_as_nan_and_sampling_then_fails():
    from torchrl.data import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(50), sampler=PrioritizedSampler(50, alpha=0.7, beta=0.5), batch_size=8)
    rb.extend(TensorDict(x=torch.arange(20.0), batch_size=[20]))
    batch = rb.sample()
    rb.update_priority(batch["index"], -torch.ones(8))
    assert torch.isnan(torch.tensor([rb._sampler._sum_tree[i] for i in batch["index"].tolist()])).all()
    with pytest.raises(OverflowError, match="Range exceeds valid bounds"):
        rb.sample()


def test_collector_batch_root_done_precedes_the_step_and_reward_is_under_next():
    from torchrl.collectors import Collector

    collector = Collector(_point_env(limit=3), _actor(), frames_per_batch=9, total_frames=9)
    data = next(iter(collector))
    collector.shutdown()
    assert data["next", "done"].sum() == 3 and data["done"].sum() == 0
    assert "reward" not in data.keys() and ("next", "reward") in data.keys(True)


def _goal_env():
    """A 2-feature observation: a position that moves every step and a goal drawn at reset and
    constant for the 50 steps of an episode (the fault class of pytorch/rl#1694)."""
    import torch
    from tensordict import TensorDict
    from torchrl.data import Bounded, Composite, Unbounded
    from torchrl.envs import EnvBase

    class Goal(EnvBase):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(observation=Unbounded((2,)))
            self.action_spec = Bounded(-1.0, 1.0, (1,))
            self.reward_spec = Unbounded((1,))

        def _reset(self, td):
            self.t, self.pos, self.goal = 0, torch.zeros(()), torch.rand(()) * 10
            return TensorDict(observation=torch.stack([self.pos, self.goal]))

        def _step(self, td):
            self.t += 1
            self.pos = self.pos + td["action"].squeeze()
            done = torch.tensor([self.t >= 50])
            return TensorDict(observation=torch.stack([self.pos, self.goal]), reward=torch.zeros(1), done=done,
                              terminated=done.clone())

        def _set_seed(self, seed):
            torch.manual_seed(seed)

    return Goal()


def test_init_stats_over_less_than_an_episode_scales_a_per_episode_constant_by_1_over_eps():
    # the info:observation-scale row's text when an ObservationNorm is in the env
    import torch
    from torchrl.envs import ObservationNorm, TransformedEnv

    torch.manual_seed(0)
    short = TransformedEnv(_goal_env(), ObservationNorm(in_keys=["observation"]))
    short.transform.init_stats(num_iter=40)  # one episode: the goal never changes
    assert short.transform.eps == 1e-06 and float(short.transform.scale[1]) == pytest.approx(1e6)
    assert float(short.transform.scale[0]) < 10
    longer = TransformedEnv(_goal_env(), ObservationNorm(in_keys=["observation"]))
    longer.transform.init_stats(num_iter=400)  # eight episodes: eight goals
    assert float(longer.transform.scale[1]) < 10
