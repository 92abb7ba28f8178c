"""ClipPPOLoss on data collected by an actor built without return_log_prob=True."""


def trigger():
    import torch
    from _tiny import TinyEnv, actor, critic
    from torchrl.envs import set_exploration_type, ExplorationType
    from torchrl.objectives import ClipPPOLoss

    collecting = actor(return_log_prob=False)
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        batch = TinyEnv().rollout(4, collecting)
    batch["advantage"] = torch.zeros(4, 1)
    ClipPPOLoss(actor(), critic())(batch)
