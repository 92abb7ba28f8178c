"""check_llm_wiring.py: every check fails its broken fixture (tests/fixtures/llm_wiring/,
each file's ``broken*()``) with the cause named, and passes the fixed twin in the same file;
the bundled known-good wiring passes every check; bad targets exit 2 with one line."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, rows, run_main

SCRIPT = "llm-vla-and-services/check_llm_wiring"
WIRING = FIXTURES / "llm_wiring"
ALL = ["load", "behaviour-logprobs", "loss-mask", "advantage", "update", "reference", "samples-per-prompt"]


def run(target: str | None = None, *argv: str) -> tuple[int, dict]:
    code, report = run_main(SCRIPT, *([target] if target else []), *argv)
    return code, rows(report)


def test_bundled_wiring_passes_every_check():
    code, found = run()
    assert code == 0
    assert [found[f"llm-wiring:{name}"][0] for name in ALL] == ["pass"] * len(ALL), found
    assert "ratio 1" in found["llm-wiring:behaviour-logprobs"][1]
    assert "no prompt token, no padding" in found["llm-wiring:loss-mask"][1]


CASES = [
    ("behaviour_logprobs", "broken", "behaviour-logprobs", ["response token 0", "stored 0.0000", "generate=False wrapper"]),
    ("loss_mask", "broken", "loss-mask", ["masking_strategy='generic'", "prompt tokens in the mask", "masking_strategy='rlhf'"]),
    ("sft", "broken", "loss-mask", ["SFTLoss (assistant masks)", "11 prompt tokens in the mask", "{% generation %} markers"]),
    ("advantage", "broken", "advantage", ["not normalised within each prompt's group", "normalised across prompts"]),
    ("advantage", "broken_shape", "advantage", ["ArrayRef: invalid slice", "adv.reshape(-1, 1, 1)"]),
    ("update", "broken", "update", ["26 of 26 trainable tensors", "another model object"]),
    ("update", "broken_frozen", "update", ["moved 1 tensors you froze", "model.embed_tokens.weight"]),
    ("reference", "broken", "reference", ["26 trainable tensors", "requires_grad_(False)"]),
    ("reference", "broken_tokenizer", "reference", ["padding_side"]),
    ("samples", "broken", "samples-per-prompt", ["[16] rows each, not 4", "num_samples=4"]),
    ("samples", "broken_actor", "samples-per-prompt", ["num_samples=4", "num_return_sequences", "generate_kwargs={}"]),
    # pad == eos: TransformersWrapper's masks are tokens != pad_token_id; the history responses come back empty
    ("pad_eos", "broken", "loss-mask", ["holds 0 response tokens in 8 rows", "pad_token_id == eos_token_id (99", "add_special_tokens"]),
    ("pad_eos", "broken", "behaviour-logprobs", ["0 response tokens to compare in 8 rows", "pad_token_id == eos_token_id"]),
    ("pad_eos", "broken_no_pad", "loss-mask", ["holds 0 response tokens", "sets pad = eos itself"]),
    ("pad_eos", "broken_tokens", "loss-mask", ["hold 0 eos ids", "pad_token_id == eos_token_id"]),
    # rows that once passed on zero evidence
    ("zero_evidence", "all_frozen", "update", ["0 trainable tensors (26 frozen)"]),
    ("zero_evidence", "empty_rollout", "load", ["the rollout has 0 rows"]),
]


@pytest.mark.parametrize("fixture, variant, check, says", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_check_fails_broken_fixture(fixture, variant, check, says):
    code, found = run(f"{WIRING / fixture}.py:{variant}")
    status, detail = found[f"llm-wiring:{check}"]
    assert code == 1 and status == "fail", detail
    for text in says:
        assert text in detail, detail


@pytest.mark.parametrize("fixture, check", [
    ("behaviour_logprobs", "behaviour-logprobs"), ("loss_mask", "loss-mask"), ("sft", "loss-mask"), ("advantage", "advantage"),
    ("update", "update"), ("reference", "reference"), ("samples", "samples-per-prompt"),
    ("pad_eos", "loss-mask"), ("pad_eos", "behaviour-logprobs"), ("zero_evidence", "update"), ("zero_evidence", "load"),
])
def test_check_passes_fixed_twin(fixture, check):
    code, found = run(f"{WIRING / fixture}.py:fixed")
    assert found[f"llm-wiring:{check}"][0] == "pass", found[f"llm-wiring:{check}"]
    assert code == 0, {k: v for k, v in found.items() if v[0] == "fail"}


def test_generic_mask_also_shows_as_a_ratio_off_at_the_first_token():
    """masking_strategy='generic' trains position 0, which torchrl scores 0.0 and the loss
    recomputes as log(1/vocab): the step-0 ratio check names that position."""
    detail = run(f"{WIRING / 'loss_mask'}.py:broken")[1]["llm-wiring:behaviour-logprobs"][1]
    assert "position 0 (the sequence's first token" in detail


def test_update_check_restores_the_weights():
    import sys

    import torch

    sys.path.insert(0, str(WIRING))
    import _common

    wiring = _common.ex.wiring()
    model = wiring["policy"].model
    before = [p.detach().clone() for p in model.parameters()]
    from conftest import load_module

    script = load_module(SCRIPT)
    parts = load_module("llm-vla-and-services/_llm_parts")
    script.check_update(parts.read_wiring(wiring, "wiring()"))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_target_without_the_function_exits_2(capsys):
    code, report = run_main(SCRIPT, f"{WIRING / 'advantage'}.py:nope")
    assert code == 2 and report == {}
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no attribute 'nope'" in err[0]


def test_wiring_without_a_loss_fails_load_naming_the_shape(tmp_path):
    target = tmp_path / "w.py"
    target.write_text("def wiring():\n    return {'policy': object(), 'rollout': None}\n")
    code, found = run(f"{target}:wiring")
    status, detail = found["llm-wiring:load"]
    assert code == 1 and status == "fail"
    assert "without loss, rollout" in detail and "'samples_per_prompt'" in detail


def _backend_or_skip(module: str) -> None:
    import importlib.util

    import torch

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed here: the {module} wiring is not verified")
    if not torch.cuda.is_available():
        pytest.skip(f"no CUDA GPU here: the {module} wiring is not verified")


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_served_policy_wiring_passes_where_the_backend_runs(backend):
    """The same checks on a vLLM/SGLang-served policy: they read the trainer's Hugging Face
    model, so they run unchanged; skipped (never passed) where the backend or a GPU is absent."""
    _backend_or_skip(backend)
    code, found = run(f"{WIRING / 'backends'}.py:{backend}")
    assert code == 0 and all(status == "pass" for status, _ in found.values()), found


def test_pad_eos_tokens_mode_fixed_twin_passes():
    """The nearest correct twin of broken_tokens: the same tokens-mode step with the tokenizer's own pad token."""
    code, found = run(f"{WIRING / 'pad_eos'}.py:fixed_tokens")
    assert code == 0 and found["llm-wiring:loss-mask"][0] == "pass", found["llm-wiring:loss-mask"]
    assert "masks exactly the 4" in found["llm-wiring:loss-mask"][1]  # 4x response tokens counted, not 0


def test_pad_eos_empties_every_history_response():
    """The fault itself, on the real wrapper: with pad == eos the prompt's end-of-turn ids are dropped
    from ('tokens', 'full'), so the decoded full text is shorter than the prompt text and every
    ('text', 'response') is empty, while ('tokens', 'response') still holds the sampled ids."""
    import sys

    sys.path.insert(0, str(WIRING))
    import _common
    from torchrl_skill.checks.llm import tiny_llm as tiny

    for pad_is_eos in (True, False):
        tok = tiny.make_tokenizer()
        if pad_is_eos:
            tok.pad_token = tok.eos_token
        _, rows = _common.ex.sample_groups(tiny.make_causal_lm(tok), tok, "history")
        texts = rows.get(("text", "response")).tolist()
        sampled = sum(t.numel() for t in rows.get(("tokens", "response"), as_list=True))
        assert sampled > 0
        assert (texts == [""] * len(texts)) is pad_is_eos, texts


def test_all_equal_rewards_skip_the_advantage_row_naming_why():
    """Zero evidence is never a pass: all-equal rewards leave no group to check the normalisation on."""
    code, found = run(f"{WIRING / 'zero_evidence'}.py:flat_rewards")
    status, detail = found["llm-wiring:advantage"]
    assert status == "skip" and "all 2 groups have all-equal rewards" in detail and "not checked" in detail
    assert run(f"{WIRING / 'zero_evidence'}.py:fixed")[1]["llm-wiring:advantage"][0] == "pass"


@pytest.mark.parametrize("mode", ["history", "text", "tokens"])
def test_bundled_example_passes_for_every_input_mode(mode):
    """--example MODE: num_samples layout [n_prompts, 4] flattened, MCAdvantage in a replay buffer,
    the mode's scoring path; every row passes on counted evidence (response tokens > 0)."""
    code, found = run(None, "--example", mode)
    assert code == 0, {k: v for k, v in found.items() if v[0] != "pass"}
    assert f"input_mode={mode!r}" in found["llm-wiring:load"][1]
    for name in ["behaviour-logprobs", "loss-mask", "advantage", "update", "samples-per-prompt"]:
        assert found[f"llm-wiring:{name}"][0] == "pass", (name, found[f"llm-wiring:{name}"])
    assert " 0 response tokens" not in found["llm-wiring:loss-mask"][1]
    assert "2 prompts x 4 samples = 8 rows" in found["llm-wiring:samples-per-prompt"][1]


def _example():
    import sys

    sys.path.insert(0, str(WIRING))
    import _common
    from torchrl_skill.checks.llm import tiny_llm as tiny

    return _common.ex, tiny


@pytest.mark.parametrize("mode", ["text", "tokens"])
def test_in_place_scoring_drops_the_prompt_tokens_that_sft_masks_with(mode):
    """text/tokens modes: a generate=False wrapper scoring the batch in place (its default) replaces
    its ('tokens', ...) entry, so ('tokens', 'prompt') is gone and GRPOLoss(masking_strategy='sft')
    raises; scoring with inplace=False and keeping only ('log_probs', 'full') leaves the prompt for
    the mask (torchrl 0.14.1)."""
    import torch
    from torchrl.modules.llm import TransformersWrapper
    from torchrl.objectives.llm import GRPOLoss

    ex, tiny = _example()
    tok = tiny.make_tokenizer()
    model = tiny.make_causal_lm(tok)
    _, rows = ex.sample_groups(model, tok, mode)
    rows.set("advantage", torch.randn(rows.batch_size[0], 1, 1))
    actor = TransformersWrapper(model, tokenizer=tok, input_mode=mode, generate=False, return_log_probs=True)
    good = rows.clone()
    with torch.no_grad():
        actor(rows)  # in place
    assert rows.get(("tokens", "prompt"), None, as_list=True) is None
    with pytest.raises(ValueError, match="Assistant mask not found"):
        GRPOLoss(actor, masking_strategy="sft")(rows)
    with pytest.raises(ValueError, match="input_mode is not 'history'"):  # no assistant mask outside history mode
        GRPOLoss(actor, masking_strategy="rlhf")(good.clone())
    _, kept = ex.score_for_loss(model, tok, good, mode)
    assert kept.get(("tokens", "prompt"), None, as_list=True) is not None
    assert torch.isfinite(GRPOLoss(actor, masking_strategy="sft")(kept).loss_objective)


def test_loss_actor_with_inplace_false_raises_keyerror():
    """The loss's actor must keep inplace=True: GRPOLoss reads the log-probs back from its input."""
    import torch
    from torchrl.modules.llm import TransformersWrapper
    from torchrl.objectives.llm import GRPOLoss

    ex, tiny = _example()
    tok = tiny.make_tokenizer()
    model = tiny.make_causal_lm(tok)
    _, batch = ex.score_for_loss(model, tok, ex.advantage_buffer(ex.sample_groups(model, tok, "tokens")[1], tok), "tokens")
    actor = TransformersWrapper(model, tokenizer=tok, input_mode="tokens", generate=False, return_log_probs=True, inplace=False)
    with pytest.raises(KeyError, match='key "log_probs" not found'):
        GRPOLoss(actor, masking_strategy="sft")(batch)
    assert torch.isfinite(GRPOLoss(ex.score_for_loss(model, tok, batch.clone(), "tokens")[0], masking_strategy="sft")(batch).loss_objective)


def test_grpo_loss_output_is_read_by_attribute_and_one_step_moves_the_weights():
    """GRPOLoss returns a tensorclass: out.loss_objective, while out["loss_objective"] raises
    ValueError (Invalid indexing arguments); an optimizer step on the loss moves the weights."""
    import torch
    from torchrl.objectives.llm import GRPOLoss

    ex, tiny = _example()
    tok = tiny.make_tokenizer()
    model = tiny.make_causal_lm(tok)
    _, batch = ex.score_for_loss(model, tok, ex.advantage_buffer(ex.sample_groups(model, tok, "tokens")[1], tok), "tokens")
    out = GRPOLoss(ex.score_for_loss(model, tok, batch.clone(), "tokens")[0], masking_strategy="sft")(batch)
    with pytest.raises(ValueError, match="Invalid indexing arguments"):
        out["loss_objective"]
    before = [p.detach().clone() for p in model.parameters()]
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    (out.loss_objective + out.loss_entropy).backward()
    optim.step()
    assert sum(not torch.equal(b, p) for b, p in zip(before, model.parameters())) > 0


def test_num_samples_layout_and_mcadvantage_groups_by_prompt_ids():
    """num_samples=N returns [n_prompts, N]; flattened prompt-major; MCAdvantage with the tensor
    prompt key ('tokens', 'prompt') groups by id values and writes (r - group mean) / group sample std."""
    import torch

    ex, tiny = _example()
    tok = tiny.make_tokenizer()
    policy, rows = ex.sample_groups(tiny.make_causal_lm(tok), tok, "tokens")
    assert policy.num_samples == ex.SAMPLES and rows.batch_size == (len(ex.PROMPTS) * ex.SAMPLES,)
    prompts = [tuple(p.tolist()) for p in rows.get(("tokens", "prompt"), as_list=True)]
    assert prompts[: ex.SAMPLES] == [prompts[0]] * ex.SAMPLES and prompts[ex.SAMPLES] != prompts[0]
    batch = ex.advantage_buffer(rows, tok)
    adv = batch.get("advantage").reshape(-1)
    reward = batch.get(("next", "reward")).reshape(-1)
    keys = [tuple(p.tolist()) for p in batch.get(("tokens", "prompt"), as_list=True)]
    for key in set(keys):
        idx = torch.tensor([i for i, k in enumerate(keys) if k == key])
        r = reward[idx]
        assert len(idx) == ex.SAMPLES
        torch.testing.assert_close(adv[idx], (r - r.mean()) / r.std().clamp_min(1e-6))


def test_grpo_loss_takes_flat_rows_not_the_num_samples_layout():
    """GRPOLoss on the wrapper's [n_prompts, num_samples] layout raises (torchrl 0.14.1); on the same
    batch flattened with reshape(-1) it runs."""
    import torch
    from torchrl.objectives.llm import GRPOLoss

    ex, tiny = _example()
    tok = tiny.make_tokenizer()
    model = tiny.make_causal_lm(tok)
    actor, batch = ex.score_for_loss(model, tok, ex.sample_groups(model, tok, "tokens")[1], "tokens")
    batch.set("advantage", torch.randn(batch.batch_size[0], 1, 1))
    loss = GRPOLoss(actor, masking_strategy="sft")
    with pytest.raises(AttributeError, match="'list' object has no attribute 'clone'"):
        loss(batch.reshape(len(ex.PROMPTS), ex.SAMPLES))
    assert torch.isfinite(loss(batch).loss_objective)
