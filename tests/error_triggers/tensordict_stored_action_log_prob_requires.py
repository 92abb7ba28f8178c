"""ClipPPOLoss on a batch rolled out with gradient tracking on (no torch.no_grad())."""


def trigger():
    import torch
    from _tiny import TinyEnv, actor, critic
    from torchrl.envs import ExplorationType, set_exploration_type
    from torchrl.objectives import ClipPPOLoss

    policy = actor()
    with set_exploration_type(ExplorationType.RANDOM):
        batch = TinyEnv().rollout(4, policy)
    batch["advantage"] = torch.zeros(4, 1)
    ClipPPOLoss(policy, critic())(batch)
