"""check_component_contracts.py: the contracts hold on the installed TorchRL, and each check
rejects a fixture that breaks its contract, naming the fix."""

import pytest
from conftest import FIXTURES, load_module, run_in_process
from torchrl_skill.report.skill_report import CheckFailed

SCRIPT = "llm-vla-and-services/check_component_contracts"
check_component_contracts = load_module(SCRIPT)
broken = load_module(FIXTURES / "interop" / "broken_contracts.py")


def test_default_run_passes_all_contracts():
    status = {name: s for name, (s, _) in run_in_process(SCRIPT).items()}
    for name in ("buffer:token-round-trip", "rollouts:collector-protocol", "loss:grpo", "loss:sft-keys", "loss:classic-ppo"):
        assert status[name] == "pass", name
    assert status["hf:backend"] == status["hf:grpo"] == "skip"


@pytest.mark.parametrize(
    "make, words",
    [
        (broken.buffer_casting_tokens, "torch.float32"),
        (broken.buffer_truncating, "differ from the extended"),
        (broken.buffer_with_replacement, "differ from the extended"),
    ],
)
def test_buffer_contract_rejects_broken_buffer(make, words):
    import torch

    # under every seed: one pass of a with-replacement sampler is a permutation ~9% of the time
    for seed in range(20):
        torch.manual_seed(seed)
        with pytest.raises(CheckFailed) as err:
            check_component_contracts.check_buffer_contract(make())
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
    with pytest.raises(CheckFailed) as err:
        check_component_contracts.check_rollouts_contract(make)
    assert words in str(err.value)


def test_grpo_contract_rejects_flat_advantage():
    from torchrl.objectives.llm import GRPOLoss

    loss = GRPOLoss(check_component_contracts.make_scoring_policy())
    bad = check_component_contracts.make_grpo_batch(loss.actor_network, advantage_shape=(1,))  # [B, 1] instead of [B, 1, 1]
    with pytest.raises(CheckFailed) as err:
        check_component_contracts.check_grpo_contract(loss, bad)
    assert "same number of dimensions" in str(err.value)
    assert 'fix: `td["advantage"] = adv.reshape(-1, 1, 1)`' in str(err.value)  # the error index's fix


def test_grpo_contract_rejects_missing_log_probs():
    from torchrl.objectives.llm import GRPOLoss

    loss = GRPOLoss(check_component_contracts.make_scoring_policy())
    bad = check_component_contracts.make_grpo_batch(loss.actor_network).exclude("log_probs")
    with pytest.raises(CheckFailed) as err:
        check_component_contracts.check_grpo_contract(loss, bad)
    assert "log_probs" in str(err.value)


def test_grpo_contract_rejects_renamed_keys():
    from torchrl.objectives.llm import GRPOLoss

    loss = GRPOLoss(check_component_contracts.make_scoring_policy())
    loss.set_keys(advantage="adv")
    with pytest.raises(CheckFailed) as err:
        check_component_contracts.check_grpo_contract(loss)
    assert "tensor_keys.advantage" in str(err.value)


def test_sft_keys_reject_renamed_history():
    from torchrl.objectives.llm import SFTLoss

    loss = SFTLoss(check_component_contracts.make_scoring_policy(), tokenizer=check_component_contracts._IdTokenizer())
    loss.set_keys(history=("history", "prompt"))
    with pytest.raises(CheckFailed) as err:
        check_component_contracts.check_sft_keys(loss)
    assert "tensor_keys.history" in str(err.value)


def test_hf_contracts_with_tiny_qwen2():
    pytest.importorskip("transformers")
    assert "generate=True writes" in check_component_contracts.check_hf_generation()
    assert check_component_contracts.check_hf_grpo().startswith("Qwen2: GRPOLoss")
