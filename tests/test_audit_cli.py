"""The run-time auditor as a command: bad targets get one line and exit 2, a target that fails
or hangs after building TorchRL objects gets a failing row and exit 1, Ctrl-C exits 130 (SIGTERM
143) with every process stopped and the temporary folder removed (also when the auditor itself
is killed outright), worker processes are stopped and
named, the user's files are left as they were.

Exit-code tests run the auditor's parent in this process (the target still runs in its child
process); the Ctrl-C and leftover tests start a real auditor process.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import BUNDLE, FIXTURES, load_module, rows, run_main

AUDIT = FIXTURES / "audit"
BAD = AUDIT / "bad"
SCRIPT = BUNDLE / "scripts" / "audit_run.py"


def run(*argv: str) -> tuple[int, dict, str]:
    """``(exit code, {row: (status, detail)}, stderr)`` of ``audit_run.main([--json, *argv])``."""
    code, report, err = run_main(SCRIPT, *argv, stderr=True)
    return code, rows(report) if report else {}, err


def one_line(stderr: str, *texts: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for text in texts:
        assert text in lines[0], lines[0]
    return lines[0]


def test_a_file_with_a_syntax_error_exits_2_naming_the_line(tmp_path):
    broken = tmp_path / "train.py"
    broken.write_text("import torch\ndef main(:\n    pass\n")
    code, rows, stderr = run(str(broken))
    assert code == 2 and rows == {}
    one_line(stderr, "SyntaxError", "train.py:2")


@pytest.mark.parametrize("target, texts", [
    (str(BAD / "missing.py"), ["not found", "fix:"]),
    (f"{BAD / 'targets.py'}:raises_early", ["raised ValueError: bad config", "targets.py:7", "before building any TorchRL object"]),
    (f"{BAD / 'targets.py'}:exits_early", ["exited with code 3", "usage: train.py --config FILE"]),
    (f"{BAD / 'targets.py'}:no_torchrl", ["without building any TorchRL object"]),
    (f"{BAD / 'targets.py'}:nope", ["has no attribute 'nope'"]),
    (f"{BAD / 'targets.py'}:not_a_function", ["is not a function"]),
    ("no_such_package.module:main", ["module 'no_such_package.module' not found"]),
])
def test_a_target_that_cannot_be_audited_exits_2_with_one_line(target, texts):
    code, rows, stderr = run(target, "--seconds", "60")
    assert code == 2 and rows == {}
    one_line(stderr, *texts)


def test_a_hang_before_any_torchrl_object_exits_2_naming_the_line():
    code, _, stderr = run(f"{BAD / 'targets.py'}:hangs_early", "--seconds", "2")
    assert code == 2
    one_line(stderr, "built no TorchRL object in 2 s", "targets.py:25 in hangs_early", "--seconds")


@pytest.mark.slow
def test_a_raise_after_torchrl_objects_fails_the_exit_row_and_keeps_the_detectors():
    code, rows, _ = run(f"{BAD / 'targets.py'}:raises_late")
    assert code == 1
    status, detail = rows["exit"]
    assert status == "fail" and "RuntimeError: loss exploded at step 3" in detail and "targets.py:15" in detail
    assert rows["run"][0] == "pass" and "GymEnv at targets.py:13" in rows["run"][1]
    assert {"target-network", "exploration", "info:update-to-data"} <= set(rows)


@pytest.mark.slow
def test_a_hang_after_torchrl_objects_is_stopped_and_named():
    code, rows, _ = run(f"{BAD / 'targets.py'}:hangs_late", "--seconds", "3")
    assert code == 1
    status, detail = rows["exit"]
    assert status == "fail" and "stopped at targets.py:34 in hangs_late" in detail


@pytest.mark.slow
def test_module_function_form_is_found_from_the_current_folder(monkeypatch):
    monkeypatch.chdir(AUDIT)
    code, rows, _ = run("bad.targets:raises_late")
    assert code == 1 and "loss exploded" in rows["exit"][1]


def _tree_digest(folder) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_user_files_are_left_unchanged_and_the_log_is_kept_where_asked(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(AUDIT / "project_dqn", project)
    before = _tree_digest(project)
    log = tmp_path / "out.log"
    code, rows, _ = run(str(project / "train.py"), "--max-frames", "200", "--log", str(log))
    assert code == 1 and rows["run"][0] == "pass"
    assert _tree_digest(project) == before  # no edit, no __pycache__, no output file
    assert "episodes" in log.read_text()  # the script's own prints


def _audit_process(args: list[str], tmp_path) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen([sys.executable, str(SCRIPT), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=str(tmp_path))


def _wait_for_descendants(pid: int, count: int, timeout: float = 240.0) -> list[int]:
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = [p.pid for p in psutil.Process(pid).children(recursive=True)]
        if len(kids) >= count:
            return kids
        time.sleep(0.3)
    raise AssertionError(f"the auditor started fewer than {count} processes in {timeout} s")


def _alive(pids: list[int]) -> list[int]:
    import psutil

    out = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
    return out


@pytest.mark.slow
def test_ctrl_c_exits_130_stops_every_process_and_removes_the_temporary_folder(tmp_path):
    # the broken vector env fixture runs gymnasium's AsyncVectorEnv: the target has workers of its own
    proc = _audit_process([str(AUDIT / "vector_autoreset" / "broken.py"), "--seconds", "300"], tmp_path)
    try:
        kids = _wait_for_descendants(proc.pid, 3)  # the child and at least two gymnasium workers
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith("torchrl-audit-")]
        time.sleep(1.0)
        kids = _wait_for_descendants(proc.pid, len(kids))
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert took < 20, f"took {took:.1f} s to stop"  # a generous bound: it is about 3 s when idle
    one_line(stderr, "interrupted")
    deadline = time.monotonic() + 10
    while _alive(kids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(kids) == []
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("torchrl-audit-")]


def _waiting_target(tmp_path):
    """A target that marks that it runs, then waits: the audited child is alive and busy."""
    target = tmp_path / "project" / "wait.py"
    target.parent.mkdir()
    target.write_text("import pathlib, time\npathlib.Path(__file__).with_name('started').touch()\n"
                      "while True:\n    time.sleep(0.1)\n")
    return target


def _started_child(proc, target, timeout: float = 120.0) -> int:
    """The audited child's pid, once the target runs (torchrl's import in the child can be slow)."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if target.with_name("started").exists():
            return psutil.Process(proc.pid).children()[0].pid
        time.sleep(0.2)
    raise AssertionError(f"the target did not start in {timeout} s: {proc.stderr.read()[-500:] if proc.poll() is not None else ''}")


def _gone(pids: list[int], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _alive(pids) == []


def test_sigterm_exits_143_like_ctrl_c_and_leaves_nothing(tmp_path):
    # `timeout 60 audit_run.py ...` or an agent's tool limit: the default SIGTERM death would
    # skip the clean-up, leaving the audited child running and its folder in TMPDIR
    target = _waiting_target(tmp_path)
    proc = _audit_process([str(target), "--seconds", "300"], tmp_path)
    try:
        child = _started_child(proc, target)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr
    one_line(stderr, "audit_run.py: terminated by SIGTERM")
    assert _gone([child])
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("torchrl-audit-")]


def test_an_auditor_killed_outright_takes_its_child_and_folder_with_it(tmp_path):
    target = _waiting_target(tmp_path)
    proc = _audit_process([str(target), "--seconds", "300"], tmp_path)
    try:
        child = _started_child(proc, target)
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith("torchrl-audit-")]
        proc.kill()  # SIGKILL: no handler of the auditor runs
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _gone([child]), "the audited child outlived its auditor"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("torchrl-audit-")]


@pytest.mark.slow
def test_multiprocess_collector_workers_are_named_and_stopped(tmp_path):
    target = str(AUDIT / "multiprocess" / "train.py")
    code, rows, _ = run(target, "--seconds", "240")
    assert code == 0, rows
    # its workers are instrumented (tests/test_audit_workers.py): the run row counts them
    assert "2 of 2 worker processes instrumented (spawn" in rows["run"][1] and "not instrumented" not in rows["run"][1]
    code, rows, _ = run(target, "--seconds", "240", "--", "--no-shutdown")
    assert code == 1
    status, detail = rows["exit"]
    assert status == "fail" and "left" in detail and "collector.shutdown()" in detail
    pids = [int(item.split()[0]) for item in detail.split("(")[1].split(";")[0].split(", ")]
    assert _alive(pids) == []


def test_the_rows_table_names_every_row_the_auditor_prints():
    # references/run-time-audit.md "The rows": one line per declared check, in report order
    audit_run = load_module(SCRIPT)
    text = (BUNDLE / "references" / "run-time-audit.md").read_text()
    table = text.split("## The rows", 1)[1].split("\n## ", 1)[0]
    named = [line.split("`")[1] for line in table.splitlines() if line.startswith("| `")]
    assert named == [c.name for c in audit_run.CHECKS]


def test_info_rows_are_ratios_of_the_run_counters():
    audit_run = load_module(SCRIPT)
    from torchrl_skill.audit import i_update_to_data as utd

    meta = {"frames": 1000, "optimizer_steps": 50, "first_frame_s": 1.0, "last_frame_s": 3.0}
    assert utd.judge({"meta": meta, "sections": {}}).startswith("0.05 optimizer steps per frame (50 steps / 1000 frames)")
    assert audit_run.info_frames_per_second({"meta": meta}).startswith("500 frames/s between the first and the last collected frame")
    # pytorch/rl#1181's shape: an actor and a critic optimizer, one update per 200 frames, batches of 1
    sec = {"optimizers": [{"label": "Adam #1 (4 tensors)", "steps": 100}, {"label": "Adam #2 (6 tensors)", "steps": 100}],
           "samples": {"n": 100, "min": 1, "max": 1}, "losses": ["DDPGLoss"]}
    text = utd.judge({"meta": {**meta, "frames": 20000, "optimizer_steps": 200}, "sections": {utd.NAME: sec}})
    assert text.startswith("0.005 optimizer steps per frame (100 steps / 20000 frames), counting the most-stepped of 2 optimizers"), text
    assert "100 replay-buffer samples of 1 elements each" in text and "low for DDPGLoss" in text


def test_update_to_data_references_name_real_loss_classes():
    import torchrl.objectives as objectives
    from torchrl_skill.audit import i_update_to_data as utd

    names = set().union(*(classes for classes, *_ in utd.REFERENCES))
    assert {n for n in names if not hasattr(objectives, n)} == set()


@pytest.mark.slow
def test_without_max_frames_the_run_stops_once_every_verdict_is_in():
    # a DQN that would collect 100,000 frames: the audit stops once each detector that saw its
    # component has its verdict, and says so; --max-frames N runs to N frames instead
    target = str(AUDIT / "mutations" / "target_network.py")
    code, rows, _ = run(target, "--seconds", "240", "--", "--variant", "soft-never", "--fixed")
    assert code == 0, rows
    status, detail = rows["exit"]
    assert status == "pass" and detail.startswith("stopped once every detector that saw its component had its verdict"), detail
    assert "target-network" in detail and "exploration" in detail, detail
    frames = int(rows["run"][1].split(" frames,")[0].rsplit(" ", 1)[1])
    assert frames < 5000, rows["run"]
    assert rows["target-network"][0] == "pass" and rows["training"][0] == "pass"


def test_a_report_of_nothing_audited_exits_5_unless_a_row_failed(capsys):
    from torchrl_skill.report import skill_report as sr

    report = sr.Report(str(SCRIPT))
    report.add("training", "skip", "no optimizer stepped in 1000 frames")
    report.nothing_audited = "no optimizer stepped"
    assert report.finish() == sr.EXIT_NOTHING_AUDITED == 5 and not report.ok
    assert capsys.readouterr().out.splitlines()[-1].startswith("NOTHING AUDITED: 0 pass, 0 fail, 1 skip")
    report.add("exit", "fail", "raised")
    assert report.finish() == 1
    assert "exit codes:" in load_module(SCRIPT).build_parser().format_help()
    assert "  5    nothing audited" in load_module(SCRIPT).build_parser().format_help()


def _wait_for_status(pid: int, status: str, timeout: float = 120.0) -> None:
    import psutil

    deadline = time.monotonic() + timeout
    while psutil.Process(pid).status() != status:
        assert time.monotonic() < deadline, f"process {pid} never became {status}"
        time.sleep(0.05)


def test_a_group_of_zombies_is_not_alive_and_a_running_member_is():
    """The runner stopped a finished child's group when ``killpg(pgid, 0)`` still found it: a
    zombie (an orphan waiting for init, here one nobody reaped yet) counts there, and made
    every audit wait 1-2 s in ``_stop_all``. Both sides: an exited leader that is not reaped,
    and a leader still running."""
    import psutil
    from torchrl_skill.audit import runner

    dead = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    try:
        _wait_for_status(dead.pid, psutil.STATUS_ZOMBIE)
        os.killpg(dead.pid, 0)  # the kernel still reports the group: the case this guards
        assert runner._group_alive(dead.pid) is False
        assert runner._group_alive(live.pid) is True
    finally:
        live.kill()
        live.wait(timeout=30)
        dead.wait(timeout=30)
    assert runner._group_alive(live.pid) is False


def test_the_resource_tracker_is_named_by_its_whole_command_line():
    # its command line is `python -B -c "from multiprocessing.resource_tracker import main; ..."`:
    # the name is in the 4th word, which a prefix of the command line missed
    from torchrl_skill.audit import runner

    code = "from multiprocessing import resource_tracker; import time; resource_tracker.ensure_running(); time.sleep(300)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "resource_tracker" not in runner._descendants(proc.pid).values():
            assert time.monotonic() < deadline, runner._descendants(proc.pid)
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
