"""``explain.py ProbabilisticActor`` (and a discrete distribution) states the installed
pairing of distribution and action spec (src/torchrl_skill/explain/pairing.py), and the
pairing is what a real env sees: a torch ``Categorical`` policy on GymEnv's default one-hot
spec steps CartPole-v1 with action 0 every step while the rollout records the sampled
actions; with ``categorical_action_encoding=True``, or with ``OneHotCategorical`` on the
one-hot spec, the env receives both actions (torchrl 0.14.1, gymnasium 1.x).
"""

from __future__ import annotations

import inspect

import pytest
import torch
from conftest import load_module

from torchrl_skill.report import skill_report as sr
from torchrl_skill.explain import pairing

explain = load_module("scripts/explain")
VERSIONS = sr.stack_versions()


def lines(name: str) -> str:
    found, out = explain.explain_lines(name, VERSIONS)
    assert found, out
    return " ".join(" ".join(out).split())


def _actions_cartpole_receives(distribution, categorical_action_encoding: bool):
    """(actions the gymnasium env was stepped with, actions the rollout recorded) over 40
    random-mode steps of a ProbabilisticActor with ``distribution`` on CartPole-v1."""
    import gymnasium as gym
    from tensordict.nn import TensorDictModule
    from torchrl.envs import ExplorationType, GymWrapper, set_exploration_type
    from torchrl.modules import ProbabilisticActor

    class Recorder(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            self.actions = []

        def step(self, action):
            self.actions.append(action)
            return self.env.step(action)

    recorder = Recorder(gym.make("CartPole-v1"))
    env = GymWrapper(recorder, categorical_action_encoding=categorical_action_encoding)
    torch.manual_seed(0)
    head = TensorDictModule(torch.nn.Linear(4, 2), ["observation"], ["logits"])
    actor = ProbabilisticActor(head, in_keys=["logits"], spec=env.action_spec, distribution_class=distribution)
    with set_exploration_type(ExplorationType.RANDOM):
        rollout = env.rollout(40, actor, break_when_any_done=False)
    sampled = rollout["action"]
    recorded = sampled.argmax(-1) if sampled.ndim > 1 else sampled
    return {int(a) for a in recorder.actions}, set(recorded.tolist())


def test_categorical_on_the_default_one_hot_spec_steps_the_env_with_action_0():
    from torchrl.modules import OneHotCategorical

    received, recorded = _actions_cartpole_receives(torch.distributions.Categorical, False)
    assert received == {0} and recorded == {0, 1}  # silent: no error, the rollout shows both actions
    # the nearest cases the claim excludes: the encodings that match
    assert _actions_cartpole_receives(torch.distributions.Categorical, True)[0] == {0, 1}
    assert _actions_cartpole_receives(OneHotCategorical, False)[0] == {0, 1}


def test_one_hot_samples_on_a_categorical_spec_are_arrays_the_env_rejects():
    from torchrl.modules import OneHotCategorical

    with pytest.raises(AssertionError, match="invalid"):  # gymnasium's Discrete space asserts on the array
        _actions_cartpole_receives(OneHotCategorical, True)


def test_explain_states_the_pairing_read_from_the_live_classes():
    from torchrl.data import OneHot
    from torchrl.envs import GymEnv
    from torchrl.envs.gym_like import GymLikeEnv

    # ground truth here, independently of pairing.py: what read_action does, and its effect on an index
    assert "to_numpy(action, safe=False)" in inspect.getsource(GymLikeEnv.read_action)
    assert [int(OneHot(4).to_numpy(torch.tensor(k), safe=False)) for k in range(4)] == [0, 0, 0, 0]
    assert type(GymEnv("CartPole-v1").action_spec).__name__ == "OneHot"
    assert type(GymEnv("CartPole-v1", categorical_action_encoding=True).action_spec).__name__ == "Categorical"
    text = lines("ProbabilisticActor")
    assert ("torch.distributions.Categorical: through Categorical(4) the env gets the sampled action, "
            "through OneHot(4) the env gets always 0 (sampled [0, 1, 2, 3])") in text
    assert ("torchrl.modules.OneHotCategorical: through Categorical(4) the env gets an array of shape [4], not an index, "
            "through OneHot(4) the env gets the sampled action") in text
    assert "with safe=False (its default) the module does not check a sample against its spec" in text
    assert ("GymEnv (categorical_action_encoding=False by default) builds a OneHot spec for a Discrete space, "
            "and a Categorical spec with categorical_action_encoding=True") in text


def test_a_distribution_states_its_own_pairing_and_a_continuous_one_none():
    assert "MaskedCategorical: through Categorical(4) the env gets the sampled action, through OneHot(4) the env gets always 0" \
        in lines("MaskedCategorical")
    assert "through OneHot(4) the env gets the sampled action" in lines("torchrl.modules.OneHotCategorical")
    assert "the env receives" not in lines("TanhNormal") and pairing.received(torch.distributions.Normal) is None


def test_the_measure_tells_the_encodings_apart():
    """Negative control: the same measure gives opposite verdicts for the two encodings."""
    from torchrl.modules import OneHotCategorical

    index, one_hot = pairing.received(torch.distributions.Categorical), pairing.received(OneHotCategorical)
    assert index["Categorical(4)"] == one_hot["OneHot(4)"] == "the sampled action"
    assert index["OneHot(4)"].startswith("always 0") and one_hot["Categorical(4)"].startswith("an array")
