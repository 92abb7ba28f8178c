"""TransformersWrapper(num_samples=2) with the default greedy decoding."""


def trigger():
    from _llm import model, tokenizer
    from torchrl_skill.checks.llm.smoke_llm_grpo import make_chat_env
    from torchrl.modules.llm import TransformersWrapper

    policy = TransformersWrapper(model(), tokenizer=tokenizer(), input_mode="history", num_samples=2,
                                 generate_kwargs={"max_new_tokens": 2})
    policy(make_chat_env(tokenizer()).reset())
