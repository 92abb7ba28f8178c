"""The llm-vla-and-services smokes on the real stack (transformers, tokenizers, ray, Pillow):
each passes on the verified setup, fails on the faults it names, and leaves nothing behind."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from conftest import load_module, run_in_process, run_main
from torchrl_skill.report.skill_report import CheckFailed, child_processes, leftover_processes

AREA = "llm-vla-and-services"
tiny = load_module(f"{AREA}/_tiny_llm")  # its stable API is documented in its docstring
smoke_llm_grpo = load_module(f"{AREA}/smoke_llm_grpo")
check_vla_schema = load_module(f"{AREA}/check_vla_schema")
smoke_services = load_module(f"{AREA}/smoke_services")
smoke_render = load_module(f"{AREA}/smoke_render")


def test_tiny_llm_api_and_round_trip():

    tok = tiny.make_tokenizer()
    text = "<|im_start|>user\nHi, 2+2?<|im_end|>\n"
    assert tok.decode(tok(text)["input_ids"]) == text
    model = tiny.make_causal_lm(tok, seed=3)
    again = tiny.make_causal_lm(tok, seed=3)
    assert all((a == b).all() for a, b in zip(model.parameters(), again.parameters()))
    assert type(model).__name__ == "Qwen2ForCausalLM"
    rm = tiny.make_reward_model(tok)
    batch = tok(["a b", "c"], return_tensors="pt", padding=True)
    assert tuple(rm(**batch).logits.shape) == (2, 1)


def test_llm_smoke_full_path_passes():
    res = run_in_process(f"{AREA}/smoke_llm_grpo", "--collector")
    assert {status for status, _ in res.values()} == {"pass"}, res
    assert "LLMCollector" in res["llm:collector-replay"][1]


def test_llm_smoke_default_skips_collector():
    status, detail = run_in_process(f"{AREA}/smoke_llm_grpo")["llm:collector-replay"]
    assert status == "skip" and "--collector" in detail


def test_llm_smoke_old_log_probs_with_grad_fail_as_documented():
    """GRPOLoss refuses old log-probs that require grad (the troubleshooting entry's error)."""
    import torch

    tok = tiny.make_tokenizer()
    gen = smoke_llm_grpo.check_env_generate(smoke_llm_grpo.build_parser().parse_args([]), tok).value
    scored = smoke_llm_grpo.scoring_actor(gen.model, tok)(gen.td.copy())  # grad enabled: the fault
    scored["advantage"] = torch.tensor([[[1.0]], [[-0.5]]])
    from torchrl.objectives.llm import GRPOLoss

    with pytest.raises(RuntimeError, match=r"tensordict stored \('log_probs', 'full'\) requires grad"):
        GRPOLoss(smoke_llm_grpo.scoring_actor(gen.model, tok), masking_strategy="rlhf")(scored)


def test_gpt2_logprob_pass_fails_as_documented():
    import torch
    from tensordict import TensorDict
    from transformers import GPT2Config, GPT2LMHeadModel
    from torchrl.modules.llm import Text, TransformersWrapper

    tok = tiny.make_tokenizer()
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=64,
                                      bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)).eval()
    wrapper = TransformersWrapper(gpt2, tokenizer=tok, input_mode="text", generate=False, return_log_probs=True)
    with pytest.raises(AttributeError, match="get_seq_length"):
        wrapper(TensorDict({"text": Text(full=["hello", "hi"])}, batch_size=(2,)))


@pytest.mark.parametrize("family", ["qwen2", "llama", "opt"])
def test_logprob_pass_works_with_qwen2_llama_and_opt(family):
    """The troubleshooting fix for GPT-2's get_seq_length error: these three families pass."""
    import torch
    from tensordict import TensorDict
    from torchrl.modules.llm import Text, TransformersWrapper
    from transformers import LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM

    tok = tiny.make_tokenizer()
    torch.manual_seed(0)
    ids = dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    model = {
        "qwen2": lambda: tiny.make_causal_lm(tok),
        "llama": lambda: LlamaForCausalLM(LlamaConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                      num_key_value_heads=1, intermediate_size=32,
                                                      max_position_embeddings=64, bos_token_id=None, **ids)),
        "opt": lambda: OPTForCausalLM(OPTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, ffn_dim=32,
                                                max_position_embeddings=64, word_embed_proj_dim=16,
                                                bos_token_id=tok.eos_token_id, **ids)),
    }[family]().eval()
    wrapper = TransformersWrapper(model, tokenizer=tok, input_mode="text", generate=False, return_log_probs=True)
    out = wrapper(TensorDict({"text": Text(full=["hello", "hi"])}, batch_size=(2,)))
    assert [lp.shape for lp in out.get(("log_probs", "full"), as_list=True)] == [torch.Size([5]), torch.Size([2])]


def test_history_template_is_torchrls_not_the_tokenizers():
    """History.apply_chat_template renders torchrl's chatml_format for a tokenizer whose own
    template has no {% generation %} markers; passing chat_template= gives the tokenizer's."""
    from torchrl.data.llm import History

    tok = tiny.make_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    history = History.from_chats([chat])
    theirs = tok.apply_chat_template(chat, tokenize=False)
    assert history.apply_chat_template(tokenizer=tok, add_generation_prompt=False)[0] == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n") != theirs
    assert history.apply_chat_template(tokenizer=tok, add_generation_prompt=False, chat_template=tok.chat_template)[0] == theirs


def test_llmcollector_keyword_and_init_tracker():
    import warnings

    make_chat_env = smoke_llm_grpo.make_chat_env
    from torchrl.collectors.llm import LLMCollector
    from torchrl.envs import InitTracker
    from torchrl.modules.llm import TransformersWrapper

    tok = tiny.make_tokenizer()
    policy = TransformersWrapper(tiny.make_causal_lm(tok), tokenizer=tok, input_mode="history",
                                 generate_kwargs={"max_new_tokens": 2})
    with pytest.raises(TypeError, match="auto_register_policy_transforms"):
        LLMCollector(make_chat_env(tok), policy=policy, dialog_turns_per_batch=2, auto_register_policy_transforms=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        LLMCollector(make_chat_env(tok), policy=policy, dialog_turns_per_batch=2).shutdown()
    assert any("auto_register_policy_transforms" in str(w.message) for w in seen)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        LLMCollector(make_chat_env(tok).append_transform(InitTracker()), policy=policy, dialog_turns_per_batch=2).shutdown()
    assert not any("auto_register_policy_transforms" in str(w.message) for w in seen)


def test_dialogue_loader_into_llmenv_fails_as_documented():
    import torch
    from torchrl.envs.llm import LLMEnv

    dialogs = [[{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}] for i in range(4)]
    loader = torch.utils.data.DataLoader(dialogs, batch_size=4, collate_fn=lambda b: {"text": b})
    with pytest.raises(RuntimeError, match=r"Received a new batch size torch.Size\(\[4\]\) with an existing batch_size torch.Size\(\[4, 2\]\) in a lazy TD"):
        LLMEnv.from_dataloader(loader, batch_size=4, str_key="text").reset()


def test_vla_schema_passes_good_and_names_bad_keys(tmp_path):
    cvs = check_vla_schema
    assert cvs.vla_problems(cvs.make_vla_batch(), cvs.ACTION_DIM) == []
    bad = cvs.make_vla_batch()
    del bad["language_instruction"]
    bad["observation", "image"] = bad["observation", "image"][:, 0]
    bad["observation", "state"] = bad["observation", "state"][..., None]
    problems = " | ".join(cvs.vla_problems(bad, cvs.ACTION_DIM))
    assert "language instruction" in problems and "('observation', 'image')" in problems
    assert "('observation', 'state')" in problems and "fix:" in problems
    bad.memmap(tmp_path / "bad")
    status, detail = run_in_process(f"{AREA}/check_vla_schema", "--file", str(tmp_path / "bad"))["vla:schema-file"]
    assert status == "fail" and "image" in detail
    good = cvs.make_vla_batch()
    good.memmap(tmp_path / "good")
    res = run_in_process(f"{AREA}/check_vla_schema", "--file", str(tmp_path / "good"), "--action-dim", "7")
    assert {status for status, _ in res.values()} == {"pass"}, res
    status, detail = run_in_process(f"{AREA}/check_vla_schema", "--file", str(tmp_path / "good"), "--action-dim", "6")["vla:schema-file"]
    assert status == "fail" and "action_dim 6" in detail


def test_vla_validator_raises_the_documented_error():
    from torchrl.data.vla import validate_vla_tensordict

    bad = check_vla_schema.make_vla_batch()
    del bad["language_instruction"]
    with pytest.raises(ValueError, match="Tensordict does not follow the canonical VLA schema:"):
        validate_vla_tensordict(bad)


def test_vla_schema_file_that_cannot_be_read_exits_2(tmp_path, capsys):
    for path, text in [(tmp_path / "nope", "does not exist"), (tmp_path, "does not load as a TensorDict")]:
        assert run_main(f"{AREA}/check_vla_schema", "--file", str(path))[0] == 2
        err = capsys.readouterr().err.strip()
        assert text in err and err.count("\n") == 0, err


@pytest.fixture
def unix_sockets():
    """Allow AF_UNIX sockets (multiprocessing pipes of ProcessLogger); TCP stays loopback-only."""
    pytest_socket = pytest.importorskip("pytest_socket")
    pytest_socket.socket_allow_hosts(["127.0.0.1", "::1", "localhost"], allow_unix_socket=True)
    yield


def test_services_default_and_executor_timeout(unix_sockets):
    res = run_in_process(f"{AREA}/smoke_services", "--exec-timeout", "0.5")
    assert res["services:direct-lifecycle"][0] == "pass"
    assert res["services:process-lifecycle"][0] == "pass"
    status, detail = res["services:python-executor"]
    assert status == "pass" and "timed out" in detail and "temporary scripts gone" in detail, detail
    assert res["services:ray-registry"][0] == "skip"


def test_services_bad_timeouts_exit_2(capsys):
    """Was a check failure: --timeout -1 reached PythonExecutorService."""
    for flag in ("--timeout", "--exec-timeout"):
        assert run_main(f"{AREA}/smoke_services", flag, "-1")[0] == 2
        err = capsys.readouterr().err.strip()
        assert flag in err and err.count("\n") == 0, err


def _interpreter_scripts() -> set[str]:
    """PersistentPythonProcess's interpreter scripts in the system temp folder (tmpXXXX.py
    holding its ``run_code`` loop), whoever wrote them."""
    out = set()
    for p in Path(tempfile.gettempdir()).glob("tmp*.py"):
        try:
            if "def run_code(code_str)" in p.read_text(errors="replace"):
                out.add(p.name)
        except OSError:
            continue
    return out


@pytest.mark.slow
def test_services_ray_registry_for_real_leaves_nothing(unix_sockets, monkeypatch):
    """Was: a tmpXXXX.py left in the system temp folder by the Ray actor's interpreter, and
    Ray's session folder in its default temp folder."""
    import ray

    # address="local" in the smoke must ignore RAY_ADDRESS (this one points at nothing)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    before, scripts_before = child_processes(), _interpreter_scripts()
    sessions_before = set(Path(tempfile.gettempdir(), "ray").glob("session_*"))
    # --timeout 300: a local Ray start on two busy cores can pass the 60 s default; this test is about leftovers
    status, detail = run_in_process(f"{AREA}/smoke_services", "--ray", "--timeout", "300")["services:ray-registry"]
    assert status == "pass", detail
    assert "Ray child process(es) seen while running" in detail and "no temporary file left" in detail
    assert "reset() emptied it and left Ray running" in detail  # the troubleshooting entry's cause
    assert not ray.is_initialized()
    assert not leftover_processes(before, grace=5.0)
    assert _interpreter_scripts() <= scripts_before
    assert set(Path(tempfile.gettempdir(), "ray").glob("session_*")) <= sessions_before


def test_local_ray_config_stays_on_loopback_in_a_private_folder(tmp_path):
    config = smoke_services.local_ray_config(str(tmp_path))
    assert config["address"] == "local" and config["_node_ip_address"] == "127.0.0.1"
    assert config["_temp_dir"].startswith(str(tmp_path))
    assert config["runtime_env"]["env_vars"]["TMPDIR"].startswith(str(tmp_path))


def test_services_ray_check_fails_without_local_children(monkeypatch):
    # a registry that starts no process here (e.g. attached to a remote cluster) gives
    # no proof that shutdown cleaned up: the check must fail, not pass
    import torchrl.services

    class NoProcessRegistry:
        def register(self, *args, **kwargs):
            pass

        def shutdown(self, raise_on_error=True):
            pass

    monkeypatch.setattr(torchrl.services, "get_services", lambda **kw: NoProcessRegistry())
    args = smoke_services.build_parser().parse_args(["--ray"])
    with pytest.raises(CheckFailed, match=r"no Ray child process found after register\(\)"):
        smoke_services.check_ray(args)


def test_render_jsonl_npz_frames_and_mp4_not_passed():
    import importlib.util

    res = run_in_process(f"{AREA}/smoke_render", "--mp4")
    for name in ("render:checkpoint", "render:rlrender-jsonl", "render:rlrender-npz", "render:rlrender-frames"):
        assert res[name][0] == "pass", res[name]
    assert "6 PNGs of 32x32" in res["render:rlrender-frames"][1]
    status, detail = res["render:rlrender-mp4"]
    if importlib.util.find_spec("torchcodec") is None:
        assert status == "missing" and "torchcodec" in detail, detail
        # the real rlrender error, documented in references/troubleshooting.md
        assert "Writing MP4 videos with VideoRecorder or CSVLogger requires torchcodec >= 0.10.0" in detail
    else:
        assert status == "pass", detail


def test_render_state_only_env_captures_no_frames(tmp_path, monkeypatch):
    # the documented "No frames were captured" error, from the same factory minus the pixels transform
    factory = smoke_render.FACTORY.replace(
        "return TransformedEnv(PendulumEnv(), AngleToPixels())", "return PendulumEnv()"
    )
    assert factory != smoke_render.FACTORY
    (tmp_path / "render_factory.py").write_text(factory)
    monkeypatch.syspath_prepend(str(tmp_path))
    import torch
    import render_factory
    from torchrl.render import save_render_checkpoint

    sys.modules.pop("render_factory", None)
    torch.manual_seed(0)
    save_render_checkpoint(tmp_path / "policy.pt", render_factory.make_policy(), format="archive")
    # frames are checked before any encoder is looked for, so this holds without torchcodec
    code, err = smoke_render.run_rlrender(tmp_path, tmp_path / "policy.pt", "mp4", False)
    assert code != 0
    assert "rlrender: error: No frames were captured, so no mp4 can be written." in err


def test_backend_report_never_passes():
    res = run_in_process(f"{AREA}/report_llm_backends")
    assert set(res) == {"backend:vllm", "backend:sglang", "backend:lerobot"}
    assert all(status in ("skip", "missing") for status, _ in res.values())
    if res["backend:vllm"][0] == "missing":
        assert "ImportError: vllm is not installed. Please install it with `pip install vllm`." in res["backend:vllm"][1]
    assert "ConnectionError" in res["backend:sglang"][1]
