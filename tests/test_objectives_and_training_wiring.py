"""check_loss_wiring.py: every check fails its broken fixture and passes the fixed one, the
user's own file is accepted as it is (FILE.py:make_loss, package.module:make_loss,
--wiring FILE.py), and bad input gives one line and a documented exit code.

Fixture pairs live in tests/fixtures/objectives/: ``X_broken.py`` reproduces a public
report, ``X_fixed.py`` applies the documented fix. The user project in
tests/fixtures/objectives/user_project/ is a training script as a user writes it.
"""

from __future__ import annotations

import json
import warnings

import pytest
from conftest import BUNDLE, FIXTURES, load_module, run_in_process, run_main, run_python, script_path

warnings.filterwarnings("ignore")
OBJECTIVES = FIXTURES / "objectives"
USER_PROJECT = OBJECTIVES / "user_project"
SCRIPT = "objectives-and-training/check_loss_wiring"
EXAMPLE = BUNDLE / "sub-skills" / "objectives-and-training" / "assets" / "ppo_user_env_wiring.py"


def wiring_rows(*argv, timeout=None):
    return run_in_process(SCRIPT, *argv, timeout=timeout)


def failures(rows):
    return {name.split(":", 1)[1]: detail for name, (status, detail) in rows.items() if status == "fail"}


@pytest.mark.parametrize(
    "pair, check, expected",
    [
        ("value_key", "value-key", "value key 'state_value' not found in value network out_keys ['state_action_value']"),
        ("log_prob", "log-prob-key", "Couldn't find the log-prob action_log_prob in the input data."),
        ("param_copies", "sync:qvalue_network", "qvalue_network_params[0].data"),
        ("grad_log_prob", "log-prob-key", "tensordict stored action_log_prob requires grad."),
        ("gae_value_key", "value-estimator", "TypeError: 'NoneType' object is not subscriptable"),
        ("own_estimator", "advantage-source", "its default (make_value_estimator was never called) GAE(gamma=0.99, lmbda=0.95), not your GAE(gamma=0.9, lmbda=0.8)"),
        ("flattened_gae", "trajectories", "1 of 30 steps without done are followed by a step of another trajectory (by ('collector', 'traj_ids'); first at flat index [15])"),
        ("truncated_gae", "value-estimator", "shifted=True reads V(s'_t) as V(s_{t+1})"),
        ("done_as_terminated", "value-estimator", "it reads 'done' as terminated"),
    ],
)
def test_each_check_fails_broken_and_passes_fixed(pair, check, expected):
    broken = failures(wiring_rows("--wiring", str(OBJECTIVES / f"{pair}_broken.py")))
    assert check in broken and expected in broken[check], broken
    fixed = wiring_rows("--wiring", str(OBJECTIVES / f"{pair}_fixed.py"))
    assert failures(fixed) == {} and fixed[f"{pair}_fixed:{check}"][0] == "pass", fixed


def test_failures_name_their_fix():
    grad = failures(wiring_rows("--wiring", str(OBJECTIVES / "grad_log_prob_broken.py")))
    assert "torch.no_grad()" in grad["log-prob-key"] and "batch.detach()" in grad["log-prob-key"]
    gae = failures(wiring_rows("--wiring", str(OBJECTIVES / "gae_value_key_broken.py")))
    assert "gae.set_keys(value='state_action_value')" in gae["value-estimator"] and "out_keys=['state_value']" in gae["value-estimator"]
    own = failures(wiring_rows("--wiring", str(OBJECTIVES / "own_estimator_broken.py")))
    assert "loss.make_value_estimator(ValueEstimators.GAE" in own["advantage-source"]
    flat = failures(wiring_rows("--wiring", str(OBJECTIVES / "flattened_gae_broken.py")))
    assert "loss.value_estimator(batch); batch = batch.reshape(-1)" in flat["trajectories"]


def test_broken_fixtures_raise_the_torchrl_errors_the_checks_name():
    """The diagnosed texts are what torchrl 0.14.1 itself raises on the broken fixtures."""
    import torch

    for stem, exc, text in [
        ("value_key_broken", KeyError, "value key 'state_value' not found in value network out_keys ['state_action_value']"),
        ("log_prob_broken", KeyError, "Couldn't find the log-prob action_log_prob in the input data."),
        ("grad_log_prob_broken", RuntimeError, "tensordict stored action_log_prob requires grad."),
    ]:
        wiring = load_module(OBJECTIVES / f"{stem}.py").build_wiring()
        with pytest.raises(exc) as err:
            wiring["loss"](wiring["batch"])
        assert text in str(err.value), stem
    wiring = load_module(OBJECTIVES / "gae_value_key_broken.py").build_wiring()
    with pytest.raises(TypeError, match="'NoneType' object is not subscriptable"), torch.no_grad():
        wiring["value_estimator"](wiring["batch"].clone())


def test_builtin_wirings_and_the_example_pass():
    rows = wiring_rows()
    assert failures(rows) == {} and rows["wiring:build"][0] == "pass"
    assert rows["ppo:advantage-source"][0] == "pass" and "GAE(gamma=0.99, lmbda=0.95)" in rows["ppo:advantage-source"][1]
    example = wiring_rows("--wiring", str(EXAMPLE))
    statuses = {name.split(":", 1)[1]: status for name, (status, _) in example.items()}
    assert set(statuses.values()) == {"pass"}, example
    assert {"value-key", "log-prob-key", "advantage-source", "trajectories", "forward", "value-estimator",
            "sync:actor_network", "sync:critic_network"} <= set(statuses)


def test_modules_key_names_match_the_loss():
    import torch

    builders = load_module("objectives-and-training/_loss_builders")
    wiring = load_module(SCRIPT)
    loss, _, _ = builders.build("SACLoss")
    assert wiring.network_names(loss) == ["actor_network", "qvalue_network"]
    from torchrl_skill.report import skill_report

    with pytest.raises(skill_report.CheckFailed, match=r"use one of \['actor_network', 'qvalue_network'\]"):
        wiring.check_module_sync(loss, "critic", torch.nn.Linear(1, 1))


# --- the user's own file, as it is -----------------------------------------------------------
def test_target_file_function_returning_the_loss_alone():
    rows = wiring_rows(f"{USER_PROJECT / 'train.py'}:make_loss")
    assert rows["wiring:build"] == ("pass", "make_loss() returned 1 wiring(s): train")
    assert rows["train:value-key"][0] == "pass"
    assert rows["train:forward"][0] == "skip" and "return (loss, batch)" in rows["train:forward"][1]
    assert failures(rows) == {}


def test_target_module_function_returning_loss_and_batch(monkeypatch):
    monkeypatch.chdir(USER_PROJECT)
    rows = wiring_rows("my_agent.losses:make_loss_and_batch")
    assert rows["wiring:build"][0] == "pass" and failures(rows) == {}, rows
    assert rows["losses:forward"][0] == "pass" and rows["losses:trajectories"][0] == "pass"


def test_wiring_flag_takes_a_function_too():
    rows = wiring_rows("--wiring", f"{USER_PROJECT / 'train.py'}:make_loss")
    assert rows["wiring:build"][0] == "pass"


# --- bad input: one line, documented exit code, clean stdout ---------------------------------
BAD_SOURCES = {
    "raises": ("def build_wiring():\n    raise ValueError('boom')\n", "build_wiring() raised ValueError: boom (at wiring_raises.py:2 in build_wiring)"),
    "none": ("def build_wiring():\n    return None\n", "build_wiring() returned None; fix: return the loss module, (loss, batch)"),
    "string": ("def build_wiring():\n    return 'loss'\n", "build_wiring() returned 'loss'; fix:"),
    "no_loss": ("def build_wiring():\n    return {'batch': 1}\n", "build_wiring() returned a dict without 'loss' (keys: ['batch'])"),
    "exits": ("import sys\n\ndef build_wiring():\n    sys.exit(3)\n", "build_wiring() called sys.exit(3) (at wiring_exits.py:4 in build_wiring); return a value instead"),
    "needs_args": ("def build_wiring(env):\n    return env\n", "build_wiring(env) needs arguments"),
    "typo_key": ("def build_wiring():\n    return {'loss': None, 'value_estimater': 1}\n", "a dict with unknown keys ['value_estimater']"),
}


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_misbehaving_user_function_is_a_failed_check(tmp_path, case):
    source, expected = BAD_SOURCES[case]
    path = tmp_path / f"wiring_{case}.py"  # not f"{case}.py": string.py would shadow the standard library
    path.write_text(source)
    code, report = run_main(SCRIPT, "--wiring", str(path))
    rows = {c["name"]: (c["status"], c["detail"]) for c in report["checks"]}
    assert code == 1 and rows["wiring:build"][0] == "fail" and expected in rows["wiring:build"][1], rows
    assert list(rows) == ["wiring:build"]


def test_hanging_user_function_fails_at_the_timeout(tmp_path):
    path = tmp_path / "hangs.py"
    path.write_text("import time\n\ndef build_wiring():\n    while True:\n        time.sleep(0.05)\n")
    status, detail = wiring_rows("--wiring", str(path), "--timeout", "3")["wiring:build"]
    assert status == "fail" and "still running after 3 s" in detail and "hangs.py:5 in build_wiring" in detail


@pytest.mark.parametrize(
    "case, content, expected",
    [
        ("syntax", b"def build_wiring(:\n    pass\n", "syntax.py:1: SyntaxError"),
        ("binary", b"abc\x00\x01\x02", "is not a text file (it holds NUL bytes)"),
        ("import_exit", b"import sys\nsys.exit(3)\n", "importing import_exit.py called sys.exit(3)"),
        ("import_raises", b"import nonexistent_package_xyz\n", "raised ModuleNotFoundError"),
        ("no_function", b"x = 1\n", "has no attribute 'build_wiring'"),
    ],
)
def test_unimportable_target_exits_2_with_one_line(tmp_path, case, content, expected):
    path = tmp_path / f"{case}.py"
    path.write_bytes(content)
    proc = run_python([str(script_path(SCRIPT)), "--wiring", str(path), "--json"], timeout=300, warm=True)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout[:300])
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_missing_path_and_two_targets_exit_2(tmp_path):
    code, _ = run_main(SCRIPT, "--wiring", str(tmp_path / "nope.py"))
    assert code == 2
    code, _ = run_main(SCRIPT, f"{USER_PROJECT / 'train.py'}:make_loss", "--wiring", str(EXAMPLE))
    assert code == 2


def test_prints_in_the_user_file_stay_off_json_stdout(tmp_path):
    path = tmp_path / "chatty.py"
    path.write_text(
        "print('hello from import')\nimport sys\n"
        f"sys.path.insert(0, {str(OBJECTIVES)!r})\nimport value_key_fixed\n\n"
        "def build_wiring():\n    print('hello from build_wiring')\n    return value_key_fixed.build_wiring()\n"
    )
    proc = run_python([str(script_path(SCRIPT)), "--wiring", str(path), "--json"], timeout=300, warm=True)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert proc.stdout.count("\n") == 1 and json.loads(proc.stdout)["ok"] is True
    assert "hello from import" in proc.stderr and "hello from build_wiring" in proc.stderr


@pytest.mark.parametrize("state_moves", [True, False])
def test_a_shuffle_is_named_only_where_the_state_could_show_it(state_moves):
    """Newcomer trial (pytorch/rl#2462 rebuilt): a shuffled minibatch from a deterministic
    rollout whose agent never moves PASSed "all continuing steps stay in their trajectory":
    a step that leaves the state as it was looks continuous whichever step follows it. The
    same shuffle is a FAIL where the state moves, and a SKIP ("cannot tell") where it does not."""
    import torch

    check_loss_wiring = load_module(SCRIPT)
    wiring = load_module(OBJECTIVES / "flattened_gae_broken.py").build_wiring(fixed=True)
    loss, batch = wiring["loss"], wiring["batch"][0].clone()  # one env's [16] steps, in order
    del batch["collector"]  # no traj_ids: the state keys are the only evidence
    if not state_moves:  # a standing env: every step leaves the observation where it was
        for key in [k for k in batch.keys(True, True) if "observation" in str(k)]:
            batch[key] = torch.zeros_like(batch[key])
    shuffled = batch[torch.randperm(batch.numel(), generator=torch.Generator().manual_seed(0))]
    if state_moves:
        with pytest.raises(check_loss_wiring.sr.CheckFailed, match="followed by a step of another trajectory"):
            check_loss_wiring.check_trajectories(loss, shuffled, wiring["value_estimator"])
        assert "the state moved in" in check_loss_wiring.check_trajectories(loss, batch, wiring["value_estimator"])
    else:
        with pytest.raises(check_loss_wiring.sr.CheckSkipped, match=r"cannot tell: in (\d+) of \1 continuing steps the state did not change"):
            check_loss_wiring.check_trajectories(loss, shuffled, wiring["value_estimator"])


@pytest.mark.parametrize("estimator", ["GAE", "TDLambdaEstimator", "TD0Estimator", "TD1Estimator"])
def test_the_reference_advantage_matches_torchrl_on_a_batch_with_truncations_and_rejects_done_as_terminated(estimator):
    """The value-estimator row's reference (a plain loop) equals torchrl 0.14.1's estimators on a
    collector batch truncated inside it, and differs where the estimator reads done as terminated."""
    import torch
    from torchrl.objectives import value

    views = load_module("objectives-and-training/_estimator_views")
    wiring = load_module(OBJECTIVES / "truncated_gae_broken.py").build_wiring("done", fixed=True)
    batch, critic = wiring["batch"], wiring["value_estimator"].value_network
    truncated = batch["next", "truncated"] & ~batch["next", "terminated"]
    assert int(truncated[:, :-1].sum()) >= 4  # truncations inside the batch, not only at its end
    kwargs = {"gamma": 0.9, "value_network": critic, **({"lmbda": 0.8} if estimator in ("GAE", "TDLambdaEstimator") else {})}
    for wrong in (False, True):
        est = getattr(value, estimator)(**kwargs)
        if wrong:
            est.set_keys(terminated="done")
        with torch.no_grad():
            got = est(batch.clone())[est.tensor_keys.advantage].squeeze(-1).double()
        ref, _, _ = views.reference_advantage(est, batch)
        assert torch.allclose(got, ref, atol=1e-5) is not wrong, (estimator, wrong, float((got - ref).abs().max()))
