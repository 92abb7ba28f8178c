"""check_env_specs on an env whose _reset returns a reward (torchrl 0.14.1)."""

import torch
from tensordict import TensorDict

from _envs_base import SixFeatureEnv


class RewardInReset(SixFeatureEnv):
    def _reset(self, tensordict):
        return TensorDict(observation=self._obs(), reward=torch.zeros(1))


def trigger():
    from torchrl.envs.utils import check_env_specs

    check_env_specs(RewardInReset(), seed=0)
