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


# --------------------------------------------------------------------------- real reports


def test_removed_collector_names_raise_importerror_and_map_to_new():
    """Every collector row of api_changes.json: the old import fails, the new one resolves."""
    sc = _module("smoke_collector")
    rows = sc.renamed_collectors()
    assert "torchrl.collectors.SyncDataCollector" in rows and len(rows) >= 5
    for old, row in rows.items():
        module, name = old.rsplit(".", 1)
        with pytest.raises(ImportError, match=f"cannot import name '{name}' from '{module}'"):
            exec(f"from {module} import {name}")
        new_module, new_name = row["new"].rsplit(".", 1)
        assert hasattr(importlib.import_module(new_module), new_name), row["new"]
        faults = sc.diagnose(f"ImportError: cannot import name '{name}' from '{module}' (/x/__init__.py)")
        assert faults == [f"{old} was removed in torchrl {row['removed_in']}; fix: from {new_module} import {new_name}"]


def test_diagnose_reads_renamed_names_from_api_changes_json(monkeypatch, tmp_path):
    """The table is api_changes.json, not a copy: a row added there is diagnosed, a missing file exits 2."""
    sc = _module("smoke_collector")
    table = tmp_path / "api_changes.json"
    row = {"old": "torchrl.collectors.OldThing", "new": "torchrl.collectors.NewThing", "changed_in": "0.12.0", "removed_in": "0.13.0"}
    table.write_text(json.dumps({"names": [row]}))
    monkeypatch.setattr(sc, "API_CHANGES", table)
    assert sc.diagnose("cannot import name 'OldThing' from 'torchrl.collectors'") == [
        "torchrl.collectors.OldThing was removed in torchrl 0.13.0; fix: from torchrl.collectors import NewThing"
    ]
    assert sc.diagnose("cannot import name 'SyncDataCollector' from 'torchrl.collectors'") == []
    monkeypatch.setattr(sc, "API_CHANGES", tmp_path / "absent.json")
    with pytest.raises(sr.CannotRun):
        sc.renamed_collectors()


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


def test_weight_update_check_passes_with_push_and_control():
    sc = _module("smoke_collector")
    detail = sc.check_weight_update_single(10)
    assert "without update actions stay [0.0]" in detail and "next batch actions [0.5]" in detail


def test_weight_update_check_fails_when_weights_do_not_change(monkeypatch):
    sc = _module("smoke_collector")
    monkeypatch.setattr(sc, "set_bias", lambda policy, value: None)
    with pytest.raises(sr.CheckFailed, match="after update_policy_weights_"):
        sc.check_weight_update_single(10)


def test_weight_update_check_fails_when_update_is_skipped(monkeypatch):
    """The collector runs its own copy: without update_policy_weights_ batch 1 keeps the old bias."""
    sc = _module("smoke_collector")
    monkeypatch.setattr(sc, "push_weights", lambda collector, trainer: None)
    with pytest.raises(sr.CheckFailed, match=r"batch 1 actions \[0\.0\] after update_policy_weights_"):
        sc.check_weight_update_single(10)


def test_weight_update_check_fails_when_collector_shares_trainer_policy(monkeypatch):
    """The old, vacuous setup (collector runs the trainer's object) is caught by the control."""
    sc = _module("smoke_collector")
    monkeypatch.setattr(sc, "collector_copy", lambda policy: policy)
    with pytest.raises(sr.CheckFailed, match="shares the trainer's weights"):
        sc.check_weight_update_single(10)


def test_truncation_check_counts_partial_last_trajectory():
    """--frames 42: max_frames_per_traj=10 gives 4 full trajectories plus a 2-step one (5 ids)."""
    sc = _module("smoke_collector")
    args = sc.build_parser().parse_args(["--frames", "42"])
    assert args.frames == 42
    detail = sc.check_truncation(42)
    assert "max_frames_per_traj=10" in detail and "truncated at [9, 19, 29, 39]" in detail and "5 traj_ids" in detail


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
    session.before = sr.child_processes()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(sr.CheckFailed, match="processes left after ray.shutdown"):
            cr.check_no_leftover(session, grace=0.5)
    finally:
        child.kill()
        child.wait()
    assert cr.is_ray_process("raylet /usr/bin/raylet") and not cr.is_ray_process("python -c pass")


def test_leftover_check_skips_when_ray_never_started():
    cr = _module("check_ray_scaling")
    with pytest.raises(sr.CheckSkipped, match="Ray was not started"):
        cr.check_no_leftover(cr.RaySession(), grace=0.1)


# --------------------------------------------------------------------------- real processes


def test_multiprocess_collector_weight_sync_and_no_child_survives():
    """--workers 2: shared ndim=2 buffer, pushed bias in the NEXT batch, workers gone."""
    sc = _module("smoke_collector")
    before = sr.child_processes()
    rows = _run(sc, ["--workers", "2", "--frames", "20"])
    assert rows["multi:shared-buffer-ndim2"][0] == "pass", rows
    assert rows["multi:weight-sync-next-batch"][0] == "pass", rows
    assert "40/40 frames at 0.5" in rows["multi:weight-sync-next-batch"][1]
    assert rows["multi:shutdown"][0] == "pass", rows
    assert sr.leftover_processes(before, grace=15.0) == {}


def test_ray_for_real_and_no_child_survives():
    pytest.importorskip("ray")
    cr = _module("check_ray_scaling")
    before = sr.child_processes()
    rows = _run(cr, ["--ray", "--grace", "15"])
    for name in ("ray:init-local-1cpu", "ray:replay-buffer", "ray:shutdown-no-leftover"):
        assert rows[name][0] == "pass", rows
    assert "raylet" in rows["ray:shutdown-no-leftover"][1]
    import ray

    assert not ray.is_initialized()
    assert sr.leftover_processes(before, grace=15.0) == {}
