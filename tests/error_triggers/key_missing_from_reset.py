"""check_env_specs on an env whose _reset leaves out the declared observation (torchrl 0.14.1)."""

from tensordict import TensorDict

from _envs_base import SixFeatureEnv


class NoObservationAtReset(SixFeatureEnv):
    def _reset(self, tensordict):
        return TensorDict()


def trigger():
    from torchrl.envs.utils import check_env_specs

    check_env_specs(NoObservationAtReset(), seed=0)
