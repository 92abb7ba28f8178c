"""The RLHF module moved to torchrl.data.llm (removed in 0.11)."""


def trigger():
    import torchrl.data.rlhf  # noqa: F401
