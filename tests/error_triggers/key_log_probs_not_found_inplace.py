"""GRPOLoss whose generate=False actor was built with inplace=False (as a
get_new_version of a wrapper sampling several responses per prompt is)."""


def trigger():
    import torch
    from _llm import model, scored_batch, tokenizer
    from torchrl.modules.llm import TransformersWrapper
    from torchrl.objectives.llm import GRPOLoss

    _, td = scored_batch(requires_grad=False)
    td["advantage"] = torch.tensor([[[1.0]], [[-0.5]]])
    actor = TransformersWrapper(model(), tokenizer=tokenizer(), input_mode="history", generate=False, inplace=False)
    GRPOLoss(actor, masking_strategy="rlhf")(td)
