"""QValueModule(spec=MultiOneHot(...)) without var_nums: the first call raises."""


def trigger():
    import torch
    from tensordict import TensorDict
    from torchrl.data import MultiOneHot
    from torchrl.modules import QValueModule

    module = QValueModule(spec=MultiOneHot([2, 3]))
    module(TensorDict(action_value=torch.zeros(5)))
