"""ActionMask over a MultiCategorical action given a grid mask shaped like nvec (torchrl 0.14.1)."""

import torch
from tensordict import TensorDict
from torchrl.data import Binary, Composite, MultiCategorical, Unbounded
from torchrl.envs import EnvBase


class GridMaskEnv(EnvBase):
    def __init__(self):
        super().__init__()
        self.action_spec = MultiCategorical(nvec=[3, 2])
        self.observation_spec = Composite(observation=Unbounded(shape=(3,)), action_mask=Binary(shape=(3, 2), dtype=torch.bool))
        self.reward_spec = Unbounded(shape=(1,))

    def _reset(self, tensordict):
        return TensorDict(observation=torch.zeros(3), action_mask=torch.ones(3, 2, dtype=torch.bool))

    def _step(self, tensordict):
        raise NotImplementedError

    def _set_seed(self, seed):
        pass


def trigger():
    from torchrl.envs import ActionMask, TransformedEnv

    TransformedEnv(GridMaskEnv(), ActionMask()).reset()
