"""Check a GRPO/SFT post-training wiring on your own (tiny) model before a GPU-day is spent on it.

TARGET is FILE.py:function (or package.module:function), called with no arguments. It
returns a dict (or an object with these attributes): 'policy' (the generating wrapper,
e.g. TransformersWrapper(generate=True)), 'loss' (GRPOLoss, DAPO, CISPOLoss or SFTLoss),
'rollout' (the TensorDict the loss is called on, as your loop builds it, or a function
returning it, given the policy when it takes one argument), and optionally 'reference'
(the generate=False wrapper of the KL reference), 'samples_per_prompt' (the group size you
asked for), 'optimizer' (default: Adam(loss.parameters(), lr=1e-3)) and 'frozen'
(parameter-name prefixes you froze). Checks: the stored behaviour log-probs equal a fresh
forward of the model on the same tokens, and the loss's ratio is 1 at step 0; the loss's
mask covers exactly the response tokens; one advantage per sequence, normalised within
each prompt's group (GRPO); one update moves the trainable tensors and nothing frozen; the
reference is frozen, shares the tokenizer and aligns; samples per prompt. Without TARGET:
the bundled known-good GRPO wiring (src/torchrl_skill/checks/llm/llm_wiring_example.py). Model weights and the
optimizer are restored after the update check. vLLM/SGLang policies: the same checks, run
against the trainer's Hugging Face model (not verified here).
"""

from __future__ import annotations


from torchrl_skill.runtime import user_code as _user_code  # noqa: E402
from torchrl_skill.report import skill_report as sr
from torchrl_skill.runtime.threads import torch_threads  # noqa: E402

EXAMPLE = (
    "python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/check_llm_wiring.py my_grpo.py:wiring --json\n"
    "  (wiring() returns {'policy': ..., 'loss': ..., 'rollout': ..., 'reference': ..., 'samples_per_prompt': 4})"
)


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("target", nargs="?", metavar="TARGET", help="FILE.py:function or package.module:function returning the wiring (see above)")
    parser.add_argument("--example", choices=("history", "text", "tokens"), default="history",
                        help="without TARGET: which bundled known-good wiring runs, by TransformersWrapper input_mode "
                             "(history: repeated prompts, in-place scoring, masking_strategy='rlhf'; text/tokens: "
                             "num_samples, MCAdvantage in a replay buffer, masking_strategy='sft')")
    sr.add_timeout_flag(parser)
    return parser


def check_load(args):
    """Call TARGET (or the bundled example) and read what it returns."""
    from torchrl_skill.checks.llm import llm_parts as parts

    if args.target is None:
        from torchrl_skill.checks.llm import llm_wiring_example as ex

        value = ex.wiring() if args.example == "history" else ex.mode_wiring(args.example)
        wiring = parts.read_wiring(value, "_llm_wiring_example")
        sr.evidence(wiring.rollout.batch_size[0], "rollout rows")
        return sr.Passed(f"bundled known-good GRPO wiring, input_mode={args.example!r} (src/torchrl_skill/checks/llm/llm_wiring_example.py)", wiring)
    target = _user_code.parse_target(args.target, form="FILE.py:function or package.module:function")
    fn = _user_code.load_attr(target)
    if not callable(fn):
        raise sr.CheckFailed(f"{target.label} is {type(fn).__name__}, not a function; point TARGET at the function that builds the wiring")
    call = f"{target.attr}()"
    try:
        value = _user_code.call_user(fn, call)
    except (sr.CheckFailed, _user_code.TimeLimitExceeded):
        raise
    except Exception as err:
        raise sr.CheckFailed(f"{call} raised {sr.first_line(err)} (at {_user_code.error_site(err)}); fix that line, then rerun") from None
    wiring = parts.read_wiring(value, call)
    sr.expect(wiring.rollout.batch_size[0] > 0, f"{call}: the rollout has 0 rows: nothing to check; return the batch the loss is called on")
    sr.evidence(wiring.rollout.batch_size[0], "rollout rows")
    return sr.Passed(f"{call}: {type(wiring.policy).__name__} policy, {type(wiring.loss).__name__}, "
                     f"rollout of {wiring.rollout.batch_size[0]} rows", wiring)


def _run_loss(wiring, grad: bool):
    from torchrl_skill.checks.llm import llm_parts as parts
    import torch

    try:
        with torch.set_grad_enabled(grad):
            return wiring.loss(wiring.rollout.copy())
    except Exception as err:
        raise sr.CheckFailed(f"{type(wiring.loss).__name__} on the rollout raised {sr.first_line(err)}{parts.known_cause(err)}") from None


def _scored(wiring):
    """``(tokens, spans)``: the rows the loss scores and where each response sits in them."""
    from torchrl_skill.checks.llm import llm_parts as parts

    key = wiring.loss.tensor_keys.action
    tokens = parts.token_rows(wiring.rollout, key)
    if tokens is None:
        raise sr.CheckFailed(f"the rollout has no {key} (GRPOLoss tensor_keys.action); pass the wrappers' output to the loss")
    return tokens, parts.response_spans(wiring.rollout, tokens, wiring.policy.tokenizer, wiring.actor)


def check_behaviour_logprobs(wiring):
    """Stored behaviour log-probs vs a fresh forward, token by token; the loss's ratio at step 0."""
    from torchrl_skill.checks.llm import llm_parts as parts

    if not wiring.is_grpo:
        raise sr.CheckSkipped(f"{type(wiring.loss).__name__} reads no behaviour log-probs")
    key = wiring.loss.tensor_keys.sample_log_prob
    stored = parts.token_rows(wiring.rollout, key)
    if stored is None:
        raise sr.CheckFailed(f"Couldn't find the log-prob {key} in the input data (GRPOLoss raises this KeyError); "
                             "fix: score the batch with TransformersWrapper(generate=False) under torch.no_grad() before the loss")
    if any(s.requires_grad for s in stored):
        raise sr.CheckFailed(f"tensordict stored {key} requires grad (GRPOLoss raises this RuntimeError); fix: compute them under torch.no_grad()")
    model = parts.model_of(wiring.actor) or parts.model_of(wiring.policy)
    tokens, spans = _scored(wiring)
    count, worst, where = parts.compare_log_probs(stored, tokens, spans, model, str(key))
    sr.expect(count > 0, f"0 response tokens to compare in {len(tokens)} rows (nothing checked): "
                         f"{parts.no_response_tokens(wiring.rollout, wiring.policy.tokenizer)}")
    sr.expect(worst <= parts.ATOL, f"stored {key} differ from a forward of {type(model).__name__} on the same tokens by up to "
                             f"{worst:.3g} at {where}: the ratio is not 1 at step 0, so the first update is biased")
    ratio, at = parts.step0_ratio(wiring)
    sr.expect(ratio <= parts.ATOL, f"{type(wiring.loss).__name__}'s own log-ratio at step 0 reaches {ratio:.3g} at {at}: the loss "
                             "recomputes other log-probs than the stored ones there, so the first update is biased")
    sr.evidence(count, "response tokens compared")
    return (f"stored {key} equal a forward of {type(model).__name__} on the same tokens over {count} response tokens in "
            f"{len(tokens)} rows (max |diff| {worst:.1e}, from {spans[0][0].source}); {type(wiring.loss).__name__}'s "
            f"log-ratio at step 0 is at most {ratio:.1e} over its mask (ratio 1)")


def check_loss_mask(wiring):
    """The loss's mask covers exactly the response (assistant) tokens: no prompt, no padding."""
    from torchrl_skill.checks.llm import llm_parts as parts

    rows, tokens, scored = parts.loss_mask(wiring)
    tok = wiring.policy.tokenizer
    cause = parts.pad_is_eos(tok)
    # text/tokens modes: pad == eos drops every eos id from the scored tokens, the response's own stop
    # token included, while the response spans still line up (history mode: the responses are empty, below)
    eos_in = sum(int((t == tok.eos_token_id).sum()) for t in tokens) if cause else 1
    sr.expect(eos_in > 0, f"the {len(rows)} scored rows hold 0 eos ids (no end of turn, no stop token to train): {cause}")
    spans = parts.response_spans(wiring.rollout if wiring.is_grpo else scored, tokens, tok,
                                 wiring.actor, every_assistant=not wiring.is_grpo)
    faults, counted, eos_left = [], 0, 0
    for i, (mask, row) in enumerate(zip(rows, spans)):
        want = {t for span in row for t in span.positions}
        eos = {span.start + span.length - 1 for span in row if span.eos}
        got = {int(t) for t in mask.nonzero().flatten()}
        first = min(span.start for span in row)
        prompt = sorted(t for t in got if t < first)
        missing = sorted(want - got - eos)
        extra = sorted(got - want - set(prompt))
        eos_left += len(eos - got)
        counted += len(want & got)
        if prompt or missing or extra:
            faults.append(f"row {i}: {len(prompt)} prompt tokens in the mask, {len(missing)} response tokens missing, "
                          f"{len(extra)} tokens after the response in it")
    sr.expect(counted > 0, f"the loss's mask holds 0 response tokens in {len(rows)} rows (nothing trains): "
                           f"{parts.no_response_tokens(wiring.rollout, tok)}")
    strategy = getattr(wiring.loss, "masking_strategy", None)
    what = f"{type(wiring.loss).__name__}(masking_strategy={strategy!r})" if strategy else f"{type(wiring.loss).__name__} (assistant masks)"
    sr.expect(not faults, f"{what} trains on other tokens than the "
                          f"responses: {'; '.join(faults[:3])}; fix: masking_strategy='rlhf' (assistant tokens of "
                          "('history', 'full')), or 'sft' with the generation's ('tokens', 'prompt') kept; for assistant masks, a "
                          "chat template whose {% generation %} markers wrap the message content only")
    note = f"; the generated end-of-turn token is outside the mask in {eos_left} rows (its stop decision is not trained)" if eos_left else ""
    sr.evidence(counted, "response tokens the mask covers")
    return (f"{what} masks exactly the {counted} response tokens of "
            f"{len(rows)} rows (from {spans[0][0].source}): no prompt token, no padding{note}")


def check_advantage(wiring):
    """One advantage per sequence in the shape GRPOLoss broadcasts; normalised within groups."""
    from torchrl_skill.checks.llm import llm_parts as parts
    import torch

    if not wiring.is_grpo:
        raise sr.CheckSkipped(f"{type(wiring.loss).__name__} takes no advantage")
    key = wiring.loss.tensor_keys.advantage
    values = wiring.rollout.get(key, None, as_list=True)
    sr.expect(values is not None, f"Advantage key {key} not in tensordict (GRPOLoss raises this ValueError); fix: write "
                                  "td['advantage'] = adv.reshape(-1, 1, 1) (MCAdvantage in the replay buffer does)")
    shapes = sorted({tuple(v.shape) for v in values})
    if shapes != [(1, 1)]:
        why = {(): "one scalar per row ([batch]): GRPOLoss pads it and raises RuntimeError: ArrayRef: invalid slice, N = 1; size = 0",
               (1,): "[batch, 1]: GRPOLoss raises ValueError: advantage and log_weight must have the same number of dimensions"}
        raise sr.CheckFailed(f"advantage rows have shape {shapes}, not (1, 1): "
                             f"{why.get(shapes[0], 'not one value per sequence')}; fix: td['advantage'] = adv.reshape(-1, 1, 1)")
    adv = torch.stack([v.reshape(()) for v in values]).double()
    sr.expect(bool(adv.isfinite().all()), f"advantage has non-finite values at rows {(~adv.isfinite()).nonzero().flatten().tolist()}")
    keys = parts.prompt_keys(wiring.rollout)
    groups = [g for g in parts.groups_of(keys) if len(g) > 1]
    if not groups:
        raise sr.CheckSkipped(f"shape [{adv.numel()}, 1, 1] right; normalisation not checked: one row per prompt, no group "
                              "to normalise within (GRPO needs several samples per prompt: num_samples or repeated prompts)")
    bad, flat = [], 0
    for g in groups:
        a = adv[g]
        if bool((a == 0).all()):
            flat += 1
            continue
        mean, std = float(a.mean()), float(a.std())
        if abs(mean) > 1e-3 or abs(std - 1.0) > 2e-2 and abs(float(a.std(unbiased=False)) - 1.0) > 2e-2:
            bad.append(f"{parts.describe_prompt(keys[g[0]])} ({len(g)} rows): mean {mean:.3f}, std {std:.3f}")
    whole = f" (over the whole batch: mean {float(adv.mean()):.3f}, std {float(adv.std()):.3f}: normalised across prompts)" \
        if abs(float(adv.mean())) < 1e-3 and abs(float(adv.std()) - 1) < 2e-2 else ""
    if flat == len(groups):
        raise sr.CheckSkipped(f"shape [{adv.numel()}, 1, 1] right; normalisation not checked: all {flat} groups have "
                              "all-equal rewards, so every advantage is 0 (no learning signal); give these prompts a reward "
                              "that varies within a group (empty responses score alike: see loss-mask)")
    sr.expect(not bad, f"advantage is not normalised within each prompt's group: {'; '.join(bad[:3])}{whole}; "
                       "fix: (r - group mean) / group std per prompt, as MCAdvantage(grpo_size=N) writes it")
    varied = len(groups) - flat
    note = (f"; the other {flat} {'group has' if flat == 1 else 'groups have'} all-equal rewards: advantage 0 on every "
            "row (no learning signal from them)") if flat else ""
    sr.evidence(adv.numel(), "sequence advantages checked")
    return (f"one advantage per sequence, shape [{adv.numel()}, 1, 1]; mean 0 and std 1 within each of the {varied} prompt "
            f"{'group' if varied == 1 else 'groups'} whose rewards vary{note}")


def _layer_parts(names) -> dict:
    """The tensors an update must reach, by name (Hugging Face decoder layouts)."""
    return {"embeddings": [n for n in names if "embed" in n],
            "layer 0 attention": [n for n in names if ".layers.0." in n and "attn" in n],
            "layer 0 MLP": [n for n in names if ".layers.0." in n and "mlp" in n]}


def check_update(wiring):
    """One optimizer step on the loss moves the policy's trainable tensors and nothing frozen."""
    import copy

    from torchrl_skill.checks.llm import llm_parts as parts
    import torch

    model = parts.model_of(wiring.policy) or parts.model_of(wiring.actor)
    named = dict(model.named_parameters())
    frozen = {n for n, p in named.items() if not p.requires_grad or n.startswith(wiring.frozen or ("\0",))}
    should = [n for n in named if n not in frozen]
    sr.expect(bool(should), f"the policy's {type(model).__name__} has 0 trainable tensors ({len(frozen)} frozen): "
                            "nothing can train; leave requires_grad on the tensors you mean to train")
    opt = wiring.optimizer or torch.optim.Adam(wiring.loss.parameters(), lr=1e-3)
    before = {n: p.detach().clone() for n, p in named.items()}
    state = copy.deepcopy(opt.state_dict())
    try:
        out = _run_loss(wiring, grad=True)
        terms = [v for k, v in out.items() if str(k).startswith("loss_") and torch.is_tensor(v) and v.requires_grad]
        sr.expect(bool(terms), f"{type(wiring.loss).__name__} returned no loss term with a gradient: nothing can train")
        opt.zero_grad()
        sum(t.sum() for t in terms).backward()
        opt.step()
        moved = {n for n, p in named.items() if not torch.equal(p.detach(), before[n])}
    finally:
        with torch.no_grad():
            for n, p in named.items():
                p.copy_(before[n])
        opt.load_state_dict(state)
        opt.zero_grad()
    stuck = [n for n in should if n not in moved]
    parts_missed = [f"{what} ({', '.join(ns[:2])})" for what, ns in _layer_parts(should).items() if ns and not set(ns) & moved]
    hint = ""
    if parts.model_of(wiring.actor) is not None and parts.model_of(wiring.actor) is not model:
        hint = "; the loss's actor wraps another model object than the generating policy: build both wrappers on the same model"
    sr.expect(not stuck, f"one update left {len(stuck)} of {len(should)} trainable tensors of the policy's model unchanged "
                         f"({', '.join(stuck[:3])}{'...' if len(stuck) > 3 else ''}){hint}")
    sr.expect(not parts_missed, f"one update did not reach {', '.join(parts_missed)}")
    leaked = sorted(frozen & moved)
    sr.expect(not leaked, f"one update moved {len(leaked)} tensors you froze ({', '.join(leaked[:3])}): set requires_grad_(False) "
                          "on them and build the optimizer from the trainable ones only")
    reached = ", ".join(w for w, ns in _layer_parts(should).items() if ns) or "no named embedding/layer-0 tensors"
    engine = "" if parts.model_of(wiring.policy) is not None else (
        f"; {type(wiring.policy).__name__} serves its own copy of the weights: their sync after the update is not checked")
    sr.evidence(len(should), "trainable tensors moved")
    return (f"one {type(opt).__name__} step on {type(wiring.loss).__name__} moved all {len(should)} trainable tensors of the "
            f"policy's {type(model).__name__} ({reached}) and none of {len(frozen)} frozen; weights and optimizer restored{engine}")


def check_reference(wiring):
    """With a KL to a reference: frozen, same tokenizer and padding side, aligned log-probs."""
    from torchrl_skill.checks.llm import llm_parts as parts

    ref, coeff = wiring.reference, getattr(wiring.loss, "kl_to_ref_coeff", None)
    if ref is None and not coeff:
        raise sr.CheckSkipped("no reference in the wiring and the loss has no kl_to_ref_coeff")
    sr.expect(ref is not None, f"{type(wiring.loss).__name__}(kl_to_ref_coeff={coeff}) but the wiring names no 'reference': "
                               "return it so that its weights, tokenizer and log-probs can be checked")
    ref_model, pol_model = parts.model_of(ref), parts.model_of(wiring.actor) or parts.model_of(wiring.policy)
    sr.expect(ref_model is not None, f"the reference {type(ref).__name__} holds no torch model to check (a remote engine)")
    trainable = [n for n, p in ref_model.named_parameters() if p.requires_grad]
    shared = {id(p) for p in ref_model.parameters()} & {id(p) for p in pol_model.parameters()}
    sr.expect(not shared, f"the reference shares {len(shared)} tensors with the policy: the KL to it stays 0 while both move; "
                          "fix: build the reference from its own copy of the initial weights")
    sr.expect(not trainable, f"the reference has {len(trainable)} trainable tensors ({', '.join(trainable[:2])}); fix: "
                             "reference.model.requires_grad_(False) so no optimizer can move it")
    a, b = ref.tokenizer, wiring.policy.tokenizer
    diffs = [what for what, x, y in (("vocabulary", a.get_vocab(), b.get_vocab()), ("padding_side", a.padding_side, b.padding_side),
                                     ("pad_token_id", a.pad_token_id, b.pad_token_id), ("eos_token_id", a.eos_token_id, b.eos_token_id),
                                     ("chat_template", a.chat_template, b.chat_template)) if x != y]
    sr.expect(not diffs, f"the reference's tokenizer differs from the policy's in {', '.join(diffs)}: its log-probs are of other "
                         "tokens; fix: pass the policy's tokenizer to the reference wrapper")
    if not coeff:
        sr.evidence(sum(1 for _ in ref_model.parameters()), "reference tensors checked frozen and unshared")
        return "reference frozen, own weights, same tokenizer; the loss has no kl_to_ref_coeff, so no stored log-probs to align"
    key = wiring.loss.tensor_keys.ref_log_probs
    stored = parts.token_rows(wiring.rollout, key)
    sr.expect(stored is not None, f"{type(wiring.loss).__name__}(kl_to_ref_coeff={coeff}) reads {key}, which the rollout lacks; "
                                  "fix: score the batch with the reference (log_probs_key='ref_log_probs') and set it there")
    tokens, spans = _scored(wiring)
    count, worst, where = parts.compare_log_probs(stored, tokens, spans, ref_model, str(key))
    sr.expect(count > 0, f"0 response tokens to compare with the reference (nothing checked): "
                         f"{parts.no_response_tokens(wiring.rollout, wiring.policy.tokenizer)}")
    sr.expect(worst <= parts.ATOL, f"stored {key} differ from a forward of the reference on the batch's tokens by up to {worst:.3g} "
                             f"at {where}: the KL compares misaligned tokens")
    sr.evidence(count, "response tokens compared with the reference")
    return (f"reference frozen ({sum(1 for _ in ref_model.parameters())} tensors), own weights, same tokenizer/padding side/template; "
            f"stored {key} equal its forward on the policy's tokens over {count} response tokens (max |diff| {worst:.1e})")


def check_samples(wiring):
    """Rows per prompt equal samples_per_prompt; the loss's actor does not sample again."""
    from torchrl_skill.checks.llm import llm_parts as parts

    actor_n = getattr(wiring.actor, "num_samples", None)
    sr.expect(actor_n in (None, 1), f"the loss's {type(wiring.actor).__name__} has num_samples={actor_n}: "
                                    "policy.get_new_version(generate=False, num_samples=None) keeps generate_kwargs "
                                    "num_return_sequences; fix: get_new_version(..., generate_kwargs={}, inplace=True) or a fresh "
                                    "TransformersWrapper(model, generate=False)")
    asked = wiring.samples_per_prompt
    if asked is None:
        raise sr.CheckSkipped("say how many samples per prompt you asked for: return 'samples_per_prompt': N")
    sizes = [len(g) for g in parts.groups_of(parts.prompt_keys(wiring.rollout))]
    wrong = sorted(set(sizes) - {asked})
    sr.expect(not wrong, f"prompts have {sorted(set(sizes))} rows each, not {asked}: (rows per prompt: {sizes[:8]}); a wrapper "
                         f"with num_samples={getattr(wiring.policy, 'num_samples', None)} samples that many per row on top of "
                         "any repeats; fix: repeat prompts or set num_samples, not both")
    sr.evidence(sum(sizes), "rows counted per prompt")
    return f"{len(sizes)} prompts x {asked} samples = {sum(sizes)} rows; the loss's actor has num_samples={actor_n}"


CHECKS = [
    sr.Check("llm-wiring:load", check_load, gives="wiring", proves="TARGET builds the policy, loss and rollout"),
    sr.Check("llm-wiring:behaviour-logprobs", check_behaviour_logprobs,
             proves="the stored log-probs equal a forward of the trained model on every response token"),
    sr.Check("llm-wiring:loss-mask", check_loss_mask, proves="the loss's mask covers exactly the response tokens"),
    sr.Check("llm-wiring:advantage", check_advantage, proves="one advantage per sequence, normalised within each prompt's group"),
    sr.Check("llm-wiring:update", check_update, proves="one update moves every trainable tensor and no frozen one"),
    sr.Check("llm-wiring:reference", check_reference,
             proves="the reference is frozen, unshared, same-tokenizer, and its stored log-probs are aligned"),
    sr.Check("llm-wiring:samples-per-prompt", check_samples, proves="every prompt has the asked number of samples"),
]


def run_checks(args, report) -> None:
    import warnings

    # a tiny model gains nothing from a second thread (smoke_llm_grpo.py measured 2-5x)
    with torch_threads(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' and torchrl's deprecation notes are not wiring faults
        sr.run_declared(CHECKS, report, args=args)


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
