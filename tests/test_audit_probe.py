"""audit_run.py --probe: the probe ladder (src/torchrl_skill/audit/ladder*.py, probe_env.py).

The probe envs keep the script's specs (torchrl's own check_env_specs passes on them) and
pay the rungs' rewards; a correct PPO project and the DQN recipe pass every rung; each broken
twin fails on the rung that isolates its fault while the correct script passes it; a script
the ladder cannot judge exits 5. Frame budgets here are small (--max-frames) and every run
gets --seconds far above its need, so a slower machine changes nothing but the wall time.
"""

from __future__ import annotations

import pytest
from conftest import BUNDLE, FIXTURES, rows, run_main

from torchrl_skill.report import skill_report as sr

PROBE = FIXTURES / "audit" / "probe"
PPO, DQN = PROBE / "ppo_project.py", PROBE / "dqn_recipe.py"
SLOW_OK = "900"  # --seconds per rung: only a guard against a hang


def _probe_envs(rung):
    import torch
    from torchrl.envs import GymEnv, SerialEnv, StepCounter, TransformedEnv

    from torchrl_skill.audit import probe_env

    torch.manual_seed(0)
    envs = {"Pendulum": TransformedEnv(GymEnv("Pendulum-v1"), StepCounter(max_steps=20)),
            "CartPole": GymEnv("CartPole-v1"),
            "SerialEnv(Point)": SerialEnv(2, _point_env),
            "Point1D (Unbounded)": _wiring_env()}
    for env in envs.values():
        if isinstance(env, SerialEnv):
            env.reset()  # SerialEnv builds its sub-envs on the first reset
            leaves = [sub.base_env for sub in env._envs]
        else:
            leaves = [env.base_env] if isinstance(env, TransformedEnv) else [env]
        for leaf in leaves:
            probe_env.attach(leaf, rung, seed=0)
    return envs


def _wiring_env():
    from conftest import load_module

    return load_module(BUNDLE / "sub-skills" / "objectives-and-training" / "assets" / "ppo_user_env_wiring.py").make_env()


def _point_env():
    from conftest import load_module

    return load_module(PPO).make_env()


@pytest.mark.parametrize("rung", [1, 2, 3, 4, 5])
def test_probe_envs_keep_the_specs_torchrl_checks(rung):
    from torchrl.envs.utils import check_env_specs

    for name, env in _probe_envs(rung).items():
        check_env_specs(env)  # raises on any key, shape, dtype or bound the probe data breaks
        td = env.rollout(4, break_when_any_done=False)
        assert td["observation"].isfinite().all() and td["observation"].abs().max() <= 4.0, name  # Unbounded: +-0.5
        env.close()


def test_probe_rewards_states_and_episode_ends_match_each_rung():
    import torch

    envs = _probe_envs(3)
    td = envs["Pendulum"].rollout(6, break_when_any_done=False)
    obs, nxt = td["observation"], td["next", "observation"]
    assert td["next", "reward"].reshape(-1).tolist() == [0.0, 1.0] * 3  # reward 0 at A, 1 at B
    assert td["next", "terminated"].reshape(-1).tolist() == [False, True] * 3
    assert not td["next", "truncated"].any()
    low_side = torch.tensor([-0.5, -0.5, -4.0])  # A: half-way to Pendulum's low bounds [-1, -1, -8]
    assert torch.equal(obs[0], low_side) and torch.equal(nxt[0], -low_side) and torch.equal(obs[1], -low_side)
    for rung, expect in ((1, {1.0}), (2, {1.0, -1.0})):
        td = _probe_envs(rung)["CartPole"].rollout(40, break_when_any_done=False)
        assert set(td["next", "reward"].reshape(-1).tolist()) == expect and td["next", "terminated"].all()
        if rung == 2:  # the reward is the state the observation shows
            assert torch.equal(torch.sign(td["observation"][:, 0]), td["next", "reward"].reshape(-1))


def test_action_rungs_pay_one_only_at_the_best_action():
    import torch

    env = _probe_envs(4)["Pendulum"]  # action in [-2, 2]: best -1 on rung 4
    for action, reward in ((-1.0, 1.0), (0.0, 0.75), (1.0, 0.0), (-2.0, 0.75)):
        td = env.reset()
        td["action"] = torch.tensor([action])
        assert float(env.step(td)["next", "reward"]) == pytest.approx(reward)
    env5 = _probe_envs(5)["CartPole"]  # OneHot(2): best index 1 at state +1, 0 at state -1
    td = env5.rollout(200, break_when_any_done=False)
    state_plus = td["observation"][:, 0] > 0
    best = torch.where(state_plus, 1, 0)
    assert torch.equal(td["next", "reward"].reshape(-1), (td["action"].argmax(-1) == best).float())


def _ladder(target, *argv):
    code, report = run_main("scripts/audit_run", "--probe", "--seconds", SLOW_OK, str(target), *argv)
    return code, rows(report)


RUNG_ROWS = ["rung-1:constant-reward", "rung-2:observation-reward", "rung-3:two-step", "rung-4:action-reward",
             "rung-5:action-observation"]


@pytest.mark.slow
@pytest.mark.parametrize("target, frames", [(PPO, "1536"), (DQN, "2000")])
def test_correct_projects_pass_every_rung(target, frames):
    code, got = _ladder(target, "--max-frames", frames)
    assert code == 0, got
    for name in RUNG_ROWS:
        assert got[name][0] == "pass", (name, got[name])
    assert "V(A) = " in got["rung-3:two-step"][1] and "gamma 0.99" in got["rung-3:two-step"][1]


def _one_rung(target, rung, frames, *script_args, seed=0):
    from types import SimpleNamespace

    from torchrl_skill.audit import ladder

    args = SimpleNamespace(target=str(target), script_args=list(script_args), seconds=float(SLOW_OK), max_frames=frames,
                           log=None, probe_seed=seed)
    got = ladder.run_rung(args, rung)
    try:
        return "pass", ladder.judge_rung(rung, got)
    except sr.CheckFailed as err:
        return "fail", str(err)
    except ladder.CouldNotProbe as err:
        return "could-not-probe", str(err)


# (target, fault, the rung that isolates it, what its row must say)
TWINS = [
    (PPO, "frozen-critic", 1, "V(s) = "),
    (PPO, "gamma0", 3, "V(A) / V(B) = "),
    (PPO, "flip", 4, "reward of pi(s) = "),
    (PPO, "one-side", 4, "reward of pi(s) = "),
    (DQN, "gamma0", 3, "V(A) / V(B) = "),
    (DQN, "no-terminal", 1, "V(s) = "),
]


@pytest.mark.slow
@pytest.mark.parametrize("target, fault, rung, says", TWINS, ids=[f"{t.stem}-{f}" for t, f, _, _ in TWINS])
def test_broken_twins_fail_the_rung_that_isolates_their_fault(target, fault, rung, says):
    frames = 1536 if target == PPO else 2000
    status, detail = _one_rung(target, rung, frames, "--fault", fault)
    assert status == "fail", detail
    assert says in detail and f"Rung {rung} isolates" in detail and "Nearest audit rows:" in detail, detail


@pytest.mark.slow
def test_a_twin_passes_the_rungs_below_its_fault_and_the_ladder_names_the_first_failure():
    code, got = _ladder(PPO, "--max-frames", "1536", "--", "--fault", "gamma0")
    assert code == 1, got
    assert [got[n][0] for n in RUNG_ROWS] == ["pass", "pass", "fail", "skip", "skip"], got
    assert "rung-3:two-step, which did not pass" in got["rung-4:action-reward"][1]


def test_a_script_that_never_trains_cannot_be_probed_and_exits_5(tmp_path):
    script = tmp_path / "collect_only.py"
    script.write_text(
        "from torchrl.collectors import Collector\nfrom torchrl.envs import GymEnv\n"
        "env = GymEnv('Pendulum-v1')\n"
        "for batch in Collector(env, None, frames_per_batch=64, total_frames=128):\n    pass\n")
    code, got = _ladder(script, "--max-frames", "64")
    assert code == 5, got
    assert got["rung-1:constant-reward"][0] == "skip" and "could not probe" in got["rung-1:constant-reward"][1], got
    assert "no loss module was called" in got["rung-1:constant-reward"][1]


@pytest.mark.slow
def test_reward_transforms_set_the_units_of_the_known_values():
    status, detail = _one_rung(PPO, 3, 1024, "--reward-scale", "0.5")  # RewardScaling(loc=0, scale=0.5) appended
    assert status == "pass" and "(want 0.5 ± 0.125)" in detail and "(want 0.495 ± 0.125)" in detail, detail


@pytest.mark.slow
def test_a_parallel_env_runs_as_a_serial_env_so_the_probe_reaches_its_sub_envs():
    status, detail = _one_rung(PPO, 1, 1024, "--parallel")
    assert status == "pass" and "SerialEnv over 3 probe leaf env(s) (Point)" in detail, detail


def test_probe_without_a_target_or_with_a_missing_one_exits_2_with_one_line(tmp_path):
    code, report, err = run_main("scripts/audit_run", "--probe", stderr=True)
    assert code == 2 and report == {} and "--probe needs the training script to probe" in err
    code, report, err = run_main("scripts/audit_run", "--probe", str(tmp_path / "missing.py"), stderr=True)
    assert code == 2 and report == {} and len(err.strip().splitlines()) == 1, err


def test_collectors_with_worker_processes_cannot_be_probed():
    from torchrl_skill.audit import ladder_child

    for name in ("MultiSyncCollector", "MultiAsyncCollector", "AsyncCollector"):
        assert "collects in worker processes" in ladder_child.unsupported_collector(name)
    assert ladder_child.unsupported_collector("Collector") is None


def test_the_documented_budgets_are_the_ones_the_ladder_uses():
    from torchrl_skill.audit import ladder_rungs

    text = (BUNDLE / "references" / "probe-ladder.md").read_text()
    for fam, table in ladder_rungs.FRAMES.items():
        assert f"| {fam} | {' | '.join(str(table[k]) for k in sorted(table))} |" in text, fam


# --- judge-level: the parent's verdict on what a rung's child reported -------------------------
def _section(**over):
    base = {"end": {"how": "budget", "reason": "max-frames"}, "meta": {"built": ["GymEnv at x.py:1"], "frames": 1000},
            "log_tail": "", "killed": False, "frames": 1000, "optimizer_steps": 50, "budget": 1000, "leaves": 1,
            "leaf_types": ["GymEnv"], "verdict": {"ok": True, "checks": [{"what": "V(s)", "got": 0.98, "want": 1.0, "tol": 0.25, "ok": True}],
                                                  "loss": "DQNLoss", "family": "dqn", "gamma": 0.99, "env": "GymEnv"}}
    base.update(over)
    return base


def test_judge_rung_names_short_runs_unsupported_specs_and_slow_learning():
    from torchrl_skill.audit import ladder

    assert ladder.judge_rung(1, _section()).startswith("V(s) = 0.98 (want 1 ± 0.25) after 1000 frames, 50 optimizer steps")
    with pytest.raises(ladder.CouldNotProbe, match="stopped after 500 of the rung's 1000 frames.*about 2x the frames"):
        ladder.judge_rung(1, _section(frames=500, end={"how": "finished"}))
    # stopped at 95% of the budget (--seconds): judged as at the budget, a wrong value fails
    far = {"ok": False, "checks": [{"what": "V(s)", "got": -3.0, "want": 1.0, "tol": 0.25, "ok": False}],
           "loss": "ClipPPOLoss", "family": "ppo", "gamma": 0.99, "env": "GymEnv"}
    with pytest.raises(sr.CheckFailed, match="V\\(s\\)"):
        ladder.judge_rung(1, _section(frames=950, verdict=far, end={"how": "budget"}))
    with pytest.raises(ladder.CouldNotProbe, match="stopped after 850 of"):  # the nearest excluded case
        ladder.judge_rung(1, _section(frames=850, verdict=far, end={"how": "budget"}))
    with pytest.raises(ladder.CouldNotProbe, match="cannot carry a probe: MultiOneHot"):
        ladder.judge_rung(1, _section(unsupported="MultiOneHot"))
    with pytest.raises(ladder.CouldNotProbe, match="no optimizer step"):
        ladder.judge_rung(1, _section(optimizer_steps=0))
    wrong = {"ok": False, "checks": [{"what": "V(s)", "got": 1.6, "want": 1.0, "tol": 0.25, "ok": False}],
             "loss": "ClipPPOLoss", "family": "ppo", "gamma": 0.99, "env": "GymEnv"}
    with pytest.raises(ladder.CouldNotProbe, match="not settled.*2.1 at 500 frames -> 1.6 at 1000, toward 1: still closing in"):
        ladder.judge_rung(1, _section(verdict=wrong, mid={"frames": 500, "got": [2.1]}))
    with pytest.raises(sr.CheckFailed, match="1.5 at 500 frames -> 1.6 at 1000, not toward 1: not closing in: wrong, not slow"):
        ladder.judge_rung(1, _section(verdict=wrong, mid={"frames": 500, "got": [1.5]}))


def test_a_script_that_ends_short_inside_main_is_named_as_short_not_as_missing_a_loss():
    """Its loss module and env are judged after main() returned (newcomer trial: a weakref
    to them was dead by then, and the row said 'no loss module was called')."""
    code, got = _ladder(PPO, "--", "--rollouts", "3")
    assert code == 5, got
    status, detail = got["rung-1:constant-reward"]
    assert status == "skip" and "the script stopped after" in detail and "no loss module" not in detail, detail
    assert "x the frames" in detail, detail


def test_a_rung_passes_early_only_on_steady_passing_judgments():
    from torchrl_skill.audit import ladder, ladder_child

    def verdict(v, ok=True):
        return {"ok": ok, "checks": [{"what": "V(s)", "got": v, "want": 1.0, "tol": 0.25, "ok": ok},
                                     {"what": "alpha x H(B)", "got": v * 3, "info": True, "ok": True}]}

    assert ladder_child._steady([verdict(0.98), verdict(1.02), verdict(1.05)])  # spread 0.07 <= 0.125; info ignored
    assert not ladder_child._steady([verdict(0.8), verdict(1.0), verdict(1.2)])  # crossing the band: spread 0.4
    detail = ladder.judge_rung(1, _section(frames=300, early=[100, 200, 300]))
    assert "passed early: at each of the judgments at 100, 200, 300 frames, steady (budget 1000)" in detail


def test_the_probe_reference_documents_every_rung_and_the_cli_offers_probe():
    text = (BUNDLE / "references" / "probe-ladder.md").read_text()
    from torchrl_skill.audit import ladder_rungs

    for rung, info in ladder_rungs.RUNGS.items():
        assert f"rung-{rung}:{info['name']}" in text
    from conftest import load_module

    assert "--probe" in load_module("scripts/audit_run").build_parser().format_help()
