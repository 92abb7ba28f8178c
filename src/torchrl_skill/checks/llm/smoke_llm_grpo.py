"""CPU smoke of TorchRL's LLM post-training path with a tiny local model; nothing downloaded.

Builds a character-level tokenizer (``tokenizers``) and a tiny random Qwen2 causal LM from
a config (src/torchrl_skill/checks/llm/tiny_llm.py), then runs: History chat template; ChatEnv with
DataLoadingPrimer reset and step; TransformersWrapper generation with log-probs;
log-probs recomputed with generate=False and compared to an independent forward pass;
GRPOLoss and SFTLoss forward and backward (non-zero gradients). With --collector, one
LLMCollector batch written into a replay buffer and MCAdvantage on a GRPO group.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchrl_skill.report import skill_report as sr
from torchrl_skill.runtime.threads import torch_threads  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/smoke_llm_grpo.py --collector --json"
QUERIES = ["What is 2+2?", "Say hi.", "Name a color.", "Count to 3."]
MAX_NEW_TOKENS = 4


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument(
        "--collector",
        action="store_true",
        help="also run one LLMCollector batch into a replay buffer and MCAdvantage (a few seconds more)",
    )
    parser.add_argument("--seed", type=int, default=0, help="torch seed (default: 0)")
    return parser


def _collate(batch):
    return {"query": [row["query"] for row in batch]}


def make_chat_env(tokenizer, batch_size: int = 2):
    """``ChatEnv`` fed by ``DataLoadingPrimer`` over :data:`QUERIES` (string prompts).

    ``batch_size`` envs in one batched env; each reset pulls ``batch_size`` queries from a
    ``torch.utils.data.DataLoader`` whose collate returns ``{"query": list[str]}``. Source:
    torchrl/envs/llm/chat.py and transforms/dataloading.py (0.14.1).
    """
    import torch
    from torchrl.envs.llm import ChatEnv, DataLoadingPrimer

    loader = torch.utils.data.DataLoader([{"query": q} for q in QUERIES], batch_size=batch_size, collate_fn=_collate)
    env = ChatEnv(batch_size=(batch_size,), system_prompt="Be brief.", tokenizer=tokenizer)
    return env.append_transform(DataLoadingPrimer(dataloader=loader, batch_size=(batch_size,)))


@dataclass
class Generation:
    """What the generation check hands on: the tiny model, the env and the policy's output."""

    model: object
    env: object
    td: object


def check_template() -> sr.Passed:
    from torchrl_skill.checks.llm import tiny_llm as tiny
    from torchrl.data.llm import History

    tok = tiny.make_tokenizer()
    text = "Hello, world! 2+2=4"
    ids = tok(text)["input_ids"]
    sr.expect(tok.decode(ids) == text, f"tokenizer round trip failed: {tok.decode(ids)!r}")
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    ours = History.from_chats([chat]).apply_chat_template(tokenizer=tok, add_generation_prompt=False)
    theirs = tok.apply_chat_template(chat, tokenize=False)
    sr.expect(ours[0] == theirs, f"History template {ours[0]!r} != tokenizer template {theirs!r}")
    back = History.from_text(ours[0], chat_template_name="chatml_format")
    sr.expect(list(back.role) == ["user", "assistant"], f"History.from_text roles {list(back.role)}")
    sr.evidence(len(ids), "token ids round-tripped")
    return sr.Passed(f"vocab {len(tok)}, text round trip, History.apply_chat_template == tokenizer template, "
                     "from_text roles back", tok)


def check_env_generate(args, tokenizer) -> sr.Passed:
    from torchrl_skill.checks.llm import tiny_llm as tiny
    import torch
    from torchrl.modules.llm import TransformersWrapper

    model = tiny.make_causal_lm(tokenizer, seed=args.seed)
    env = make_chat_env(tokenizer)
    td = env.reset()
    roles = td["history"].prompt.role
    sr.expect(list(roles[0]) == ["system", "user"], f"reset history roles {roles}")
    torch.manual_seed(args.seed)
    policy = TransformersWrapper(
        model,
        tokenizer=tokenizer,
        input_mode="history",
        generate=True,
        return_log_probs=True,
        generate_kwargs={"max_new_tokens": MAX_NEW_TOKENS, "do_sample": True},
    )
    td = policy(td)
    resp = td.get(("tokens", "response"), as_list=True)
    lps = td.get(("log_probs", "response"), as_list=True)
    sr.expect(all(r.numel() == lp.numel() >= 1 for r, lp in zip(resp, lps)), "response tokens/log-probs lengths differ")
    roles = env.step(td)["next"]["history"].prompt.role
    sr.expect(list(roles[0]) == ["system", "user", "assistant"], f"after step history roles {roles}")
    sr.evidence(len(resp), "responses generated with log-probs")
    return sr.Passed(
        f"ChatEnv+DataLoadingPrimer reset -> TransformersWrapper generated {[r.numel() for r in resp]} tokens "
        "with log_probs.response; step appended the assistant turn",
        Generation(model, env, td),
    )


def scoring_actor(model, tokenizer):
    """``TransformersWrapper(generate=False, return_log_probs=True)`` on the history: old log-probs."""
    from torchrl.modules.llm import TransformersWrapper

    return TransformersWrapper(model, tokenizer=tokenizer, input_mode="history", generate=False, return_log_probs=True)


def check_logprob_recompute(tokenizer, generation) -> sr.Passed:
    import torch

    model, gen_td = generation.model, generation.td
    with torch.no_grad():  # old log-probs must not require grad (GRPOLoss refuses them)
        td = scoring_actor(model, tokenizer)(gen_td.copy())
    worst = 0.0
    for i, (prompt, resp) in enumerate(
        zip(gen_td.get(("tokens", "prompt"), as_list=True), gen_td.get(("tokens", "response"), as_list=True))
    ):
        full = td.get(("tokens", "full"), as_list=True)[i]
        lpf = td.get(("log_probs", "full"), as_list=True)[i]
        n0, n = prompt.numel(), resp.numel()
        sr.expect(torch.equal(full[:n0 + n], torch.cat([prompt, resp])), "re-tokenized history != prompt+response tokens")
        with torch.no_grad():
            ref = model(full[None]).logits[0].log_softmax(-1)[:-1].gather(-1, full[1:, None]).squeeze(-1)
        # log_probs.full[t] = log p(token t | tokens < t): ref is shifted by one.
        worst = max(worst, float((lpf[n0:n0 + n] - ref[n0 - 1:n0 - 1 + n]).abs().max()))
        gen = gen_td.get(("log_probs", "response"), as_list=True)[i]
        sr.expect(torch.allclose(gen[1:], lpf[n0 + 1:n0 + n], atol=1e-4), "generation log-probs != recomputed ones")
    sr.expect(worst < 1e-4, f"recomputed log-probs differ from a plain forward by {worst:.2e}")
    sr.evidence(len(gen_td.get(('tokens', 'response'), as_list=True)), "responses recomputed")
    return sr.Passed(f"generate=False log_probs.full match a manual forward (max |diff| {worst:.1e}); "
                     "generation ones match after index 0", td)


def _grad_l1(model) -> float:
    return sum(float(p.grad.abs().sum()) for p in model.parameters() if p.grad is not None)


def check_grpo(tokenizer, generation, scored) -> str:
    import torch
    from torchrl.objectives.llm import GRPOLoss, GRPOLossOutput

    td = scored.copy()
    td["advantage"] = torch.tensor([[[1.0]], [[-0.5]]])  # [batch, 1, 1]: a 2-D advantage raises ValueError
    out = GRPOLoss(scoring_actor(generation.model, tokenizer), masking_strategy="rlhf")(td)
    sr.expect(isinstance(out, GRPOLossOutput), f"GRPOLoss returned {type(out).__name__}")
    generation.model.zero_grad()
    (out.loss_objective + out.loss_entropy).backward()
    gnorm = _grad_l1(generation.model)
    sr.expect(gnorm > 0, "GRPOLoss backward left every gradient at zero")
    sr.evidence(td.batch_size.numel(), "scored rows through the loss")
    return f"GRPOLossOutput loss_objective={float(out.loss_objective.detach()):.3f} ESS={float(out.ESS):.2f}, grad L1 {gnorm:.2f}"


def check_sft(tokenizer, generation) -> str:
    from tensordict import TensorDict
    from torchrl.data.llm import History
    from torchrl.modules.llm import ChatHistory
    from torchrl.objectives.llm import SFTLoss, SFTLossOutput

    chats = History.from_chats(
        [
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
            [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
        ]
    )
    loss = SFTLoss(scoring_actor(generation.model, tokenizer), tokenizer=tokenizer)
    out = loss(TensorDict(history=ChatHistory(full=chats), batch_size=(2,)))
    sr.expect(isinstance(out, SFTLossOutput), f"SFTLoss returned {type(out).__name__}")
    generation.model.zero_grad()
    out.loss_sft.backward()
    gnorm = _grad_l1(generation.model)
    sr.expect(gnorm > 0, "SFTLoss backward left every gradient at zero")
    sr.evidence(2, "chats through the loss")
    return f"SFTLossOutput loss_sft={float(out.loss_sft.detach()):.3f} on history.full, grad L1 {gnorm:.2f}"


def check_collector(tokenizer, generation) -> str:
    import torch
    from tensordict import TensorDict
    from torchrl.collectors.llm import LLMCollector
    from torchrl.data import LazyStackStorage, ReplayBuffer
    from torchrl.envs import InitTracker
    from torchrl.modules.llm import TransformersWrapper
    from torchrl.objectives.llm import MCAdvantage

    policy = TransformersWrapper(
        generation.model, tokenizer=tokenizer, input_mode="history", generate=True, return_log_probs=True,
        generate_kwargs={"max_new_tokens": MAX_NEW_TOKENS, "do_sample": True},
    )
    rb = ReplayBuffer(storage=LazyStackStorage(8), batch_size=2)
    env = make_chat_env(tokenizer).append_transform(InitTracker())  # silences the FutureWarning
    collector = LLMCollector(env, policy=policy, dialog_turns_per_batch=2, total_dialog_turns=2, replay_buffer=rb)
    try:
        for _ in collector:
            pass
    finally:
        collector.shutdown()
    sr.expect(len(rb) == 2, f"replay buffer holds {len(rb)} items, expected 2")
    sample = rb.sample()
    sr.expect(("tokens", "response") in sample.keys(True), "sampled batch lacks ('tokens', 'response')")
    # MCAdvantage: a group of grpo_size completed answers to one prompt -> reward - mean, over std
    adv = MCAdvantage(grpo_size=2, prompt_key="query")
    group = TensorDict(
        {"query": ["q", "q"], "next": {"reward": torch.tensor([[[1.0]], [[0.0]]]), "done": torch.ones(2, 1, 1, dtype=torch.bool)}},
        batch_size=(2,),
    )
    out = adv.inv(group)  # MCAdvantage writes on the replay-buffer (inverse) path
    sr.expect("advantage" in out.keys(), "MCAdvantage wrote no 'advantage' for a full group")
    vals = out["advantage"].flatten().tolist()
    sr.expect(vals[0] > 0 > vals[1], f"advantages {vals}: the rewarded answer should be positive")
    sr.evidence(len(rb) + len(vals), "dialog turns stored and advantages read")
    return f"LLMCollector wrote 2 dialog turns into a ReplayBuffer (LazyStackStorage); MCAdvantage {[round(v, 3) for v in vals]}"


CHECKS = [
    sr.Check("llm:tokenizer-template", check_template, gives="tokenizer",
             proves="the tiny tokenizer round-trips text and History's chat template equals the tokenizer's"),
    sr.Check("llm:chatenv-generate", check_env_generate, gives="generation",
             proves="ChatEnv plus TransformersWrapper generate responses with per-token log-probs"),
    sr.Check("llm:logprob-recompute", check_logprob_recompute, gives="scored",
             proves="generate=False log_probs.full equal a plain forward, and the generation's after index 0"),
    sr.Check("llm:grpo-loss", check_grpo, proves="GRPOLoss gives a loss whose backward reaches the model"),
    sr.Check("llm:sft-loss", check_sft, proves="SFTLoss gives a loss whose backward reaches the model"),
    sr.Check("llm:collector-replay", check_collector, flag="collector",
             proves="LLMCollector writes its dialog turns into the buffer and MCAdvantage ranks the rewarded answer first"),
]


def run_checks(args, report) -> None:
    # The tiny model's matmuls gain nothing from a second thread, and on a 2-core machine
    # with the other core busy its wait made generation and the losses 2-5x slower
    # (measured). The caller's thread count comes back afterwards (run_all_checks.py).
    with torch_threads(1):
        sr.run_declared(CHECKS, report, args=args)


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
