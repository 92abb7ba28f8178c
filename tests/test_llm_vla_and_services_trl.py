"""Both TRL round trips run for real on CPU (tiny Qwen2 models from configs, offline)."""

import pytest
from conftest import load_module

trl_round_trips = load_module("llm-vla-and-services/trl_round_trips")
post_training_metrics = load_module("llm-vla-and-services/post_training_metrics")


def test_buffer_records_round_trip():
    assert "identical" in trl_round_trips.check_buffer_records()


@pytest.mark.slow
def test_real_trl_sft_trainer_samples_from_torchrl_buffer():
    pytest.importorskip("trl")
    res = trl_round_trips.trl_sft_from_buffer(steps=2)
    # Which path ran: the real trl trainer, not a plain transformers loop.
    assert res["backend"] == "trl.SFTTrainer"
    assert res["steps"] == 2 and len(res["losses"]) == 2
    assert len(res["sampled"]) >= 4 and set(res["sampled"]) <= set(trl_round_trips.PROMPTS)
    assert res["weights_changed"]


@pytest.mark.slow
def test_torchrl_grpo_with_hf_reward_model(tmp_path):
    pytest.importorskip("datasets")
    res = trl_round_trips.grpo_with_hf_reward(steps=2, log_dir=tmp_path)
    assert len(res["losses"]) == 2 and all(x == x for x in res["losses"])
    m = res["metrics"]
    assert m["kl/k3_mean"] >= 0.0 and "loss/loss_kl_to_ref" in m
    steps, _ = post_training_metrics.read_csv_run(res["csv_dir"], "reward/seq_mean")
    assert steps == [0, 1]
