"""envs-and-transforms: smoke_env_rollout.py runs PendulumEnv, gymnasium CartPole-v1 and
Pendulum-v1 for real, serial and parallel, and fails on a transform that writes wrong data."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "sub-skills" / "envs-and-transforms" / "scripts" / "smoke_env_rollout.py"
spec = importlib.util.spec_from_file_location("envs_test_smoke_env_rollout", SCRIPT)
smoke = importlib.util.module_from_spec(spec)
spec.loader.exec_module(smoke)


def run_smoke(*args: str) -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = smoke.main([*args, "--json"])
    return code, json.loads(out.getvalue())


@pytest.mark.parametrize(
    "args,expect_pass",
    [
        ((), ["rollout:transformed"]),
        (("--env", "gym:CartPole-v1", "--steps", "5", "--check-specs", "--batched", "serial", "--num-envs", "3"),
         ["backend:gymnasium", "rollout:transformed", "specs:check_env_specs", "batched:serial", "specs:check_env_specs-serial"]),
        (("--env", "gym:Pendulum-v1", "--steps", "5", "--check-specs"), ["rollout:transformed", "specs:check_env_specs"]),
        (("--batched", "parallel", "--num-envs", "2", "--steps", "3"), ["batched:parallel"]),
    ],
    ids=["pendulum-default", "cartpole-serial", "gym-pendulum", "pendulum-parallel"],
)
def test_smoke_runs(args, expect_pass):
    code, report = run_smoke(*args)
    got = {c["name"]: c["status"] for c in report["checks"]}
    assert code == 0, report["checks"]
    for name in expect_pass:
        assert got[name] == "pass", (name, report["checks"])


def test_smoke_default_skips_slow_parts():
    _, report = run_smoke()
    got = {c["name"]: (c["status"], c["detail"]) for c in report["checks"]}
    assert got["batched:rollout"][0] == "skip" and "--batched" in got["batched:rollout"][1]
    assert got["specs:check_env_specs"][0] == "skip"


def test_verify_rollout_rejects_wrong_data():
    """The rollout verifier fails when a transform's output is tampered with."""
    import skill_report as sr

    env = smoke.add_transforms(smoke.make_base_env("pendulum"))
    env.set_seed(0)
    td = env.rollout(4)
    assert "step_count 1..4" in smoke.verify_rollout(env, td, 4)
    bad = td.clone()
    bad["next", "episode_reward"] = bad["next", "episode_reward"] * 0
    with pytest.raises(sr.CheckFailed, match="episode_reward"):
        smoke.verify_rollout(env, bad, 4)
    bad = td.clone()
    del bad["next", "th"]
    with pytest.raises(sr.CheckFailed, match="lacks"):
        smoke.verify_rollout(env, bad, 4)
    env.close()


def test_bad_env_flag_exits_2():
    with pytest.raises(SystemExit) as info:
        smoke.build_parser().parse_args(["--env", "cartpole"])
    assert info.value.code == 2
