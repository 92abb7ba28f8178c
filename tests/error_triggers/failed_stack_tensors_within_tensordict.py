"""Indexing a ragged field of a lazy stack (log-probs of different lengths)."""


def trigger():
    import torch
    from tensordict import TensorDict, lazy_stack

    td = lazy_stack([TensorDict(log_probs=torch.zeros(3)), TensorDict(log_probs=torch.zeros(5))])
    td["log_probs"]
