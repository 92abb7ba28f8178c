"""smoke_collector.py and the collector claims of collectors-and-replay: real torchrl 0.14.1
runs, real worker processes, real Ctrl-C.

Spawned-worker tests run the collector in this process (psutil then lists what it started)
or, for exit codes, interrupts and hangs, as a child in its own process group, signalled the
way a terminal signals it (os.killpg). Limits only guard against a hung child; pick them
generously (a 3x slower machine must pass).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from torchrl_skill.report import skill_report as sr
from conftest import BUNDLE, FIXTURES, load_module, run_in_process, run_main

psutil = pytest.importorskip("psutil")

SCRIPT = "collectors-and-replay/smoke_collector"
SCRIPT_PATH = BUNDLE / "sub-skills" / "collectors-and-replay" / "scripts" / "smoke_collector.py"
LOGS = FIXTURES / "collectors"


def smoke_collector():
    return load_module(SCRIPT)


class Child:
    """A ``python ARGS`` child in its own session (so a signal to its group reaches it and its
    workers, as Ctrl-C in a terminal does, and nothing else), stderr read by a thread."""

    def __init__(self, args: list[str], cwd):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
        env.pop("TORCHRL_CONSOLE_STREAM", None)
        self.proc = subprocess.Popen([sys.executable, *args], cwd=str(cwd), env=env, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self.stderr: list[str] = []
        self.stdout: list[str] = []
        self.threads = [threading.Thread(target=self._read, args=(s, out), daemon=True)
                        for s, out in ((self.proc.stderr, self.stderr), (self.proc.stdout, self.stdout))]
        for t in self.threads:
            t.start()

    def _read(self, stream, out):
        for line in stream:
            out.append(line)

    def descendants(self) -> list:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def wait_for(self, predicate, what: str, limit: float = 300.0) -> None:
        deadline = time.monotonic() + limit
        while not predicate():
            if self.proc.poll() is not None:
                raise AssertionError(f"child exited {self.proc.returncode} before {what}: {''.join(self.stderr)[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {limit:g} s")
            time.sleep(0.1)

    def kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for t in self.threads:
            t.join(5)


def alive(procs: list) -> list[int]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def spawned_workers(child: Child) -> list:
    found = []
    for p in child.descendants():
        try:
            if "spawn_main" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            pass
    return found


# ------------------------------------------------------------------------- diagnosis


def test_removed_collector_names_raise_importerror_and_map_to_new():
    """Every collector row of api_changes.json: the old import fails, the new one resolves,
    and the diagnosis names exactly the replacement (not also the index entry listing all)."""
    sc = smoke_collector()
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


def test_diagnose_reads_renamed_names_from_api_changes_json(tmp_path):
    """The table is api_changes.json, not a copy: a row added there is diagnosed, a missing file exits 2."""
    sc = smoke_collector()
    table = tmp_path / "api_changes.json"
    row = {"old": "torchrl.collectors.OldThing", "new": "torchrl.collectors.NewThing", "changed_in": "0.12.0", "removed_in": "0.13.0"}
    table.write_text(json.dumps({"names": [row]}))
    assert sc.diagnose("cannot import name 'OldThing' from 'torchrl.collectors'", api_changes=table) == [
        "torchrl.collectors.OldThing was removed in torchrl 0.13.0; fix: from torchrl.collectors import NewThing"
    ]
    with pytest.raises(sr.CannotRun):
        sc.renamed_collectors(tmp_path / "absent.json")


def test_diagnose_names_ndim2_for_worker_crash_log():
    """The real worker log of a MultiSyncCollector over SerialEnv(2) with a 1-D storage:
    both index entries (the worker's error, the parent's), causes read from the index."""
    text = (LOGS / "ndim1_worker_crash.log").read_text()
    faults = smoke_collector().diagnose(text)
    assert any("ndim=2" in f and f.endswith("[indexed-destination-tensordict-batch-size-torch]") for f in faults), faults
    assert any(f.endswith("[least-process-failed]") for f in faults), faults


def interleaved_slice_error() -> str:
    """The real message of a SliceSampler over envs stored interleaved (ids 0, 1, 0, 1, ...)."""
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler

    rb = ReplayBuffer(storage=LazyTensorStorage(40), sampler=SliceSampler(slice_len=5, traj_key=("collector", "traj_ids")))
    rb.extend(TensorDict({("collector", "traj_ids"): torch.arange(40) % 2}, batch_size=[40]))
    with pytest.raises(RuntimeError) as err:
        rb.sample(10)
    return f"Traceback (most recent call last):\n  ...\nRuntimeError: {err.value}"


def test_diagnose_names_the_interleaving_for_length_one_slices(tmp_path):
    """Issue: --diagnose said "no known cause" for this text; now the cause and the fix come
    from the error index, and the generic SliceSampler entry (whose fixes do not help here)
    is left out."""
    text = interleaved_slice_error()
    assert "(length range: 1 - 1 / required=5)" in text
    faults = smoke_collector().diagnose(text)
    assert len(faults) == 1 and faults[0].endswith("[slice-trajectories-length-one-interleaved]"), faults
    assert "reshape(-1)" in faults[0] and "ndim=2" in faults[0] and "trajs_per_batch" in faults[0]
    log = tmp_path / "train.log"
    log.write_text(text)
    status, detail = run_in_process(SCRIPT, "--diagnose", str(log))["diagnose:log"]
    assert status == "fail" and "one-step batches of a batched env" in detail and "trajs_per_batch" in detail, detail


def test_diagnose_cli_fails_on_fault_and_passes_clean_log():
    bad = run_in_process(SCRIPT, "--diagnose", str(LOGS / "ndim1_worker_crash.log"))
    assert bad["diagnose:log"][0] == "fail" and "ndim=2" in bad["diagnose:log"][1]
    good = run_in_process(SCRIPT, "--diagnose", str(LOGS / "unrelated_error.log"))
    assert good["diagnose:log"][0] == "pass" and "no known fault" in good["diagnose:log"][1]


@pytest.mark.parametrize("argv, says", [
    (["--diagnose", "no/such/worker.log"], "no such file"),
    (["--diagnose", str(LOGS)], "is a folder"),
    (["--diagnose", "{binary}"], "not a text file"),
    (["--workers", "-1"], "--workers"),
    (["--frames", "0"], "--frames"),
])
def test_bad_input_exits_2_with_one_line(argv, says, capsys, tmp_path):
    binary = tmp_path / "core.bin"
    binary.write_bytes(b"\x00\x01 not a log")
    code, report = run_main(SCRIPT, *(a.format(binary=binary) for a in argv))
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, report) == (2, {})
    assert len(err) == 1 and says in err[0] and "fix:" in err[0], err


# ------------------------------------------------------------------------- one process


def test_default_run_skips_the_worker_checks_naming_the_flag():
    rows = run_in_process(SCRIPT)
    assert {rows[n][0] for n in rows if n.startswith("collector:")} == {"pass"}, rows
    assert all(rows[n] == ("skip", "not asked for (pass --workers)") for n in rows if n.startswith("multi:")), rows


def test_batched_env_storage_check_reports_silent_1d_fault():
    detail = smoke_collector().check_batched_env_storage(20)
    assert "ndim=2) holds 20 frames" in detail and "ndim=1 holds 2 rows" in detail


def test_weight_update_check_passes_with_push_and_control():
    detail = smoke_collector().check_weight_update_single(10)
    assert "without update actions stay [0.0]" in detail and "next batch actions [0.5]" in detail


def test_weight_update_check_fails_when_weights_do_not_change(monkeypatch):
    sc = smoke_collector()
    monkeypatch.setattr(sc, "change_trainer_weights", lambda policy: None)
    with pytest.raises(sr.CheckFailed, match="after update_policy_weights_"):
        sc.check_weight_update_single(10)


def test_weight_update_check_fails_when_update_is_skipped(monkeypatch):
    """A collector on its own policy copy keeps the old weights until they are pushed: without
    update_policy_weights_ batch 1 still has the old bias (the troubleshooting entry)."""
    sc = smoke_collector()
    monkeypatch.setattr(sc, "push_weights", lambda collector, trainer: None)
    with pytest.raises(sr.CheckFailed, match=r"batch 1 actions \[0\.0\] after update_policy_weights_"):
        sc.check_weight_update_single(10)


def test_weight_update_check_fails_when_collector_shares_trainer_policy(monkeypatch):
    """The old, vacuous setup (collector runs the trainer's object) is caught by the control."""
    sc = smoke_collector()
    monkeypatch.setattr(sc, "collector_copy", lambda policy: policy)
    with pytest.raises(sr.CheckFailed, match="shares the trainer's weights"):
        sc.check_weight_update_single(10)


def test_trajs_per_batch_check_passes_and_fails_without_it(monkeypatch):
    """Collector(trajs_per_batch=2, replay_buffer=rb) stores whole trajectories that a
    SliceSampler cuts into one-trajectory slices; without trajs_per_batch the same one-step
    batches land as [2, 1] items and the SliceSampler refuses them."""
    sc = smoke_collector()
    assert "4 contiguous trajectories" in sc.check_trajs_per_batch()
    monkeypatch.setattr(sc, "TRAJS_PER_BATCH", None)
    with pytest.raises(RuntimeError, match="end-of-trajectory signal to be 1-dimensional"):
        sc.check_trajs_per_batch()


def test_truncation_check_counts_partial_last_trajectory():
    """--frames 42: max_frames_per_traj=10 gives 4 full trajectories plus a 2-step one (5 ids)."""
    detail = smoke_collector().check_truncation(42)
    assert "max_frames_per_traj=10" in detail and "truncated at [9, 19, 29, 39]" in detail and "5 traj_ids" in detail


# ------------------------------------------------------------------------- worker processes


@pytest.mark.slow
def test_multiprocess_collector_weight_sync_and_no_child_survives():
    """--workers 2: shared ndim=2 buffer, pushed bias in the NEXT batch, workers gone."""
    before = sr.child_processes()
    rows = run_in_process(SCRIPT, "--workers", "2", "--frames", "20")
    assert rows["multi:shared-buffer-ndim2"][0] == "pass", rows
    assert rows["multi:weight-sync-next-batch"][0] == "pass", rows
    assert "40/40 frames at 0.5" in rows["multi:weight-sync-next-batch"][1]
    assert rows["multi:shutdown"][0] == "pass", rows
    assert sr.leftover_processes(before, grace=15.0) == {}


@pytest.mark.slow
def test_ctrl_c_while_workers_start_exits_130_and_leaves_nothing(tmp_path):
    """Issue: Ctrl-C about 1 s after the workers of --workers 2 appear left the script hung.
    SIGINT goes to the whole process group, as a terminal sends it; the script must exit 130
    within a generous limit, print one line and no traceback (workers included), and leave
    no process behind."""
    child = Child([str(SCRIPT_PATH), "--workers", "2"], cwd=tmp_path)
    try:
        child.wait_for(lambda: len(spawned_workers(child)) >= 2, "2 spawned workers")
        time.sleep(1.0)
        started = child.descendants()
        os.killpg(child.proc.pid, signal.SIGINT)
        try:
            child.proc.wait(timeout=60)  # exits in seconds; a hang runs forever
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 60 s after Ctrl-C: {''.join(child.stderr)[-2000:]}")
        for t in child.threads:
            t.join(10)
        err = "".join(child.stderr)
        assert child.proc.returncode == 130, err[-2000:]
        assert "Traceback" not in err, err[-3000:]
        assert err.strip().splitlines()[-1] == "smoke_collector.py: interrupted"
        deadline = time.monotonic() + 15
        while alive(started) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive(started) == [], [p.cmdline() for p in started if p.pid in alive(started)]
    finally:
        child.kill_group()


@pytest.mark.slow
def test_failed_collector_start_hangs_at_exit_unless_the_scheme_is_shut_down(tmp_path):
    """The cause behind the hang: a MultiSyncCollector whose construction raises leaves its
    default SharedMemWeightSyncScheme to __del__ at interpreter exit, which never returns
    (torchrl 0.14.1). The same script that shuts the scheme down in `finally` exits."""
    broken = Child([str(LOGS / "failed_start_hangs.py")], cwd=tmp_path)
    fixed = Child([str(LOGS / "failed_start_exits.py")], cwd=tmp_path)  # side by side: half the wait
    try:
        failed = lambda child: "failed to initialize" in "".join(child.stderr)  # noqa: E731 - the traceback's text
        fixed.wait_for(lambda: failed(fixed) or fixed.proc.poll() is not None, "the worker failure")
        printed = time.monotonic()
        fixed.proc.wait(timeout=300)
        exit_took = time.monotonic() - printed  # from the traceback to the process gone: the exit itself
        for t in fixed.threads:
            t.join(10)
        err = "".join(fixed.stderr)
        assert fixed.proc.returncode == 1 and "failed to initialize" in err, err[-2000:]
        assert "Can't get attribute 'Net' on <module '__mp_main__'" in err
        broken.wait_for(lambda: failed(broken), "the worker failure")
        # the same exit, given 4 times as long as the fixed script's took here (at least 4 s):
        # a slower machine slows both alike
        time.sleep(max(4.0, 4 * exit_took))
        assert broken.proc.poll() is None, f"exited {broken.proc.returncode}: the hang did not reproduce"
    finally:
        broken.kill_group()
        fixed.kill_group()


@pytest.mark.slow
def test_multi_async_collector_takes_lambdas_syncs_weights_and_writes_past_total_frames():
    """MultiAsyncCollector on 0.14.1: lambda env factories work (sent with cloudpickle);
    update_policy_weights_() reaches the workers; with replay_buffer= the workers go on
    writing after the loop stopped at total_frames, until shutdown()."""
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import MultiAsyncCollector
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.envs import PendulumEnv, TransformedEnv, UnsqueezeTransform

    torch.manual_seed(0)
    linear = torch.nn.Linear(1, 1)  # action = bias: zero weight
    with torch.no_grad():
        linear.weight.zero_()
        linear.bias.zero_()
    policy = TensorDictModule(linear, in_keys=["th1"], out_keys=["action"])
    make_env = lambda: TransformedEnv(PendulumEnv(), UnsqueezeTransform(-1, in_keys=["th"], out_keys=["th1"]))  # noqa: E731
    rb = ReplayBuffer(storage=LazyTensorStorage(100_000))
    before = sr.child_processes()
    collector = MultiAsyncCollector([make_env, make_env], policy, frames_per_batch=10, total_frames=60,
                                    replay_buffer=rb, auto_register_policy_transforms=False)
    try:
        for i, _ in enumerate(collector):
            if i == 0:
                with torch.no_grad():
                    linear.bias.fill_(0.5)
                collector.update_policy_weights_()
        after_loop = len(rb)
        deadline = time.monotonic() + 120
        while len(rb) <= after_loop + 40 and time.monotonic() < deadline:
            time.sleep(0.2)
        grown = len(rb)
    finally:
        collector.shutdown()
    assert after_loop >= 60 and grown > after_loop + 40, (after_loop, grown)
    # a batch each worker started before the update (weights change mid-batch in shared
    # memory) may land after the loop: the newest writes, 40 frames on, are all new weights
    late = rb[grown - 10:grown]["action"].reshape(-1)
    assert bool((late == 0.5).all()), late.unique().tolist()
    assert sr.leftover_processes(before, grace=15.0) == {}
