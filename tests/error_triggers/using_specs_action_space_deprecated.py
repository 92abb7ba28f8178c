"""A TensorSpec passed as action_space= to QValueModule."""


def trigger():
    from torchrl.data import MultiOneHot
    from torchrl.modules import QValueModule

    QValueModule(action_space=MultiOneHot([2, 3]))
