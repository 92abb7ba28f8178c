"""The PPO keyword renamed to entropy_coeff (removed in 0.11)."""


def trigger():
    from _tiny import actor, critic
    from torchrl.objectives import ClipPPOLoss

    ClipPPOLoss(actor(), critic(), entropy_coef=0.01)
