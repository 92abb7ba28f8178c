"""ClipPPOLoss whose critic writes state_action_value, not the state_value it reads."""


def trigger():
    from _tiny import actor, critic
    from torchrl.objectives import ClipPPOLoss

    ClipPPOLoss(actor(), critic(out_key="state_action_value")).make_value_estimator()
