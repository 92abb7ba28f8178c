"""SFTLoss called on a ChatEnv reset, whose ("history") holds only "prompt"."""


def trigger():
    from _llm import model, tokenizer
    from torchrl_skill.checks.llm.smoke_llm_grpo import make_chat_env
    from torchrl.modules.llm import TransformersWrapper
    from torchrl.objectives.llm import SFTLoss

    actor = TransformersWrapper(model(), tokenizer=tokenizer(), input_mode="history", generate=False)
    SFTLoss(actor, tokenizer=tokenizer())(make_chat_env(tokenizer()).reset())
