"""envs-and-transforms: check_user_env.py names the cause of each broken fixture env,
passes the correct ones, and the real reports of issue 3 reproduce on this stack."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BUNDLE = Path(__file__).resolve().parent.parent
SCRIPTS = BUNDLE / "sub-skills" / "envs-and-transforms" / "scripts"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "envs"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"envs_test_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


checker = _load("check_user_env")


def run_checker(*args: str) -> tuple[int, dict]:
    """Run check_user_env.main in-process with --json; return (exit code, report)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = checker.main([*args, "--json"])
    return code, json.loads(out.getvalue())


def statuses(report: dict) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["status"], c["detail"]) for c in report["checks"]}


def fixture(name: str) -> str:
    return f"{FIXTURES / name}.py:make_env"


# fixture file -> (check that must fail, cause id it must name)
BROKEN = [
    ("reward_in_reset", "env:reset-output", "reward-emitted-from-reset"),
    ("done_in_reset", "env:reset-output", "done-true-after-reset"),
    ("feature_shaped_root", "env:root-spec-shapes", "root-composite-feature-shaped"),
    ("missing_next_key", "env:rollout-next-keys-in-spec", "key-missing-under-next"),
    ("dtype_outside_spec", "env:rollout-next-keys-in-spec", "value-outside-spec"),
    ("shape_outside_spec", "env:rollout-next-keys-in-spec", "value-outside-spec"),
    ("unbatched_step", "env:batched-input", "batched-tensordict-to-unbatched-env"),
    ("no_main_guard", "target:static-main-guard", "missing-main-guard"),
    ("gym_wrapper_next_step", "target:build", "gym-vector-next-step-autoreset"),
    ("time_limit_terminated", "env:time-limit-as-truncation", "time-limit-as-terminated"),
    ("global_rng_reseed", "env:seed-global-rng", "env-reseeds-global-rng"),
]


@pytest.mark.parametrize("name,check,cause", BROKEN, ids=[b[0] for b in BROKEN])
def test_checker_names_cause(name, check, cause):
    code, report = run_checker(fixture(name))
    assert code == 1 and report["ok"] is False
    status, detail = statuses(report)[check]
    assert status == "fail", (check, status, detail)
    assert f"[{cause}]" in detail and "fix:" in detail, detail


def test_checker_check_env_specs_errors_are_mapped():
    """check_env_specs' own error text is mapped to the same named causes."""
    for name, cause in [("reward_in_reset", "reward-emitted-from-reset"), ("feature_shaped_root", "root-composite-feature-shaped"),
                        ("missing_next_key", "key-missing-under-next"), ("dtype_outside_spec", "value-outside-spec")]:
        _, report = run_checker(fixture(name))
        status, detail = statuses(report)["env:check_env_specs"]
        assert status == "fail" and f"[{cause}]" in detail, (name, detail)


@pytest.mark.parametrize("target", [None, "good_env", "gym_wrapper_same_step", "random_terminal", "newcomer_reach_fixed"])
def test_checker_passes_correct_envs(target):
    args = [] if target is None else [fixture(target)]
    code, report = run_checker(*args)
    assert code == 0, [c for c in report["checks"] if c["status"] == "fail"]
    st = statuses(report)
    assert st["env:check_env_specs"][0] == "pass" and st["env:rollout-next-keys-in-spec"][0] == "pass"


def test_checker_module_target(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    code, report = run_checker("good_env:make_env")
    assert code == 0 and statuses(report)["target:build"][0] == "pass"


def test_checker_silent_faults():
    code, report = run_checker(fixture("empty_transforms"))
    assert code == 0  # nothing is broken unless the user says what should be there
    code, report = run_checker(fixture("empty_transforms"), "--expect-transform", "ObservationNorm")
    status, detail = statuses(report)["env:transforms"]
    assert code == 1 and status == "fail" and "ObservationNorm" in detail and "append_transform" in detail
    code, report = run_checker(fixture("unseeded_rng"))
    status, detail = statuses(report)["env:seed-reproducible"]
    assert code == 1 and status == "fail" and "_set_seed" in detail


def test_collector_typeerror_from_reward_in_reset():
    """Real report 1: a Collector over an env returning reward from _reset."""
    from torchrl.collectors import Collector

    sys.path.insert(0, str(FIXTURES))
    mod = checker.load_factory(fixture("reward_in_reset"))
    env = mod()
    collector = Collector(env, None, frames_per_batch=10, total_frames=20)
    try:
        with pytest.raises(TypeError) as info:
            next(iter(collector))
    finally:
        collector.shutdown()
    text = f"TypeError: {info.value}"
    assert "expected Tensor as element 1 in argument 0, but got NoneType" in text
    assert checker.diagnose(text).startswith("[reward-emitted-from-reset]")


def test_feature_shaped_root_error_text():
    """Real report 2: fake_tensordict() on a root Composite shaped (6,) with batch_size ()."""
    env = checker.load_factory(fixture("feature_shaped_root"))()
    with pytest.raises(RuntimeError) as info:
        env.fake_tensordict()
    assert "batch dimension mismatch, got self.batch_size=torch.Size([6]) and value.shape=torch.Size([1])" in str(info.value)
    assert checker.diagnose(str(info.value)).startswith("[root-composite-feature-shaped]")


def test_bootstrapping_error_real(tmp_path):
    """Real report 3: starting a spawn process at import time; the text maps to the guard fix,
    and the static scan flags the same file without running it."""
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(
        """
        import multiprocessing as mp
        mp.set_start_method("spawn", force=True)
        p = mp.Process(target=print)
        p.start()
        p.join()
        """
    ))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "has finished its bootstrapping phase" in proc.stderr
    assert checker.diagnose(proc.stderr).startswith("[missing-main-guard]")
    assert checker.unguarded_process_starts(script.read_text()) == [(4, "Process")]
    guarded = 'import multiprocessing as mp\nif __name__ == "__main__":\n    mp.Process(target=print).start()\n'
    assert checker.unguarded_process_starts(guarded) == []


def test_gym_num_envs_next_step_junk_transition():
    """Real report 4: GymEnv("CartPole-v1", num_envs=2) wraps a NEXT_STEP vector env; the step
    after a done carries reward 0 (CartPole pays 1 on every real step). The checker flags it."""
    env = checker.load_factory(fixture("gym_vector_next_step"))()
    try:
        assert checker.gym_vector_autoreset(env) == "NEXT_STEP"
        with pytest.raises(Exception) as info:
            checker.check_gym_autoreset(env)
        assert "[gym-vector-next-step-autoreset]" in str(info.value)
        env.set_seed(0)
        td = env.rollout(60, break_when_any_done=False)
        done = td["next", "done"].squeeze(-1)
        reward = td["next", "reward"].squeeze(-1)
        assert done[:, :-1].any()
        assert (reward[:, 1:][done[:, :-1]] == 0).all()
        assert (reward[~done.roll(1, -1) & ~done] == 1).all()
    finally:
        env.close()


ORDER = [
    "target:static-main-guard", "target:build", "env:root-spec-shapes", "env:gym-vector-autoreset",
    "env:reset-output", "env:check_env_specs", "env:rollout-next-keys-in-spec", "env:batched-input",
    "env:seed-reproducible", "env:seed-global-rng", "env:time-limit-as-truncation", "env:transforms",
]


def test_newcomer_original_env_names_root_cause_first():
    """Real report (newcomer): reward from _reset, a 50-step limit as terminated, torch.manual_seed
    in _set_seed. The first failure names reward-from-reset; checks that trip over it say so
    instead of blaming missing keys; the two independent faults get their own causes."""
    code, report = run_checker(fixture("newcomer_reach_original"))
    assert code == 1
    assert [c["name"] for c in report["checks"]] == ORDER
    fails = [c for c in report["checks"] if c["status"] == "fail"]
    assert fails[0]["name"] == "env:reset-output" and fails[0]["detail"].startswith("[reward-emitted-from-reset]")
    st = statuses(report)
    assert st["env:check_env_specs"][0] == "fail" and "[reward-emitted-from-reset]" in st["env:check_env_specs"][1]
    for c in fails:
        assert "[key-missing-under-next]" not in c["detail"], c
        assert "none of the spec'd" not in c["detail"], c
    assert st["env:seed-reproducible"][0] == "pass", st["env:seed-reproducible"]
    assert st["env:seed-global-rng"][0] == "fail" and "torch.Generator" in st["env:seed-global-rng"][1]
    status, detail = st["env:time-limit-as-truncation"]
    assert status == "fail" and "[time-limit-as-terminated]" in detail and "exactly step 50" in detail


def test_keys_mismatch_read_from_the_printed_sets():
    """check_env_specs prints both key lists (one may be set()); each real text maps to its own cause."""
    import torch
    from torchrl.envs.utils import check_env_specs

    sys.path.insert(0, str(FIXTURES))
    from _envs_fixture_base import SixFeatureEnv

    class ExtraKeyInStep(SixFeatureEnv):
        def _step(self, tensordict):
            out = super()._step(tensordict)
            out["extra"] = torch.zeros(1)
            return out

    envs = [
        (ExtraKeyInStep(), "key-not-in-spec"),
        # reward (and done, terminated) from _reset: this text, not "The reward key was present"
        (checker.load_factory(fixture("newcomer_reach_original"))(), "reward-emitted-from-reset"),
        (checker.load_factory(fixture("missing_next_key"))(), "key-missing-under-next"),
    ]
    for env, cause in envs:
        with pytest.raises(AssertionError) as info:
            check_env_specs(env, seed=0)
        text = f"AssertionError: {info.value}"
        assert "The keys of the specs and data do not match" in text
        assert "List of keys present in fake but not in real" in text  # printed every time
        assert checker.diagnose(text).startswith(f"[{cause}]"), (cause, text)


def test_relabel_under_root_cause():
    """Once reset output shows the root cause, a later check's failure is reported under it."""
    import skill_report as sr

    raw = "check_env_specs(env, seed=0) raised AssertionError: boom -> [key-missing-under-next] cause: x; fix: y"
    out = checker.relabel(raw, "reward-emitted-from-reset", "env:reset-output")
    assert out.startswith("[reward-emitted-from-reset]") and "[key-missing-under-next]" not in out and "boom" in out
    own = "two rollouts after env.set_seed(0) differ"
    assert checker.relabel(own, "reward-emitted-from-reset", "env:reset-output") == own

    def failing():
        raise sr.CheckFailed(raw)

    with pytest.raises(sr.CheckFailed) as info:
        checker.mapped(failing, {"id": "reward-emitted-from-reset", "by": "env:reset-output"})()
    assert str(info.value).startswith("[reward-emitted-from-reset]")
    with pytest.raises(sr.CheckFailed) as info:
        checker.mapped(failing)()
    assert str(info.value) == raw


def test_time_limit_rule_spares_real_end_states():
    f = checker.fixed_terminal_length
    assert f([(50, True, False)] * 2) == 50
    assert f([(50, True, False), (7, True, False), (50, True, False)]) == 50  # a goal reached once
    assert f([(1, True, False)] * 10) is None  # one-step (bandit) task
    assert f([(50, True, False)]) is None  # one episode proves nothing
    assert f([(30, True, False)] * 2 + [(12, True, False), (9, True, False), (20, True, False)]) is None
    assert f([(50, False, True)] * 4) is None  # the limit already is a truncation
    assert f([(13, True, False), (40, True, False), (22, True, False), (40, True, False), (5, True, False)]) is None


def test_time_limit_with_and_without_step_counter():
    """StepCounter(max_steps=N) on a never-ending env writes truncated: passes. The same
    step limit written to terminated fails even under a StepCounter."""
    import skill_report as sr
    from torchrl.envs import StepCounter, TransformedEnv

    good = TransformedEnv(checker.load_factory(fixture("good_env"))(), StepCounter(max_steps=20))
    detail = checker.check_time_limit(good, 100)
    assert "truncated key present" in detail
    bad = TransformedEnv(checker.load_factory(fixture("time_limit_terminated"))(), StepCounter(max_steps=20))
    with pytest.raises(sr.CheckFailed) as info:
        checker.check_time_limit(bad, 100)
    assert "[time-limit-as-terminated]" in str(info.value) and "StepCounter(max_steps=N)" in str(info.value)
    assert "yet terminated is set at the limit too" in str(info.value)


def test_global_rng_probe_restores_state():
    import torch

    env = checker.load_factory(fixture("global_rng_reseed"))()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    assert checker.global_rng_after_set_seed(env, 7) == (True, True, True)
    assert torch.equal(torch.get_rng_state(), state)
    good = checker.load_factory(fixture("good_env"))()
    assert checker.global_rng_after_set_seed(good, 7) == (False, False, False)


def test_rollout_detail_explains_break_when_any_done():
    """--steps 60 with StepCounter(max_steps=50): batch [60] is explained, done at index 49."""
    code, report = run_checker(fixture("newcomer_reach_fixed"), "--steps", "60")
    assert code == 0
    status, detail = statuses(report)["env:rollout-next-keys-in-spec"]
    assert status == "pass" and "rollout batch [60]" in detail
    assert "break_when_any_done=False" in detail and "49" in detail and "break_when_any_done=True" in detail
