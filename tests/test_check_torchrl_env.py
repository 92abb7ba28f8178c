"""Behaviour of scripts/check_torchrl_env.py beyond the generic script contract."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from torchrl_skill.stack import check_torchrl_env as env_check
import pytest
from torchrl_skill.report import skill_report as sr
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
# Layers the running interpreter's packages under a venv's own (the venv's torch wins):
# read by a .pth file of the torch-2.13 venv, so one venv serves "only torch" and "torch
# 2.13 under the verified stack".
LAYER_VAR = "TORCHRL_SKILL_TEST_LAYER_SITE"


def _by_name(report: dict) -> dict:
    return {c["name"]: c for c in report["checks"]}


@pytest.mark.slow
def test_verified_stack_passes_the_acceptance_rows(tmp_path):
    proc = run_python([str(SCRIPT), "--json", "--steps", "4"], cwd=tmp_path, warm=True)
    assert proc.returncode == 0, proc.stderr
    rows = _by_name(json.loads(proc.stdout))
    for name in ("versions", "tensordict-in-torchrl-range", "torchrl-requirements", "torch-matches-torchrl-build",
                 "compiled-extension", "core:pendulum-rollout", "core:check_env_specs", "core:replay-buffer",
                 "core:prioritized-replay", "core:step_mdp", "core:tensordict-module"):
        assert rows[name]["status"] == "pass", rows[name]
    assert "batch [4]" in rows["core:pendulum-rollout"]["detail"]
    assert "hoptorch" in rows["torchrl-requirements"]["detail"]
    backends = [r for n, r in rows.items() if n.startswith("backend:")]
    assert len(backends) == len(env_check.OPTIONAL_BACKENDS)
    assert {r["status"] for r in backends} <= {"pass", "missing"}
    for r in backends:
        if r["status"] == "missing":
            assert "pip install" in r["detail"]
    assert rows["backend:gymnasium"]["status"] == "pass"
    assert (rows["cli:rlrender"]["status"], rows["cli:rlrender"]["detail"]) == ("skip", "not asked for (pass --check-cli)")


def test_checks_are_declared_once():
    assert sr.validate_declared(env_check.CHECKS, {"args", "versions"}) == []


@pytest.mark.slow
def test_check_cli_finds_console_scripts(tmp_path):
    proc = run_python([str(SCRIPT), "--json", "--check-cli"], cwd=tmp_path, warm=True)
    rows = _by_name(json.loads(proc.stdout))
    assert rows["cli:rlrender"]["status"] == "pass" and rows["cli:torchrl-render"]["status"] == "pass"


def test_console_scripts_run_side_by_side_and_none_outlives_its_row(tmp_path, monkeypatch):
    """The cli rows start every ``--help`` at once (one torchrl import of waiting, not one per
    row); a missing script fails naming the install, and one still running when its row times
    out is killed, not left behind."""
    for name, seconds in (("a-cli", 2), ("b-cli", 2), ("slow-cli", 60)):
        (tmp_path / name).write_text(f"#!{sys.executable}\nimport time\ntime.sleep({seconds})\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(env_check, "CLIS", ("a-cli", "b-cli", "slow-cli", "no-such-cli"))
    monkeypatch.setattr(env_check, "CHECKS", [sr.Check(f"cli:{c}", lambda c=c: env_check.check_cli(c)) for c in env_check.CLIS])
    report = sr.Report(str(SCRIPT), json_mode=True, timeout=3)
    before = sr.child_processes()
    env_check.run_checks(SimpleNamespace(device="cpu"), report)
    rows = {c.name: c for c in report.checks}
    a, b = rows["cli:a-cli"], rows["cli:b-cli"]
    # b ran while a's row waited: its own row waits for less than half of a's
    assert a.status == b.status == "pass" and b.seconds < a.seconds / 2, (a, b)
    assert rows["cli:slow-cli"].status == "fail" and "still running after 3 s" in rows["cli:slow-cli"].detail
    missing = rows["cli:no-such-cli"]
    assert missing.status == "fail" and "no-such-cli not found" in missing.detail and "pip install torchrl" in missing.detail
    assert sr.leftover_processes(before, grace=5.0) == {} and env_check._CLI_RUNS == {}


@pytest.mark.slow
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


@pytest.mark.slow
def test_missing_required_dependency_fails_naming_it_and_the_pip_command(run_without, tmp_path):
    # hoptorch is a required dependency of torchrl 0.14.1 that `import torchrl` does not
    # need: a --no-deps install leaves it out silently.
    proc = run_without(["hoptorch"], [str(SCRIPT), "--json"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    rows = _by_name(json.loads(proc.stdout))
    req = rows["torchrl-requirements"]
    assert req["status"] == "fail"
    assert "hoptorch is not installed" in req["detail"] and "fix: pip install 'hoptorch>=0.1.4'" in req["detail"]
    others = [r for n, r in rows.items() if r["status"] == "fail" and n != "torchrl-requirements"]
    assert others == []


def test_requirement_outside_its_range_fails(monkeypatch):
    real = sr.installed_version
    monkeypatch.setattr(sr, "installed_version", lambda dist: "0.1.0" if dist == "pyvers" else real(dist))
    with pytest.raises(sr.CheckFailed, match=r"pyvers 0\.1\.0 is outside pyvers>=0\.2\.3; fix: pip install 'pyvers>=0\.2\.3'"):
        env_check.check_requirements()


@pytest.mark.slow
def test_missing_packaging_exits_2_in_one_line(run_without, tmp_path):
    # torchrl imports packaging at import time (torchrl/_utils.py): the stack probe says so.
    proc = run_without(["packaging"], [str(SCRIPT)], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr and "packaging" in lines[0], proc.stderr[-2000:]


def _local_cpu_wheel() -> str | None:
    found = sorted(glob.glob("/opt/wheels/torch-2.13.0*cpu*.whl"))
    return found[0] if found else None


def _site_dirs() -> list[str]:
    """The running interpreter's package folders (a venv's own when pytest runs in one)."""
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


@pytest.fixture(scope="module")
def torch_213_venv(tmp_path_factory) -> SimpleNamespace:
    """A venv holding only the torch 2.13.0 CPU wheel, under this run's temporary folder.

    ``python``: its interpreter. ``layer_env``: the environment that layers the running
    interpreter's packages (tensordict, torchrl 0.14.1, torch 2.14.1 shadowed) under it.
    Built once per module on the worker that runs these tests (they share an xdist
    group), removed at the end; skipped when the wheel is not on this machine.
    """
    wheel = _local_cpu_wheel()
    if wheel is None:
        pytest.skip("no torch 2.13.0 CPU wheel in /opt/wheels; test_broken_extension_fails_naming_symbol_and_fix "
                    "reproduces the same fault with a planted import error")
    venv = tmp_path_factory.mktemp("venv-torch-2.13.0-cpu")
    subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    own_site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    # --no-deps: the wheel alone (its own dependencies come with the layer); nothing downloaded.
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--no-index",
                    "--target", own_site, wheel], check=True, timeout=900)
    Path(own_site, "zz_test_layer.pth").write_text(
        # one line, run by site.py at start-up (a comprehension there cannot see `site`)
        f"import os, site; list(map(site.addsitedir, filter(None, os.environ.get({LAYER_VAR!r}, '').split(os.pathsep))))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHRL_CONSOLE_STREAM", "PYTHONPATH", LAYER_VAR)}
    yield SimpleNamespace(python=str(python), env=env, layer_env={**env, LAYER_VAR: os.pathsep.join(_site_dirs())})
    shutil.rmtree(venv, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.xdist_group("torch-2.13-venv")
def test_venv_with_only_torch_exits_2_in_one_line(torch_213_venv, tmp_path):
    # the helper must not import packaging (or anything but the standard
    # library) before it can say that tensordict/torchrl are missing.
    proc = subprocess.run([torch_213_venv.python, str(SCRIPT)], capture_output=True, text=True,
                          cwd=tmp_path, env=torch_213_venv.env, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "torchrl is not installed" in lines[0] and "pip install" in lines[0]
    assert proc.stdout == ""


@pytest.mark.slow
@pytest.mark.xdist_group("torch-2.13-venv")
def test_real_torch_213_mismatch_exits_1(torch_213_venv, tmp_path):
    proc = subprocess.run([torch_213_venv.python, str(SCRIPT), "--json"], capture_output=True, text=True,
                          cwd=tmp_path, env=torch_213_venv.layer_env, timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]
    rows = _by_name(json.loads(proc.stdout))
    assert rows["versions"]["detail"].count("torch 2.13.0") == 1
    assert rows["compiled-extension"]["status"] == "fail"
    assert "undefined symbol" in rows["compiled-extension"]["detail"]
    assert rows["torch-matches-torchrl-build"]["status"] == "fail"
    assert rows["core:prioritized-replay"]["status"] == "fail"
    assert "SumSegmentTreeFp32 is not available" in rows["core:prioritized-replay"]["detail"]


def test_tensordict_outside_declared_range_fails(monkeypatch):
    monkeypatch.setattr(sr, "installed_version", lambda dist: "0.14.0" if dist == "tensordict" else "0.14.1")
    with pytest.raises(sr.CheckFailed, match=r"outside torchrl's declared range.*pip install 'tensordict"):
        env_check.check_tensordict_range()


def test_torch_minor_mismatch_fails(monkeypatch):
    import torch

    monkeypatch.setattr(torch, "__version__", "2.13.0")
    loads = ", ".join(sorted({".".join(v.split(".")[:2]) for v in sr.stack_lines()["extension"]["torchrl"]["0.14.1"]["loads"]}))
    assert loads.startswith("2.14")  # measured: 2.14 (the verified torch), and 2.15 since 2026-12-06
    with pytest.raises(sr.CheckFailed, match=re.escape(f"compiled extension loads only with torch {loads} (measured; with 2.13: ")
                       + r"undefined symbol.*fix: pip install 'torch==2\.14\.\*'"):
        env_check.check_torch_build()


def test_a_torch_the_measurement_did_not_cover_is_a_skip_not_a_guess(monkeypatch):
    import torch

    monkeypatch.setattr(torch, "__version__", "2.16.0")
    with pytest.raises(sr.CheckSkipped, match=r"torch 2\.16\.0 was not measured with torchrl 0\.14\.1"):
        env_check.check_torch_build()


def _measured_pairs():
    """One loading and one failing torch per measured torchrl release, read from the table."""
    rows = sr.stack_lines().get("extension", {}).get("torchrl", {})
    pairs = []
    for torchrl, row in sorted(rows.items()):
        pairs += [(torchrl, row["loads"][-1], "loads"), *[(torchrl, t, "fails") for t in sorted(row["fails"])[:1]]]
    return pairs


@pytest.mark.parametrize("torchrl, torch_version, measured", _measured_pairs())
def test_each_release_names_the_torch_its_extension_loads_with(monkeypatch, torchrl, torch_version, measured):
    """check_torch_build follows the measured table (src/torchrl_skill/data/stack_lines.json, written by
    benchmarks/version_matrix.py): a pair measured to load passes, one measured to fail fails
    naming the torch minor to install: the verified one where it loads, else the newest that loads."""
    import torch

    row = sr.stack_lines()["extension"]["torchrl"][torchrl]
    newest = max(row["loads"], key=lambda v: tuple(int(x) for x in v.split("+")[0].split(".")))
    real = sr.installed_version
    monkeypatch.setattr(sr, "installed_version", lambda dist: torchrl if dist == "torchrl" else real(dist))
    monkeypatch.setattr(torch, "__version__", torch_version)
    if measured == "loads":
        assert f"torch {torch_version}: torchrl {torchrl}'s compiled extension loads with torch" in env_check.check_torch_build()
    else:
        minors = {".".join(v.split(".")[:2]) for v in row["loads"]}
        verified = ".".join(sr.VERIFIED["torch"].split(".")[:2])
        fix = f"fix: pip install 'torch=={verified if verified in minors else '.'.join(newest.split('.')[:2])}.*'"
        with pytest.raises(sr.CheckFailed, match=re.escape(fix)):
            env_check.check_torch_build()


def test_the_measured_table_covers_every_supported_release_and_agrees_with_this_install():
    import torch

    table = sr.stack_lines()["extension"]
    assert "ExtensionFileLoader" in table["how"] and table["date"]
    measured = table["torchrl"]
    assert {"0.11.1", "0.12.0", "0.13.3", "0.14.1"} <= set(measured)
    here = measured[sr.installed_version("torchrl")]
    assert torch.__version__.split("+")[0] in here["loads"]  # and this install does load it (test_verified_stack_...)
    assert all(row["loads"] and row["fails"] for row in measured.values())  # each row has both sides measured


def _pendulum(steps: int = 5) -> env_check.Pendulum:
    return env_check.check_rollout(SimpleNamespace(device="cpu", steps=steps)).value


def test_priority_update_that_does_nothing_is_caught(monkeypatch):
    from torchrl.data import TensorDictPrioritizedReplayBuffer

    pendulum = _pendulum()
    env_check.check_prioritized(pendulum)  # the real update passes
    monkeypatch.setattr(TensorDictPrioritizedReplayBuffer, "update_priority", lambda self, index, priority: None)
    with pytest.raises(sr.CheckFailed, match="after update_priority"):
        env_check.check_prioritized(pendulum)


def test_stepcounter_not_counting_is_caught():
    from torchrl.envs import PendulumEnv

    env = PendulumEnv()  # no StepCounter attached: the rollout has no step_count
    with pytest.raises(sr.CheckFailed, match="StepCounter wrote nothing"):
        env_check.verify_rollout(env.rollout(3), 3)


def test_install_hint_reads_extras_from_metadata():
    assert env_check.install_hint("vmas") == "pip install vmas (or torchrl[marl])"
    assert env_check.install_hint("av") == "pip install av"


def test_install_hint_never_offers_an_extra_that_downgrades():
    # torchrl 0.14.1's gym-continuous extra pins gymnasium<1.0.
    gym = env_check.install_hint("gymnasium")
    assert gym.startswith("pip install gymnasium (or torchrl[atari]);"), gym
    assert "torchrl[gym-continuous] pins gymnasium<1.0" in gym
    mujoco = env_check.install_hint("mujoco")
    assert mujoco.startswith("pip install mujoco;"), mujoco
    assert "torchrl[gym-continuous] would also replace gymnasium 1.4.0 (it pins gymnasium<1.0)" in mujoco
    # a marker that excludes this interpreter (lerobot needs Python 3.12; 3.11 here)
    if sys.version_info < (3, 12):
        assert "torchrl[vla] installs it only where python_version >= \"3.12\"" in env_check.install_hint("lerobot")


@pytest.mark.slow
def test_unusable_device_exits_2(tmp_path):
    proc = run_python([str(SCRIPT), "--device", "cuda:7"], cwd=tmp_path, warm=True)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--device cuda:7" in proc.stderr


def _fake_stack(monkeypatch, **versions):
    # the stack probe reads versions where require_stack lives (skill_report re-exports it)
    verified = {"torch": "2.14.1", "tensordict": "0.14.3", "torchrl": "0.14.1"}
    monkeypatch.setattr(f"{sr.require_stack.__module__}.installed_version", lambda dist: {**verified, **versions}.get(dist))


def test_torchrl_below_the_supported_lines_exits_2(monkeypatch, capsys):
    _fake_stack(monkeypatch, torchrl="0.10.1", tensordict="0.10.1")
    with pytest.raises(sr.CannotRun):
        sr.require_stack(import_torchrl=False)
    assert "torchrl 0.10.1 is outside the range this bundle supports (torchrl>=0.11)" in capsys.readouterr().err


def test_tensordict_below_the_supported_lines_exits_2(monkeypatch, capsys):
    _fake_stack(monkeypatch, tensordict="0.10.0")
    with pytest.raises(sr.CannotRun):
        sr.require_stack(import_torchrl=False)
    assert "tensordict 0.10.0 is outside the range this bundle supports" in capsys.readouterr().err


# No upper bound: 0.15 (the nightly stand-in, and the release) and a future 0.16 run, marked
# by their first row (tests/test_stack_lines_newer.py).
@pytest.mark.parametrize("torchrl, tensordict", [("0.11.1", "0.11.0"), ("0.12.0", "0.12.4"), ("0.13.3", "0.13.0"), ("0.14.0", "0.14.2"),
                                                 ("0.15.0", "0.15.3"), ("0.15.0.dev20261027", "0.15.3"), ("0.16.0", "0.16.1")])
def test_every_supported_line_with_its_tensordict_runs(monkeypatch, capsys, torchrl, tensordict):
    _fake_stack(monkeypatch, torchrl=torchrl, tensordict=tensordict)
    versions = sr.require_stack(import_torchrl=False)
    assert versions["torchrl"] == torchrl and capsys.readouterr().err == ""


@pytest.mark.parametrize("torchrl, tensordict", [("0.13.3", "0.15.3"), ("0.13.3", "0.12.4"), ("0.14.1", "0.13.0")])
def test_tensordict_of_another_line_exits_2_naming_the_line(monkeypatch, capsys, torchrl, tensordict):
    # pip keeps the pair (torchrl pins tensordict's line); `pip install --no-deps` does not.
    # One line ahead runs instead (tests/test_stack_lines_newer.py); behind or two ahead exits 2.
    _fake_stack(monkeypatch, torchrl=torchrl, tensordict=tensordict)
    with pytest.raises(sr.CannotRun):
        sr.require_stack(import_torchrl=False)
    err = capsys.readouterr().err
    line = torchrl.rsplit(".", 1)[0]
    assert f"tensordict {tensordict} is not the line of torchrl {torchrl}" in err, err
    # the installed torchrl's own declared range where it is that torchrl (0.14.1: <0.15.0,>=0.14.3), else its line
    fix = "tensordict<0.15.0,>=0.14.3" if torchrl == "0.14.1" else f"tensordict>={line},<0.{int(line[2:]) + 1}"
    assert f"pip install '{fix}'" in err and len(err.strip().splitlines()) == 1
