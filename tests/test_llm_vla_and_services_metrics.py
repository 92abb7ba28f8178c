"""post_training_metrics.py: values equal hand computations on a fixed batch; CSVLogger
round trip; the plot is written from a logged run; a wrong expectation is rejected."""

import math

import pytest
from conftest import load_module, run_in_process, run_main
from torchrl_skill.report.skill_report import CheckFailed

SCRIPT = "llm-vla-and-services/post_training_metrics"
post_training_metrics = load_module(SCRIPT)


def test_fixed_batch_against_hand_values():
    m = post_training_metrics.compute_metrics(post_training_metrics.fixed_batch(), current_version=6)
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
    exp = post_training_metrics.expected_fixed_metrics()
    exp["kl/k3_mean"] += 0.01
    with pytest.raises(CheckFailed) as err:
        post_training_metrics.check_fixed_batch(expected=exp)
    assert "kl/k3_mean" in str(err.value)


def test_missing_reward_key_is_named():
    with pytest.raises(KeyError) as err:
        post_training_metrics.sequence_rewards(post_training_metrics.fixed_batch().exclude("reward"))
    assert "no reward key" in str(err.value)


def test_extra_inputs_and_buffer_fill():
    from torchrl.data import LazyStackStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyStackStorage(8))
    rb.extend(post_training_metrics.fixed_batch())
    m = post_training_metrics.compute_metrics(post_training_metrics.fixed_batch(), gen_tokens=50, gen_seconds=2.0, sync_seconds=0.25, buffer=rb)
    assert m["perf/gen_tokens_per_s"] == 25.0
    assert m["perf/weight_sync_s"] == 0.25
    assert m["buffer/fill"] == pytest.approx(2 / 8)


def test_csv_logger_round_trip_and_plot(tmp_path):
    logger = post_training_metrics.synthetic_run(tmp_path, 4)
    steps, values = post_training_metrics.read_csv_run(logger.csv_dir, "kl/k3_mean")
    assert steps == [0, 1, 2, 3] and len(values) == 4
    pytest.importorskip("matplotlib")
    out = post_training_metrics.plot_run(logger.csv_dir, tmp_path / "p.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_script_default_run_passes():
    assert [s for s, _ in run_in_process(SCRIPT).values()] == ["pass", "pass", "skip"]


def test_csv_dir_bad_arguments_exit_2(tmp_path, capsys):
    """Was exit 0: --csv-dir /nonexistent without --plot was read by nothing."""
    for argv, text in [(["--csv-dir", str(tmp_path / "nope")], "--csv-dir is read only by --plot"),
                       (["--csv-dir", str(tmp_path), "--plot", str(tmp_path / "p.png")], "is not a CSVLogger experiment folder")]:
        assert run_main(SCRIPT, *argv)[0] == 2
        err = capsys.readouterr().err.strip()
        assert text in err and err.count("\n") == 0, err
    assert not (tmp_path / "p.png").exists()
