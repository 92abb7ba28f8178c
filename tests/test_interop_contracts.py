"""check_component_contracts.py: the contracts hold on the installed TorchRL, and each check
rejects a fixture that breaks its contract, naming the fix."""

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "sub-skills" / "llm-vla-and-services" / "scripts"
sys.path.insert(0, str(SCRIPTS))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

ccc = importlib.import_module("check_component_contracts")
sr = importlib.import_module("skill_report")
broken = importlib.import_module("interop.broken")


def test_default_run_passes_all_contracts():
    report = sr.Report(str(SCRIPTS / "check_component_contracts.py"), json_mode=True)
    ccc.run_checks(ccc.build_parser().parse_args([]), report)
    status = {c.name: c.status for c in report.checks}
    assert status["buffer:token-round-trip"] == "pass"
    assert status["rollouts:collector-protocol"] == "pass"
    assert status["loss:grpo"] == "pass"
    assert status["loss:sft-keys"] == "pass"
    assert status["loss:classic-ppo"] == "pass"
    assert status["hf:grpo"] == "skip"


@pytest.mark.parametrize(
    "make, words",
    [
        (broken.buffer_casting_tokens, "torch.float32"),
        (broken.buffer_truncating, "differ from the extended"),
        (broken.buffer_with_replacement, "differ from the extended"),
    ],
)
def test_buffer_contract_rejects_broken_buffer(make, words):
    with pytest.raises(sr.CheckFailed) as err:
        ccc.check_buffer_contract(make())
    assert words in str(err.value)
    assert "LazyStackStorage" in str(err.value)


@pytest.mark.parametrize(
    "make, words",
    [
        (broken.collector_without_version, "track_policy_version=True"),
        (broken.collector_wrong_batch, "frames_per_batch=8"),
    ],
)
def test_rollouts_contract_rejects_broken_collector(make, words):
    with pytest.raises(sr.CheckFailed) as err:
        ccc.check_rollouts_contract(make)
    assert words in str(err.value)


def test_grpo_contract_rejects_flat_advantage():
    from torchrl.objectives.llm import GRPOLoss

    loss = GRPOLoss(ccc.make_scoring_policy())
    bad = ccc.make_grpo_batch(loss.actor_network, advantage_shape=(1,))  # [B, 1] instead of [B, 1, 1]
    with pytest.raises(sr.CheckFailed) as err:
        ccc.check_grpo_contract(loss, bad)
    assert "same number of dimensions" in str(err.value)
    assert "[B, 1, 1]" in str(err.value)


def test_grpo_contract_rejects_missing_log_probs():
    from torchrl.objectives.llm import GRPOLoss

    loss = GRPOLoss(ccc.make_scoring_policy())
    bad = ccc.make_grpo_batch(loss.actor_network).exclude("log_probs")
    with pytest.raises(sr.CheckFailed) as err:
        ccc.check_grpo_contract(loss, bad)
    assert "log_probs" in str(err.value)


def test_grpo_contract_rejects_renamed_keys():
    from torchrl.objectives.llm import GRPOLoss

    loss = GRPOLoss(ccc.make_scoring_policy())
    loss.set_keys(advantage="adv")
    with pytest.raises(sr.CheckFailed) as err:
        ccc.check_grpo_contract(loss)
    assert "tensor_keys.advantage" in str(err.value)


def test_sft_keys_reject_renamed_history():
    from torchrl.objectives.llm import SFTLoss

    loss = SFTLoss(ccc.make_scoring_policy(), tokenizer=ccc._IdTokenizer())
    loss.set_keys(history=("history", "prompt"))
    with pytest.raises(sr.CheckFailed) as err:
        ccc.check_sft_keys(loss)
    assert "tensor_keys.history" in str(err.value)


def test_hf_contracts_with_tiny_qwen2():
    pytest.importorskip("transformers")
    assert "generate=True writes" in ccc.check_hf_generation()
    assert ccc.check_hf_grpo().startswith("Qwen2: GRPOLoss")
