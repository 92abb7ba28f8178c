"""Behaviour tests for sub-skills/llm-vla-and-services scripts (real transformers, tokenizers, ray, Pillow)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "sub-skills" / "llm-vla-and-services" / "scripts"
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(SCRIPTS))

import skill_report as sr  # noqa: E402


def _run(module: str, argv: list[str]) -> dict[str, sr.CheckResult]:
    mod = importlib.import_module(module)
    args = mod.build_parser().parse_args(argv)
    report = sr.Report(str(SCRIPTS / f"{module}.py"), json_mode=True)
    mod.run_checks(args, report)
    return {c.name: c for c in report.checks}


def test_tiny_llm_api_and_round_trip():
    import _tiny_llm as tiny

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
    res = _run("smoke_llm_grpo", ["--collector"])
    assert {r.status for r in res.values()} == {"pass"}, res
    assert "LLMCollector" in res["llm:collector-replay"].detail


def test_llm_smoke_default_skips_collector():
    res = _run("smoke_llm_grpo", [])
    assert res["llm:collector-replay"].status == "skip"
    assert "--collector" in res["llm:collector-replay"].detail


def test_gpt2_logprob_pass_fails_as_documented():
    import torch
    import _tiny_llm as tiny
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


def test_llmcollector_keyword_and_init_tracker():
    import warnings
    import _tiny_llm as tiny
    from smoke_llm_grpo import make_chat_env
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
    import check_vla_schema as cvs

    assert cvs.vla_problems(cvs.make_vla_batch(), cvs.ACTION_DIM) == []
    bad = cvs.make_vla_batch()
    del bad["language_instruction"]
    bad["observation", "image"] = bad["observation", "image"][:, 0]
    bad["observation", "state"] = bad["observation", "state"][..., None]
    problems = " | ".join(cvs.vla_problems(bad, cvs.ACTION_DIM))
    assert "language instruction" in problems and "('observation', 'image')" in problems
    assert "('observation', 'state')" in problems and "fix:" in problems
    bad.memmap(tmp_path / "bad")
    res = _run("check_vla_schema", ["--file", str(tmp_path / "bad")])
    assert res["vla:schema-file"].status == "fail" and "image" in res["vla:schema-file"].detail
    good = cvs.make_vla_batch()
    good.memmap(tmp_path / "good")
    res = _run("check_vla_schema", ["--file", str(tmp_path / "good"), "--action-dim", "7"])
    assert {r.status for r in res.values()} == {"pass"}, res
    res = _run("check_vla_schema", ["--file", str(tmp_path / "good"), "--action-dim", "6"])
    assert res["vla:schema-file"].status == "fail" and "action_dim 6" in res["vla:schema-file"].detail


@pytest.fixture
def unix_sockets():
    """Allow AF_UNIX sockets (multiprocessing pipes of ProcessLogger); TCP stays loopback-only."""
    pytest_socket = pytest.importorskip("pytest_socket")
    pytest_socket.socket_allow_hosts(["127.0.0.1", "::1", "localhost"], allow_unix_socket=True)
    yield


def test_services_default_and_executor_timeout(unix_sockets):
    res = _run("smoke_services", ["--timeout", "0.5"])
    assert res["services:direct-lifecycle"].status == "pass"
    assert res["services:process-lifecycle"].status == "pass"
    assert res["services:python-executor"].status == "pass", res["services:python-executor"].detail
    assert "timed out" in res["services:python-executor"].detail
    assert res["services:ray-registry"].status == "skip"


def test_services_ray_registry_for_real_leaves_nothing(unix_sockets, monkeypatch):
    import ray

    # address="local" in the smoke must ignore RAY_ADDRESS (this one points at nothing)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    before = sr.child_processes()
    res = _run("smoke_services", ["--ray", "--timeout", "1.0"])
    detail = res["services:ray-registry"].detail
    assert res["services:ray-registry"].status == "pass", detail
    assert "Ray child process(es) seen while running" in detail and not detail.startswith("0 ")
    assert not ray.is_initialized()
    assert not sr.leftover_processes(before, grace=5.0)


def test_services_ray_check_fails_without_local_children(monkeypatch):
    # a registry that starts no process here (e.g. attached to a remote cluster) gives
    # no proof that shutdown cleaned up: the check must fail, not pass
    import torchrl.services
    import smoke_services

    class NoProcessRegistry:
        def register(self, *args, **kwargs):
            pass

        def shutdown(self, raise_on_error=True):
            pass

    monkeypatch.setattr(torchrl.services, "get_services", lambda **kw: NoProcessRegistry())
    report = sr.Report(str(SCRIPTS / "smoke_services.py"), json_mode=True)
    result = report.run("services:ray-registry", lambda: smoke_services.check_ray(True, 1.0))
    assert result.status == "fail"
    assert "no Ray child process found after register()" in result.detail


def test_render_jsonl_npz_frames_and_mp4_not_passed():
    import importlib.util

    res = _run("smoke_render", ["--mp4"])
    for name in ("render:checkpoint", "render:rlrender-jsonl", "render:rlrender-npz", "render:rlrender-frames"):
        assert res[name].status == "pass", res[name].detail
    assert "6 PNGs of 32x32" in res["render:rlrender-frames"].detail
    mp4 = res["render:rlrender-mp4"]
    if importlib.util.find_spec("torchcodec") is None:
        assert mp4.status == "missing", mp4.detail
        assert "torchcodec" in mp4.detail
        # the real rlrender error, documented in references/troubleshooting.md
        assert "Writing MP4 videos with VideoRecorder or CSVLogger requires torchcodec >= 0.10.0" in mp4.detail
    else:
        assert mp4.status == "pass", mp4.detail


def test_render_state_only_env_captures_no_frames(tmp_path, monkeypatch):
    # the documented "No frames were captured" error, from the same factory minus the pixels transform
    import smoke_render

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
    code, err = smoke_render._render(tmp_path, tmp_path / "policy.pt", "mp4", False)
    assert code != 0
    assert "rlrender: error: No frames were captured, so no mp4 can be written." in err


def test_backend_report_never_passes():
    res = _run("report_llm_backends", [])
    assert set(res) == {"backend:vllm", "backend:sglang", "backend:lerobot"}
    assert all(r.status in ("skip", "missing") for r in res.values())
    if res["backend:vllm"].status == "missing":
        assert "ImportError: vllm is not installed" in res["backend:vllm"].detail
    assert "ConnectionError" in res["backend:sglang"].detail
