"""LLMCollector given the keyword its own FutureWarning recommends."""


def trigger():
    from _llm import model, tokenizer
    from torchrl_skill.checks.llm.smoke_llm_grpo import make_chat_env
    from torchrl.collectors.llm import LLMCollector
    from torchrl.modules.llm import TransformersWrapper

    policy = TransformersWrapper(model(), tokenizer=tokenizer(), input_mode="history", generate_kwargs={"max_new_tokens": 2})
    LLMCollector(make_chat_env(tokenizer()), policy=policy, dialog_turns_per_batch=2, auto_register_policy_transforms=True)
