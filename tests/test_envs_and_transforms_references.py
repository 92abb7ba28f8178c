"""envs-and-transforms: the behaviours the references and the error-index entries state,
reproduced on the installed stack (the tests tests/proofs.json names for them). The triggers and
the section proofs themselves are checked by test_error_index.py and test_docs_contract.py."""

from __future__ import annotations

import re
import sys

import pytest
from conftest import FIXTURES, load_module

from torchrl_skill.explain import error_index as _error_index

AREA = "envs-and-transforms"
sys.path.insert(0, str(FIXTURES / "envs"))
checker = load_module(f"{AREA}/check_user_env")


def test_call_only_transform_skips_reset():
    """A false claim, once in the references: a Transform overriding only _call (or only _apply_transform)
    changes the step output but not the reset output; adding _reset returning
    self._call(tensordict_reset) fixes it. The old sentence ("applies its transform to what
    the env outputs at reset and step") fails the first two asserts."""
    from torchrl.envs import PendulumEnv, TransformedEnv
    from torchrl.envs.transforms import Transform

    class CallOnly(Transform):
        def _call(self, next_tensordict):
            next_tensordict["th"] = next_tensordict["th"] + 100
            return next_tensordict

    class ApplyOnly(Transform):
        def _apply_transform(self, th):
            return th + 100

    class WithReset(CallOnly):
        def _reset(self, tensordict, tensordict_reset):
            return self._call(tensordict_reset)

    for cls, at_reset in [(CallOnly, False), (ApplyOnly, False), (WithReset, True)]:
        env = TransformedEnv(PendulumEnv(), cls(in_keys=["th"], out_keys=["th"]))
        env.set_seed(0)
        reset = env.reset()
        assert (reset["th"].item() > 90) is at_reset, cls.__name__
        assert env.rand_step(reset)["next", "th"].item() > 90, cls.__name__
        found = checker.transforms_skipping_reset(env, reset)
        assert found == ([] if at_reset else [(cls.__name__, ["th"])]), (cls.__name__, found)


def test_built_in_transforms_are_applied_at_reset():
    """The checker's probe passes the transforms the bundle's own smoke run uses."""
    smoke = load_module(f"{AREA}/smoke_env_rollout")
    env = smoke.add_transforms(smoke.make_base_env("pendulum"))
    assert checker.transforms_skipping_reset(env, env.reset()) == []


def _raised(fn) -> str:
    try:
        fn()
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    raise AssertionError("no error")


def test_every_other_signature_occurs_in_a_real_error():
    """The signatures a trigger does not produce, each reproduced and mapped to its entry."""
    import torch
    from _envs_fixture_base import SixFeatureEnv
    from tensordict import TensorDict
    from torchrl.data import Binary, Bounded, Composite, MultiOneHot, Unbounded
    from torchrl.envs import ActionMask, EnvBase, PendulumEnv, TransformedEnv
    from torchrl.envs.transforms import Transform
    from torchrl.envs.utils import check_env_specs

    class Short(SixFeatureEnv):
        def _step(self, tensordict):
            out = super()._step(tensordict)
            out["observation"] = out["observation"][:5]
            return out

    class OutOfBounds(SixFeatureEnv):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(observation=Bounded(low=-1.0, high=1.0, shape=(6,)))

        def _obs(self):
            return torch.full((6,), 5.0)

    class NewKeyNoSpec(Transform):
        def _apply_transform(self, th):
            return th * 2

        def _reset(self, tensordict, tensordict_reset):
            return self._call(tensordict_reset)

    class Int8Mask(EnvBase):
        def __init__(self):
            super().__init__()
            self.action_spec = MultiOneHot(nvec=[3, 2])
            self.observation_spec = Composite(action_mask=Binary(n=5, dtype=torch.int8))
            self.reward_spec = Unbounded(shape=(1,))

        def _reset(self, tensordict):
            return TensorDict(action_mask=torch.ones(5, dtype=torch.int8))

        def _step(self, tensordict):
            raise NotImplementedError

        def _set_seed(self, seed):
            pass

    cases = {
        "The shapes of the tensors to stack is incompatible": (lambda: check_env_specs(Short(), seed=0), "value-outside-spec"),
        "spec check failed at root": (lambda: check_env_specs(OutOfBounds(), seed=0), "value-outside-spec"),
        "is unaccounted for by the transform": (
            lambda: TransformedEnv(PendulumEnv(), NewKeyNoSpec(in_keys=["th"], out_keys=["th2"])).rollout(2), "key-not-in-spec"),
        "Only boolean masks are accepted": (lambda: TransformedEnv(Int8Mask(), ActionMask()).reset(), "action-mask-mismatch"),
    }
    for signature, (make, cause) in cases.items():
        text = _raised(make)
        assert signature in text, (signature, text)
        assert signature in _error_index.by_id()[cause].signatures
        assert checker.diagnose(text) == cause, (signature, text)


@pytest.mark.slow
def test_parallel_env_pickles_local_factories():
    """torchrl 0.14.1: ParallelEnv (spawn) runs a factory defined inside a function (sent with
    cloudpickle); a lambda is wrapped in EnvCreator with a warning."""
    import warnings

    from torchrl.envs import ParallelEnv, PendulumEnv

    def local_factory():
        return PendulumEnv()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lazy = ParallelEnv(2, lambda: PendulumEnv(), mp_start_method="spawn")
    assert any("wrapped in an EnvCreator" in str(w.message) for w in caught)
    assert lazy.is_closed  # no worker started until the first reset
    env = ParallelEnv(2, local_factory, mp_start_method="spawn")
    try:
        assert env.rollout(2).batch_size == (2, 2)
    finally:
        env.close()


def test_gymnasium_1_0_is_refused():
    """torchrl/envs/libs/gym.py (0.14.1) registers, for gymnasium >=1.0,<1.1, spec converters
    that raise ImportError(GYMNASIUM_1_ERROR); gymnasium 1.1+ has its own converters."""
    import inspect

    import torchrl.envs.libs.gym as gym_lib

    assert "does not support gymnasium 1.0" in gym_lib.GYMNASIUM_1_ERROR
    source = inspect.getsource(gym_lib)
    refusing = re.findall(r'@implement_for\("gymnasium", "1\.0\.0", "1\.1\.0"\)\n(?:.*\n){1,3}?\s+raise ImportError\(GYMNASIUM_1_ERROR\)', source)
    assert len(refusing) >= 3 and '@implement_for("gymnasium", "1.1.0")' in source


def test_gym_wrapper_multidiscrete_action_specs():
    """What the action-mask-mismatch entry says of GymWrapper (torchrl 0.14.1, gymnasium 1.4):
    MultiDiscrete with equal sizes becomes a stacked OneHot [len(nvec), n]; with a mask
    shaped like nvec it is flattened to one OneHot(prod(nvec)); unequal sizes: MultiOneHot."""
    import gymnasium as gym
    import numpy as np
    from torchrl.data import MultiOneHot, OneHot
    from torchrl.envs import GymWrapper

    class Board(gym.Env):
        def __init__(self, nvec, mask_shape):
            self.action_space = gym.spaces.MultiDiscrete(nvec)
            self.observation_space = gym.spaces.Dict({"action_mask": gym.spaces.Box(0, 1, mask_shape, np.bool_)})

        def reset(self, seed=None, options=None):
            return {"action_mask": np.ones(self.observation_space["action_mask"].shape, np.bool_)}, {}

        def step(self, action):
            return self.reset()[0], 0.0, False, False, {}

    for nvec, mask, cls, shape in [([3, 3], (6,), OneHot, (2, 3)), ([3, 2], (3, 2), OneHot, (6,)), ([3, 2], (5,), MultiOneHot, (5,))]:
        spec = GymWrapper(Board(nvec, mask)).action_spec
        assert type(spec) is cls and tuple(spec.shape) == shape, (nvec, mask, spec)
        assert checker.expected_mask_shape(spec) == shape
