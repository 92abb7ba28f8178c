"""env.reset() on an env whose _reset returns done=True (torchrl 0.14.1)."""

import torch
from tensordict import TensorDict

from _envs_base import SixFeatureEnv


class DoneInReset(SixFeatureEnv):
    def _reset(self, tensordict):
        flag = torch.ones(1, dtype=torch.bool)
        return TensorDict(observation=self._obs(), done=flag, terminated=flag.clone())


def trigger():
    DoneInReset().reset()
