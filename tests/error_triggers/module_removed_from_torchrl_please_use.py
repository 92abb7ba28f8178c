"""The exploration wrapper that still imports but raises when built."""


def trigger():
    from _tiny import actor
    from torchrl.modules import AdditiveGaussianWrapper

    AdditiveGaussianWrapper(actor())
