"""check_ray_scaling.py on a real local Ray (ray 2.60.0): flags, missing ray, and a run that
must leave no process, no session folder and no changed environment behind.

Runs in this process so psutil lists the Ray processes the run started.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from torchrl_skill.report import skill_report as sr
from conftest import load_module, run_in_process, run_main

psutil = pytest.importorskip("psutil")

SCRIPT = "collectors-and-replay/check_ray_scaling"
# torch's compile cache: torch creates it in the temp folder on import and keeps it on purpose.
TORCH_CACHE_PREFIX = "torchinductor_"


@pytest.fixture(scope="module", autouse=True)
def torchrl_imported():
    """Import torchrl before any test captures stderr: its logger keeps the stream it found."""
    import torchrl  # noqa: F401


def check_ray_scaling():
    return load_module(SCRIPT)


def test_ray_flags_off_are_skips():
    rows = run_in_process(SCRIPT)
    assert rows["ray:installed"][0] == "pass"
    assert rows["ray:collector"] == ("skip", "not asked for (pass --ray-collector)")
    assert all(rows[n] == ("skip", "not asked for (pass --ray)") for n in rows if n not in ("ray:installed", "ray:collector"))


def test_ray_missing_reports_missing(monkeypatch):
    real = sr.importlib.util.find_spec
    monkeypatch.setattr(sr.importlib.util, "find_spec", lambda n, *a: None if n == "ray" else real(n, *a))
    rows = run_in_process(SCRIPT, "--ray")
    assert rows["ray:installed"][0] == rows["ray:init-local-1cpu"][0] == "missing"
    assert "pip install ray" in rows["ray:init-local-1cpu"][1]
    assert rows["ray:replay-buffer"] == ("skip", "not run: needs ray_run from ray:init-local-1cpu, which did not pass")


@pytest.mark.parametrize("argv, says", [(["--ray-collector"], "needs --ray"), (["--grace", "-1"], "--grace")])
def test_bad_input_exits_2_with_one_line(argv, says, capsys):
    code, report = run_main(SCRIPT, *argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, report) == (2, {})
    assert len(err) == 1 and says in err[0] and "fix:" in err[0], err


def finished_run(cr):
    """A RayRun as the checks leave it after a session that saw one Ray process."""
    run = cr.RayRun()
    run.seen = {1: "raylet"}
    run.before = sr.child_processes()
    return run


def test_leftover_check_fails_on_a_surviving_child():
    cr = check_ray_scaling()
    run = finished_run(cr)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(sr.CheckFailed, match="processes left after ray.shutdown"):
            cr.check_no_leftover(run, cr.build_parser().parse_args(["--grace", "0.5"]))
    finally:
        child.kill()
        child.wait()
    assert cr.is_ray_process("raylet /usr/bin/raylet") and not cr.is_ray_process("python -c pass")


def test_leftover_check_fails_on_a_left_session_folder(tmp_path, monkeypatch):
    """A session folder that outlives the run (ray.shutdown() does not remove it) fails the check."""
    cr = check_ray_scaling()
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    run = finished_run(cr)
    (tmp_path / "ray" / "session_2026-01-01_00-00-00_000000_1").mkdir(parents=True)
    with pytest.raises(sr.CheckFailed, match="folders left after ray.shutdown.*session_2026"):
        cr.check_no_leftover(run, cr.build_parser().parse_args(["--grace", "0.5"]))


@pytest.mark.slow
def test_ray_for_real_leaves_nothing_behind(monkeypatch):
    """Issue: --ray left a session_* folder in Ray's default temp folder and reached for
    outside addresses. Now: a loopback node, no process, no folder (ours or Ray's default)
    and no environment variable left."""
    pytest.importorskip("ray")
    tmp = Path(tempfile.mkdtemp(prefix="trs", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    try:
        monkeypatch.setenv("TMPDIR", str(tmp))  # Ray's default folder and ours both go here
        monkeypatch.setattr(tempfile, "tempdir", None)
        env_before = dict(os.environ)
        before = sr.child_processes()
        rows = run_in_process(SCRIPT, "--ray", "--grace", "15")
        for name in ("ray:init-local-1cpu", "ray:replay-buffer", "ray:shutdown-no-leftover"):
            assert rows[name][0] == "pass", rows
        if "imported before" not in rows["ray:init-local-1cpu"][1]:
            assert "node 127.0.0.1" in rows["ray:init-local-1cpu"][1], rows
        assert "raylet" in rows["ray:shutdown-no-leftover"][1]
        import ray

        assert not ray.is_initialized()
        assert sr.leftover_processes(before, grace=15.0) == {}
        assert sorted(p.name for p in tmp.iterdir() if not p.name.startswith(TORCH_CACHE_PREFIX)) == []
        assert dict(os.environ) == env_before
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.slow
def test_ray_shutdown_keeps_its_session_folder(monkeypatch):
    """Why the check starts Ray in a temporary folder: a plain local session's folder stays
    in Ray's default temp folder after ray.shutdown() (its processes do not)."""
    ray = pytest.importorskip("ray")

    def sessions(folder):
        return sorted(p.name for p in folder.glob("session_*"))

    tmp = Path(tempfile.mkdtemp(prefix="trs", dir="/tmp"))
    try:
        monkeypatch.setenv("TMPDIR", str(tmp))
        monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        environ = dict(os.environ)
        before = sr.child_processes()
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            assert sessions(tmp / "ray"), "no session folder while Ray runs"
        finally:
            ray.shutdown()
            for key in set(os.environ) - set(environ):  # ray.init sets PYTHONBREAKPOINT, RAY_AUTH_MODE
                del os.environ[key]
        assert sessions(tmp / "ray"), "the session folder went away with ray.shutdown()"
        assert sr.leftover_processes(before, grace=15.0) == {}
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
