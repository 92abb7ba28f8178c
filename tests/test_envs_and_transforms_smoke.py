"""envs-and-transforms: smoke_env_rollout.py runs PendulumEnv, gymnasium CartPole-v1 and
Pendulum-v1 for real, serial and parallel, and fails on a transform that writes wrong data."""

from __future__ import annotations

import pytest
from conftest import load_module, rows, run_main

from torchrl_skill.report import skill_report as sr

SCRIPT = "envs-and-transforms/smoke_env_rollout"
smoke = load_module(SCRIPT)


@pytest.mark.parametrize(
    "args,expect_pass,detail",
    [
        ((), ["rollout:transformed"], {}),
        (("--env", "gym:CartPole-v1", "--steps", "5", "--check-specs", "--batched", "serial", "--num-envs", "3"),
         ["backend:gymnasium", "rollout:transformed", "specs:check_env_specs", "batched:rollout", "specs:check_env_specs-batched"],
         {"batched:rollout": "SerialEnv(3)", "specs:check_env_specs-batched": "batch [3]"}),
        (("--env", "gym:Pendulum-v1", "--steps", "5", "--check-specs"), ["rollout:transformed", "specs:check_env_specs"], {}),
        pytest.param(("--batched", "parallel", "--num-envs", "2", "--steps", "3"), ["batched:rollout"],
                     {"batched:rollout": "ParallelEnv(2)"}, marks=pytest.mark.slow),  # spawned workers
    ],
    ids=["pendulum-default", "cartpole-serial", "gym-pendulum", "pendulum-parallel"],
)
def test_smoke_runs(args, expect_pass, detail):
    code, report = run_main(SCRIPT, *args)
    st = rows(report)
    assert code == 0, report["checks"]
    for name in expect_pass:
        assert st[name][0] == "pass", (name, st)
    for name, text in detail.items():
        assert text in st[name][1], st[name]


def test_smoke_default_skips_slow_parts():
    _, report = run_main(SCRIPT)
    st = rows(report)
    assert st["batched:rollout"][0] == "skip" and "--batched" in st["batched:rollout"][1]
    assert st["specs:check_env_specs"][0] == "skip" and "--check-specs" in st["specs:check_env_specs"][1]
    assert st["backend:gymnasium"][0] == "skip"


def test_declared_checks_are_sound():
    assert sr.validate_declared(smoke.CHECKS, {"args", "cleanup"}) == []


def test_verify_rollout_rejects_wrong_data():
    """The rollout verifier fails when a transform's output is tampered with."""
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
