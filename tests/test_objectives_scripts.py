"""Tests for sub-skills/objectives-and-training scripts: real losses, real forward passes."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "sub-skills" / "objectives-and-training" / "scripts"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "objectives"
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(SCRIPTS))

import skill_report as sr  # noqa: E402

warnings.filterwarnings("ignore")


@pytest.fixture(scope="module")
def ilk():
    import inspect_loss_keys

    return inspect_loss_keys


@pytest.mark.parametrize("name", ["ClipPPOLoss", "SACLoss", "DQNLoss"])
def test_key_report_matches_real_forward(ilk, name):
    import _loss_builders as B

    result = ilk.verify_forward(name)
    rep = result["report"]
    # independent forward: batch restricted to the reported in_keys is enough
    loss, kind, actor = B.build(name)
    batch = B.forward_batch(kind, actor)
    reported = set(rep["in_keys"])
    keep = [k for k in batch.keys(True, True) if ilk._fmt(k) in reported]
    out = loss(batch.select(*keep))
    produced = {ilk._fmt(k) for k in out.keys(True, True)}
    assert set(rep["out_keys"]) <= produced
    # tensor_keys reported == live tensor_keys of a fresh instance
    for field, key in rep["tensor_keys"].items():
        assert ilk._fmt(getattr(loss.tensor_keys, field)) == key
    # dropping "observation" (an in_key every one of them needs) breaks the forward pass
    with pytest.raises(Exception):
        loss(batch.exclude("observation"))


def test_ppo_log_prob_default_is_action_log_prob(ilk):
    rep = ilk.verify_forward("ClipPPOLoss")["report"]
    assert rep["tensor_keys"]["sample_log_prob"] == "action_log_prob"
    assert "action_log_prob" in rep["in_keys"]


def test_list_covers_every_exported_loss(ilk):
    import inspect

    import torchrl.objectives as O

    expected = sorted(
        n for n in O.__all__ if inspect.isclass(getattr(O, n)) and issubclass(getattr(O, n), O.LossModule) and n != "LossModule"
    )
    report = sr.Report(str(SCRIPTS / "inspect_loss_keys.py"), json_mode=True)
    ilk.run_checks(ilk.build_parser().parse_args(["--list"]), report)
    detail = report.checks[0].detail
    for name in expected:
        assert name in detail
    # every exported name yields a report row without crashing the runner
    assert ilk.resolve_names(["all"], expected) == expected


def test_unknown_loss_exits_2_with_suggestion():
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "inspect_loss_keys.py"), "--loss", "ClipPPO"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "Warning" not in ln and "warn" not in ln]
    assert len(lines) == 1 and "ClipPPOLoss" in lines[0], proc.stderr


def test_target_must_move_after_updater_step():
    import smoke_training_step as st

    assert "moved" in st.check_dqn(skip_updater_step=False)
    with pytest.raises(sr.CheckFailed, match="did not move"):
        st.check_dqn(skip_updater_step=True)
    assert "moved" in st.check_sac(skip_updater_step=False)
    with pytest.raises(sr.CheckFailed, match="SoftUpdate.step"):
        st.check_sac(skip_updater_step=True)


def _wiring_report(fixture):
    import check_loss_wiring as clw

    report = sr.Report(str(SCRIPTS / "check_loss_wiring.py"), json_mode=True)
    clw.run_checks(clw.build_parser().parse_args(["--wiring", str(FIXTURES / fixture)]), report)
    return report


@pytest.mark.parametrize(
    "broken, fixed, expected",
    [
        ("value_key_broken.py", "value_key_fixed.py", "value key 'state_value' not found in value network out_keys ['state_action_value']"),
        ("log_prob_broken.py", "log_prob_fixed.py", "Couldn't find the log-prob action_log_prob in the input data."),
        ("param_copies_broken.py", "param_copies_fixed.py", "qvalue_network_params[0].data"),
        ("grad_log_prob_broken.py", "grad_log_prob_fixed.py", "tensordict stored action_log_prob requires grad."),
        ("gae_value_key_broken.py", "gae_value_key_fixed.py", "TypeError: 'NoneType' object is not subscriptable"),
    ],
)
def test_wiring_reports_fail_then_fix(broken, fixed, expected):
    bad = _wiring_report(broken)
    assert not bad.ok
    assert any(c.status == "fail" and expected in c.detail for c in bad.checks), [c.detail for c in bad.checks]
    good = _wiring_report(fixed)
    assert good.ok, [c.detail for c in good.checks if c.status == "fail"]


def test_real_errors_match_torchrl_text():
    """The diagnosed texts are what torchrl 0.14.1 itself raises on the broken fixtures."""
    import importlib.util

    for fixture, text in [
        ("value_key_broken.py", "value key 'state_value' not found in value network out_keys ['state_action_value']"),
        ("log_prob_broken.py", "Couldn't find the log-prob action_log_prob in the input data."),
    ]:
        spec = importlib.util.spec_from_file_location(f"_fx_{Path(fixture).stem}", FIXTURES / fixture)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        w = mod.build_wiring()
        with pytest.raises(KeyError) as err:
            w["loss"](w["batch"])
        assert text in str(err.value)


def test_failures_name_their_fix():
    grad = _wiring_report("grad_log_prob_broken.py")
    assert any(c.status == "fail" and "torch.no_grad()" in c.detail and "batch.detach()" in c.detail for c in grad.checks)
    gae = _wiring_report("gae_value_key_broken.py")
    assert any(c.status == "fail" and "gae.set_keys(value='state_action_value')" in c.detail
               and "out_keys=['state_value']" in c.detail for c in gae.checks)


def test_real_errors_of_new_fixtures_match_torchrl_text():
    """torchrl 0.14.1 itself raises the diagnosed texts on the grad and standalone-GAE fixtures."""
    import importlib.util

    def load(fixture):
        spec = importlib.util.spec_from_file_location(f"_fx_{Path(fixture).stem}", FIXTURES / fixture)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.build_wiring()

    w = load("grad_log_prob_broken.py")
    with pytest.raises(RuntimeError, match="tensordict stored action_log_prob requires grad."):
        w["loss"](w["batch"])
    w = load("gae_value_key_broken.py")
    with pytest.raises(TypeError, match="'NoneType' object is not subscriptable"):
        w["value_estimator"](w["batch"].clone())


def test_user_env_example_wiring_passes_every_check():
    example = ROOT / "sub-skills" / "objectives-and-training" / "assets" / "ppo_user_env_wiring.py"
    import check_loss_wiring as clw

    report = sr.Report(str(SCRIPTS / "check_loss_wiring.py"), json_mode=True)
    clw.run_checks(clw.build_parser().parse_args(["--wiring", str(example)]), report)
    statuses = {c.name.split(":", 1)[1]: c.status for c in report.checks}
    assert set(statuses.values()) == {"pass"}, [(c.name, c.detail) for c in report.checks]
    assert {"value-key", "log-prob-key", "forward", "value-estimator", "sync:actor_network",
            "sync:critic_network"} <= set(statuses)


def test_modules_key_names_match_the_loss():
    import _loss_builders as B
    import check_loss_wiring as clw

    loss, _, _ = B.build("SACLoss")
    assert clw.network_names(loss) == ["actor_network", "qvalue_network"]
    with pytest.raises(sr.CheckFailed, match=r"use one of \['actor_network', 'qvalue_network'\]"):
        clw.check_module_sync(loss, "critic", torch_linear())


def torch_linear():
    import torch

    return torch.nn.Linear(1, 1)
