"""MaskedCategorical over [2, 3, 4, 5] logits with one [1, 5] mask for every batch element
(the shapes of pytorch/rl#3078): entropy() expands the mask from the left."""


def trigger():
    import torch
    from torchrl.modules import MaskedCategorical

    mask = torch.tensor([[True, False, True, False, True]])
    MaskedCategorical(logits=torch.randn(2, 3, 4, 5), mask=mask).entropy()
