"""An LSTMModule policy rolled out on an env with no InitTracker / TensorDictPrimer."""


def trigger():
    from _tiny import TinyEnv
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torch import nn
    from torchrl.modules import LSTMModule

    lstm = LSTMModule(input_size=3, hidden_size=4, in_key="observation", out_key="embed")
    head = TensorDictModule(nn.Linear(4, 1), in_keys=["embed"], out_keys=["action"])
    TinyEnv().rollout(2, TensorDictSequential(lstm, head))
