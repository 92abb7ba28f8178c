"""The behaviours the llm-vla-and-services references state, each reproduced on the verified
stack (tests/proofs.json names these tests under the sections they prove)."""

from __future__ import annotations

import sys
import warnings

import pytest
from conftest import load_module

AREA = "llm-vla-and-services"
tiny = load_module(f"{AREA}/_tiny_llm")
smoke_llm_grpo = load_module(f"{AREA}/smoke_llm_grpo")
check_component_contracts = load_module(f"{AREA}/check_component_contracts")
post_training_metrics = load_module(f"{AREA}/post_training_metrics")
smoke_render = load_module(f"{AREA}/smoke_render")


def test_llm_env_names_live_in_the_llm_modules():
    with pytest.raises(ImportError, match="cannot import name 'LLMEnv' from 'torchrl.envs'"):
        from torchrl.envs import LLMEnv  # noqa: F401
    from torchrl.envs.llm import ChatEnv, DataLoadingPrimer, LLMEnv  # noqa: F401


def test_dapo_and_cispo_share_grpos_key_contract():
    from torchrl.objectives.llm import CISPOLoss, DAPO, GRPOLoss

    policy = check_component_contracts.make_scoring_policy()
    keys = dict(GRPOLoss(policy).tensor_keys.__dict__)
    for cls in (DAPO, CISPOLoss):
        assert issubclass(cls, GRPOLoss) and dict(cls(policy).tensor_keys.__dict__) == keys


def test_a_tokenizer_template_with_generation_markers_is_used_as_is():
    from torchrl.data.llm import History

    tok = tiny.make_tokenizer()
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }}: {% generation %}{{ m['content'] }}"
                         "{% endgeneration %};{% endfor %}")
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert History.from_chats([chat]).apply_chat_template(tokenizer=tok, add_generation_prompt=False)[0] == "user: hi;assistant: yo;"


def test_generation_log_probs_start_with_zero():
    """On 0.14.1 the first entry of ("log_probs", "response") from generate=True is 0.0."""
    import torch
    from torchrl.modules.llm import TransformersWrapper

    tok = tiny.make_tokenizer()
    model = tiny.make_causal_lm(tok)
    for seed in range(3):
        torch.manual_seed(seed)
        td = TransformersWrapper(model, tokenizer=tok, input_mode="history", generate=True, return_log_probs=True,
                                 generate_kwargs={"max_new_tokens": 3, "do_sample": True})(smoke_llm_grpo.make_chat_env(tok).reset())
        assert all(float(lp[0]) == 0.0 for lp in td.get(("log_probs", "response"), as_list=True))


def test_multi_turn_dialogues_reset_through_history():
    from tensordict import TensorDict
    from torchrl.data.llm import History
    from torchrl.envs.llm import ChatEnv

    dialogs = [[{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}] for i in range(2)]
    td = ChatEnv(batch_size=(2,), tokenizer=tiny.make_tokenizer()).reset(
        TensorDict(query=History.from_chats(dialogs), batch_size=(2,)))
    assert [list(r) for r in td["history"].prompt.role] == [["user", "assistant"]] * 2


def test_llmcollector_with_a_replay_buffer_yields_none():
    from torchrl.collectors.llm import LLMCollector
    from torchrl.data import LazyStackStorage, ReplayBuffer
    from torchrl.envs import InitTracker
    from torchrl.modules.llm import TransformersWrapper

    tok = tiny.make_tokenizer()
    policy = TransformersWrapper(tiny.make_causal_lm(tok), tokenizer=tok, input_mode="history",
                                 generate_kwargs={"max_new_tokens": 2})
    rb = ReplayBuffer(storage=LazyStackStorage(8))
    env = smoke_llm_grpo.make_chat_env(tok).append_transform(InitTracker())
    collector = LLMCollector(env, policy=policy, dialog_turns_per_batch=2, total_dialog_turns=2, replay_buffer=rb)
    try:
        yielded = list(collector)
    finally:
        collector.shutdown()
    assert yielded and all(b is None for b in yielded) and len(rb) == 2


def test_grpo_kl_to_ref_averages_over_padded_positions():
    """GRPOLossOutput.kl_to_ref: k3 summed over response tokens, divided by batch x padded
    length; post_training_metrics' kl/k3_mean divides by the response tokens only."""
    import torch
    from torchrl.objectives.llm import GRPOLoss

    policy = check_component_contracts.make_scoring_policy()
    batch = check_component_contracts.make_grpo_batch(policy)
    torch.manual_seed(1)
    for row in batch.tensordicts:
        lp = row["log_probs", "full"]
        row.set(("next", "ref_log_probs", "full"), lp + 0.3 * torch.randn_like(lp))
    out = GRPOLoss(policy, masking_strategy="sft", kl_to_ref_coeff=0.1)(batch)
    d = torch.cat([(r["next", "ref_log_probs", "full"] - r["log_probs", "full"])[r["masks", "all_assistant_mask"]]
                   for r in batch.tensordicts])
    k3 = d.expm1() - d
    padded = len(batch.tensordicts) * max(r["tokens", "full"].numel() for r in batch.tensordicts)
    assert float(out.kl_to_ref) == pytest.approx(float(k3.sum()) / padded, rel=1e-5)
    metric = post_training_metrics.kl_to_ref(batch)["kl/k3_mean"]
    assert metric == pytest.approx(float(k3.mean()), rel=1e-5) and metric > float(out.kl_to_ref)


def test_ragged_rows_pad_back_left_for_an_external_trainer():
    import torch
    from tensordict import TensorDict, lazy_stack

    batch = lazy_stack([TensorDict(tokens=TensorDict(full=torch.arange(1, n + 1))) for n in (2, 3)])
    padded = batch.get(("tokens", "full"), as_padded_tensor=True, padding_side="left")
    assert padded.tolist() == [[0, 1, 2], [1, 2, 3]]


def test_render_checkpoint_default_format_warns_about_v015(tmp_path):
    from torchrl.render import save_render_checkpoint

    (tmp_path / "render_factory.py").write_text(smoke_render.FACTORY)
    sys.path.insert(0, str(tmp_path))
    try:
        import render_factory

        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            save_render_checkpoint(tmp_path / "p.pt", render_factory.make_policy())
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("render_factory", None)
    assert any(issubclass(w.category, FutureWarning) and "in v0.15" in str(w.message) for w in seen)


def test_frames_of_a_state_only_env_exit_0_with_no_png(tmp_path):
    """--format frames on an env without pixels exits 0 and writes no PNG: count the files."""
    import torch
    from torchrl.render import save_render_checkpoint

    factory = smoke_render.FACTORY.replace("return TransformedEnv(PendulumEnv(), AngleToPixels())", "return PendulumEnv()")
    (tmp_path / "render_factory.py").write_text(factory)
    sys.path.insert(0, str(tmp_path))
    try:
        import render_factory

        torch.manual_seed(0)
        save_render_checkpoint(tmp_path / "policy.pt", render_factory.make_policy(), format="archive")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("render_factory", None)
    code, _ = smoke_render.run_rlrender(tmp_path, tmp_path / "policy.pt", "frames", False)
    assert code == 0 and not list(tmp_path.rglob("*.png"))
    code, err = smoke_render.run_rlrender(tmp_path, tmp_path / "policy.pt", "gif", False)
    assert code != 0 and "No frames were captured, so no gif can be written." in err


def test_python_executor_result_keys_and_its_temporary_script(tmp_path, monkeypatch):
    import tempfile

    from torchrl.envs.llm.transforms.tools import PythonExecutorService

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    svc = PythonExecutorService(pool_size=1, timeout=5.0)
    try:
        assert [p.suffix for p in tmp_path.iterdir()] == [".py"]  # the interpreter's script
        assert sorted(svc.execute("print(1)")) == ["returncode", "stderr", "stdout", "success"]
    finally:
        svc.cleanup()
    assert list(tmp_path.iterdir()) == []


def test_python_executor_timeout_also_bounds_the_interpreter_start(tmp_path, monkeypatch):
    """timeout=0.01 is shorter than any interpreter start: the constructor raises and leaves
    no process; the same service with room to start runs code (the nearest case)."""
    import tempfile

    import psutil
    from torchrl.envs.llm.transforms.tools import PythonExecutorService

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    try:
        with pytest.raises(RuntimeError, match="Process failed to initialize within timeout"):
            PythonExecutorService(pool_size=1, timeout=0.01)
    finally:  # the half-built interpreter is not stopped by torchrl (0.14.1): stop it here
        for proc in psutil.Process().children(recursive=True):
            if proc.pid not in before:
                proc.kill()
    svc = PythonExecutorService(pool_size=1, timeout=30.0)
    try:
        assert svc.execute("print(6 * 7)")["stdout"].strip() == "42"
    finally:
        svc.cleanup()


def test_vla_canonical_keys():
    import torchrl.data.vla as vla

    assert (vla.INSTRUCTION_KEY, vla.IMAGE_KEY, vla.STATE_KEY, vla.ACTION_KEY) == (
        "language_instruction", ("observation", "image"), ("observation", "state"), "action")
    assert (vla.VLA_ACTION_KEY, vla.ACTION_CHUNK_KEY, vla.ACTION_TOKENS_KEY, vla.ACTION_IS_PAD_KEY) == (
        "vla_action", ("vla_action", "chunk"), ("vla_action", "tokens"), "action_is_pad")


def test_vla_validator_lets_a_mis_shaped_image_through():
    from torchrl.data.vla import validate_vla_tensordict

    check_vla_schema = load_module(f"{AREA}/check_vla_schema")
    bad = check_vla_schema.make_vla_batch()
    bad["observation", "image"] = bad["observation", "image"][:, 0]  # [B, H, W]: no channel dim
    assert validate_vla_tensordict(bad, raise_on_error=False) == []
    assert any("mis-shaped ('observation', 'image')" in p for p in check_vla_schema.vla_problems(bad))
