"""root references: library behaviour the run-time audit reference states, tried on the
nearest case its first proof (tests/test_audit_facts.py) did not run (the claims sweep, tests/README.md). Each test
shows the stated effect on the claim's case and the other behaviour on the counter-example
that narrowed the sentence, or the claim holding on a case its proof did not cover.
In-process and small: no auditor run here.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

warnings.filterwarnings("ignore", category=UserWarning)


def test_negative_priority_depends_on_alpha():
    """run-time-audit.md#prioritized-replay: a priority p is stored as (p + eps) ** alpha.
    A negative p is NaN for a fractional alpha (the next sample() raises OverflowError "Range
    exceeds valid bounds"), stays negative for alpha=1 (sample() raises "non-positive p_min")
    and turns positive for alpha=2 (sampling goes on without an error)."""
    from torchrl.data import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer

    def after_negative_update(alpha):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(50), sampler=PrioritizedSampler(50, alpha=alpha, beta=0.5),
                                    batch_size=8)
        rb.extend(TensorDict(x=torch.arange(20.0), batch_size=[20]))
        index = rb.sample()["index"]
        rb.update_priority(index, -torch.ones(8))
        return rb, torch.tensor([rb._sampler._sum_tree[i] for i in index.tolist()])

    rb, stored = after_negative_update(0.7)
    assert stored.isnan().all()
    with pytest.raises(OverflowError, match="Range exceeds valid bounds"):
        rb.sample()
    rb, stored = after_negative_update(1.0)
    assert (stored < 0).all()
    with pytest.raises(RuntimeError, match="non-positive p_min"):
        rb.sample()
    rb, stored = after_negative_update(2.0)
    assert (stored > 0).all() and rb.sample()["index"].numel() == 8


def test_rollout_outside_an_exploration_context_follows_default_interaction_type():
    """run-time-audit.md#exploration: outside any exploration context env.rollout takes
    ProbabilisticActor's deterministic action with the default default_interaction_type, and
    samples with default_interaction_type=InteractionType.RANDOM."""
    from tensordict.nn import InteractionType
    from torchrl.data import Bounded, Composite, Unbounded
    from torchrl.envs import EnvBase
    from torchrl.envs.utils import ExplorationType, exploration_type, set_exploration_type
    from torchrl.modules import ProbabilisticActor, TanhNormal

    class Point(EnvBase):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(observation=Unbounded(shape=(2,)))
            self.action_spec = Bounded(-1.0, 1.0, shape=(1,))
            self.reward_spec = Unbounded(shape=(1,))

        def _reset(self, td):
            return TensorDict(observation=torch.rand(2))

        def _step(self, td):
            return TensorDict(observation=td["observation"] + td["action"], reward=torch.zeros(1), done=torch.tensor([False]))

        def _set_seed(self, seed):
            pass

    env = Point()
    net = nn.Sequential(nn.Linear(2, 2), NormalParamExtractor())

    def rollout_is_deterministic(**kwargs):
        actor = ProbabilisticActor(TensorDictModule(net, ["observation"], ["loc", "scale"]), in_keys=["loc", "scale"],
                                   distribution_class=TanhNormal, spec=env.action_spec, **kwargs)
        torch.manual_seed(0)
        data = env.rollout(5, actor)
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            det = actor(data.exclude("next", "action").clone())["action"]
        return torch.allclose(det, data["action"])

    assert exploration_type() is None
    assert rollout_is_deterministic()
    assert not rollout_is_deterministic(default_interaction_type=InteractionType.RANDOM)


def test_next_step_autoreset_pays_zero_on_pendulum_too():
    """run-time-audit.md#vector-autoreset (held): in gymnasium's NEXT_STEP mode the step after
    an episode end pays 0 and is neither terminated nor truncated, here on Pendulum (rewards
    otherwise negative) ended by a 3-step TimeLimit, not only on CartPole."""
    import gymnasium as gym

    envs = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync",
                        wrappers=[lambda e: gym.wrappers.TimeLimit(e, 3)])
    try:
        assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
        envs.reset(seed=0)
        envs.action_space.seed(0)
        ended, after_end, other = [False, False], [], []
        for _ in range(8):
            _, reward, term, trunc, _ = envs.step(envs.action_space.sample())
            for i in range(2):
                (after_end if ended[i] else other).append((float(reward[i]), bool(term[i] or trunc[i])))
            ended = list(term | trunc)
    finally:
        envs.close()
    assert after_end and all(r == (0.0, False) for r in after_end)
    assert all(r < 0.0 for r, _ in other)
