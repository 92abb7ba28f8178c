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
    parts = load_module("scripts/_llm_parts")
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
