"""A spec class name removed in torchrl 0.11."""


def trigger():
    from torchrl.data import CompositeSpec  # noqa: F401
