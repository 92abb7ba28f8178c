"""check_env_specs on an env whose _step returns a key no spec declares (torchrl 0.14.1)."""

import torch

from _envs_base import SixFeatureEnv


class ExtraKeyInStep(SixFeatureEnv):
    def _step(self, tensordict):
        out = super()._step(tensordict)
        out["extra"] = torch.zeros(1)
        return out


def trigger():
    from torchrl.envs.utils import check_env_specs

    check_env_specs(ExtraKeyInStep(), seed=0)
