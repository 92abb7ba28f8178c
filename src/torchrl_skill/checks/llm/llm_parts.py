"""What the LLM checks measure, apart from how they report: the user's wiring read into
one shape, the rows of a rollout, where each response sits in the tokens the loss scores,
a plain forward pass, the groups of rows that share a prompt, and the comparisons built on
them (stored log-probs vs a forward, the loss's step-0 log ratio and mask). Used by
sub-skills/llm-vla-and-services/scripts/check_llm_wiring.py and the auditor's LLM rows
(src/torchrl_skill/audit/l_*.py), so both read a batch the same way.

Nothing here goes through torchrl's log-prob code: the forward is the Hugging Face model
called on one unpadded sequence, and the response positions come from the generation's
own ``("tokens", "prompt")``/``("tokens", "response")`` or, when a ``generate=False``
wrapper replaced them in place, from the chat template and the last assistant message of
``("history", "full")``. Verified with torchrl 0.14.1 and transformers 5.24.0.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from torchrl_skill.report import skill_report as sr

ATOL = 1e-3  # log-prob tolerance: float32 recomputes agree to ~1e-6 here; a ratio off by 0.1% is a fault
HELP_SHAPE = (
    "a dict (or an object with these attributes): 'policy' (the generating wrapper), 'loss' "
    "(GRPOLoss or SFTLoss), 'rollout' (the TensorDict the loss is called on, or a function "
    "returning it, called with the policy when it takes one argument), and optionally "
    "'reference' (a generate=False wrapper), 'samples_per_prompt' (int), 'optimizer', "
    "'frozen' (parameter-name prefixes you froze)"
)


@dataclass
class Wiring:
    """The user's wiring, read from what TARGET returned (see :data:`HELP_SHAPE`)."""

    policy: object
    loss: object
    rollout: object
    reference: object = None
    samples_per_prompt: int | None = None
    optimizer: object = None
    frozen: tuple = field(default_factory=tuple)
    source: str = ""

    @property
    def is_grpo(self) -> bool:
        """True for GRPOLoss and its subclasses (DAPO, CISPOLoss): they read behaviour
        log-probs and an advantage."""
        keys = getattr(self.loss, "tensor_keys", None)
        return keys is not None and hasattr(keys, "advantage") and hasattr(keys, "sample_log_prob")

    @property
    def actor(self):
        return getattr(self.loss, "actor_network", None)


def read_wiring(value, source: str) -> Wiring:
    """Build a :class:`Wiring` from a dict or object; ``CheckFailed`` naming what is missing."""
    get = value.get if isinstance(value, dict) else (lambda name, default=None: getattr(value, name, default))
    missing = [name for name in ("policy", "loss", "rollout") if get(name) is None]
    if missing:
        raise sr.CheckFailed(f"{source} returned {type(value).__name__} without {', '.join(missing)}; return {HELP_SHAPE}")
    rollout = get("rollout")
    if callable(rollout) and not hasattr(rollout, "batch_size"):
        takes = [p for p in inspect.signature(rollout).parameters.values() if p.default is p.empty]
        rollout = rollout(get("policy")) if takes else rollout()
    if not hasattr(rollout, "batch_size"):
        raise sr.CheckFailed(f"the rollout is {type(rollout).__name__}, not a TensorDict; return the batch the loss is called on")
    samples = get("samples_per_prompt")
    return Wiring(get("policy"), get("loss"), rows_of(rollout), get("reference"),
                  int(samples) if samples is not None else None, get("optimizer"), tuple(get("frozen") or ()), source)


def rows_of(td):
    """The rollout as one row per sequence: a ``[prompts, samples]`` batch (what a wrapper
    with ``num_samples`` returns) is flattened to ``[prompts * samples]``."""
    return td.reshape(-1) if td.ndim > 1 else td


def token_rows(td, key, attention=("masks", "all_attention_mask")) -> list | None:
    """``key`` as a list of 1-D tensors, one per row; padded rows (``pad_output=True``) are
    cut to their attention mask. None when the key is absent or holds None."""
    try:
        rows = td.get(key, None, as_list=True)
    except Exception:
        return None
    if rows is None or any(r is None for r in rows):
        return None
    mask = td.get(attention, None, as_list=True) if key[-1] == "full" else None
    if mask is not None and all(m is not None and m.shape == r.shape for m, r in zip(mask, rows)):
        rows = [r[m.bool()] for r, m in zip(rows, mask)]
    return [r.reshape(-1) for r in rows]


def model_of(wrapper):
    """The ``torch.nn.Module`` a wrapper runs (``TransformersWrapper.model``), or None (a vLLM
    engine, an SGLang server)."""
    import torch

    model = getattr(wrapper, "model", None)
    return model if isinstance(model, torch.nn.Module) else None


def forward_log_probs(model, ids):
    """``lp[t] = log p(ids[t] | ids[:t])`` from one forward of ``model`` on the unpadded
    sequence ``ids`` (no attention mask, no position offset), ``lp[0] = nan``. Float32,
    no gradient, on the model's device; returned on CPU."""
    import torch

    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(ids.to(device)[None]).logits[0].float().log_softmax(-1)
    lp = logits[:-1].gather(-1, ids.to(device)[1:, None]).squeeze(-1).cpu()
    return torch.cat([torch.tensor([float("nan")]), lp])


@dataclass
class Span:
    """Where one response sits in a row of the tokens the loss scores: ``start``, ``length``,
    ``eos`` (its last generated token is the tokenizer's end-of-turn id) and ``source``."""

    start: int
    length: int
    eos: bool
    source: str

    @property
    def positions(self) -> range:
        return range(self.start, self.start + self.length)


def _render(history, tokenizer, actor, generation_prompt: bool) -> list[int]:
    kwargs = {"tokenizer": tokenizer, "add_generation_prompt": generation_prompt}
    for name in ("chat_template_name", "chat_template"):
        if getattr(actor, name, None) is not None:
            kwargs[name] = getattr(actor, name)
    text = history.apply_chat_template(**kwargs)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def response_spans(td, tokens: list, tokenizer, actor, every_assistant: bool = False) -> list[list[Span]]:
    """Per row, the spans of the response tokens inside ``tokens[row]``.

    From the generation (``("tokens", "prompt")`` and ``("tokens", "response")``, pad ids
    dropped) when both are there; else from ``("history", "full")``: the prompt is the
    history before an assistant message rendered with the generation prompt, the response
    is that message's content tokenized alone. ``every_assistant``: every assistant
    message (SFT), else the last one (the response GRPO sampled). Raises ``CheckFailed``
    when the tokens at those positions are not the response's: the loss then scores other
    tokens than were generated (a chat template or tokenizer that does not round-trip).
    """
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    prompts, responses = token_rows(td, ("tokens", "prompt")), token_rows(td, ("tokens", "response"))
    out = []
    if prompts is not None and responses is not None and not every_assistant:
        for i, (p, r, full) in enumerate(zip(prompts, responses, tokens)):
            r = r[r != pad] if pad is not None else r
            want = p.tolist() + r.tolist()
            if full[: len(want)].tolist() != want:
                cause = pad_is_eos(tokenizer, p.tolist())
                raise sr.CheckFailed(
                    f"row {i}: the loss scores tokens that differ from the generated prompt+response "
                    f"(first difference at position {_first_diff(full.tolist(), want)}); "
                    + (cause or "the history was re-rendered or re-tokenized into other ids; score the generated tokens "
                       "(input_mode='tokens') or use a tokenizer and chat template that round-trip"))
            out.append([Span(len(p), len(r), bool(len(r)) and int(r[-1]) == eos, "the generated tokens.prompt/response")])
        return out
    histories = td.get(("history", "full"), None)
    if histories is None:
        raise sr.CheckFailed("the rollout has neither ('tokens', 'prompt')/('tokens', 'response') nor ('history', 'full'): "
                             "cannot tell where the responses are; pass the generating wrapper's output to the loss")
    for i, full in enumerate(tokens):
        h = histories[i]
        roles = list(h.role)
        turns = [k for k, role in enumerate(roles) if role == "assistant"]
        if not turns:
            raise sr.CheckFailed(f"row {i}: ('history', 'full') has no assistant message (roles {roles})")
        spans = []
        for k in turns if every_assistant else turns[-1:]:
            start = len(_render(h[:k], tokenizer, actor, True))
            body = tokenizer(str(h[k].content), add_special_tokens=False)["input_ids"]
            if full[start:start + len(body)].tolist() != body:
                raise sr.CheckFailed(
                    f"row {i}: the assistant message {k} is not at tokens {start}..{start + len(body) - 1} of the scored "
                    "sequence: the chat template renders the prompt differently from the sequence the loss scores")
            spans.append(Span(start, len(body), False, "the assistant messages of ('history', 'full')"))
        out.append(spans)
    return out


def pad_is_eos(tokenizer, prompt_ids=None) -> str:
    """The cause, when the tokenizer's pad id is its eos id; "" otherwise.

    TransformersWrapper (torchrl 0.14.1, modules/llm/policies/transformers_wrapper.py) sets
    ``tokenizer.pad_token = tokenizer.eos_token`` itself when the tokenizer has no pad token,
    and builds ``("tokens", "full")`` and its attention masks from ``tokens != pad_token_id``:
    every eos id is dropped as padding, the chat template's end-of-turn tokens in the prompt
    included. In "history" mode the decoded full text is then shorter than the prompt text and
    every response comes back empty (tests/test_llm_vla_and_services_wiring.py). ``prompt_ids``
    (one row's prompt) adds how many eos ids it holds."""
    pad, eos = getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)
    if pad is None or pad != eos:
        return ""
    inside = f"; a prompt holds it {prompt_ids.count(eos)} times (the chat template's end of turn)" if prompt_ids else ""
    return (f"tokenizer.pad_token_id == eos_token_id ({eos}, {tokenizer.eos_token!r}){inside}: TransformersWrapper takes "
            "tokens != pad_token_id as the attention mask, so every eos id is dropped as padding and the responses lose "
            "their tokens (TransformersWrapper sets pad = eos itself when the tokenizer has no pad token); fix: a pad token "
            "distinct from eos before building the wrappers: tokenizer.pad_token = an unused special token of the "
            "vocabulary, or tokenizer.add_special_tokens({'pad_token': '<pad>'}) then "
            "model.resize_token_embeddings(len(tokenizer))")


def no_response_tokens(td, tokenizer) -> str:
    """Why a rollout's responses hold no token at all: pad == eos (:func:`pad_is_eos`), else
    the generation itself (``max_new_tokens``, an eos sampled first). For a check that
    counted 0 response tokens: a pass on zero evidence is a fault, never a pass."""
    prompts = token_rows(td, ("tokens", "prompt"))
    cause = pad_is_eos(tokenizer, prompts[0].tolist() if prompts else None)
    return cause or ("the responses are empty: check generate_kwargs max_new_tokens > 0 and that the rollout holds the "
                     "generating wrapper's output (('tokens', 'response') or the assistant messages of ('history', 'full'))")


def _first_diff(a: list, b: list) -> int:
    return next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def prompt_keys(td, tokenizer=None) -> list:
    """One hashable key per row naming its prompt: the generated ``("tokens", "prompt")`` ids
    when present, else the messages before the last one of ``("history", "full")``, else
    ``("history", "prompt")``. Rows with equal keys form a GRPO group."""
    prompts = token_rows(td, ("tokens", "prompt"))
    if prompts is not None:
        return [tuple(p.tolist()) for p in prompts]
    for key, drop_last in ((("history", "full"), True), (("history", "prompt"), False)):
        histories = td.get(key, None)
        if histories is not None:
            keys = []
            for i in range(td.batch_size[0]):
                h = histories[i]
                pairs = list(zip(list(h.role), [str(c) for c in h.content]))
                keys.append(tuple(pairs[:-1] if drop_last else pairs))
            return keys
    raise sr.CheckFailed("the rollout holds no ('tokens', 'prompt') and no ('history', ...): cannot tell which rows share a prompt")


def groups_of(keys: list) -> list[list[int]]:
    """Row indices grouped by equal prompt key, in first-seen order."""
    groups: dict = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def describe_prompt(key) -> str:
    """A short label for a prompt key (the user message when the key holds messages)."""
    if key and isinstance(key[0], tuple):
        return repr(key[-1][1][:30])
    return f"{len(key)} prompt tokens"


def known_cause(err: BaseException) -> str:
    """``"; fix: ..."`` from the error index when it knows ``err`` (written once, there)."""
    from torchrl_skill.explain import error_index as _error_index

    hits = _error_index.match(f"{type(err).__name__}: {sr.first_line(err)}")
    return f"; fix: {hits[0][1].plain('fix')}" if hits and hits[0][0] >= 100 else ""


def compare_log_probs(stored_rows, tokens, spans, model, what: str) -> tuple[int, float, str]:
    """Token-by-token comparison of stored log-probs with a fresh forward over the response
    positions: ``(tokens compared, worst |diff|, the worst one described)``."""
    worst, where, count = 0.0, "", 0
    for i, (stored, ids, row) in enumerate(zip(stored_rows, tokens, spans)):
        if stored.numel() != ids.numel():
            raise sr.CheckFailed(
                f"row {i}: {what} holds {stored.numel()} log-probs for {ids.numel()} scored tokens: not aligned token for "
                "token (generation ('log_probs', 'response') covers the response only; a re-rendered history adds the "
                "template's end-of-turn tokens); fix: compute them with a generate=False wrapper on the same batch, "
                "under torch.no_grad()")
        fresh = forward_log_probs(model, ids)
        for span in row:
            for j, t in enumerate(span.positions):
                count += 1
                diff = abs(float(stored[t]) - float(fresh[t]))
                if not diff <= worst:  # also catches nan
                    worst, where = diff, describe_diff(i, j, t, stored, fresh)
    return count, worst, where


def describe_diff(i, j, t, stored, fresh) -> str:
    """Row ``i``, response token ``j`` at position ``t``: stored vs forward, with the likely
    cause when it is one of the known ones (a 0.0 first token, a one-token shift)."""
    s, f = float(stored[t]), float(fresh[t])
    hint = ""
    if j == 0 and s == 0.0:
        hint = (" (the first response token is 0.0: TransformersWrapper(generate=True) sets it so on torchrl 0.14.1; "
                "recompute behaviour log-probs with a generate=False wrapper under torch.no_grad())")
    elif 0 < t < stored.numel() - 1 and (abs(s - float(fresh[t + 1])) < ATOL or abs(s - float(fresh[t - 1])) < ATOL):
        hint = " (it equals the forward's value one token away: the stored log-probs are shifted by one token)"
    return f"row {i}, response token {j} (position {t}): stored {s:.4f}, forward {f:.4f}{hint}"


def step0_ratio(wiring) -> tuple[float, str]:
    """The largest |log ratio| the loss computes over its mask before any update, and where.

    Reads ``GRPOLoss._log_weight`` (torchrl/objectives/llm/grpo.py): the same log-weights
    and mask its forward uses (0.14 returns the mask; 0.11-0.13 return
    ``(log_weight, dist, kl_approx)`` and the forward reads ``dist.mask``); rows are
    left-padded to the longest one."""
    import torch

    td = wiring.rollout.copy()
    try:
        with torch.no_grad():
            # adv_shape only reshapes composite log-weights: the advantage itself is check_advantage's
            out = wiring.loss._log_weight(td, adv_shape=td.batch_size)
        log_weight, mask = out[0], out[3] if len(out) > 3 else out[1].mask
    except Exception as err:
        raise sr.CheckFailed(f"{type(wiring.loss).__name__} on the rollout raised {sr.first_line(err)}{known_cause(err)}") from None
    lw = torch.where(mask, log_weight.squeeze(-1), 0.0).abs()
    if not lw.numel() or float(lw.max()) == 0.0:
        return 0.0, ""
    i, col = divmod(int(lw.argmax()), lw.shape[-1])
    lengths = [t.numel() for t in token_rows(td, wiring.loss.tensor_keys.action)]
    t = col - (lw.shape[-1] - lengths[i])
    what = "the sequence's first token, which torchrl scores 0.0" if t == 0 else "a token the mask includes"
    return float(lw.max()), f"row {i}, position {t} ({what})"


def loss_mask(wiring):
    """``(rows, tokens, scored)``: the per-row mask the loss trains on, cut to each row's own
    tokens (left padding dropped; padding inside the mask is a ``CheckFailed``), those
    tokens as the loss's actor renders them, and the actor's output. GRPO: the mask
    ``GRPOLoss._get_cur_log_prob`` builds; SFTLoss: the assistant masks it reads."""
    import torch

    work = wiring.rollout.copy()
    with torch.no_grad():
        if wiring.is_grpo:
            _, dist, _ = wiring.loss._get_cur_log_prob(work)  # the mask GRPOLoss builds (grpo.py, 0.14.1)
            mask = dist.mask
        # the actor scores in place, replacing the ('tokens', ...) entry; a clone keeps the rollout's own
        # generated ('tokens', 'prompt'), which the later checks read, out of its reach
        scored = wiring.actor(wiring.rollout.clone())
    tokens = token_rows(scored, ("tokens", "full"))
    if not wiring.is_grpo:  # SFTLoss.forward: stored assistant masks, else the template's, & attention
        assist = scored.get(("masks", "all_assistant_mask"), None, as_list=True)
        rows = [a.bool() for a in assist]
        return rows, tokens, scored
    width = mask.shape[-1]
    rows, pads = [], []
    for i, ids in enumerate(tokens):
        rows.append(mask[i, width - ids.numel():].bool())
        pads.append(int(mask[i, : width - ids.numel()].sum()))
    if any(pads):
        raise sr.CheckFailed(f"the loss's mask covers {sum(pads)} padding positions (rows {[i for i, p in enumerate(pads) if p]})")
    return rows, tokens, scored
