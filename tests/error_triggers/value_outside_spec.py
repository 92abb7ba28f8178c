"""check_env_specs on an env whose _step returns float64 where the spec says float32."""

from _envs_base import SixFeatureEnv


class Float64Observation(SixFeatureEnv):
    def _step(self, tensordict):
        out = super()._step(tensordict)
        out["observation"] = out["observation"].double()
        return out


def trigger():
    from torchrl.envs.utils import check_env_specs

    check_env_specs(Float64Observation(), seed=0)
