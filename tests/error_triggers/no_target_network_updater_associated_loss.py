"""DQNLoss(delay_value=True) whose target parameters are read with no target updater built."""


def trigger():
    from _tiny import warning_text
    from torch import nn
    from torchrl.data import OneHot
    from torchrl.modules import QValueActor
    from torchrl.objectives import DQNLoss

    loss = DQNLoss(QValueActor(nn.Linear(3, 2), in_keys=["observation"], spec=OneHot(2)), delay_value=True)
    return warning_text(lambda: loss.target_value_network_params, UserWarning, "target network updater")
