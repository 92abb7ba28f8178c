"""Verify the three post-training component contracts on the installed TorchRL, on CPU.

"give me a buffer": ragged token rows extended into ReplayBuffer(LazyStackStorage,
SamplerWithoutReplacement) come back exactly (same ids, int64, per-row lengths, keys), each
row once per pass. "give me rollouts": a Collector yields TensorDicts of frames_per_batch
rows, update_policy_weights_ copies trainer weights into the collector's policy and bumps
the "policy_version" it writes. "give me a loss": GRPOLoss reads ("tokens", "full"),
("log_probs", "full") and "advantage" [B, 1, 1] and returns a GRPOLossOutput of scalars with
a differentiable loss_objective; SFTLoss key contract; ClipPPOLoss for comparison.
Each check function takes the object it checks, so a broken buffer, batch or loss can be
passed in (the tests do). --hf reruns the GRPO contract and checks the generation output
keys with a tiny Qwen2 model built from a config (transformers, nothing downloaded).
One file of ~450 lines on purpose: the three contracts share the builders (token rows,
scoring policy, GRPO batch) that the tests reuse to pass broken objects in.
"""

from __future__ import annotations


from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/check_component_contracts.py --hf --json"

# The key contracts, as read from torchrl 0.14.1 (torchrl/objectives/llm/grpo.py, sft.py).
GRPO_TENSOR_KEYS = {
    "advantage": "advantage",
    "action": ("tokens", "full"),
    "sample_log_prob": ("log_probs", "full"),
    "ref_log_probs": ("next", "ref_log_probs", "full"),
}
GRPO_OUTPUT_FIELDS = ("loss_objective", "clip_fraction", "kl_approx", "ESS", "entropy", "loss_entropy")
SFT_TENSOR_KEYS = {
    "history": ("history", "full"),
    "ref_log_prob": ("next", "ref_log_probs", "full"),
    "log_probs": ("log_probs", "full"),
}
PPO_OUTPUT_FIELDS = ("loss_objective", "loss_critic", "loss_entropy", "entropy", "clip_fraction", "ESS", "kl_approx")
VOCAB = 16


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument(
        "--hf",
        action="store_true",
        help="also run the GRPO contract and generation keys with a tiny Qwen2 model (imports transformers, ~5 s)",
    )
    return parser


# ---------------------------------------------------------------- fixtures (known good)


PASSES = 8  # sample passes over the extended rows in the buffer contract

def token_rows(lengths=((3, 2), (5, 3), (2, 4), (4, 1)), seed: int = 0) -> list:
    """Ragged token rows, one TensorDict per sequence (batch_size ``[]``).

    Each row: ``("tokens", "prompt")`` int64 [P], ``("tokens", "response")`` int64 [R],
    ``("tokens", "full")`` int64 [P+R], ``("masks", "all_attention_mask")`` bool [P+R],
    ``("masks", "all_assistant_mask")`` bool [P+R] (True on response tokens),
    ``"reward"`` float32 [1, 1], ``"text"`` str. Ids in ``[1, VOCAB)``; seeded.
    """
    import torch
    from tensordict import TensorDict

    gen = torch.Generator().manual_seed(seed)
    rows = []
    for i, (p, r) in enumerate(lengths):
        full = torch.randint(1, VOCAB, (p + r,), generator=gen)
        rows.append(
            TensorDict(
                tokens=TensorDict(prompt=full[:p], response=full[p:], full=full),
                masks=TensorDict(
                    all_attention_mask=torch.ones(p + r, dtype=torch.bool),
                    all_assistant_mask=torch.cat([torch.zeros(p, dtype=torch.bool), torch.ones(r, dtype=torch.bool)]),
                ),
                reward=torch.full((1, 1), float(i)),
                text=f"row {i}",
            )
        )
    return rows


def make_token_buffer(max_size: int = 64):
    """``ReplayBuffer(storage=LazyStackStorage(max_size), sampler=SamplerWithoutReplacement())``."""
    from torchrl.data import LazyStackStorage, ReplayBuffer, SamplerWithoutReplacement

    return ReplayBuffer(storage=LazyStackStorage(max_size), sampler=SamplerWithoutReplacement())


class _TinyOut(dict):
    """A ``{"logits": ...}`` mapping with attribute access, like a transformers ModelOutput."""

    __getattr__ = dict.__getitem__


def _tiny_lm(seed: int = 0):
    """A pure-torch causal LM stand-in: ``model(input_ids, attention_mask).logits`` [B, T, VOCAB]."""
    import torch

    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(VOCAB, 8)
            self.head = torch.nn.Linear(8, VOCAB)

        def forward(self, input_ids, attention_mask=None, **kwargs):
            return _TinyOut(logits=self.head(self.emb(input_ids)))

    torch.manual_seed(seed)
    return TinyLM().eval()


class _IdTokenizer:
    """The few tokenizer attributes TransformersWrapper reads in input_mode="tokens" (pad id 0)."""

    pad_token = eos_token = "<pad>"
    pad_token_id = eos_token_id = 0
    padding_side = "left"

    def __call__(self, text, **kwargs):
        return {"input_ids": [0]}


def make_scoring_policy(model=None, tokenizer=None):
    """``TransformersWrapper(model, input_mode="tokens", generate=False, return_log_probs=True)``.

    Without arguments: the pure-torch tiny LM and an id-only tokenizer (no transformers import).
    """
    from torchrl.modules.llm import TransformersWrapper

    return TransformersWrapper(
        model if model is not None else _tiny_lm(),
        tokenizer=tokenizer if tokenizer is not None else _IdTokenizer(),
        input_mode="tokens",
        generate=False,
        return_log_probs=True,
        pad_output=False,
    )


def make_grpo_batch(policy, rows=None, advantage_shape=(1, 1)):
    """Score ``rows`` with ``policy`` and add ``"advantage"``: the batch GRPOLoss consumes.

    Returns a lazy stack [B] with ``("log_probs", "full")`` [B, T_i] from the policy (no grad)
    and ``"advantage"`` of shape ``[B, *advantage_shape]`` (contract: ``(1, 1)`` per row, i.e.
    [B, 1, 1]: one value broadcast over tokens), group-normalised from ``"reward"``.
    """
    import torch
    from tensordict import lazy_stack

    rows = rows if rows is not None else token_rows()
    batch = lazy_stack([r.clone() for r in rows])
    with torch.no_grad():
        scored = policy(batch.select("tokens", "masks"))
    log_probs = scored.get(("log_probs", "full"), as_list=True)
    reward = torch.stack([r["reward"].reshape(()) for r in rows])
    adv = (reward - reward.mean()) / reward.std().clamp_min(1e-6)
    adv = adv.reshape(-1, *([1] * len(advantage_shape))).expand(-1, *advantage_shape)
    out = []
    for row, lp, a in zip(batch.unbind(0), log_probs, adv.unbind(0)):
        row.set(("log_probs", "full"), lp)
        row.set("advantage", a.clone())
        out.append(row)
    return lazy_stack(out)


# ---------------------------------------------------------------- contract checks


def check_buffer_contract(buffer=None, rows=None) -> str:
    """extend then sample: every ragged token row comes back exactly once per pass, same keys.

    ``buffer``: any ReplayBuffer (default :func:`make_token_buffer`); ``rows``: list of
    TensorDicts from :func:`token_rows`. Fails naming the fix (LazyStackStorage +
    SamplerWithoutReplacement) when ids, dtype, lengths or keys change, or a row repeats.
    """
    import torch
    from tensordict import lazy_stack

    rows = rows if rows is not None else token_rows()
    buffer = buffer if buffer is not None else make_token_buffer()
    fix = "use ReplayBuffer(storage=LazyStackStorage(N), sampler=SamplerWithoutReplacement()) for ragged token rows"
    try:
        buffer.extend(lazy_stack([r.clone() for r in rows]))
    except Exception as err:
        raise sr.CheckFailed(f"extend of ragged token rows raised {type(err).__name__}: {str(err)[:120]}; fix: {fix}")
    sr.expect(len(buffer) == len(rows), f"buffer holds {len(buffer)} rows after extend of {len(rows)}; fix: {fix}")
    want_keys = {k for k in rows[0].keys(True, True)}
    want = sorted(tuple(r["tokens", "full"].tolist()) for r in rows)
    # Several passes: a sampler with replacement returns each row once in one pass by chance
    # (4!/4**4, about 9% for 4 rows), never in all of PASSES of them.
    for _ in range(PASSES):
        sample = buffer.sample(len(rows))
        got_keys = set(sample.keys(True, True))
        sr.expect(want_keys <= got_keys, f"sample lost keys {sorted(map(str, want_keys - got_keys))}; fix: {fix}")
        got = sample.get(("tokens", "full"), as_list=True)
        sr.expect(
            all(t.dtype == torch.int64 for t in got),
            f"token ids come back as {sorted({str(t.dtype) for t in got})}, stored int64; fix: {fix}",
        )
        have = sorted(tuple(t.tolist()) for t in got)
        sr.expect(
            have == want,
            "sampled token rows differ from the extended ones (padded, truncated, cast or repeated: "
            f"lengths {sorted(len(h) for h in have)} vs {sorted(len(w) for w in want)}); fix: {fix}",
        )
        texts = sample.get("text")
        texts = texts.tolist() if hasattr(texts, "tolist") else list(texts)
        sr.expect(sorted(texts) == sorted(r["text"] for r in rows), f"non-tensor 'text' did not round-trip: {texts}")
    sr.evidence(len(rows) * PASSES, "token rows round-tripped")
    return (
        f"{len(rows)} ragged rows (lengths {sorted(len(w) for w in want)}) extend->sample exact, int64, "
        f"keys {len(want_keys)} kept, each row once in each of {PASSES} passes (without replacement)"
    )


def _pendulum_net():
    """Linear policy (th, thdot) -> action [..., 1] for PendulumEnv (scalar observations)."""
    import torch

    class PendulumNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 1)

        def forward(self, th, thdot):
            return self.lin(torch.stack([th, thdot], -1)).clamp(-2.0, 2.0)

    return PendulumNet()


def _float_policy_version() -> bool:
    """True when the installed PolicyVersion writes an int version as float (torchrl before
    0.13.0; pytorch/rl#3755 made it int64): measured on a 4-row TensorDict."""
    from tensordict import TensorDict
    from torchrl.envs.llm.transforms import PolicyVersion

    transform = PolicyVersion(version_type="int")
    td = TensorDict(batch_size=(4,))
    return transform._step(td, td.copy())["policy_version"].is_floating_point()


def _batches(collector, own: bool):
    """Iterate ``collector``; the float policy version of an older torchrl, which makes the
    collector's stack of its batch raise, is named: the bundle's own collector is then a
    skip (this release cannot run it), a user's collector a failure with the cause."""
    try:
        yield from collector
    except TypeError as err:
        if "can't be cast to the desired output type Long" not in str(err) or not _float_policy_version():
            raise
        cause = (f"torchrl {sr.installed_version('torchrl')}'s PolicyVersion writes policy_version as float, so the "
                 "collector cannot stack its batch (pytorch/rl#3755, fixed in torchrl 0.13.0)")
        if own:
            raise sr.CheckSkipped(f"not run: {cause}; to run this check: pip install 'torchrl>=0.13'") from None
        raise sr.CheckFailed(f"{sr.first_line(err)}: {cause}; fix: upgrade to torchrl>=0.13 or "
                             "track_policy_version=False") from None


def check_rollouts_contract(make_collector=None, frames_per_batch: int = 8) -> str:
    """Collector protocol: iterate -> batch of ``frames_per_batch``; push weights; version bumps.

    ``make_collector(policy) -> collector`` (default: ``Collector(PendulumEnv(),
    policy, frames_per_batch=8, total_frames=16, track_policy_version=True)``). Checks the
    batch size, the ``"policy_version"`` key, that ``update_policy_weights_`` copies the
    trainer's weights into the collector's policy and that the version increases.
    """
    import copy

    import torch
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule

    torch.manual_seed(0)
    trainer_policy = TensorDictModule(_pendulum_net(), in_keys=["th", "thdot"], out_keys=["action"])
    own = make_collector is None
    if own:
        from torchrl.collectors import Collector
        from torchrl.envs import PendulumEnv

        def make_collector(policy):
            return Collector(
                PendulumEnv(),
                policy,
                frames_per_batch=frames_per_batch,
                total_frames=2 * frames_per_batch,
                track_policy_version=True,
            )

    collector = make_collector(copy.deepcopy(trainer_policy))
    versions = []
    try:
        for batch in _batches(collector, own):
            sr.expect(
                batch.numel() == frames_per_batch,
                f"collector yielded {batch.numel()} frames, asked frames_per_batch={frames_per_batch}",
            )
            sr.expect(
                "policy_version" in batch.keys(),
                "batch has no 'policy_version' key; fix: Collector(..., track_policy_version=True)",
            )
            versions.append(int(batch["policy_version"].max()))
            with torch.no_grad():
                trainer_policy.module.lin.weight.add_(0.5)
            collector.update_policy_weights_(TensorDict.from_module(trainer_policy))
            inner = TensorDict.from_module(collector.policy)
            sr.expect(
                all(torch.equal(inner[k], v) for k, v in TensorDict.from_module(trainer_policy).items(True, True)),
                "collector policy weights differ from the trainer's after update_policy_weights_; "
                "fix: pass TensorDict.from_module(trainer_policy) to collector.update_policy_weights_",
            )
    finally:
        collector.shutdown()
    sr.expect(len(versions) == 2, f"expected 2 batches from total_frames=2*frames_per_batch, got {len(versions)}")
    sr.expect(versions[1] > versions[0], f"policy_version did not increase after a weight push: {versions}")
    sr.evidence(len(versions) * frames_per_batch, "frames collected")
    return (
        f"2 batches of {frames_per_batch} frames; update_policy_weights_ copied weights; "
        f"policy_version {versions[0]} -> {versions[1]}"
    )


def check_grpo_contract(loss=None, batch=None) -> str:
    """GRPOLoss: tensordict in, GRPOLossOutput of scalars out; loss_objective has a gradient.

    ``loss``: a GRPOLoss (default: on :func:`make_scoring_policy`); ``batch``: from
    :func:`make_grpo_batch`. Also checks the default ``tensor_keys`` against the contract.
    """
    from torchrl.objectives.llm import GRPOLoss, GRPOLossOutput

    if loss is None:
        loss = GRPOLoss(make_scoring_policy(), masking_strategy="sft")
    batch = batch if batch is not None else make_grpo_batch(loss.actor_network)
    for name, key in GRPO_TENSOR_KEYS.items():
        got = getattr(loss.tensor_keys, name)
        sr.expect(got == key, f"GRPOLoss.tensor_keys.{name} is {got!r}, contract says {key!r}")
    missing = [k for k in (loss.tensor_keys.action, loss.tensor_keys.sample_log_prob, loss.tensor_keys.advantage) if k not in batch.keys(True)]
    sr.expect(not missing, f"batch lacks GRPOLoss input keys {missing}; fix: loss.set_keys(...) or write those keys")
    try:
        out = loss(batch)
    except ValueError as err:  # the fix comes from the error index, written once
        from torchrl_skill.explain import error_index as _error_index

        hits = _error_index.match(sr.first_line(err))
        fix = f"; fix: {hits[0][1].plain('fix')}" if hits and hits[0][0] >= 100 else ""
        raise sr.CheckFailed(f"{sr.first_line(err)}{fix}") from None
    sr.expect(isinstance(out, GRPOLossOutput), f"GRPOLoss returned {type(out).__name__}, expected GRPOLossOutput")
    for field in GRPO_OUTPUT_FIELDS:
        val = getattr(out, field)
        sr.expect(val is not None and val.shape == (), f"GRPOLossOutput.{field} is {val!r}, expected a scalar tensor")
        sr.expect(bool(val.isfinite()), f"GRPOLossOutput.{field} is not finite: {val}")
    sr.expect(out.loss_objective.requires_grad, "loss_objective has no grad_fn: the actor's parameters are not reached")
    sr.evidence(batch.batch_size.numel(), "ragged rows through the loss")
    return (
        f"GRPOLoss(masking_strategy={loss.masking_strategy!r}) on {batch.batch_size[0]} ragged rows -> "
        f"GRPOLossOutput scalars {', '.join(GRPO_OUTPUT_FIELDS)}; ESS={float(out.ESS):.3f}, loss_objective differentiable"
    )


def check_sft_keys(loss=None) -> str:
    """SFTLoss key contract: tensor_keys defaults, in_keys grow with kl_to_ref_coeff."""
    from torchrl.objectives.llm import SFTLoss

    if loss is None:
        loss = SFTLoss(make_scoring_policy(), tokenizer=_IdTokenizer(), kl_to_ref_coeff=0.1)
    for name, key in SFT_TENSOR_KEYS.items():
        got = getattr(loss.tensor_keys, name)
        sr.expect(got == key, f"SFTLoss.tensor_keys.{name} is {got!r}, contract says {key!r}")
    want_in = [SFT_TENSOR_KEYS["history"]] + ([SFT_TENSOR_KEYS["ref_log_prob"]] if loss.kl_to_ref_coeff is not None else [])
    sr.expect(list(loss.in_keys) == want_in, f"SFTLoss.in_keys {loss.in_keys} != {want_in}")
    sr.evidence(len(SFT_TENSOR_KEYS), "tensor_keys compared")
    return f"SFTLoss tensor_keys {SFT_TENSOR_KEYS}; in_keys {want_in}; outputs loss_sft (+ loss_kl_to_ref, kl_to_ref)"


def check_ppo_contract(loss=None, batch=None) -> str:
    """Classic loss for comparison: ClipPPOLoss on a [B] batch of observation/action/advantage."""
    import torch
    from tensordict import TensorDict
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import ClipPPOLoss

    torch.manual_seed(0)
    if loss is None:
        net = torch.nn.Sequential(torch.nn.Linear(3, 2), NormalParamExtractor())
        actor = ProbabilisticActor(
            TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            return_log_prob=True,
        )
        critic = ValueOperator(torch.nn.Linear(3, 1), in_keys=["observation"])
        loss = ClipPPOLoss(actor, critic)
    if batch is None:
        b = 6
        batch = TensorDict(
            observation=torch.randn(b, 3),
            action=torch.rand(b, 1) * 1.8 - 0.9,
            action_log_prob=torch.randn(b),
            advantage=torch.randn(b, 1),
            value_target=torch.randn(b, 1),
            batch_size=[b],
        )
    out = loss(batch)
    missing = [k for k in PPO_OUTPUT_FIELDS if k not in out.keys()]
    sr.expect(not missing, f"ClipPPOLoss output lacks {missing}")
    sr.evidence(batch.batch_size.numel(), "batch rows through the loss")
    return (
        f"ClipPPOLoss on flat [B] batch (advantage [B, 1]) -> TensorDict {sorted(out.keys())}; "
        "GRPO differs: ragged tokens, advantage [B, 1, 1], no critic"
    )


# ---------------------------------------------------------------- --hf checks


def check_hf_generation() -> str:
    """TransformersWrapper(generate=True) output keys an external trainer reads (tiny Qwen2)."""
    import torch
    from torchrl_skill.checks.llm.tiny_llm import make_causal_lm, make_tokenizer
    from tensordict import TensorDict
    from torchrl.data.llm import History
    from torchrl.modules.llm import TransformersWrapper

    tok = make_tokenizer()
    lm = make_causal_lm(tok)
    policy = TransformersWrapper(
        lm,
        tokenizer=tok,
        input_mode="history",
        generate=True,
        return_log_probs=True,
        generate_kwargs={"max_new_tokens": 4, "do_sample": False},
    )
    hist = History.from_chats([[{"role": "user", "content": "2+2="}], [{"role": "user", "content": "hi"}]])
    with torch.no_grad():
        out = policy(TensorDict(history=TensorDict(prompt=hist, batch_size=(2,)), batch_size=(2,)))
    need = [("tokens", "prompt"), ("tokens", "response"), ("tokens", "full"), ("log_probs", "response"), ("masks", "all_attention_mask")]
    keys = set(out.keys(True, True))
    sr.expect(all(k in keys for k in need), f"generation output lacks {[k for k in need if k not in keys]}")
    sr.expect(out.get(("text", "response"), None) is not None, "generation output lacks ('text', 'response')")
    resp = out.get(("tokens", "response"), as_list=True)
    lps = out.get(("log_probs", "response"), as_list=True)
    sr.expect(all(r.shape == lp.shape for r, lp in zip(resp, lps)), "log_probs.response not aligned with tokens.response")
    sr.evidence(len(resp), "responses aligned per token")
    return f"generate=True writes {', '.join('.'.join(k) for k in need)}; response log-probs aligned per token"


def check_hf_grpo() -> str:
    """GRPO contract again with a tiny transformers Qwen2 model and byte tokenizer."""
    from torchrl_skill.checks.llm.tiny_llm import make_causal_lm, make_tokenizer
    from torchrl.objectives.llm import GRPOLoss

    tok = make_tokenizer()
    policy = make_scoring_policy(make_causal_lm(tok), tok)
    return "Qwen2: " + check_grpo_contract(GRPOLoss(policy, masking_strategy="sft"))


def check_hf_backend() -> sr.Passed:
    return sr.Passed(sr.optional_backend("transformers"), True)


CHECKS = [
    sr.Check("buffer:token-round-trip", check_buffer_contract, proves="every ragged token row comes back exactly once per pass, same keys"),
    sr.Check("rollouts:collector-protocol", check_rollouts_contract,
             proves="each batch has frames_per_batch frames and policy_version rises after a weight push"),
    sr.Check("loss:grpo", check_grpo_contract, proves="GRPOLoss gives finite scalar outputs and a differentiable objective"),
    sr.Check("loss:sft-keys", check_sft_keys, proves="SFTLoss's tensor_keys and in_keys are the contract's"),
    sr.Check("loss:classic-ppo", check_ppo_contract, proves="ClipPPOLoss on a flat batch gives every output field"),
    sr.Check("hf:backend", check_hf_backend, gives="transformers", flag="hf", proves="transformers is importable"),
    sr.Check("hf:generation-keys", lambda transformers: check_hf_generation(), flag="hf",
             proves="generate=True writes the generation keys with response log-probs aligned per token"),
    sr.Check("hf:grpo", lambda transformers: check_hf_grpo(), flag="hf",
             proves="GRPOLoss on a Qwen2 policy gives finite scalar outputs and a differentiable objective"),
]


def run_checks(args, report) -> None:
    sr.run_declared(CHECKS, report, args=args)


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
