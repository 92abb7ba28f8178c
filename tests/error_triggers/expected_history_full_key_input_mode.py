"""A generate=False TransformersWrapper called on a ChatEnv reset (prompt only)."""


def trigger():
    from _llm import model, tokenizer
    from torchrl_skill.checks.llm.smoke_llm_grpo import make_chat_env
    from torchrl.modules.llm import TransformersWrapper

    scorer = TransformersWrapper(model(), tokenizer=tokenizer(), input_mode="history", generate=False)
    scorer(make_chat_env(tokenizer()).reset())
