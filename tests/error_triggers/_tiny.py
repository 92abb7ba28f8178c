"""Small real pieces the triggers share: a 3-feature env, a tiny actor and critic, and
helpers to capture a warning or hide an installed module (not a trigger: no ``trigger``)."""

from __future__ import annotations

import importlib.abc
import sys
import warnings

import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs import EnvBase


class TinyEnv(EnvBase):
    """Correct: batch_size (), observation [3], action [1] in [-1, 1], reward [1]."""

    def __init__(self):
        super().__init__(batch_size=torch.Size([]))
        self.observation_spec = Composite(observation=Unbounded(shape=(3,)))
        self.action_spec = Bounded(low=-1.0, high=1.0, shape=(1,))
        self.reward_spec = Unbounded(shape=(1,))

    def _reset(self, tensordict):
        return TensorDict(observation=torch.zeros(3))

    def _step(self, tensordict):
        return TensorDict(
            observation=torch.zeros(3),
            reward=torch.zeros(1),
            done=torch.zeros(1, dtype=torch.bool),
            terminated=torch.zeros(1, dtype=torch.bool),
        )

    def _set_seed(self, seed):
        return seed


def actor(obs: int = 3, act: int = 1, return_log_prob: bool = True):
    """A ``ProbabilisticActor`` with a ``TanhNormal`` head over ``observation``."""
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.modules import ProbabilisticActor, TanhNormal

    net = torch.nn.Sequential(torch.nn.Linear(obs, 2 * act), NormalParamExtractor())
    module = TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"])
    return ProbabilisticActor(module, in_keys=["loc", "scale"], distribution_class=TanhNormal,
                              spec=Bounded(-1.0, 1.0, (act,)), return_log_prob=return_log_prob)


def critic(obs: int = 3, out_key: str = "state_value"):
    from torchrl.modules import ValueOperator

    return ValueOperator(torch.nn.Linear(obs, 1), in_keys=["observation"], out_keys=[out_key])


def warning_text(fn, category=Warning, contains: str = "") -> str:
    """Run ``fn`` and return ``"Category: message"`` of the first warning of ``category``
    (whose text holds ``contains``); raise AssertionError when none was emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    for w in caught:
        if issubclass(w.category, category) and contains in str(w.message):
            return f"{w.category.__name__}: {w.message}"
    raise AssertionError(f"no {category.__name__} warning containing {contains!r}: {[str(w.message)[:80] for w in caught]}")


class _Hide(importlib.abc.MetaPathFinder):
    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def hide_modules(*names: str, probe_sees_them: bool = False) -> None:
    """Make NAME look not installed, for SUBPROCESS triggers (it lasts for the rest of the
    interpreter). Default: ``importlib.util.find_spec(NAME)`` returns None (what torchrl's
    probes read). ``probe_sees_them=True``: ``import NAME`` raises Python's own
    ``ModuleNotFoundError: No module named 'NAME'`` (for code that imports it directly)."""
    for name in list(sys.modules):
        if name.split(".")[0] in names:
            del sys.modules[name]
    if probe_sees_them:
        sys.meta_path.insert(0, _Hide(names))
    else:
        for name in names:
            sys.modules[name] = None  # type: ignore[assignment]
