"""A known-good GRPO wiring on a tiny Qwen2 model, and the steps it is built from.

check_llm_wiring.py runs on :func:`wiring` when given no TARGET; the test fixtures
(tests/fixtures/llm_wiring/) rebuild it with one step done wrong, so each broken wiring
differs from a good one in the lines that matter. Nothing is downloaded: the tokenizer and
models come from scripts/_tiny_llm.py.

The loop it wires (torchrl 0.14.1): prompts repeated ``SAMPLES`` times (a GRPO group per
prompt) -> ``TransformersWrapper(generate=True)`` samples responses -> a ``generate=False``
wrapper scores them under ``torch.no_grad()`` (the behaviour log-probs ``("log_probs",
"full")``, aligned with ``("tokens", "full")``) -> a frozen reference scores the same
history into ``("next", "ref_log_probs", "full")`` -> a toy reward -> advantage
normalised within each group as ``MCAdvantage`` does ((r - mean) / std, shape
``[batch, 1, 1]``) -> ``GRPOLoss(actor, masking_strategy="rlhf", kl_to_ref_coeff=...)``.

Stable API (fixtures use it): ``PROMPTS``, ``SAMPLES``, ``MAX_NEW_TOKENS``,
:func:`prompts_td`, :func:`generating_policy`, :func:`scoring_actor`,
:func:`reference_actor`, :func:`generate`, :func:`score`, :func:`add_reference`,
:func:`rewards_of`, :func:`group_advantage`, :func:`wiring`.
"""

from __future__ import annotations

PROMPTS = ["What is 2+2?", "Say hi."]
SAMPLES = 4  # responses per prompt: one GRPO group
MAX_NEW_TOKENS = 6
SYSTEM = "Be brief."


def prompts_td(prompts=PROMPTS, samples: int = SAMPLES):
    """A lazy-stacked TensorDict ``[len(prompts) * samples]`` holding ``("history",
    "prompt")`` (system + user), each prompt repeated ``samples`` times in a row.

    Lazy-stacked because the wrapper writes ragged fields (different token counts per row)
    that a dense TensorDict cannot hold (GRPOLoss then fails with "Failed to stack tensors
    within a tensordict")."""
    from tensordict import TensorDict
    from torchrl.data.llm import History
    from torchrl.modules.llm import ChatHistory

    chats = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": p}] for p in prompts for _ in range(samples)]
    td = TensorDict(history=ChatHistory(prompt=History.from_chats(chats)), batch_size=(len(chats),))
    return td.to_lazystack(0)


def generating_policy(model, tokenizer, **kwargs):
    """``TransformersWrapper(generate=True, return_log_probs=True)`` sampling ``MAX_NEW_TOKENS``."""
    from torchrl.modules.llm import TransformersWrapper

    gen_kwargs = {"max_new_tokens": MAX_NEW_TOKENS, "do_sample": True}
    return TransformersWrapper(model, tokenizer=tokenizer, input_mode="history", generate=True,
                               return_log_probs=True, generate_kwargs=gen_kwargs, **kwargs)


def scoring_actor(model, tokenizer, **kwargs):
    """``TransformersWrapper(generate=False)``: recomputes ``("log_probs", "full")`` from
    ``("history", "full")``; the loss's actor. A fresh wrapper, not
    ``policy.get_new_version(generate=False)``, which keeps the generating input key and
    ``num_return_sequences`` (tests/test_llm_vla_and_services_behaviours.py)."""
    from torchrl.modules.llm import TransformersWrapper

    return TransformersWrapper(model, tokenizer=tokenizer, input_mode="history", generate=False, return_log_probs=True, **kwargs)


def reference_actor(model, tokenizer):
    """A frozen ``generate=False`` wrapper writing ``("ref_log_probs", "full")`` into a new
    TensorDict (``inplace=False``), so it never rewrites the batch's tokens."""
    model.requires_grad_(False)
    return scoring_actor(model.eval(), tokenizer, log_probs_key="ref_log_probs", inplace=False)


def generate(policy, seed: int = 0, prompts=PROMPTS, samples: int = SAMPLES):
    """Sample one batch of responses (no gradient), seeded."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        return policy(prompts_td(prompts, samples))


def score(actor, batch):
    """Behaviour log-probs: ``actor`` run on ``batch`` under ``torch.no_grad()``, in place
    (its default): ``("tokens", "full")`` and ``("log_probs", "full")`` are then the
    re-rendered history and its log-probs, aligned token for token."""
    import torch

    with torch.no_grad():
        return actor(batch)


def add_reference(reference, batch):
    """Write the reference's log-probs on the batch's tokens at ``("next", "ref_log_probs",
    "full")``, the key ``GRPOLoss(kl_to_ref_coeff=...)`` reads."""
    import torch

    with torch.no_grad():
        out = reference(batch.copy())
    batch.set("next", out.select(("ref_log_probs", "full")))
    return batch


def rewards_of(batch):
    """A toy reward in [0, 1] per row (``[batch]``): the share of digits and vowels in the
    response text. Varies within a group, so GRPO has a signal."""
    import torch

    texts = batch.get(("history", "full")).content
    out = []
    for row in texts:
        answer = str(row[-1])
        out.append(sum(ch in "0123456789aeiouAEIOU" for ch in answer) / max(len(answer), 1))
    return torch.tensor(out)


def group_advantage(rewards, samples: int = SAMPLES):
    """``(r - group mean) / group std`` over consecutive groups of ``samples`` rows, shape
    ``[batch, 1, 1]``: MCAdvantage's formula (torchrl/objectives/llm/grpo.py,
    ``_trajectory_advantage``: unbiased std clamped at 1e-6)."""
    groups = rewards.reshape(-1, samples)
    adv = (groups - groups.mean(-1, keepdim=True)) / groups.std(-1, keepdim=True).clamp_min(1e-6)
    return adv.reshape(-1, 1, 1)


def build(seed: int = 0, kl_to_ref_coeff: float | None = 0.05):
    """``(tokenizer, model, policy, actor, reference, loss)``: the pieces, not yet run."""
    import _tiny_llm as tiny
    from torchrl.objectives.llm import GRPOLoss

    tok = tiny.make_tokenizer()
    model = tiny.make_causal_lm(tok, seed=seed)
    policy = generating_policy(model, tok)
    actor = scoring_actor(model, tok)
    reference = reference_actor(tiny.make_causal_lm(tok, seed=seed), tok) if kl_to_ref_coeff else None
    loss = GRPOLoss(actor, masking_strategy="rlhf", kl_to_ref_coeff=kl_to_ref_coeff)
    return tok, model, policy, actor, reference, loss


def wiring(seed: int = 0):
    """The known-good GRPO wiring, in the shape check_llm_wiring.py reads (see its --help)."""
    import torch

    _, model, policy, actor, reference, loss = build(seed)
    batch = score(actor, generate(policy, seed))
    add_reference(reference, batch)
    batch.set("advantage", group_advantage(rewards_of(batch)))
    return {
        "policy": policy,
        "loss": loss,
        "reference": reference,
        "rollout": batch,
        "samples_per_prompt": SAMPLES,
        "optimizer": torch.optim.Adam(loss.parameters(), lr=1e-3),
    }
