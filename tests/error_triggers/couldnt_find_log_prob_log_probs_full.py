"""GRPOLoss on a generating wrapper's output, before any generate=False scoring pass."""


def trigger():
    import torch
    from _llm import generated_batch
    from torchrl.objectives.llm import GRPOLoss

    actor, td = generated_batch()
    td["advantage"] = torch.tensor([[[1.0]], [[-0.5]]])
    GRPOLoss(actor, masking_strategy="rlhf")(td)
