"""A batched env whose _reset, given a "_reset" mask, returns done=True for a sub-env the
mask resets (pytorch/rl#1764's message, torchrl 0.14.1: EnvBase._reset_check_done)."""

import torch
from tensordict import TensorDict
from torchrl.data import Composite, Unbounded
from torchrl.envs import EnvBase


class TwoEnvs(EnvBase):
    def __init__(self, done_at_reset: bool = True):
        super().__init__(batch_size=[2])
        self.done_at_reset = done_at_reset
        self.observation_spec = Composite(observation=Unbounded((2, 3)), shape=(2,))
        self.action_spec = Unbounded((2, 1))
        self.reward_spec = Unbounded((2, 1))

    def _reset(self, tensordict):
        flag = torch.full((2, 1), self.done_at_reset)  # the reset sub-envs report done: the fault
        return TensorDict(observation=torch.zeros(2, 3), done=flag, terminated=flag.clone(), batch_size=[2])

    def _step(self, tensordict):
        no = torch.zeros(2, 1, dtype=torch.bool)
        return TensorDict(observation=torch.zeros(2, 3), reward=torch.zeros(2, 1), done=no, terminated=no.clone(),
                          batch_size=[2])

    def _set_seed(self, seed):
        pass


def partial_reset(env):
    """Reset only the first sub-env, as a collector does after it finished."""
    mask = torch.tensor([[True], [False]])
    return env.reset(TensorDict({"_reset": mask}, batch_size=[2]))


def trigger():
    partial_reset(TwoEnvs())
