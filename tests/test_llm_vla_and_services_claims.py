"""llm-vla-and-services: claims of the references and error index tried on the nearest case
their proof did not run (the claims sweep, tests/README.md). Each test shows the stated effect on the claim's case and
the other behaviour on the counter-example that made the sentence narrower; a few show a
claim holding on a case its first proof did not cover.

Models: the pure-torch tiny LM of check_component_contracts (no transformers import) where a
loss only needs log-probs, the tiny Qwen2 of src/torchrl_skill/checks/llm/tiny_llm.py where the wrapper has to
generate or render a chat template. Nothing is downloaded.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import load_module
from tensordict import TensorDict, lazy_stack

AREA = "llm-vla-and-services"
tiny = load_module(f"{AREA}/_tiny_llm")
contracts = load_module(f"{AREA}/check_component_contracts")
ex = load_module(f"{AREA}/_llm_wiring_example")
warnings.filterwarnings("ignore", category=UserWarning)


@pytest.fixture(scope="module")
def tok_model():
    tok = tiny.make_tokenizer()
    return tok, tiny.make_causal_lm(tok)


# --- GRPOLoss output and advantage layout (component-contracts.md, grpo-wiring-checks.md) ---
def test_grpo_output_fields_are_scalars_only_with_token_mean():
    """component-contracts.md#give-me-a-loss: every field is a scalar with the default
    aggregation="token_mean"; "prompt_mean" gives loss_* of shape [1], "none" (or
    reduction="none") per-token [B, T, 1]. kl_to_ref does not follow the aggregation."""
    from torchrl.objectives.llm import GRPOLoss

    policy = contracts.make_scoring_policy()
    batch = contracts.make_grpo_batch(policy)
    torch.manual_seed(1)
    for row in batch.tensordicts:
        lp = row["log_probs", "full"]
        row.set(("next", "ref_log_probs", "full"), lp + 0.3 * torch.randn_like(lp))
    n, width = len(batch.tensordicts), max(r["tokens", "full"].numel() for r in batch.tensordicts)
    shapes, kl = {}, {}
    for name, kw in {"token_mean": {}, "prompt_mean": {"aggregation": "prompt_mean"},
                     "none": {"aggregation": "none"}, "reduction_none": {"reduction": "none"}}.items():
        out = GRPOLoss(policy, kl_to_ref_coeff=0.1, **kw)(batch)
        shapes[name] = {k: tuple(v.shape) for k, v in out.items()}
        kl[name] = float(out.kl_to_ref)
    assert set(shapes["token_mean"].values()) == {()}
    for name, loss_shape in (("prompt_mean", (1,)), ("none", (n, width, 1)), ("reduction_none", (n, width, 1))):
        assert shapes[name]["loss_objective"] == shapes[name]["loss_entropy"] == loss_shape, name
        assert shapes[name]["ESS"] == shapes[name]["kl_to_ref"] == (), name
    assert kl["prompt_mean"] == pytest.approx(kl["token_mean"], rel=1e-6)


def test_scalar_advantage_error_depends_on_the_batch_layout():
    """grpo-wiring-checks.md#advantage: one scalar advantage per row raises the ArrayRef error
    in a lazy-stacked batch (pad_sequence over 0-d tensors), but in a dense batch the advantage
    is read as is and GRPOLoss raises its same-number-of-dimensions ValueError, as it does for
    [B, 1]; [B, 1, 1] runs in both."""
    from torchrl.objectives.llm import GRPOLoss

    policy = contracts.make_scoring_policy()
    torch.manual_seed(0)
    full = torch.randint(1, 16, (3, 6))
    rows = [TensorDict(tokens=TensorDict(full=full[i], prompt=full[i, :3], response=full[i, 3:]),
                       masks=TensorDict(all_attention_mask=torch.ones(6, dtype=torch.bool),
                                        all_assistant_mask=torch.arange(6) >= 3)) for i in range(3)]
    with torch.no_grad():
        lps = policy(lazy_stack(rows)).get(("log_probs", "full"), as_list=True)
    for row, lp in zip(rows, lps):
        row.set(("log_probs", "full"), lp)
    loss = GRPOLoss(policy)

    def lazy(adv_shape):
        return lazy_stack([r.clone().set("advantage", torch.full(adv_shape, 0.5)) for r in rows])

    def dense(adv_shape):
        return torch.stack([r.clone() for r in rows]).set("advantage", torch.full((3, *adv_shape), 0.5))

    assert type(dense(())).__name__ == "TensorDict" and dense(()).get(("log_probs", "full")).shape == (3, 6)  # not lazy
    with pytest.raises(RuntimeError, match="ArrayRef: invalid slice, N = 1; size = 0"):
        loss(lazy(()))
    for adv_shape in ((), (1,)):
        with pytest.raises(ValueError, match="advantage and log_weight must have the same number of dimensions"):
            loss(dense(adv_shape))
    assert torch.isfinite(loss(lazy((1, 1))).loss_objective) and torch.isfinite(loss(dense((1, 1))).loss_objective)


def test_plain_indexing_fails_only_on_rows_of_different_length():
    """llm-and-rlhf-workflows.md#wrappers: with pad_output=False, td["log_probs", "full"] raises
    when the rows differ in length; rows of one length stack into a [B, T] tensor."""
    policy = contracts.make_scoring_policy()

    def scored(lengths):
        rows = [TensorDict(tokens=TensorDict(full=torch.randint(1, 16, (n,))),
                           masks=TensorDict(all_attention_mask=torch.ones(n, dtype=torch.bool))) for n in lengths]
        with torch.no_grad():
            return policy(lazy_stack(rows))

    assert scored((5, 5))["log_probs", "full"].shape == (2, 5)
    with pytest.raises(RuntimeError, match="Failed to stack tensors within a tensordict"):
        scored((4, 6))["log_probs", "full"]


# --- SFTLoss (component-contracts.md, grpo-wiring-checks.md#loss-mask) ----------------------
def test_sft_loss_uses_the_batch_assistant_mask_and_the_actors_tokenizer(tok_model):
    """SFTLoss(actor) without tokenizer= takes the actor's; it renders ("history", "full")
    with the chat template only when the batch has no ("masks", "all_assistant_mask"): a mask
    in the batch is used as given (one token here: the loss is minus that token's log-prob)."""
    from torchrl.data.llm import History
    from torchrl.modules.llm import ChatHistory, TransformersWrapper
    from torchrl.objectives.llm import SFTLoss

    tok, model = tok_model
    actor = TransformersWrapper(model, tokenizer=tok, input_mode="history", generate=False, return_log_probs=True)
    chats = [[{"role": "user", "content": "hi there"}, {"role": "assistant", "content": f"hello {w}"}] for w in ("you", "all")]
    batch = TensorDict(history=ChatHistory(full=History.from_chats(chats)), batch_size=(2,))
    loss = SFTLoss(actor)
    assert loss.tokenizer is tok
    from_template = float(loss(batch.copy()).loss_sft.detach())
    with torch.no_grad():
        scored = actor(batch.copy())
    own_masks = scored.get(("masks", "all_assistant_mask"), as_list=True)
    assert all(int(m.sum()) > 1 for m in own_masks)

    def with_masks(masks):
        out = batch.copy().to_lazystack(0)
        for row, m, attn in zip(out.tensordicts, masks, scored.get(("masks", "all_attention_mask"), as_list=True)):
            row.set(("masks", "all_assistant_mask"), m)
            row.set(("masks", "all_attention_mask"), attn)
        return out

    assert float(loss(with_masks(own_masks)).loss_sft) == pytest.approx(from_template, rel=1e-5)
    one_token = [torch.zeros_like(m).index_fill_(0, torch.tensor([m.numel() - 3]), True) for m in own_masks]
    lps = scored.get(("log_probs", "full"), as_list=True)
    expected = -float(torch.stack([lp[m.numel() - 3] for lp, m in zip(lps, own_masks)]).mean())
    custom = float(loss(with_masks(one_token)).loss_sft)
    assert custom == pytest.approx(expected, rel=1e-4) and custom != pytest.approx(from_template, rel=1e-3)


# --- History and chat templates (llm-and-rlhf-workflows.md#history-and-chat-templates) ------
def test_a_known_model_name_picks_torchrls_template_over_generation_markers():
    """Without chat_template, a tokenizer name torchrl knows (qwen, llama, ...) picks torchrl's
    template even when the tokenizer's own one has {% generation %}; an unknown name keeps it."""
    from torchrl.data.llm import History

    tok = tiny.make_tokenizer()
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }}: {% generation %}{{ m['content'] }}"
                         "{% endgeneration %};{% endfor %}")
    history = History.from_chats([[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]])
    rendered = {}
    for name in ("", "org/mistral-tiny", "org/my-llama-tiny", "org/qwen-tiny"):
        tok.name_or_path = name
        rendered[name] = history.apply_chat_template(tokenizer=tok, add_generation_prompt=False)[0]
    assert rendered[""] == rendered["org/mistral-tiny"] == "user: hi;assistant: yo;"
    assert rendered["org/my-llama-tiny"].startswith("<|header_start|>user")
    assert rendered["org/qwen-tiny"].startswith("<|im_start|>system\n")


# --- TransformersWrapper generation (llm-and-rlhf-workflows.md#wrappers, error index) -------
def test_generation_keys_depend_on_input_mode(tok_model):
    """Generation fills text.* and history.* in history mode only: text mode leaves history
    empty, tokens mode text and history. The first ("log_probs", "response") entry is 0.0 in
    all three (the claim that held)."""
    from torchrl.modules.llm import TransformersWrapper

    tok, model = tok_model
    prompts = ex.prompts_td(["hi", "What?"], samples=1)
    texts = prompts["history", "prompt"].apply_chat_template(tokenizer=tok, add_generation_prompt=True)
    inputs = {
        "history": prompts,
        "text": TensorDict(text=TensorDict(prompt=texts, batch_size=[2]), batch_size=[2]),
        "tokens": lazy_stack([TensorDict(tokens=TensorDict(prompt=torch.tensor(tok(t)["input_ids"]))) for t in texts]),
    }
    for mode, td in inputs.items():
        policy = TransformersWrapper(model, tokenizer=tok, input_mode=mode, generate=True, return_log_probs=True,
                                     generate_kwargs={"max_new_tokens": 3, "do_sample": True})
        torch.manual_seed(0)
        out = policy(td)
        for key in ("prompt", "response", "full"):
            assert len(out.get(("tokens", key), as_list=True)) == 2, (mode, key)
        assert all(float(lp[0]) == 0.0 for lp in out.get(("log_probs", "response"), as_list=True)), mode
        assert (out.get(("text", "full"), None) is not None) == (mode != "tokens"), mode
        assert (out.get(("history", "full"), None) is not None) == (mode == "history"), mode


def test_num_samples_samples_when_the_generation_config_does(tok_model):
    """greedy-num-return-sequences-num-samples: num_samples=k without do_sample in
    generate_kwargs fails on a config-built model (greedy), and samples k answers when the
    model's generation_config sets do_sample=True (a checkpoint's generation_config.json may)."""
    from torchrl.modules.llm import TransformersWrapper

    tok, model = tok_model
    assert not model.generation_config.do_sample
    policy = TransformersWrapper(model, tokenizer=tok, input_mode="history", num_samples=2,
                                 generate_kwargs={"max_new_tokens": 3})
    with pytest.raises(ValueError, match="Greedy methods .* do not support `num_return_sequences` different than 1"):
        policy(ex.prompts_td(["hi"], samples=1))
    model.generation_config.do_sample = True
    try:
        out = policy(ex.prompts_td(["hi"], samples=1))
    finally:
        model.generation_config.do_sample = False
    assert out.batch_size == (1, 2) and all(out[0, i].get(("tokens", "response")).numel() > 0 for i in range(2))


# --- MCAdvantage (llm-and-rlhf-workflows.md#losses-and-advantages; held) ---------------------
def test_mcadvantage_divides_by_the_sample_std_and_gives_zero_for_equal_rewards():
    """(reward - group mean) / group std holds with the sample std (n - 1): rewards 1 and 0
    give +-0.707, not +-1; a group of equal rewards gives 0, not NaN; shape [n, 1, 1]."""
    from torchrl.objectives.llm import MCAdvantage

    def advantages(rewards):
        transform, out = MCAdvantage(grpo_size=len(rewards), prompt_key="query"), None
        for r in rewards:
            done = torch.ones(1, 1, dtype=torch.bool)
            row = TensorDict(query="q", done=done, batch_size=[1],
                             next=TensorDict(reward=torch.full((1, 1, 1), r), done=done, batch_size=[1]))
            out = transform.inv(row)
        return out["advantage"]

    adv = advantages([1.0, 0.0])
    assert adv.shape == (2, 1, 1) and adv.flatten().tolist() == pytest.approx([2 ** -0.5, -(2 ** -0.5)], rel=1e-5)
    assert advantages([1.0, 1.0]).flatten().tolist() == [0.0, 0.0]


# --- VLA (vla-data-and-actions.md, error index) ---------------------------------------------
def test_vla_validator_checks_only_actions_for_non_finite_values():
    """validate_vla_tensordict reports a NaN action; a NaN state or an inf image passes."""
    from torchrl.data.vla import validate_vla_tensordict

    td = TensorDict(observation=TensorDict(image=torch.zeros(2, 3, 8, 8), state=torch.zeros(2, 4), batch_size=[2]),
                    action=torch.zeros(2, 7), batch_size=[2])
    td["language_instruction"] = "pick the cube"
    assert validate_vla_tensordict(td, raise_on_error=False) == []
    bad_obs = td.clone()
    bad_obs["observation", "state"][0, 0] = float("nan")
    bad_obs["observation", "image"][0, 0, 0, 0] = float("inf")
    assert validate_vla_tensordict(bad_obs, raise_on_error=False) == []
    bad_action = td.clone()
    bad_action["action"][0, 0] = float("nan")
    assert validate_vla_tensordict(bad_action, raise_on_error=False) == ["non-finite values in action at key 'action'"]


def test_action_tokenizer_error_bounds_hold_only_inside_the_range():
    """Inside [-1, 1] UniformActionTokenizer(256) round-trips within 1/256 (half its bin) and
    VocabTailActionTokenizer(256) within 1/255 (its 256 ids are the edges of 255 bins), in the
    last 256 ids of the vocabulary; outside, both clamp to the edge bin."""
    from torchrl.data.vla import UniformActionTokenizer, VocabTailActionTokenizer

    x = torch.linspace(-1, 1, 7007).reshape(-1, 7)
    uniform = UniformActionTokenizer(256, low=-1.0, high=1.0, action_dim=7)
    tail = VocabTailActionTokenizer(256, full_vocab_size=32000)
    err_u = float((uniform.decode(uniform.encode(x)) - x).abs().max())
    ids = tail.encode(x)
    err_t = float((tail.decode(ids) - x).abs().max())
    assert err_u == pytest.approx(1 / 256, rel=1e-3) and err_t == pytest.approx(1 / 255, rel=1e-3) and err_t > 1 / 256
    assert int(ids.min()) == 32000 - 256 and int(ids.max()) == 31999
    outside = torch.tensor([[1.5, -3.0, 0, 0, 0, 0, 0]])
    for tok in (uniform, tail):
        back = tok.decode(tok.encode(outside))[0, :2]
        assert back.abs().max() < 1.0 and float((back - outside[0, :2]).abs().min()) > 0.5
