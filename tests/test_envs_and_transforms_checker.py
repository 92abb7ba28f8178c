"""envs-and-transforms: check_user_env.py names the cause of each broken fixture env, passes
the fixed ones, and behaves as a command-line tool on bad input, hangs and Ctrl-C.

Helper kept here (not in conftest): ``start_python`` / ``interrupt_when_ready`` run the
checker as a real child process for the SIGINT tests.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import BUNDLE, FIXTURES, load_module, rows, run_in_process, run_main

from torchrl_skill.explain import error_index as _error_index
from torchrl_skill.runtime import user_code as _user_code
from torchrl_skill.report import skill_report as sr

SCRIPT = "envs-and-transforms/check_user_env"
checker = load_module(SCRIPT)
ENV_FIXTURES = FIXTURES / "envs"
sys.path.insert(0, str(ENV_FIXTURES))


def fixture(name: str) -> str:
    return f"{ENV_FIXTURES / name}.py:make_env"


def build(name: str):
    """The env a fixture's make_env returns, loaded with the checkers' shared loader."""
    return _user_code.load_attr(_user_code.parse_target(fixture(name)))()


def run_checker(*args: str) -> tuple[int, dict[str, tuple[str, str]]]:
    code, report = run_main(SCRIPT, *args)
    return code, rows(report) if report else {}


# fixture file -> (check that must fail, cause id its detail must start with)
BROKEN = [
    ("reward_in_reset", "env:reset-output", "reward-emitted-from-reset"),
    ("done_in_reset", "env:reset-output", "done-true-after-reset"),
    ("missing_reset_key", "env:reset-output", "key-missing-from-reset"),
    ("call_only_transform", "env:reset-output", "transform-skips-reset"),
    ("action_mask_multicategorical", "env:reset-output", "action-mask-mismatch"),
    ("gym_board_flat_action", "env:reset-output", "gym-multidiscrete-flat-action"),
    ("feature_shaped_root", "env:root-spec-shapes", "root-composite-feature-shaped"),
    ("missing_next_key", "env:rollout-next-keys-in-spec", "key-missing-under-next"),
    ("dtype_outside_spec", "env:rollout-next-keys-in-spec", "value-outside-spec"),
    ("shape_outside_spec", "env:rollout-next-keys-in-spec", "value-outside-spec"),
    ("unbatched_step", "env:batched-input", "batched-tensordict-to-unbatched-env"),
    ("batched_shared_seed", "env:batched-seeds", "batched-envs-share-seed"),
    ("no_main_guard", "target:static-main-guard", "missing-main-guard"),
    ("gym_wrapper_next_step", "target:build", "gym-vector-next-step-autoreset"),
    ("time_limit_terminated", "env:time-limit-as-truncation", "time-limit-as-terminated"),
    ("global_rng_reseed", "env:seed-global-rng", "env-reseeds-global-rng"),
    ("unseeded_rng", "env:seed-reproducible", "env-rng-not-seeded"),
    ("transform_overwrites_state", "env:transform-keeps-env-state", "transform-overwrites-env-state"),
]


@pytest.mark.parametrize("name,check,cause", BROKEN, ids=[b[0] for b in BROKEN])
def test_checker_names_cause(name, check, cause):
    code, st = run_checker(fixture(name))
    assert code == 1
    status, detail = st[check]
    assert status == "fail", (check, status, detail)
    assert detail.startswith(f"[{cause}]") and "fix:" in detail, detail
    entry = _error_index.by_id()[cause]
    assert entry.plain("fix").rstrip(".") in detail  # the fix sentence comes from the error index


FIXED = [None, "good_env", "gym_wrapper_same_step", "random_terminal", "newcomer_reach_fixed", "call_only_transform_fixed",
         "action_mask_multicategorical_fixed", "gym_board_fixed", "batched_own_seeds", "transformed_pendulum", "transform_overwrites_state_fixed"]


@pytest.mark.parametrize("target", FIXED)
def test_checker_passes_correct_envs(target):
    code, st = run_checker(*([] if target is None else [fixture(target)]))
    assert code == 0, {k: v for k, v in st.items() if v[0] == "fail"}
    assert st["env:reset-output"][0] == "pass" and st["env:check_env_specs"][0] == "pass"
    assert st["env:rollout-next-keys-in-spec"][0] == "pass"


def test_every_cause_the_checker_names_has_an_index_entry():
    """Every cause id written in the checker's modules is an envs entry of the error index."""
    scripts = BUNDLE / "src" / "torchrl_skill" / "checks" / "envs"
    named = set()
    for path in scripts.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "EnvFault" and node.args:
                if isinstance(node.args[0], ast.Constant):  # EnvFault(root.cause_id, ...) re-raises a known id
                    named.add(node.args[0].value)
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in ("ROOT_CAUSES", "FOLLOW_FROM_RESET"):
                named |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    envs = {e.id for e in _error_index.load() if e.area == "envs-and-transforms"}
    assert len(named) >= 15 and named <= envs, named - envs


def test_check_env_specs_errors_are_mapped():
    """check_env_specs' own error text is mapped to the named causes."""
    for name, cause in [("reward_in_reset", "reward-emitted-from-reset"), ("feature_shaped_root", "root-composite-feature-shaped"),
                        ("missing_next_key", "key-missing-under-next"), ("dtype_outside_spec", "value-outside-spec"),
                        ("missing_reset_key", "key-missing-from-reset")]:
        _, st = run_checker(fixture(name))
        status, detail = st["env:check_env_specs"]
        assert status == "fail" and detail.startswith(f"[{cause}]"), (name, detail)


def test_reset_output_names_missing_observation_key():
    """Once env:reset-output passed an env whose _reset left out the observation."""
    env = build("missing_reset_key")
    with pytest.raises(checker.EnvFault) as info:
        checker.check_reset(env)
    assert info.value.cause_id == "key-missing-from-reset" and "['observation']" in str(info.value)
    assert env.rollout(3).batch_size == (3,)  # the fault is silent in a plain rollout


def test_call_only_transform_and_action_mask_are_named():
    for name, cause, seen in [("call_only_transform", "transform-skips-reset", "Shift changes ['observation']"),
                              ("action_mask_multicategorical", "action-mask-mismatch", "it needs (5,)")]:
        with pytest.raises(checker.EnvFault) as info:
            checker.check_reset(build(name))
        assert info.value.cause_id == cause and seen in str(info.value), str(info.value)
    # what a joint mask really does on torchrl 0.14.1: reset passes, drawing an action raises
    env = build("action_mask_multicategorical")
    env.reset()
    with pytest.raises(RuntimeError, match="split_with_sizes expects split_sizes to sum exactly to 6"):
        env.rand_step(env.reset())


def test_transforms_alone_are_not_blamed_on_the_env():
    """The batched-input and seed checks fall back to the base env only to clear it: a
    sound base env under transforms passes, a broken one still fails under the same transforms."""
    from torchrl.envs import StepCounter, TransformedEnv

    good = build("transformed_pendulum")
    assert "its transforms do not take a [2, ...] tensordict" in checker.check_batched_input(good)
    assert "a transform keeps state across rollouts" in checker.check_seed(good, 5)
    for name, check, args, cause in [("unbatched_step", checker.check_batched_input, (), "batched-tensordict-to-unbatched-env"),
                                     ("unseeded_rng", checker.check_seed, (5,), "env-rng-not-seeded")]:
        with pytest.raises(checker.EnvFault) as info:
            check(TransformedEnv(build(name), StepCounter()), *args)
        assert info.value.cause_id == cause


def test_gym_autoreset_probe_on_serial_env():
    """getattr(SerialEnv, "_env") recursed until RecursionError on torchrl 0.14.1; the probe
    reads attributes with vars() and says "not a vector env"."""
    from _envs_fixture_base import SixFeatureEnv
    from torchrl.envs import SerialEnv

    env = SerialEnv(2, SixFeatureEnv)
    with pytest.raises(RecursionError):
        getattr(env, "base_env", env)  # what the probe did before
    assert checker.gym_vector_autoreset(env) is None
    env.reset()
    assert checker.gym_vector_autoreset(env) is None
    with pytest.raises(sr.CheckSkipped):
        checker.check_gym_autoreset(env)
    env.close()


def test_batched_copies_sharing_one_seed():
    """SerialEnv copies built with one seed reset identically until env.set_seed sets them
    apart; a _set_seed that ignores its seed keeps them identical. Copies built with their
    own seeds (SerialEnv takes a list of factories) pass."""
    import torch
    from _envs_fixture_base import SixFeatureEnv
    from torchrl.envs import SerialEnv

    env = build("batched_shared_seed")
    first = env.reset()["observation"]
    assert all(torch.equal(first[0], first[i]) for i in (1, 2))
    with pytest.raises(checker.EnvFault) as info:
        checker.check_batched_seeds(env, env.reset().clone())
    assert info.value.cause_id == "batched-envs-share-seed" and "env.set_seed(0) sets them apart" in str(info.value)
    env.set_seed(0)
    after = env.reset()["observation"]
    assert not torch.equal(after[0], after[1])

    class IgnoresSeed(SixFeatureEnv):
        def _set_seed(self, seed):
            pass

    deaf = SerialEnv(2, IgnoresSeed)
    with pytest.raises(checker.EnvFault, match="_set_seed ignores its seed"):
        checker.check_batched_seeds(deaf, deaf.reset().clone())
    good = build("batched_own_seeds")
    assert "different states" in checker.check_batched_seeds(good, good.reset().clone())
    for e in (env, deaf, good):
        e.close()


def test_module_target_found_in_current_folder(tmp_path, monkeypatch):
    """module:factory is looked up from the current folder (a name no test imported before)."""
    for name in ("good_env.py", "_envs_fixture_base.py"):
        (tmp_path / name.replace("good_env", "my_env_in_cwd")).write_text((ENV_FIXTURES / name).read_text())
    monkeypatch.chdir(tmp_path)
    code, st = run_checker("my_env_in_cwd:make_env")
    assert code == 0 and st["target:build"][0] == "pass", st


@pytest.mark.parametrize(
    "kind,expect",
    [("folder", "is a folder"), ("syntax", "SyntaxError"), ("binary", "is not a text file"), ("missing", "not found"),
     ("no-attr", "has no attribute 'make_envv'"), ("form", "is not path/to/file.py:factory")],
)
def test_bad_target_exits_2_with_one_line(kind, expect, tmp_path, capsys):
    """A folder, a syntax error or a binary file exits 2 with one line (it was reported as
    "it would start worker processes" or "file not found" before)."""
    bad = {"folder": f"{tmp_path}:make_env", "missing": f"{tmp_path}/nope.py:make_env",
           "no-attr": f"{ENV_FIXTURES / 'good_env.py'}:make_envv", "form": "my_env.py:"}
    if kind == "syntax":
        (tmp_path / "broken.py").write_text("def make_env(:\n    pass\n")
    if kind == "binary":
        (tmp_path / "broken.py").write_bytes(b"\x7fELF\x00\x01\x02")
    code, _ = run_checker(bad.get(kind, f"{tmp_path}/broken.py:make_env"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expect in err[0], err
    assert "worker processes" not in err[0] and "Traceback" not in err[0]


def test_unknown_cause_says_where_it_was_raised(tmp_path):
    (tmp_path / "odd_env.py").write_text(
        "import sys\nsys.path.insert(0, %r)\nfrom _envs_fixture_base import SixFeatureEnv\n\n\n"
        "class Odd(SixFeatureEnv):\n    def _step(self, tensordict):\n        raise ValueError('odd failure')\n\n\n"
        "def make_env():\n    return Odd()\n" % str(ENV_FIXTURES)
    )
    st = run_in_process(SCRIPT, f"{tmp_path / 'odd_env.py'}:make_env")
    status, detail = st["env:check_env_specs"]
    assert status == "fail" and "ValueError: odd failure" in detail
    assert "(no known cause; raised at odd_env.py:8 in _step)" in detail, detail


def test_timeout_fails_a_hanging_factory_with_its_line():
    st = run_in_process(SCRIPT, fixture("hang_in_factory"), "--timeout", "3")
    status, detail = st["target:build"]
    assert status == "fail" and "still running after 3 s (at hang_in_factory.py:" in detail and "--timeout" in detail
    assert st["env:reset-output"][0] == "skip"


def test_timeout_fails_a_hanging_step_with_its_line():
    st = run_in_process(SCRIPT, fixture("hang_in_step"), "--timeout", "3")
    assert st["env:reset-output"][0] == "pass"
    status, detail = st["env:check_env_specs"]
    assert status == "fail" and "still running after 3 s (at hang_in_step.py:" in detail and "in _step" in detail
    # the env is not stepped again: the hang costs one time limit, not one per later row
    later = list(st)[list(st).index("env:check_env_specs") + 1:]
    assert later and all(st[n] == ("skip", "not run: env:check_env_specs timed out inside env (its state is unknown "
                                           "after the interrupt; fix that hang first)") for n in later), st


def test_keyboard_interrupt_in_user_code_is_not_an_env_fault(tmp_path):
    (tmp_path / "interrupted.py").write_text("def make_env():\n    raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        run_in_process(SCRIPT, f"{tmp_path / 'interrupted.py'}:make_env")


def start_python(args: list[str], env: dict) -> subprocess.Popen:
    full = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **env}
    full.pop("TORCHRL_CONSOLE_STREAM", None)
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(BUNDLE.parent), env=full)


def interrupt_when_ready(proc: subprocess.Popen, marker: Path, limit: float = 300.0) -> tuple[int, str, str, list]:
    """Wait for the fixture's marker file, send SIGINT, and return (rc, stdout, stderr,
    descendants that were alive before the signal)."""
    import psutil

    deadline = time.monotonic() + limit
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the fixture never started hanging"
        time.sleep(0.2)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running 60 s after SIGINT: {err[-500:]}")
    return proc.returncode, out, err, children


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hang_in_factory", "hang_in_step"])
def test_ctrl_c_exits_130_with_one_line(name, tmp_path):
    marker = tmp_path / "hanging"
    script = BUNDLE / "sub-skills" / "envs-and-transforms" / "scripts" / "check_user_env.py"
    proc = start_python([str(script), fixture(name), "--json", "--timeout", "600"], {"ENV_FIXTURE_MARKER": str(marker)})
    code, out, err, children = interrupt_when_ready(proc, marker)
    lines = [ln for ln in err.strip().splitlines() if "[torchrl][INFO]" not in ln]
    assert code == 130 and lines == ["check_user_env.py: interrupted"], (code, err[-1000:])
    assert out == ""  # no report: an interrupt is not a finding about the env
    assert not [c for c in children if c.is_running() and c.status() != "zombie"]


ORDER = [
    "target:static-main-guard", "target:build", "env:root-spec-shapes", "env:gym-vector-autoreset",
    "env:reset-output", "env:batched-seeds", "env:check_env_specs", "env:rollout-next-keys-in-spec", "env:batched-input",
    "env:seed-reproducible", "env:seed-global-rng", "env:time-limit-as-truncation", "env:transforms",
    "env:transform-keeps-env-state",
]


def test_declared_checks_are_sound():
    assert [c.name for c in checker.CHECKS] == ORDER
    assert sr.validate_declared(checker.CHECKS, {"args", "target", "cleanup", "steps", "time_limit_steps",
                                                 "expected_transforms"}) == []


def test_newcomer_original_env_names_root_cause_first():
    """Real report (newcomer): reward from _reset, a 50-step limit as terminated, torch.manual_seed
    in _set_seed. The first failure names reward-from-reset; checks that trip over it say so
    instead of blaming missing keys; the two independent faults get their own causes."""
    code, report = run_main(SCRIPT, fixture("newcomer_reach_original"))
    assert code == 1 and [c["name"] for c in report["checks"]] == ORDER
    fails = [c for c in report["checks"] if c["status"] == "fail"]
    assert fails[0]["name"] == "env:reset-output" and fails[0]["detail"].startswith("[reward-emitted-from-reset]")
    st = rows(report)
    assert st["env:check_env_specs"][0] == "fail" and st["env:check_env_specs"][1].startswith("[reward-emitted-from-reset]")
    for c in fails:
        assert "[key-missing-under-next]" not in c["detail"] and "none of the spec'd" not in c["detail"], c
    assert st["env:seed-reproducible"][0] == "pass", st["env:seed-reproducible"]
    assert st["env:seed-global-rng"][0] == "fail" and st["env:seed-global-rng"][1].startswith("[env-reseeds-global-rng]")
    status, detail = st["env:time-limit-as-truncation"]
    assert status == "fail" and detail.startswith("[time-limit-as-terminated]") and "exactly step 50" in detail


def test_collector_typeerror_from_reward_in_reset():
    """Real report 1: a Collector over an env returning reward from _reset."""
    from torchrl.collectors import Collector

    collector = Collector(build("reward_in_reset"), None, frames_per_batch=10, total_frames=20)
    try:
        with pytest.raises(TypeError) as info:
            next(iter(collector))
    finally:
        collector.shutdown()
    text = f"TypeError: {info.value}"
    assert "expected Tensor as element 1 in argument 0, but got NoneType" in text
    assert checker.diagnose(text) == "reward-emitted-from-reset"


def test_feature_shaped_root_error_text():
    """Real report 2: fake_tensordict() on a root Composite shaped (6,) with batch_size ()."""
    with pytest.raises(RuntimeError) as info:
        build("feature_shaped_root").fake_tensordict()
    assert "batch dimension mismatch, got self.batch_size=torch.Size([6]) and value.shape=torch.Size([1])" in str(info.value)
    assert checker.diagnose(str(info.value)) == "root-composite-feature-shaped"


def test_bootstrapping_error_real(tmp_path):
    """Real report 3: a spawn process started at import time; the text maps to the guard fix,
    and the static scan flags the same file without running it."""
    script = tmp_path / "unguarded.py"
    script.write_text('import multiprocessing as mp\nmp.set_start_method("spawn", force=True)\np = mp.Process(target=print)\n'
                      "p.start()\np.join()\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "has finished its bootstrapping phase" in proc.stderr
    assert checker.diagnose(proc.stderr) == "missing-main-guard"
    assert checker.unguarded_process_starts(script.read_text()) == [(3, "Process")]
    guarded = 'import multiprocessing as mp\nif __name__ == "__main__":\n    mp.Process(target=print).start()\n'
    assert checker.unguarded_process_starts(guarded) == []


def test_gym_num_envs_next_step_junk_transition():
    """Real report 4: GymEnv("CartPole-v1", num_envs=2) wraps a NEXT_STEP vector env; the step
    after a done carries reward 0 (CartPole pays 1 on every real step). The checker flags it."""
    env = build("gym_vector_next_step")
    try:
        assert checker.gym_vector_autoreset(env) == "NEXT_STEP"
        with pytest.raises(checker.EnvFault) as info:
            checker.check_gym_autoreset(env)
        assert info.value.cause_id == "gym-vector-next-step-autoreset"
        env.set_seed(0)
        td = env.rollout(60, break_when_any_done=False)
        done, reward = td["next", "done"].squeeze(-1), td["next", "reward"].squeeze(-1)
        assert done[:, :-1].any()
        assert (reward[:, 1:][done[:, :-1]] == 0).all()
        assert (reward[~done.roll(1, -1) & ~done] == 1).all()
    finally:
        env.close()


def test_keys_mismatch_read_from_the_printed_sets():
    """check_env_specs prints both key sets (one may be set()); each real text maps to its own cause."""
    import torch
    from _envs_fixture_base import SixFeatureEnv
    from torchrl.envs.utils import check_env_specs

    class ExtraKeyInStep(SixFeatureEnv):
        def _step(self, tensordict):
            out = super()._step(tensordict)
            out["extra"] = torch.zeros(1)
            return out

    for env, cause in [(ExtraKeyInStep(), "key-not-in-spec"), (build("newcomer_reach_original"), "reward-emitted-from-reset"),
                       (build("missing_next_key"), "key-missing-under-next")]:
        with pytest.raises(AssertionError) as info:
            check_env_specs(env, seed=0)
        text = f"AssertionError: {info.value}"
        assert "The keys of the specs and data do not match" in text and "List of keys present in fake but not in real" in text
        assert checker.diagnose(text) == cause, (cause, text)


def test_faults_follow_the_root_cause_by_id():
    """A later check's fault is reported under the reset output's root cause by comparing
    cause ids; a check's own plain finding and an independent cause keep their text."""
    root = checker.EnvFault("reward-emitted-from-reset", "env.reset() output holds ['reward']")

    @checker.diagnosed(root_of=lambda env: root)
    def trips(env):
        raise checker.EnvFault("key-missing-under-next", "boom", raised_by="check_env_specs(env, seed=0)")

    with pytest.raises(checker.EnvFault) as info:
        trips(env=None)
    assert info.value.cause_id == "reward-emitted-from-reset" and info.value.follows == "env:reset-output"
    assert "[key-missing-under-next]" not in str(info.value) and "boom" in str(info.value)

    @checker.diagnosed(root_of=lambda env: root)
    def crashes(env):
        raise ValueError("odd")

    with pytest.raises(checker.EnvFault, match=r"^\[reward-emitted-from-reset\] follows from"):
        crashes(env=None)
    for raised in (sr.CheckFailed("two rollouts differ"), checker.EnvFault("time-limit-as-terminated", "step 50")):
        def own(env, raised=raised):
            raise raised

        with pytest.raises(sr.CheckFailed) as info:
            checker.diagnosed(own, root_of=lambda env: root)(env=None)
        assert info.value is raised


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
    """StepCounter(max_steps=N) on a never-ending env writes truncated: passes. The same step
    limit written to terminated fails even under a StepCounter."""
    from torchrl.envs import StepCounter, TransformedEnv

    good = TransformedEnv(build("good_env"), StepCounter(max_steps=20))
    assert "truncated key present" in checker.check_time_limit(good, 100)
    bad = TransformedEnv(build("time_limit_terminated"), StepCounter(max_steps=20))
    with pytest.raises(checker.EnvFault) as info:
        checker.check_time_limit(bad, 100)
    assert info.value.cause_id == "time-limit-as-terminated"
    assert "StepCounter(max_steps=N)" in str(info.value) and "yet terminated is set at the limit too" in str(info.value)


def test_global_rng_probe_restores_state():
    import torch

    env = build("global_rng_reseed")
    torch.manual_seed(123)
    state = torch.get_rng_state()
    assert checker.global_rng_after_set_seed(env, 7) == (True, True, True)
    assert torch.equal(torch.get_rng_state(), state)
    assert checker.global_rng_after_set_seed(build("good_env"), 7) == (False, False, False)


def test_checker_silent_faults():
    code, st = run_checker(fixture("empty_transforms"))
    assert code == 0  # nothing is broken unless the user says what should be there
    code, st = run_checker(fixture("empty_transforms"), "--expect-transform", "ObservationNorm")
    status, detail = st["env:transforms"]
    assert code == 1 and status == "fail" and detail.startswith("[transform-not-attached]") and "append_transform" in detail
    code, st = run_checker(fixture("unseeded_rng"))
    status, detail = st["env:seed-reproducible"]
    assert code == 1 and status == "fail" and detail.startswith("[env-rng-not-seeded]") and "_set_seed" in detail


def test_rollout_detail_explains_break_when_any_done():
    """--steps 60 with StepCounter(max_steps=50): batch [60] is explained, done at index 49."""
    code, st = run_checker(fixture("newcomer_reach_fixed"), "--steps", "60")
    assert code == 0
    status, detail = st["env:rollout-next-keys-in-spec"]
    assert status == "pass" and "rollout batch [60]" in detail
    assert "break_when_any_done=False" in detail and "49" in detail and "a plain env.rollout(n)" in detail
    env = build("newcomer_reach_fixed")  # what the detail and the entry say of a plain rollout
    assert env.rollout(60).batch_size == (50,) and env.rollout(60, break_when_any_done=False).batch_size == (60,)


def _pendulum_rollout(env, steps: int = 5):
    """``("next", "th")`` and ``("next", "thdot")`` of a seeded rollout with the torque held at 0.5."""
    import torch

    torch.manual_seed(0)
    env.set_seed(0)
    td = env.rollout(steps, lambda td: td.set("action", torch.full((*td.batch_size, 1), 0.5)), break_when_any_done=False)
    return td["next", "th"], td["next", "thdot"]


def test_transform_rewriting_env_state_changes_the_dynamics():
    """PendulumEnv._step reads th/thdot from its input: a transform rescaling them in place
    (no _inv_call) makes the pendulum follow other dynamics, with no error; the same scaling
    on new keys, or undone by in_keys_inv, leaves them as they were. The checker measures it
    by stepping the base env from the state it returned and from the rewritten one."""
    import torch
    from torchrl.envs import GymEnv, ObservationNorm, PendulumEnv, TransformedEnv, VecNormV2
    from transform_overwrites_state import ScaleObs
    from transform_overwrites_state_fixed import ScaleObsToNewKeys

    th, thdot = _pendulum_rollout(PendulumEnv())
    scaled_th, scaled_thdot = _pendulum_rollout(TransformedEnv(PendulumEnv(), ScaleObs()))
    assert not torch.allclose(scaled_th * torch.pi, th) and not torch.allclose(scaled_thdot * 8.0, thdot)  # other dynamics
    assert all(torch.allclose(a, b) for a, b in zip(_pendulum_rollout(TransformedEnv(PendulumEnv(), ScaleObsToNewKeys())), (th, thdot)))
    undone = TransformedEnv(PendulumEnv(), ObservationNorm(loc=0.0, scale=2.0, in_keys=["thdot"], in_keys_inv=["thdot"]))
    _, norm_thdot = _pendulum_rollout(undone)
    assert torch.allclose(norm_thdot, thdot * 2.0, atol=1e-5)  # rewritten in the output, undone on the way in

    in_place = [(TransformedEnv(PendulumEnv(), ScaleObs()), "ScaleObs", "['th', 'thdot']"),
                (TransformedEnv(PendulumEnv(), ObservationNorm(loc=0.0, scale=2.0, in_keys=["thdot"])), "ObservationNorm", "['thdot']"),
                # the transformed_pendulum fixture before this check: VecNormV2 normalizing thdot in place
                (TransformedEnv(PendulumEnv(), VecNormV2(in_keys=["thdot"], decay=0.99)), "VecNormV2", "['thdot']"),
                (build("transform_overwrites_state"), "ScaleObs", "['th', 'thdot']")]
    for env, writer, keys in in_place:
        with pytest.raises(checker.EnvFault) as info:
            checker.check_transform_state(env)
        assert info.value.cause_id == "transform-overwrites-env-state", str(info.value)
        assert f"{writer} rewrote {keys} and" in str(info.value) and "differs in 'th" in str(info.value), str(info.value)
    assert "gets its state keys back" in checker.check_transform_state(undone)
    assert "gets its state keys back" in checker.check_transform_state(build("transform_overwrites_state_fixed"))
    # a stateful env (the gymnasium env keeps CartPole's state) ignores the observation it is handed
    gym = TransformedEnv(GymEnv("CartPole-v1"), ObservationNorm(loc=1.0, scale=2.0, in_keys=["observation"]))
    try:
        assert "rewrite ['observation']; GymEnv._step from the state it returned gives the same step" in checker.check_transform_state(gym)
    finally:
        gym.close()


def test_transform_state_check_skips_with_its_reason():
    """No TransformedEnv: nothing to probe. A base env whose _step gives two outputs for one
    input (a counter kept inside it): no verdict, said so."""
    import torch
    from _envs_fixture_base import SixFeatureEnv
    from torchrl.envs import ObservationNorm, TransformedEnv

    with pytest.raises(sr.CheckSkipped, match="not a TransformedEnv"):
        checker.check_transform_state(build("good_env"))

    class Counting(SixFeatureEnv):
        def _step(self, tensordict):
            self.calls = getattr(self, "calls", 0) + 1
            out = super()._step(tensordict)
            out["observation"] = tensordict["observation"] + self.calls
            return out

    env = TransformedEnv(Counting(), ObservationNorm(loc=0.0, scale=torch.tensor(2.0), in_keys=["observation"]))
    with pytest.raises(sr.CheckSkipped, match=r"Counting._step gives two outputs for one input"):
        checker.check_transform_state(env)


def test_class_target_is_called_with_no_arguments(tmp_path):
    """TARGET may name an EnvBase subclass (file.py:ReachEnv); it is called with no
    arguments like a factory. A class that needs arguments fails target:build saying so."""
    code, st = run_checker(f"{ENV_FIXTURES / 'newcomer_reach_fixed.py'}:ReachEnv")
    assert code == 0 and st["target:build"] == ("pass", "newcomer_reach_fixed.py:ReachEnv -> ReachEnv, batch_size []"), st
    assert st["env:transform-keeps-env-state"][0] == "skip"
    (tmp_path / "needs_args.py").write_text(
        "import sys\nsys.path.insert(0, %r)\nfrom newcomer_reach_fixed import ReachEnv\n\n\n"
        "class Sized(ReachEnv):\n    def __init__(self, size):\n        super().__init__()\n" % str(ENV_FIXTURES))
    code, st = run_checker(f"{tmp_path / 'needs_args.py'}:Sized")
    status, detail = st["target:build"]
    assert code == 1 and status == "fail" and "missing 1 required positional argument: 'size'" in detail, detail


@pytest.mark.parametrize("broken, line, what", [
    ("module_level_loop", 13, "a for loop over collector runs at import time"),
    ("module_level_main_call", 17, "train(...) runs at import time"),
])
def test_static_guard_rejects_work_at_module_level_and_passes_the_guarded_twin(broken, line, what):
    """A collection/training loop at module level (or a call there of the function holding it)
    fails the static guard and the file is not imported; the same file with the loop under
    if __name__ == "__main__": passes and the env is checked."""
    code, st = run_checker(fixture(broken))
    status, detail = st["target:static-main-guard"]
    assert code == 1 and status == "fail" and f"{broken}.py:{line} {what}" in detail and '__name__ == "__main__"' in detail, detail
    assert st["target:build"][0] == "skip"  # never imported
    code, st = run_checker(fixture("module_level_loop_fixed"))
    assert code == 0 and st["target:static-main-guard"][0] == "pass" and st["target:build"][0] == "pass", st


@pytest.mark.parametrize("source, expected", [
    ("import torch\ntry:\n    for i in range(3):\n        pass\nexcept Exception:\n    pass\n", [(3, "a for loop over range(3)")]),
    ("with open('x') as f:\n    while True:\n        break\n", [(2, "a while loop (True)")]),
    ('if __name__ == "__main__":\n    env.rollout(3)\nelse:\n    env.rollout(3)\n', [(4, "env.rollout(...)")]),
    ("def go():\n    return helper()\ndef helper():\n    for _ in x:\n        pass\ngo()\n", [(6, "go(), which runs helper(), which runs a for loop over x")]),
    ("td = next(iter(collector))\n", [(1, "next(...)")]),
    ('X = 3\ndef f():\n    for _ in range(X):\n        pass\nclass E:\n    def _step(self):\n        return self.step()\n'
     'if __name__ == "__main__":\n    f()\n', []),
])
def test_import_time_work_finds_what_runs_on_import_and_nothing_else(source, expected):
    found, scanned = checker.import_time_work(source)
    assert found == expected and scanned >= 1


def test_import_time_work_counts_no_evidence_on_an_empty_file():
    assert checker.import_time_work('"""only a docstring"""\n') == ([], 0)
