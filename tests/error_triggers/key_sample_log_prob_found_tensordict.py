"""Reading the pre-0.9 log-prob key from an actor's output."""


def trigger():
    import torch
    from _tiny import actor
    from tensordict import TensorDict
    from torchrl.envs import ExplorationType, set_exploration_type

    with set_exploration_type(ExplorationType.RANDOM):
        out = actor()(TensorDict(observation=torch.zeros(3)))
    out["sample_log_prob"]
