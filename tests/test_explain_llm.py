"""explain.py on LLM losses and wrappers (src/torchrl_skill/explain/llm.py): for each key a loss
reads, the TransformersWrapper modes that write it, measured by running the installed
wrapper on a tiny Qwen2 model; the measured table agrees with an independent run; a
wrapper that cannot run here (vLLMWrapper) is said not verified; other names get no such
fact."""

from __future__ import annotations

import importlib
import importlib.util

import pytest
import torch
from conftest import load_module

from torchrl_skill.report import skill_report as sr

explain = load_module("scripts/explain")
llm = importlib.import_module("torchrl_skill.explain.llm")
VERSIONS = sr.stack_versions()


def facts(name: str) -> list[str]:
    found, out = explain.explain_lines(name, VERSIONS)
    assert found, out
    text = " ".join(" ".join(out).split())
    return [part.strip() for part in text.split("fact:")[1:]]


def fact(name: str, start: str) -> str:
    hits = [f for f in facts(name) if f.startswith(start)]
    assert len(hits) == 1, facts(name)
    return hits[0].split(" note:")[0]


def test_grpo_behaviour_log_probs_come_from_generate_false_only():
    line = fact("GRPOLoss", "reads ('log_probs', 'full')")
    assert "generate=False" in line and "generate=True" not in line
    assert "written by no" in fact("GRPOLoss", "reads 'advantage'") and "MCAdvantage" in fact("GRPOLoss", "reads 'advantage'")
    ref = fact("GRPOLoss", "reads ('next', 'ref_log_probs', 'full')")
    assert "written by no" in ref and "log_probs_key='ref_log_probs'" in ref
    assert any("first entry is 0.0" in f for f in facts("GRPOLoss"))


def test_sft_reads_the_history_a_generating_history_wrapper_writes_and_not_its_output_key():
    line = fact("SFTLoss", "reads ('history', 'full')")
    assert "input_mode='history' generate=True" in line and "input_mode='text'" not in line
    assert not [f for f in facts("SFTLoss") if f.startswith("reads ('log_probs', 'full')")]  # an output key


def test_the_measured_table_agrees_with_an_independent_run():
    from tensordict import TensorDict
    from torchrl.data.llm import History
    from torchrl.modules.llm import ChatHistory, TransformersWrapper

    tiny = load_module("llm-vla-and-services/_tiny_llm")
    tok = tiny.make_tokenizer()
    td = TensorDict(history=ChatHistory(prompt=History.from_chats([[{"role": "user", "content": "yo"}]])), batch_size=(1,))
    with torch.no_grad():
        out = TransformersWrapper(tiny.make_causal_lm(tok), tokenizer=tok, generate_kwargs={"max_new_tokens": 3})(td.to_lazystack(0))
    table = llm.written_by_mode()
    in_key, written = table[("history", True, True)]
    assert in_key == ("history", "prompt")
    for key in written:
        assert out.get(key, None, as_list=True) is not None, key
    assert ("log_probs", "response") in written and ("log_probs", "full") not in written
    assert out.get(("log_probs", "full"), None, as_list=True) is None
    assert ("log_probs", "full") in table[("tokens", False, True)][1]


def test_transformers_wrapper_lists_each_mode():
    lines = [f for f in facts("TransformersWrapper") if f.startswith("input_mode=")]
    assert len(lines) == len(llm.MODES)
    assert any(f.startswith("input_mode='tokens' generate=False: reads ('tokens', 'full')") for f in lines)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here: the not-run branch does not apply")
def test_vllm_wrapper_is_said_not_verified():
    line = fact("vLLMWrapper", "not run here")
    assert "not verified" in line and "input_mode, generate, return_log_probs" in line


def test_other_names_get_no_wrapper_mode_fact():
    assert not [f for f in facts("ClipPPOLoss") if "TransformersWrapper" in f]
    assert llm.llm_facts(torch.nn.Linear) == []
