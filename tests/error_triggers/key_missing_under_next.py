"""check_env_specs on an env whose _step leaves out the observation (torchrl 0.14.1)."""

import torch
from tensordict import TensorDict

from _envs_base import SixFeatureEnv


class MissingNextKey(SixFeatureEnv):
    def _step(self, tensordict):
        flag = torch.zeros(1, dtype=torch.bool)
        return TensorDict(reward=torch.zeros(1), done=flag, terminated=flag.clone())


def trigger():
    from torchrl.envs.utils import check_env_specs

    check_env_specs(MissingNextKey(), seed=0)
