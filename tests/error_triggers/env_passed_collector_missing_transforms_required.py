"""A TensorDictModule policy given to Collector without auto_register_policy_transforms: the warning's text."""


def trigger():
    import warnings

    from tensordict.nn import TensorDictModule
    from torchrl.collectors import Collector
    from torchrl.envs import PendulumEnv

    policy = TensorDictModule(lambda th: th.unsqueeze(-1), in_keys=["th"], out_keys=["action"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Collector(PendulumEnv(), policy, frames_per_batch=10, total_frames=10).shutdown()
    found = [w for w in caught if "missing transforms required by the policy" in str(w.message)]
    return f"{found[0].category.__name__}: {found[0].message}" if found else ""
