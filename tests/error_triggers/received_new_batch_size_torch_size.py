"""Dialogues (lists of role/content dicts) fed through a DataLoader into LLMEnv.from_dataloader."""


def trigger():
    import torch
    from torchrl.envs.llm import LLMEnv

    dialogs = [[{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}] for i in range(4)]
    loader = torch.utils.data.DataLoader(dialogs, batch_size=4, collate_fn=lambda b: {"text": b})
    LLMEnv.from_dataloader(loader, batch_size=4, str_key="text").reset()
