"""Claims of envs-and-transforms (references and error-index entries), each shown on its case
and on the nearest case it excludes (the claims sweep, tests/README.md). The gymnasium board of
tests/fixtures/envs/gym_board_flat_action.py uses its action: step() unpacks [row, col]
and places a stone there, so a wrong action is seen, not only a wrong spec.
"""

from __future__ import annotations

import sys

import pytest
import torch
from conftest import FIXTURES, load_module

sys.path.insert(0, str(FIXTURES / "envs"))
checker = load_module("envs-and-transforms/check_user_env")
board = load_module(FIXTURES / "envs" / "gym_board_flat_action.py")


def _board_env(mask: str, flat_action: bool = False, categorical: bool = True):
    from torchrl.envs import ActionMask, GymWrapper, TransformedEnv

    gym_env = board.Board(mask, flat_action)
    return gym_env, TransformedEnv(GymWrapper(gym_env, categorical_action_encoding=categorical), ActionMask())


@pytest.mark.parametrize("categorical", [True, False], ids=["Categorical", "OneHot"])
def test_nvec_shaped_mask_hands_the_gym_env_a_flat_index(categorical):
    """gym-multidiscrete-flat-action (pytorch/rl#3242, #3342). A (5, 5) mask over a
    MultiDiscrete([5, 5]) action: the spec becomes one Categorical(25)/OneHot(25), ActionMask
    draws only the allowed cells, and the gym env's step() gets their flat index (7 or 19),
    which it cannot unpack. Nearest excluded cases: a (2, 5) per-sub-action mask keeps
    [row, col]; a Discrete(25) action decoded in step() keeps the joint mask."""
    from torchrl.data import Categorical, OneHot

    gym_env, env = _board_env("grid", categorical=categorical)
    spec = env.base_env.action_spec
    assert type(spec) is (Categorical if categorical else OneHot) and spec.space.n == 25
    with pytest.raises(TypeError, match="object is not iterable"):
        env.rollout(3)
    sent = env.base_env.read_action(env.action_spec.rand())  # what _step passes to the gym env
    assert sent in (1 * 5 + 2, 3 * 5 + 4) and not gym_env.action_space.contains(sent)
    assert "which its action_space does not contain" in checker.gym_flat_multidiscrete(env)

    gym_env, env = _board_env("per-part", categorical=categorical)  # one row of flags per sub-action
    env.rollout(40)
    assert set(gym_env.placed) <= {(r, c) for r in (1, 3) for c in (2, 4)} and len(set(gym_env.placed)) > 1
    assert checker.gym_flat_multidiscrete(env) is None

    gym_env, env = _board_env("grid", flat_action=True, categorical=categorical)  # Discrete(25), decoded
    env.rollout(40)
    assert set(gym_env.placed) == set(board.ALLOWED)
    assert checker.gym_flat_multidiscrete(env) is None


def test_checker_names_the_flat_index_and_passes_both_fixes():
    """check_user_env's env:reset-output fails the (5, 5) mask as gym-multidiscrete-flat-action
    (it said "needs (25,)" before, and a (25,) mask makes ActionMask raise) and passes the
    per-sub-action mask and the decoded Discrete(25) action."""
    with pytest.raises(checker.EnvFault) as info:
        checker.check_reset(_board_env("grid")[1])
    assert info.value.cause_id == "gym-multidiscrete-flat-action"
    for mask, flat in (("per-part", False), ("grid", True)):
        assert "no reward" in checker.check_reset(_board_env(mask, flat)[1]).detail


def _masked_env(spec, mask_shape):
    """A TransformedEnv(custom env, ActionMask()) whose all-True bool mask has ``mask_shape``;
    its _step records the actions it receives."""
    from tensordict import TensorDict
    from torchrl.data import Composite, Unbounded
    from torchrl.envs import ActionMask, EnvBase, TransformedEnv

    class Masked(EnvBase):
        def __init__(self):
            super().__init__()
            self.action_spec = spec.clone()
            self.observation_spec = Composite(observation=Unbounded(shape=(3,)),
                                              action_mask=Unbounded(shape=mask_shape, dtype=torch.bool))
            self.reward_spec = Unbounded(shape=(1,))
            self.got = []

        def _obs(self):
            return TensorDict(observation=torch.zeros(3), action_mask=torch.ones(mask_shape, dtype=torch.bool))

        def _reset(self, td):
            return self._obs()

        def _step(self, td):
            self.got.append(td["action"].clone())
            return self._obs().update(reward=torch.zeros(1), done=torch.zeros(1, dtype=torch.bool),
                                      terminated=torch.zeros(1, dtype=torch.bool))

        def _set_seed(self, seed):
            pass

    return TransformedEnv(Masked(), ActionMask())


def _specs():
    from torchrl.data import Categorical, MultiCategorical, MultiOneHot, OneHot

    return {"Categorical(25)": Categorical(25), "Categorical(5)[2]": Categorical(5, shape=(2,)),
            "OneHot(25)": OneHot(25), "MultiCategorical[3,2]": MultiCategorical(nvec=[3, 2]),
            "MultiOneHot[3,2]": MultiOneHot(nvec=[3, 2])}


@pytest.mark.parametrize("name,mask_shape,works", [
    ("Categorical(25)", (25,), True), ("Categorical(25)", (5, 5), True),       # n flags in any shape are reshaped
    ("Categorical(25)", (24,), False),
    ("Categorical(5)[2]", (2, 5), True), ("Categorical(5)[2]", (5,), True),     # (5,) broadcasts over the 2 parts
    ("Categorical(5)[2]", (10,), False),
    ("OneHot(25)", (5, 5), True), ("OneHot(25)", (25,), True),
    ("MultiCategorical[3,2]", (5,), True), ("MultiCategorical[3,2]", (6,), False),  # (6,): raises only when drawing
    ("MultiOneHot[3,2]", (5,), True), ("MultiOneHot[3,2]", (6,), False),
])
def test_action_mask_shapes_each_spec_takes(name, mask_shape, works):
    """action-mask-mismatch: which mask shapes ActionMask takes over each spec on torchrl 0.14.1
    (a rollout runs), and that the checker flags exactly the others."""
    env = _masked_env(_specs()[name], mask_shape)
    found = checker.action_mask_mismatch(env)
    if works:
        env.rollout(3)
        assert found is None and len(env.base_env.got) == 3
    else:
        with pytest.raises((RuntimeError, ValueError)):
            env.rollout(3)
        assert found is not None and f"has shape {mask_shape}" in found


@pytest.mark.parametrize("name,mask_shape", [("Categorical(25)", (24,)), ("Categorical(5)[2]", (10,)),
                                             ("MultiCategorical[3,2]", (6,)), ("MultiOneHot[3,2]", (6,))])
def test_every_mask_shape_the_checker_offers_works(name, mask_shape):
    """The fix the checker prints ("it needs (...)") is a shape that works on that spec: an env
    rebuilt with it rolls out and ActionMask keeps sampling (before the claims sweep the checker could
    offer a shape that makes ActionMask raise)."""
    import re

    found = checker.action_mask_mismatch(_masked_env(_specs()[name], mask_shape))
    offered = tuple(int(n) for n in re.search(r"it needs \(([\d, ]+)\)", found).group(1).split(",") if n.strip())
    fixed = _masked_env(_specs()[name], offered)
    fixed.rollout(3)
    assert checker.action_mask_mismatch(fixed) is None


def test_builtin_observation_transforms_handle_reset_a_call_only_one_does_not():
    """transforms.md: built-in observation transforms change the reset output as they change
    the step output; a Transform subclass of your own that overrides only _apply_transform
    leaves the first observation of each episode untouched. (Not every built-in overrides
    _reset: action and reward transforms such as ActionScaling or RewardScaling keep
    Transform._reset, which is why the sentence names observation transforms only.)"""
    from torchrl.envs import (ActionScaling, ClipTransform, DTypeCastTransform, ObservationNorm, PendulumEnv, RewardScaling,
                              SignTransform, Transform, TransformedEnv)

    for transform, check in [(SignTransform(in_keys=["th"]), lambda th: th.abs().item() == 1.0),
                             (ClipTransform(in_keys=["th"], low=-0.01, high=0.01), lambda th: th.abs().item() <= 0.01),
                             (ObservationNorm(loc=100.0, scale=1.0, in_keys=["th"], standard_normal=False), lambda th: th.item() > 90),
                             (DTypeCastTransform(torch.float32, torch.float64, in_keys=["th"]), lambda th: th.dtype == torch.float64)]:
        assert check(TransformedEnv(PendulumEnv(), transform).reset()["th"]), type(transform).__name__

    class Shift(Transform):
        def _apply_transform(self, obs):
            return obs + 100

    env = TransformedEnv(PendulumEnv(), Shift(in_keys=["th"], out_keys=["th"]))
    td = env.reset()
    assert td["th"].abs().item() < 10 and env.rand_step(td)["next", "th"].item() > 90
    assert ActionScaling._reset is Transform._reset and RewardScaling._reset is Transform._reset


FACTORY_CALLS: list[int] = []


def _counted_pendulum(tag: int = 0):
    from torchrl.envs import PendulumEnv

    FACTORY_CALLS.append(tag)
    return PendulumEnv()


def test_parallel_env_builds_one_env_here_a_lambda_two():
    """batched-envs-and-wrappers.md: ParallelEnv calls a module-level factory (or a partial of
    one) once in the main process at construction, to read the specs; a lambda, wrapped in
    EnvCreator, twice. No worker starts here (workers start on first use)."""
    import functools
    import warnings

    from torchrl.envs import ParallelEnv

    for factory, calls in [(_counted_pendulum, 1), (functools.partial(_counted_pendulum, 1), 1),
                           (lambda: _counted_pendulum(2), 2)]:
        FACTORY_CALLS.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = ParallelEnv(2, factory)
        assert env.is_closed and len(FACTORY_CALLS) == calls, (factory, FACTORY_CALLS)


def _truncating_env(declare_truncated: bool):
    """An env whose _reset and _step return ``truncated``; declared in done_spec or not."""
    import torch
    from tensordict import TensorDict
    from torchrl.data import Categorical, Composite, Unbounded
    from torchrl.envs import EnvBase

    flag = {"shape": (1,), "dtype": torch.bool}

    class Truncating(EnvBase):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(observation=Unbounded(shape=(2,)))
            self.action_spec = Unbounded(shape=(1,))
            self.reward_spec = Unbounded(shape=(1,))
            if declare_truncated:
                self.done_spec = Composite(done=Categorical(2, **flag), terminated=Categorical(2, **flag),
                                           truncated=Categorical(2, **flag))

        def _reset(self, td):
            return TensorDict(observation=torch.zeros(2), truncated=torch.zeros(1, dtype=torch.bool))

        def _step(self, td):
            no = torch.zeros(1, dtype=torch.bool)
            return TensorDict(observation=torch.zeros(2), reward=torch.zeros(1), done=no, terminated=no.clone(), truncated=no.clone())

        def _set_seed(self, seed):
            pass

    return Truncating()


def test_a_done_flag_no_spec_declares_is_fixed_in_done_spec_and_the_row_names_the_keys():
    """key-not-in-spec (newcomer trial on pytorch/rl#2462): a returned ``truncated`` that no
    spec declares fails check_env_specs with both key sets; declaring it in done_spec (the
    entry's fix for a done flag) passes; check_user_env's row quotes the keys."""
    from torchrl.envs.utils import check_env_specs

    with pytest.raises(AssertionError, match=r"keys_in_real_not_in_fake=\{.*truncated"):
        check_env_specs(_truncating_env(False))
    check_env_specs(_truncating_env(True))
    causes = load_module("envs-and-transforms/_env_causes")
    try:
        check_env_specs(_truncating_env(False))
    except AssertionError as err:
        fault = causes.fault_from(err, "check_env_specs(env, seed=0)")
    assert "('next', 'truncated')" in str(fault) and "done_spec" in str(fault)
