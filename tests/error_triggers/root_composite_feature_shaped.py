"""fake_tensordict() of an env whose root Composite has the feature shape (torchrl 0.14.1)."""

from _envs_base import SixFeatureEnv


class FeatureShapedRoot(SixFeatureEnv):
    root_shape = (6,)


def trigger():
    FeatureShapedRoot().fake_tensordict()
