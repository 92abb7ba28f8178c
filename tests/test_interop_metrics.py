"""post_training_metrics.py: values equal hand computations on a fixed batch; CSVLogger
round trip; the plot is written from a logged run; a wrong expectation is rejected."""

import importlib
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "sub-skills" / "llm-vla-and-services" / "scripts"))
ptm = importlib.import_module("post_training_metrics")
sr = importlib.import_module("skill_report")


def test_fixed_batch_against_hand_values():
    m = ptm.compute_metrics(ptm.fixed_batch(), current_version=6)
    # rewards 1.0 and -0.5; 2 + 3 response tokens
    assert m["reward/seq_mean"] == pytest.approx(0.25)
    assert m["reward/seq_std"] == pytest.approx(0.75)
    assert m["reward/per_token_mean"] == pytest.approx(0.1)
    assert m["response/len_mean"] == pytest.approx(2.5)
    # ref - cur on response tokens: -0.5, 1.0, 0.0, -0.5, 0.0
    k3 = (math.expm1(-0.5) + 0.5 + math.expm1(1.0) - 1.0 + math.expm1(-0.5) + 0.5) / 5
    assert m["kl/k3_mean"] == pytest.approx(k3)
    assert m["kl/k1_mean"] == pytest.approx(0.0)
    assert m["entropy/sampled_nll"] == pytest.approx(5.0 / 5)
    assert m["policy/version_lag_mean"] == pytest.approx(2.0)
    assert m["policy/version_lag_max"] == pytest.approx(3.0)


def test_check_rejects_wrong_expectation():
    exp = ptm.expected_fixed_metrics()
    exp["kl/k3_mean"] += 0.01
    with pytest.raises(sr.CheckFailed) as err:
        ptm.check_fixed_batch(expected=exp)
    assert "kl/k3_mean" in str(err.value)


def test_missing_reward_key_is_named():
    with pytest.raises(KeyError) as err:
        ptm.sequence_rewards(ptm.fixed_batch().exclude("reward"))
    assert "no reward key" in str(err.value)


def test_extra_inputs_and_buffer_fill():
    from torchrl.data import LazyStackStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyStackStorage(8))
    rb.extend(ptm.fixed_batch())
    m = ptm.compute_metrics(ptm.fixed_batch(), gen_tokens=50, gen_seconds=2.0, sync_seconds=0.25, buffer=rb)
    assert m["perf/gen_tokens_per_s"] == 25.0
    assert m["perf/weight_sync_s"] == 0.25
    assert m["buffer/fill"] == pytest.approx(2 / 8)


def test_csv_logger_round_trip_and_plot(tmp_path):
    logger = ptm.synthetic_run(tmp_path, 4)
    steps, values = ptm.read_csv_run(logger.csv_dir, "kl/k3_mean")
    assert steps == [0, 1, 2, 3] and len(values) == 4
    pytest.importorskip("matplotlib")
    out = ptm.plot_run(logger.csv_dir, tmp_path / "p.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_script_default_run_passes():
    report = sr.Report(ptm.__file__, json_mode=True)
    ptm.run_checks(ptm.build_parser().parse_args([]), report)
    assert [c.status for c in report.checks] == ["pass", "pass", "skip"]
