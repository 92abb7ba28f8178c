"""Tiny LLM pieces for the llm-vla-and-services triggers, from the sub-skill's own helpers
(src/torchrl_skill/checks/llm/tiny_llm.py: a character tokenizer and a Qwen2 model built from a config)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


@functools.lru_cache(maxsize=None)
def tokenizer():
    from torchrl_skill.checks.llm import tiny_llm as _tiny_llm

    return _tiny_llm.make_tokenizer()


def model():
    from torchrl_skill.checks.llm import tiny_llm as _tiny_llm

    return _tiny_llm.make_causal_lm(tokenizer(), seed=0)


def generated_batch():
    """``(actor, td)``: a ChatEnv reset and a 2-token generation (``("log_probs",
    "response")`` only), with a generate=False TransformersWrapper on the same model."""
    import torch
    from torchrl_skill.checks.llm.smoke_llm_grpo import make_chat_env
    from torchrl.modules.llm import TransformersWrapper

    lm = model()
    torch.manual_seed(0)
    policy = TransformersWrapper(lm, tokenizer=tokenizer(), input_mode="history", generate=True, return_log_probs=True,
                                 generate_kwargs={"max_new_tokens": 2, "do_sample": True})
    actor = TransformersWrapper(lm, tokenizer=tokenizer(), input_mode="history", generate=False, return_log_probs=True)
    return actor, policy(make_chat_env(tokenizer()).reset())


def scored_batch(requires_grad: bool):
    """``(actor, td)``: a ChatEnv reset, a 2-token generation, and its log-probs recomputed
    by a generate=False TransformersWrapper, with or without gradient tracking."""
    import torch
    from torchrl_skill.checks.llm.smoke_llm_grpo import make_chat_env
    from torchrl.modules.llm import TransformersWrapper

    lm = model()
    td = make_chat_env(tokenizer()).reset()
    torch.manual_seed(0)
    policy = TransformersWrapper(lm, tokenizer=tokenizer(), input_mode="history", generate=True, return_log_probs=True,
                                 generate_kwargs={"max_new_tokens": 2, "do_sample": True})
    td = policy(td)
    actor = TransformersWrapper(lm, tokenizer=tokenizer(), input_mode="history", generate=False, return_log_probs=True)
    with torch.set_grad_enabled(requires_grad):
        td = actor(td)
    return actor, td
