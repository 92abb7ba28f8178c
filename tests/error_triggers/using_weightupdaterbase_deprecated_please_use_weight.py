"""A Collector given weight_updater= (the pre-0.11 API): the DeprecationWarning's text."""


def trigger():
    from _tiny import TinyEnv, actor, warning_text
    from tensordict import TensorDict
    from torchrl.collectors import Collector, VanillaWeightUpdater

    policy = actor()

    def build():
        updater = VanillaWeightUpdater(policy_weights=TensorDict.from_module(policy))
        Collector(TinyEnv(), policy, frames_per_batch=4, total_frames=4, weight_updater=updater,
                  auto_register_policy_transforms=False).shutdown()

    return warning_text(build, DeprecationWarning, "WeightUpdaterBase")
