"""Claims of modules-and-policies, each shown on its case and on the nearest case it excludes
(the claims sweep, tests/README.md).

The distribution/spec pairing of a discrete ProbabilisticActor: a ``Categorical`` samples an
index, a ``OneHotCategorical`` a one-hot vector; the env reads the action through its spec.
The gymnasium env here records every action it receives, so the test sees what the env got.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch


class RecordActions(gym.Wrapper):
    """CartPole that keeps the actions its step() receives."""

    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))
        self.got: list = []

    def step(self, action):
        self.got.append(np.asarray(action).tolist())
        return super().step(action)


def _run(encoding: bool, distribution) -> tuple[list, tuple]:
    """30 RANDOM steps of a ProbabilisticActor whose logits favour action 1 (p ~ 0.993) on
    CartPole wrapped with ``categorical_action_encoding=encoding``: the actions the gym env
    got, and (one action's shape, env.action_spec.shape)."""
    from tensordict.nn import TensorDictModule
    from torchrl.envs import GymWrapper
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import ProbabilisticActor

    gym_env = RecordActions()
    env = GymWrapper(gym_env, categorical_action_encoding=encoding)
    env.set_seed(0)
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    with torch.no_grad():
        net.weight.zero_()
        net.bias.copy_(torch.tensor([0.0, 5.0]))
    actor = ProbabilisticActor(TensorDictModule(net, ["observation"], ["logits"]), in_keys=["logits"],
                               distribution_class=distribution, spec=env.action_spec)
    with set_exploration_type(ExplorationType.RANDOM):
        shapes = (actor(env.reset())["action"].shape, env.action_spec.shape)  # the entry's verify line
        env.rollout(30, actor, break_when_any_done=False)
    env.close()
    return gym_env.got, shapes


def test_categorical_on_a_one_hot_spec_sends_action_0_every_step():
    """GymEnv/GymWrapper's default discrete action spec is one-hot; a torch Categorical writes
    an index there and the env reads it as one-hot (argmax of one number): action 0 every
    step, no error, although the policy picks 1. The two right pairings send the policy's 1."""
    from torchrl.modules import OneHotCategorical

    got, shapes = _run(False, torch.distributions.Categorical)
    assert got == [0] * 30  # the case: silent
    assert shapes == (torch.Size([]), torch.Size([2]))  # what the verify line compares
    for encoding, distribution in [(True, torch.distributions.Categorical), (False, OneHotCategorical)]:
        got, shapes = _run(encoding, distribution)
        assert len(got) == 30 and got.count(1) >= 25, (encoding, distribution, got)
        assert shapes[0] == shapes[1]


def test_one_hot_categorical_on_a_categorical_spec_raises_in_the_gym_env():
    """The other mismatch is loud: a one-hot sample on an index spec reaches gymnasium as an
    array and CartPole's action check raises."""
    from torchrl.modules import OneHotCategorical

    with pytest.raises(AssertionError, match="invalid"):
        _run(True, OneHotCategorical)


@pytest.mark.parametrize("with_bounds", [False, True], ids=["spec-only", "distribution_kwargs"])
def test_tanh_normal_ignores_the_spec_bounds(with_bounds):
    """policy-api.md: TanhNormal does not read ProbabilisticActor's spec=; without
    distribution_kwargs low/high a Pendulum policy stays in [-1, 1] (the env allows [-2, 2]),
    with them it uses the whole range."""
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.envs import GymEnv
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal

    torch.manual_seed(0)
    env = GymEnv("Pendulum-v1")
    spec = env.action_spec
    kwargs = {"distribution_kwargs": {"low": spec.space.low, "high": spec.space.high}} if with_bounds else {}
    net = torch.nn.Sequential(MLP(in_features=3, out_features=2, num_cells=[16]), NormalParamExtractor())
    actor = ProbabilisticActor(TensorDictModule(net, ["observation"], ["loc", "scale"]), in_keys=["loc", "scale"],
                               spec=spec, distribution_class=TanhNormal, **kwargs)
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        peak = env.rollout(200, actor)["action"].abs().max().item()
    env.close()
    assert (1.0 < peak <= 2.0) if with_bounds else (peak <= 1.0)
