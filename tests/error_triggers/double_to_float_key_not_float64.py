"""DoubleToFloat(in_keys=["observation"]) over a float32 observation (torchrl 0.14.1;
GymEnv("Pendulum-v1") is float32 too): raised when the spec is first read."""

from _tiny import TinyEnv


def trigger():
    from torchrl.envs import DoubleToFloat, TransformedEnv

    TransformedEnv(TinyEnv(), DoubleToFloat(in_keys=["observation"])).observation_spec
