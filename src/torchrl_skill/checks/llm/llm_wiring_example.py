"""A known-good GRPO wiring on a tiny Qwen2 model, and the steps it is built from.

check_llm_wiring.py runs on :func:`wiring` when given no TARGET; the test fixtures
(tests/fixtures/llm_wiring/) rebuild it with one step done wrong, so each broken wiring
differs from a good one in the lines that matter. Nothing is downloaded: the tokenizer and
models come from src/torchrl_skill/checks/llm/tiny_llm.py.

The loop it wires (torchrl 0.14.1): prompts repeated ``SAMPLES`` times (a GRPO group per
prompt) -> ``TransformersWrapper(generate=True)`` samples responses -> a ``generate=False``
wrapper scores them under ``torch.no_grad()`` (the behaviour log-probs ``("log_probs",
"full")``, aligned with ``("tokens", "full")``) -> a frozen reference scores the same
history into ``("next", "ref_log_probs", "full")`` -> a toy reward -> advantage
normalised within each group as ``MCAdvantage`` does ((r - mean) / std, shape
``[batch, 1, 1]``) -> ``GRPOLoss(actor, masking_strategy="rlhf", kl_to_ref_coeff=...)``.

The same step for every ``input_mode`` (:func:`mode_wiring`, run by ``check_llm_wiring.py
--example MODE``): the prompts once per row under the key the mode reads (``("history",
"prompt")``, ``("text", "prompt")`` or ``("tokens", "prompt")``) -> ``TransformersWrapper(...,
num_samples=SAMPLES)`` returns ``[n_prompts, SAMPLES]``, flattened prompt-major to
``[n_prompts * SAMPLES]`` -> reward at ``("next", "reward")`` ``[1, 1]`` per row and
``("next", "done")`` -> a replay buffer whose ``MCAdvantage(grpo_size=SAMPLES,
prompt_key=("tokens", "prompt"))`` writes the group-normalised advantage on ``extend`` ->
sample -> behaviour log-probs: "history" scores in place (the re-rendered history is what the
loss reads, ``masking_strategy="rlhf"``); "text"/"tokens" score with an ``inplace=False``
wrapper and keep only ``("log_probs", "full")``, so the generated ``("tokens", "prompt")``
that ``masking_strategy="sft"`` masks with survives.

Stable API (fixtures use it): ``PROMPTS``, ``SAMPLES``, ``MAX_NEW_TOKENS``, ``INPUT_MODES``,
:func:`prompts_td`, :func:`generating_policy`, :func:`scoring_actor`,
:func:`reference_actor`, :func:`generate`, :func:`score`, :func:`add_reference`,
:func:`rewards_of`, :func:`group_advantage`, :func:`wiring`, :func:`prompt_rows`,
:func:`sample_groups`, :func:`advantage_buffer`, :func:`score_for_loss`, :func:`mode_wiring`.
"""

from __future__ import annotations

PROMPTS = ["What is 2+2?", "Say hi."]
SAMPLES = 4  # responses per prompt: one GRPO group
MAX_NEW_TOKENS = 6
SYSTEM = "Be brief."
INPUT_MODES = ("history", "text", "tokens")  # TransformersWrapper input_mode values


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
    from torchrl_skill.checks.llm import tiny_llm as tiny
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


def prompt_rows(tokenizer, input_mode: str = "history", prompts=PROMPTS):
    """A TensorDict ``[len(prompts)]``, one prompt per row, under the key
    ``TransformersWrapper(input_mode=..., generate=True)`` reads: ``("history", "prompt")``
    (a ``ChatHistory``), ``("text", "prompt")`` (the chat template rendered with the
    generation prompt) or ``("tokens", "prompt")`` (that text's ids, ragged, lazy-stacked)."""
    import torch
    from tensordict import TensorDict, lazy_stack
    from torchrl.data.llm import History
    from torchrl.modules.llm import ChatHistory

    chats = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": p}] for p in prompts]
    n = len(chats)
    if input_mode == "history":
        return TensorDict(history=ChatHistory(prompt=History.from_chats(chats)), batch_size=(n,))
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    if input_mode == "text":
        return TensorDict(text=TensorDict(prompt=texts, batch_size=(n,)), batch_size=(n,))
    if input_mode == "tokens":
        ids = [torch.tensor(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
        return lazy_stack([TensorDict(tokens=TensorDict(prompt=i)) for i in ids])
    raise ValueError(f"input_mode must be one of {INPUT_MODES}, got {input_mode!r}")


def sample_groups(model, tokenizer, input_mode: str = "history", samples: int = SAMPLES, seed: int = 0, prompts=PROMPTS):
    """``(policy, rows)``: ``TransformersWrapper(generate=True, num_samples=samples)`` on
    :func:`prompt_rows`, seeded, no gradient. The wrapper returns ``[n_prompts, samples]``;
    ``rows`` is it flattened to ``[n_prompts * samples]`` (prompt-major: rows ``i*samples`` to
    ``i*samples + samples - 1`` share prompt ``i``), the layout the loss and the buffer take."""
    import torch
    from torchrl.modules.llm import TransformersWrapper

    policy = TransformersWrapper(model, tokenizer=tokenizer, input_mode=input_mode, generate=True, num_samples=samples,
                                 generate_kwargs={"max_new_tokens": MAX_NEW_TOKENS, "do_sample": True})
    torch.manual_seed(seed)
    with torch.no_grad():
        out = policy(prompt_rows(tokenizer, input_mode, prompts))
    return policy, out.reshape(-1)


def advantage_buffer(rows, tokenizer, samples: int = SAMPLES):
    """Write ``rows`` with a toy reward into a ``ReplayBuffer(LazyStackStorage)`` whose
    transform is ``MCAdvantage(grpo_size=samples, prompt_key=("tokens", "prompt"))``, and
    sample them all back (``SamplerWithoutReplacement``: each row once, in another order).

    The reward (share of digits/vowels in the decoded ``("tokens", "response")``) goes to
    ``("next", "reward")`` as ``[1, 1]`` per row with ``("next", "done")`` True: one
    one-step trajectory per response. MCAdvantage groups rows by the value of their prompt
    ids (tensor group keys are compared by value, torchrl 0.14.1 objectives/llm/grpo.py) and
    writes ``advantage`` ``[1, 1]`` per row = (r - group mean) / group sample std."""
    import torch
    from torchrl.data import LazyStackStorage, ReplayBuffer, SamplerWithoutReplacement
    from torchrl.objectives.llm import MCAdvantage

    texts = tokenizer.batch_decode(rows.get(("tokens", "response"), as_list=True), skip_special_tokens=True)
    reward = torch.tensor([sum(ch in "0123456789aeiouAEIOU" for ch in t) / max(len(t), 1) for t in texts])
    rows.set(("next", "reward"), reward.reshape(-1, 1, 1))
    rows.set(("next", "done"), torch.ones(len(texts), 1, 1, dtype=torch.bool))
    rb = ReplayBuffer(storage=LazyStackStorage(4 * len(texts)), sampler=SamplerWithoutReplacement(),
                      transform=MCAdvantage(grpo_size=samples, prompt_key=("tokens", "prompt")))
    rb.extend(rows)
    return rb.sample(len(rb))


def score_for_loss(model, tokenizer, batch, input_mode: str = "history"):
    """``(actor, batch)``: the loss's ``generate=False`` actor (default ``inplace=True``: GRPOLoss
    with an ``inplace=False`` actor raises ``KeyError: 'key "log_probs" not found'``) and the
    batch holding behaviour ``("log_probs", "full")``, computed under ``torch.no_grad()``.

    "history": scored in place; the re-rendered ``("tokens", "full")`` replaces the generated
    tokens, and ``masking_strategy="rlhf"`` masks its assistant tokens. "text"/"tokens": a
    second wrapper with ``inplace=False`` scores, and only ``("log_probs", "full")`` is
    written back, so ``("tokens", "prompt")`` survives for ``masking_strategy="sft"`` (in
    place it is dropped, and "sft" raises ``ValueError: Assistant mask not found``)."""
    import torch
    from torchrl.modules.llm import TransformersWrapper

    actor = TransformersWrapper(model, tokenizer=tokenizer, input_mode=input_mode, generate=False, return_log_probs=True)
    with torch.no_grad():
        if input_mode == "history":
            return actor, actor(batch)
        scorer = TransformersWrapper(model, tokenizer=tokenizer, input_mode=input_mode, generate=False,
                                     return_log_probs=True, inplace=False)
        batch.update(scorer(batch).select(("log_probs", "full")))
    return actor, batch


def mode_wiring(input_mode: str = "text", seed: int = 0, tokenizer=None):
    """A known-good GRPO step for one ``input_mode``: :func:`sample_groups` ->
    :func:`advantage_buffer` -> :func:`score_for_loss` -> ``GRPOLoss`` ("rlhf" for history,
    "sft" for text/tokens), in the shape check_llm_wiring.py reads. ``tokenizer``: another
    setup of the tiny one (the pad==eos fixture passes one)."""
    from torchrl_skill.checks.llm import tiny_llm as tiny
    import torch
    from torchrl.objectives.llm import GRPOLoss

    tok = tokenizer if tokenizer is not None else tiny.make_tokenizer()
    model = tiny.make_causal_lm(tok, seed=seed)
    policy, rows = sample_groups(model, tok, input_mode, seed=seed)
    actor, batch = score_for_loss(model, tok, advantage_buffer(rows, tok), input_mode)
    loss = GRPOLoss(actor, masking_strategy="rlhf" if input_mode == "history" else "sft")
    return {"policy": policy, "loss": loss, "rollout": batch, "samples_per_prompt": SAMPLES,
            "optimizer": torch.optim.Adam(loss.parameters(), lr=1e-3)}
