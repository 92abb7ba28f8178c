"""Four behaviours of TransformersWrapper reported by a GRPO newcomer trial, each
reproduced as it is or shown not to hold, on a tiny Qwen2 model (torchrl 0.14.1,
transformers 5.24.0):

1. generation log-probs vs a forward pass: NOT shifted; the first response token is 0.0;
2. get_new_version(generate=False, num_samples=None) keeps num_return_sequences (holds), and
   also keeps the generating input key ("history", "prompt") and inplace=False;
3. an in-place generate=False pass replaces tokens/text/history and drops the generation's
   prompt/response entries (holds); GRPOLoss's default mask then falls back to the
   assistant mask, which covers the same response tokens (the "mask needs them" part does
   not hold);
4. the full text is the decoded full tokens, with no separator needed or missing; a tokenizer
   whose merges make tokenization non-unique does not give back generated ids on its own.
"""

from __future__ import annotations

import pytest
import torch
from conftest import load_module

tiny = load_module("llm-vla-and-services/_tiny_llm")
ex = load_module("llm-vla-and-services/_llm_wiring_example")


@pytest.fixture(scope="module")
def tok_model():
    tok = tiny.make_tokenizer()
    return tok, tiny.make_causal_lm(tok)


def _generate(tok, model, **kwargs):
    from torchrl.modules.llm import TransformersWrapper

    policy = TransformersWrapper(model, tokenizer=tok, input_mode="history", generate=True, return_log_probs=True,
                                 generate_kwargs={"max_new_tokens": 5, "do_sample": True}, **kwargs)
    torch.manual_seed(0)
    return policy, policy(ex.prompts_td(["What is 2+2?", "hi"], samples=1))


def _forward(model, ids):
    with torch.no_grad():
        lp = model(ids[None]).logits[0].log_softmax(-1)
    return lp[:-1].gather(-1, ids[1:, None]).squeeze(-1)  # [t] = log p(ids[t+1] | ids[:t+1])


def test_generation_log_probs_are_aligned_not_shifted_and_the_first_is_zero(tok_model):
    tok, model = tok_model
    _, out = _generate(tok, model)
    prompts = out.get(("tokens", "prompt"), as_list=True)
    assert prompts[0].numel() != prompts[1].numel()  # rows of different length: left padding at work
    for prompt, full, gen in zip(prompts, out.get(("tokens", "full"), as_list=True), out.get(("log_probs", "response"), as_list=True)):
        fwd = _forward(model, full)
        n0, n = prompt.numel(), gen.numel()
        aligned, shifted = fwd[n0 - 1:n0 - 1 + n], fwd[n0:n0 - 1 + n]
        assert torch.allclose(gen[1:], aligned[1:], atol=1e-5)
        assert not torch.allclose(gen[1:n - 1], shifted[1:], atol=1e-3)  # a one-token shift would match this
        assert float(gen[0]) == 0.0 and float(aligned[0]) < -1.0


def test_get_new_version_keeps_num_return_sequences_input_key_and_inplace(tok_model):
    tok, model = tok_model
    policy, _ = _generate(tok, model, num_samples=3)
    scorer = policy.get_new_version(generate=False, num_samples=None)
    assert scorer.num_samples == 3 and scorer.generate_kwargs["num_return_sequences"] == 3
    assert scorer.input_key == ("history", "prompt") and scorer.inplace is False
    fixed = policy.get_new_version(generate=False, num_samples=None, generate_kwargs={}, input_key=("history", "full"), inplace=True)
    assert fixed.num_samples is None and fixed.input_key == ("history", "full") and fixed.inplace is True


def test_get_new_version_scorer_reads_the_prompt_only(tok_model):
    """Without input_key, the generate=False version scores ("history", "prompt"): no
    response token at all, and an all-False assistant mask."""
    tok, model = tok_model
    policy, out = _generate(tok, model)
    scorer = policy.get_new_version(generate=False)
    with torch.no_grad():
        scored = scorer(out.copy())
    prompt_lens = [p.numel() for p in out.get(("tokens", "prompt"), as_list=True)]
    scored_lens = [t.numel() for t in scored.get(("tokens", "full"), as_list=True)]
    assert all(s < p for s, p in zip(scored_lens, prompt_lens))  # the prompt without the generation prompt
    assert not any(bool(m.any()) for m in scored.get(("masks", "all_assistant_mask"), as_list=True))


def test_in_place_scoring_drops_generation_entries_but_the_mask_survives(tok_model):
    from torchrl.modules.llm import TransformersWrapper
    from torchrl.objectives.llm import GRPOLoss

    tok, model = tok_model
    _, out = _generate(tok, model)
    gen_full = [t.numel() for t in out.get(("tokens", "full"), as_list=True)]
    responses = out.get(("tokens", "response"), as_list=True)
    scorer = TransformersWrapper(model, tokenizer=tok, input_mode="history", generate=False)
    with torch.no_grad():
        scored = scorer(out)
    assert scored is out  # in place (inplace=True is the default for one sample per row)
    for key in (("tokens", "prompt"), ("tokens", "response"), ("log_probs", "response"), ("history", "prompt")):
        assert scored.get(key, None, as_list=True) is None, key
    assert scored.get(("text", "prompt"), None) is None and scored.get(("text", "response"), None) is None
    new_full = [t.numel() for t in scored.get(("tokens", "full"), as_list=True)]
    ended = [int(r[-1]) == tok.eos_token_id for r in responses]
    # the history is re-rendered: a response cut by max_new_tokens gains "<|im_end|>\n"
    assert [n - g for n, g in zip(new_full, gen_full)] == [1 if e else 2 for e in ended]
    with torch.no_grad():
        _, dist, _ = GRPOLoss(scorer)._get_cur_log_prob(scored.copy())  # default masking_strategy="sft"
    width = dist.mask.shape[-1]
    for i, (resp, n) in enumerate(zip(responses, new_full)):
        row = dist.mask[i, width - n:]
        content = resp.numel() - int(ended[i])
        assert int(row.sum()) == content and bool(row[gen_full[i] - resp.numel():][:content].all())


def test_full_text_is_the_decoded_full_tokens(tok_model):
    tok, model = tok_model
    _, out = _generate(tok, model)
    for prompt, response, full, ids in zip(out.get(("text", "prompt")).tolist(), out.get(("text", "response")).tolist(),
                                           out.get(("text", "full")).tolist(), out.get(("tokens", "full"), as_list=True)):
        assert prompt.endswith("<|im_start|>assistant\n")  # the chat template's generation prompt is the separator
        assert full == prompt + response == tok.decode(ids)
        assert tok(full)["input_ids"] == ids.tolist()


def test_a_tokenizer_with_merges_does_not_round_trip_generated_ids():
    """Decoding the ids a model sampled and encoding the text again merges them: the
    tokenizer's doing (any join), not the wrapper's."""
    from tokenizers import Tokenizer, decoders, models

    vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    assert backend.decode([1, 2]) == "ab" and backend.encode("ab").ids == [3]
