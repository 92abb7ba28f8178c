"""The run-time auditor instruments worker processes (src/torchrl_skill/audit/workers.py, worker_reports.py): a transform
dropped inside a ParallelEnv worker's env is seen, identical first resets of ParallelEnv
workers and of multi-process collector workers are seen, the env-boundary monitors see the
steps the workers make, for spawned (torchrl's default) and forked workers alike; the run
row counts the instrumented workers instead of saying the rows saw only the main process;
nothing is left behind (no temporary folder, no process).

Fixture runs are real audits of tests/fixtures/audit/workers/train.py, bounded by
--max-frames; the merge of worker reports is also checked on summaries alone.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest
from conftest import BUNDLE, FIXTURES, load_module, rows, run_main

TRAIN = FIXTURES / "audit" / "workers" / "train.py"


@functools.lru_cache(maxsize=None)
def audit(variant: str) -> tuple[int, dict]:
    code, report = run_main("scripts/audit_run", "--seconds", "300", "--max-frames", "400", str(TRAIN), "--", "--variant", variant)
    return code, rows(report)


def _instrumented(run_row: str, method: str) -> None:
    assert f"2 of 2 worker processes instrumented ({method}), their events merged into the rows" in run_row, run_row
    assert "not instrumented" not in run_row, run_row


@pytest.mark.slow  # real audits with spawned or forked workers
@pytest.mark.parametrize("variant, method", [("parallel", "spawn"), ("parallel-fork", "fork")])
def test_a_transform_dropped_inside_parallel_env_workers_is_seen(variant, method):
    code, got = audit(variant)
    _instrumented(got["run"][1], method)
    status, detail = got["transforms"]
    assert status == "fail" and "built at train.py" in detail and "in make_env_dropping was never stepped" in detail, detail
    assert "env.append_transform(...) returns a new TransformedEnv" in detail, detail
    # the env-boundary monitors count the steps the workers made: 400 frames, 200 per worker
    status, detail = got["env-actions"]
    assert status == "pass" and "Reach with action spec BoundedContinuous(shape=(1,)): 400 received actions in 2 processes" in detail, detail
    assert "in 2 processes" in got["action-bounds"][1]
    # the ParallelEnv's identical first resets are seen (on its batched reset)
    assert "ParallelEnv built at train.py:" in got["identical-workers"][1] and ": 1 distinct first resets for 2 workers" in got["identical-workers"][1]


@pytest.mark.slow  # real audits with spawned or forked workers
def test_a_transform_dropped_inside_workers_that_step_through_private_step_is_seen():
    # ParallelEnv(use_buffers=False): a worker calls env._step on the script's own env class,
    # which the audited process cannot wrap (it is pickled by value); the worker wraps it
    code, got = audit("parallel-direct")
    _instrumented(got["run"][1], "spawn")
    status, detail = got["transforms"]
    assert status == "fail" and "in make_env_dropping was never stepped, while its base Reach was stepped 200 times" in detail, detail


@pytest.mark.slow  # real audits with spawned or forked workers
def test_parallel_env_workers_with_the_transform_kept_and_seeded_pass():
    code, got = audit("parallel-fixed")
    _instrumented(got["run"][1], "spawn")
    status, detail = got["transforms"]
    assert status == "pass" and "2 x StepCounter (200 steps" in detail and "not counted" not in detail, detail
    status, detail = got["identical-workers"]
    assert status == "pass" and "ParallelEnv built at train.py:" in detail and ": 2 distinct first resets for 2 workers" in detail, detail


@pytest.mark.slow  # real audits with spawned or forked workers
def test_multi_sync_collector_workers_starting_alike_are_seen_and_nothing_is_left_behind(tmp_path):
    # a real auditor process, its temporary folder in tmp_path: checked empty afterwards
    env = {**os.environ, "TMPDIR": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(BUNDLE / "scripts" / "audit_run.py"), "--json", "--seconds", "300", "--max-frames", "400",
                           str(TRAIN), "--", "--variant", "multisync"], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=900)
    got = rows(json.loads(proc.stdout))
    _instrumented(got["run"][1], "spawn")
    status, detail = got["identical-workers"]
    # one env per collector worker, compared across the workers' reports; the FAIL names the factory's line
    assert status == "fail" and "TransformedEnv(Reach) (one per worker process) built at train.py:" in detail, detail
    assert "in make_env: 1 distinct first resets for 2 workers" in detail and "collector.set_seed(seed)" in detail, detail
    assert got["env-actions"][0] == "pass" and "400 received actions in 2 processes" in got["env-actions"][1]
    assert "2 x StepCounter (200 steps" in got["transforms"][1] or "StepCounter (" in got["transforms"][1]
    # no torchrl-audit-* folder, no worker report (torch itself may leave its torchinductor_* cache there)
    assert [p for p in tmp_path.rglob("*") if p.name.startswith(("torchrl-audit-", "worker-"))] == []
    import psutil

    assert [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])] == []


def test_merged_reports_name_uninstrumented_workers_and_keep_the_note():
    audit_run = load_module("scripts/audit_run")
    from torchrl_skill.audit import worker_reports as workers

    def observed(processes, reports):
        return {"meta": {"workers": ["ParallelEnv(2 workers)"], "probe_errors": {}, "processes": processes},
                "sections": {"transforms": {"envs": [{"base_id": 3, "steps": 0}]}}, "end": {}, "worker_reports": reports}

    report = {"meta": {"pid": 11, "instrumented": True, "processes": [], "probe_errors": {"env_step:_audit.e_env_actions": "boom"}},
              "sections": {"transforms": {"envs": [{"base_id": 3, "steps": 50}]}, "env-seeding": {"calls": [], "set_seed_calls": 1}}}
    obs = observed([{"pid": 11, "method": "spawn", "target": "_run_worker_pipe_shared_mem"},
                    {"pid": 12, "method": "forkserver", "target": "_run_worker_pipe_shared_mem"}], [report])
    workers.merge(obs, audit_run.MODULES + audit_run.INFO_MODULES)
    # the worker's env is kept apart from the main process's env of the same object key
    assert [e["base_id"] for e in obs["sections"]["transforms"]["envs"]] == [3, "w1:3"]
    assert obs["sections"]["env-seeding"] == {"calls": [], "set_seed_calls": 1}
    assert obs["meta"]["probe_errors"]["env_step:_audit.e_env_actions"] == "boom (in worker 11)"
    assert workers.notes(obs["meta"]) == ["1 of 2 worker processes instrumented (forkserver, spawn), their events merged "
                                          "into the rows; not instrumented: 12 (forkserver, _run_worker_pipe_shared_mem)"]
    assert obs["meta"]["workers"] == ["ParallelEnv(2 workers)"]  # the run row keeps saying what was not seen
    # every started process reported: no component is left unseen
    obs = observed([{"pid": 11, "method": "spawn", "target": None}], [report])
    workers.merge(obs, audit_run.MODULES)
    assert obs["meta"]["workers"] == [] and workers.notes(obs["meta"])[0].startswith("1 of 1 worker processes instrumented (spawn")


def test_the_early_stop_waits_for_started_workers_and_judges_with_their_reports(tmp_path):
    # d_training's early stop reads the worker reports as they come: while a started worker has not
    # reported as instrumented it is no view at all (None); then the worker's env is in the row,
    # merged on a copy (the hub's own meta is left as it was)
    import copy
    import time

    from torchrl_skill.audit import d_training, d_transforms
    from torchrl_skill.audit.evidence import readiness

    def env(base_id, steps):
        return {"site": "train.py:51 in make_env", "base_cls": "Reach", "base_id": base_id, "steps": steps, "resets": steps // 10, "by_user": True,
                "base_steps": steps, "appended_at": None, "transforms": ["StepCounter"], "reset_skipped": [], "norms": []}

    class Hub:
        workers_dir = str(tmp_path)
        meta = {"workers": ["ParallelEnv(2 workers)"], "probe_errors": {}, "frames": 400,
                "processes": [{"pid": 11, "method": "spawn", "target": "_run_worker_pipe_shared_mem", "t": time.time()}]}

    hub = Hub()
    observed = {"meta": hub.meta, "sections": {"transforms": {"envs": [env(3, 0)]}}, "end": {"how": "running"}, "live": True}
    before = copy.deepcopy(hub.meta)
    assert readiness(d_transforms, observed) is None  # the main process alone: the env inside the workers is not seen
    assert d_training._with_worker_reports(hub, observed, [d_transforms]) is None  # no report yet
    report = {"meta": {"pid": 11, "instrumented": False, "processes": [], "probe_errors": {}}, "sections": {}}
    (tmp_path / "worker-11.json").write_text(json.dumps(report))
    assert d_training._with_worker_reports(hub, observed, [d_transforms]) is None  # booted, torchrl not imported yet
    report = {"meta": {"pid": 11, "instrumented": True, "processes": [], "probe_errors": {}}, "sections": {"transforms": {"envs": [env(3, 200)]}}}
    (tmp_path / "worker-11.json").write_text(json.dumps(report))
    merged = d_training._with_worker_reports(hub, observed, [d_transforms])
    assert readiness(d_transforms, merged) is True and "StepCounter (200 steps, 20 resets" in d_transforms.judge(merged)
    assert merged["meta"]["workers"] == [] and hub.meta == before
    # a started process that never reports (a forkserver start) is waited for WORKER_BOOT_S, not forever
    (tmp_path / "worker-11.json").unlink()
    hub.meta["processes"][0]["t"] = time.time() - d_training.WORKER_BOOT_S - 1
    assert d_training._with_worker_reports(hub, observed, [d_transforms])["meta"]["worker_processes"]["missing"] == [
        "11 (spawn, _run_worker_pipe_shared_mem)"]


def _factory_from(filename: str, co_filename: str | None = None):
    """``make_env`` compiled as if written at line 3 of ``filename`` in a module no worker can
    import (so cloudpickle pickles it by value), calling the auditor's ``user_site`` from there;
    ``co_filename`` overrides the code's file, as cloudpickle >= 3.0's unpickling does."""
    from torchrl_skill.audit import probe

    source = "\n\ndef make_env():\n    return user_site()\n"
    scope = {"__name__": "train_not_importable", "__file__": filename, "user_site": probe.user_site}
    exec(compile(source, filename, "exec"), scope)
    fn = scope["make_env"]
    if co_filename is not None:
        fn.__code__ = fn.__code__.replace(co_filename=co_filename)
    return fn


def test_a_factory_unpickled_by_value_is_attributed_to_the_users_file(tmp_path):
    # cloudpickle 3.x rebuilds a by-value function with co_filename "<dynamic-code>" (2.x kept
    # the file): the worker's env factory frame must still read as the user's train.py line
    import cloudpickle

    train = str(tmp_path / "train.py")
    assert _factory_from(train)() == "train.py:4 in make_env"
    assert _factory_from(train, co_filename="<dynamic-code>")() == "train.py:4 in make_env"
    # the installed cloudpickle's own round trip, whichever version it is
    clone = cloudpickle.loads(cloudpickle.dumps(_factory_from(train)))
    assert clone.__code__.co_filename in (train, "<dynamic-code>")
    assert clone() == "train.py:4 in make_env"
    # nearest case: dynamic code with no module file is not the user's: the next user frame out
    # (this test) is named instead
    fn = _factory_from(train, co_filename="<dynamic-code>")
    fn.__globals__.pop("__file__")
    assert fn().startswith("test_audit_workers.py:") and fn().endswith("in test_a_factory_unpickled_by_value_is_attributed_to_the_users_file"), fn()
