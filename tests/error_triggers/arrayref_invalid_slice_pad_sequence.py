"""GRPOLoss given one advantage scalar per row ([batch]) instead of [batch, 1, 1]."""


def trigger():
    import torch
    from _llm import scored_batch
    from torchrl.objectives.llm import GRPOLoss

    actor, td = scored_batch(requires_grad=False)
    td["advantage"] = torch.tensor([1.0, -0.5])
    GRPOLoss(actor, masking_strategy="rlhf")(td)
