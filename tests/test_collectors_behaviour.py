"""Behaviour tests of the collectors-and-replay scripts: real torchrl 0.14.1 runs, real reports.

The slow ones (spawned collector workers, a local Ray) run in this process so that psutil
can list the processes they start and prove none survives.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

BUNDLE = Path(__file__).resolve().parent.parent
SCRIPTS = BUNDLE / "sub-skills" / "collectors-and-replay" / "scripts"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "collectors"
sys.path.insert(0, str(SCRIPTS))
sys.path.insert(0, str(BUNDLE / "scripts"))

import skill_report as sr  # noqa: E402

psutil = pytest.importorskip("psutil")


def _module(name):
    return importlib.import_module(name)


def _run(module, argv):
    """Run a script's checks in this process; returns {name: (status, detail)}."""
    args = module.build_parser().parse_args(argv)
    report = sr.Report(str(SCRIPTS / f"{module.__name__}.py"), json_mode=True)
    module.run_checks(args, report)
    return {c.name: (c.status, c.detail) for c in report.checks}


def _live_children() -> set:
    """Live descendants as {(pid, command line)}, minus Python's multiprocessing
    resource tracker: the stdlib starts it once per interpreter at the first spawn and it
    exits with the interpreter, so it is not a process the scripts leave behind."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(p.cmdline())
        except psutil.NoSuchProcess:
            continue
        if "multiprocessing.resource_tracker" in cmd:
            continue
        out.add((p.pid, cmd[:200]))
    return out


def _wait_no_new_children(before: set, grace: float = 15.0) -> set:
    deadline = time.monotonic() + grace
    while True:
        new = _live_children() - before
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.2)


# --------------------------------------------------------------------------- real reports


def test_removed_collector_names_raise_importerror_and_map_to_new():
    sc = _module("smoke_collector")
    import torchrl.collectors as collectors

    for old, new in sc.RENAMED.items():
        code = f"from torchrl.collectors import {old}"
        with pytest.raises(ImportError, match=f"cannot import name '{old}' from 'torchrl.collectors'"):
            exec(code)
        assert hasattr(collectors, new), new


def test_diagnose_names_fix_for_removed_name_log():
    sc = _module("smoke_collector")
    faults = sc.diagnose((FIXTURES / "removed_name_import.log").read_text())
    assert len(faults) == 1
    assert "from torchrl.collectors import Collector" in faults[0]


def test_diagnose_names_ndim2_for_worker_crash_log():
    """The real worker log of a MultiSyncCollector over SerialEnv(2) with a 1-D storage."""
    sc = _module("smoke_collector")
    text = (FIXTURES / "ndim1_worker_crash.log").read_text()
    assert "differs from the source batch size torch.Size([2, 10])" in text
    assert "At least one process failed" in text
    faults = sc.diagnose(text)
    assert any("ndim=2" in f and "LazyTensorStorage(max_size, ndim=2)" in f for f in faults), faults


def test_diagnose_cli_fails_on_fault_and_passes_clean_log():
    sc = _module("smoke_collector")
    bad = _run(sc, ["--diagnose", str(FIXTURES / "ndim1_worker_crash.log")])
    assert bad["diagnose:log"][0] == "fail" and "ndim=2" in bad["diagnose:log"][1]
    good = _run(sc, ["--diagnose", str(FIXTURES / "unrelated_error.log")])
    assert good["diagnose:log"][0] == "pass"


def test_slice_sampler_short_batch_and_pad_output_fix():
    rb = _module("smoke_replay_buffer")
    fx = json.loads((FIXTURES / "slice_short_trajectories.json").read_text())
    L, sl, bs = fx["lengths"], fx["slice_len"], fx["batch_size"]
    n_strict, _, contiguous = rb.sample_slices(L, sl, bs)
    assert n_strict == bs and contiguous
    n_loose, _, _ = rb.sample_slices(L, sl, bs, strict_length=False)
    assert n_loose < bs  # the report: fewer items than asked
    n_pad, n_real, _ = rb.sample_slices(L, sl, bs, strict_length=False, pad_output=True)
    assert n_pad == bs and n_real < bs  # the fix: full batch, mask marks real steps
    with pytest.raises(RuntimeError, match="Did not find a single trajectory with sufficient length"):
        rb.sample_slices(fx["all_short"], sl, 20)


def test_slice_check_fails_when_no_trajectory_is_short(monkeypatch):
    rb = _module("smoke_replay_buffer")
    monkeypatch.setattr(rb, "TRAJ_LENGTHS", (30, 30, 40))
    with pytest.raises(sr.CheckFailed, match="strict_length=False returned the full"):
        rb.check_slice(20)


def test_batched_env_storage_check_reports_silent_1d_fault():
    sc = _module("smoke_collector")
    detail = sc.check_batched_env_storage(20)
    assert "ndim=2) holds 20 frames" in detail and "ndim=1 holds 2 rows" in detail


def test_weight_update_check_fails_when_weights_do_not_change(monkeypatch):
    sc = _module("smoke_collector")
    monkeypatch.setattr(sc, "set_bias", lambda policy, value: None)
    with pytest.raises(sr.CheckFailed, match="after update_policy_weights_"):
        sc.check_weight_update_single(10)


def test_replay_buffer_all_checks_pass_and_report_samples():
    rows = _run(_module("smoke_replay_buffer"), [])
    assert {s for s, _ in rows.values()} == {"pass"}, rows
    assert "74 items" in rows["sampler:slice"][1] or "strict_length=False ->" in rows["sampler:slice"][1]
    assert "priorities kept" in rows["checkpoint:dumps-loads"][1]


def test_ray_flags_off_are_skips():
    rows = _run(_module("check_ray_scaling"), [])
    assert rows["ray:installed"][0] == "pass"
    assert all(rows[n] == ("skip", "not asked for (pass --ray)") for n in rows if n != "ray:installed")


def test_ray_missing_reports_missing(monkeypatch):
    cr = _module("check_ray_scaling")
    real = sr.importlib.util.find_spec
    monkeypatch.setattr(sr.importlib.util, "find_spec", lambda n, *a: None if n == "ray" else real(n, *a))
    rows = _run(cr, ["--ray"])
    assert {s for s, _ in rows.values()} == {"missing"}
    assert "pip install ray" in rows["ray:replay-buffer"][1]


def test_leftover_check_fails_on_a_surviving_child():
    cr = _module("check_ray_scaling")
    session = cr.RaySession()
    session.was_started = True
    session.seen = {1: "raylet"}
    session.before = cr._children()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(sr.CheckFailed, match="processes left after ray.shutdown"):
            cr.check_no_leftover(session, grace=0.5)
    finally:
        child.kill()
        child.wait()
    assert cr.is_ray_process("raylet /usr/bin/raylet") and not cr.is_ray_process("python -c pass")


# --------------------------------------------------------------------------- real processes


def test_multiprocess_collector_weight_sync_and_no_child_survives():
    """--workers 2: shared ndim=2 buffer, pushed bias in the NEXT batch, workers gone."""
    sc = _module("smoke_collector")
    before = _live_children()
    rows = _run(sc, ["--workers", "2", "--frames", "20"])
    assert rows["multi:shared-buffer-ndim2"][0] == "pass", rows
    assert rows["multi:weight-sync-next-batch"][0] == "pass", rows
    assert "40/40 frames at 0.5" in rows["multi:weight-sync-next-batch"][1]
    assert rows["multi:shutdown"][0] == "pass", rows
    assert _wait_no_new_children(before) == set()


def test_ray_for_real_and_no_child_survives():
    pytest.importorskip("ray")
    cr = _module("check_ray_scaling")
    before = _live_children()
    rows = _run(cr, ["--ray", "--grace", "15"])
    for name in ("ray:init-local-1cpu", "ray:replay-buffer", "ray:shutdown-no-leftover"):
        assert rows[name][0] == "pass", rows
    assert "raylet" in rows["ray:shutdown-no-leftover"][1]
    import ray

    assert not ray.is_initialized()
    assert _wait_no_new_children(before) == set()
