"""GRPOLoss given the generation's response log-probs, zero-padded over the prompt, as
("log_probs", "full"): the actor re-renders the history with the template's end-of-turn
tokens, so it scores more tokens than were generated."""


def trigger():
    import torch
    from _llm import generated_batch
    from tensordict import TensorDict, lazy_stack
    from torchrl.objectives.llm import GRPOLoss

    actor, td = generated_batch()
    rows = [TensorDict(full=torch.cat([torch.zeros(p.numel()), lp]))
            for p, lp in zip(td.get(("tokens", "prompt"), as_list=True), td.get(("log_probs", "response"), as_list=True))]
    td.set("log_probs", lazy_stack(rows))
    td["advantage"] = torch.tensor([[[1.0]], [[-0.5]]])
    GRPOLoss(actor, masking_strategy="rlhf")(td)
