"""The pre-0.8 module method LSTMModule.set_recurrent_mode()."""


def trigger():
    from torchrl.modules import LSTMModule

    LSTMModule(input_size=3, hidden_size=4, in_key="observation", out_key="embed").set_recurrent_mode(True)
