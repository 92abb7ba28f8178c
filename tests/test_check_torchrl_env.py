"""Behaviour of scripts/check_torchrl_env.py beyond the generic script contract."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import check_torchrl_env as env_check
import pytest
import skill_report as sr
from conftest import BUNDLE, run_python

SCRIPT = BUNDLE / "scripts" / "check_torchrl_env.py"
UNDEFINED = "undefined symbol: _ZN5torch8autograd13_wrap_outputsERKSt6vector"
# Reproduces what torch 2.13.0 + torchrl 0.14.1 do: torchrl._torchrl raises at import.
BREAK_EXTENSION = f"""
import importlib.abc, importlib.machinery, runpy, sys
class _Broken(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    # found like the real .so, but loading fails as the dynamic linker does
    def find_spec(self, name, path=None, target=None):
        if name == "torchrl._torchrl":
            return importlib.machinery.ModuleSpec(name, self)
    def create_module(self, spec):
        raise ImportError("{UNDEFINED}")
    def exec_module(self, module):
        pass
sys.meta_path.insert(0, _Broken())
p = sys.argv[1]; sys.argv = sys.argv[1:]
runpy.run_path(p, run_name="__main__")
"""


def _by_name(report: dict) -> dict:
    return {c["name"]: c for c in report["checks"]}


def test_verified_stack_passes_the_acceptance_rows(tmp_path):
    proc = run_python([str(SCRIPT), "--json", "--steps", "4"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = _by_name(json.loads(proc.stdout))
    for name in ("versions", "tensordict-in-torchrl-range", "torch-matches-torchrl-build", "compiled-extension",
                 "core:pendulum-rollout", "core:check_env_specs", "core:replay-buffer", "core:prioritized-replay",
                 "core:step_mdp", "core:tensordict-module"):
        assert rows[name]["status"] == "pass", rows[name]
    assert "batch [4]" in rows["core:pendulum-rollout"]["detail"]
    backends = [r for n, r in rows.items() if n.startswith("backend:")]
    assert len(backends) == len(env_check.OPTIONAL_BACKENDS)
    assert {r["status"] for r in backends} <= {"pass", "missing"}
    for r in backends:
        if r["status"] == "missing":
            assert "pip install" in r["detail"]
    assert rows["backend:gymnasium"]["status"] == "pass"
    assert rows["cli:rlrender"]["status"] == "skip"


def test_check_cli_finds_console_scripts(tmp_path):
    proc = run_python([str(SCRIPT), "--json", "--check-cli"], cwd=tmp_path)
    rows = _by_name(json.loads(proc.stdout))
    assert rows["cli:rlrender"]["status"] == "pass" and rows["cli:torchrl-render"]["status"] == "pass"


def test_broken_extension_fails_naming_symbol_and_fix(tmp_path):
    proc = run_python(["-c", BREAK_EXTENSION, str(SCRIPT), "--json"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    rows = _by_name(json.loads(proc.stdout))
    ext = rows["compiled-extension"]
    assert ext["status"] == "fail"
    assert "undefined symbol _ZN5torch8autograd13_wrap_outputs" in ext["detail"]
    assert "pip install 'torch==2.14.*'" in ext["detail"]
    assert rows["core:prioritized-replay"]["status"] == "fail"
    assert "SumSegmentTreeFp32 is not available" in rows["core:prioritized-replay"]["detail"]


def _local_cpu_wheel() -> str | None:
    found = sorted(glob.glob("/opt/wheels/torch-2.13.0*cpu*.whl"))
    return found[0] if found else None


@pytest.fixture(scope="session")
def torch_213_python() -> str:
    """A venv layering the torch 2.13.0 CPU wheel over the verified stack (cached)."""
    wheel = _local_cpu_wheel()
    if wheel is None:
        pytest.skip("no local torch 2.13.0 CPU wheel; test_broken_extension_fails_naming_symbol_and_fix covers it")
    venv = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "torchrl-skill" / "venv-torch-2.13.0-cpu"
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import torch; assert torch.__version__.startswith('2.13.0')"]
    if not python.exists() or subprocess.run(probe, capture_output=True).returncode != 0:
        subprocess.run([sys.executable, "-m", "venv", "--clear", "--system-site-packages", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", wheel], check=True, timeout=900)
    return str(python)


@pytest.mark.slow
def test_real_torch_213_mismatch_exits_1(torch_213_python, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TORCHRL_CONSOLE_STREAM"}
    proc = subprocess.run([torch_213_python, str(SCRIPT), "--json"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    rows = _by_name(json.loads(proc.stdout))
    assert rows["versions"]["detail"].count("torch 2.13.0") == 1
    assert rows["compiled-extension"]["status"] == "fail"
    assert "undefined symbol" in rows["compiled-extension"]["detail"]
    assert rows["torch-matches-torchrl-build"]["status"] == "fail"
    assert rows["core:prioritized-replay"]["status"] == "fail"


def test_tensordict_outside_declared_range_fails(monkeypatch):
    monkeypatch.setattr(sr, "installed_version", lambda dist: "0.14.0" if dist == "tensordict" else "0.14.1")
    with pytest.raises(sr.CheckFailed, match=r"outside torchrl's declared range.*pip install 'tensordict"):
        env_check.check_tensordict_range()


def test_torch_minor_mismatch_fails(monkeypatch):
    import torch

    monkeypatch.setattr(torch, "__version__", "2.15.0")
    with pytest.raises(sr.CheckFailed, match=r"built for torch 2\.14\.x; fix: pip install 'torch==2\.14\.\*'"):
        env_check.check_torch_build()


def test_priority_update_that_does_nothing_is_caught(monkeypatch):
    from torchrl.data import TensorDictPrioritizedReplayBuffer

    monkeypatch.setattr(TensorDictPrioritizedReplayBuffer, "update_priority", lambda self, index, priority: None)
    env = env_check.make_env("cpu")
    td, _ = env_check.check_rollout(env, 5)
    with pytest.raises(sr.CheckFailed, match="after update_priority"):
        env_check.check_prioritized(td)


def test_stepcounter_not_counting_is_caught():
    from torchrl.envs import PendulumEnv

    env = PendulumEnv()  # no StepCounter attached: the rollout has no step_count
    with pytest.raises(KeyError):
        env_check.check_rollout(env, 3)


def test_install_hint_reads_extras_from_metadata():
    assert env_check.install_hint("vmas") == "pip install vmas (or torchrl[marl])"
    assert env_check.install_hint("av") == "pip install av"


def test_unusable_device_exits_2(tmp_path):
    proc = run_python([str(SCRIPT), "--device", "cuda:7"], cwd=tmp_path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--device cuda:7" in proc.stderr


def test_too_old_torchrl_exits_2(monkeypatch):
    monkeypatch.setattr(sr, "installed_version", lambda dist: {"torchrl": "0.13.1"}.get(dist, "2.14.1" if dist == "torch" else "0.14.3"))
    with pytest.raises(sr.CannotRun):
        sr.require_stack(import_torchrl=False)
