"""scripts/run_all_checks.py: every bundled script in one process, one table, one exit code."""

from __future__ import annotations

import json

import jsonschema
from torchrl_skill import data
import pytest
from torchrl_skill.checks import run_all_checks
from torchrl_skill.report import skill_report as sr
from conftest import BUNDLE, SCRIPTS, run_python

RUNNER = BUNDLE / "scripts" / "run_all_checks.py"
SCHEMA = json.loads(data.REPORT_SCHEMA.read_text())


def test_report_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.slow
def test_full_run_covers_every_script_and_passes(tmp_path):
    # under pytest's 600 s limit, so a hang fails here with the runner's own output
    proc = run_python([str(RUNNER), "--json"], cwd=tmp_path, timeout=570, warm=True)
    assert proc.stdout.count("\n") == 1, proc.stdout[:500]  # one JSON object, nothing else
    report = json.loads(proc.stdout)
    jsonschema.validate(report, SCHEMA)
    failed = [c for c in report["checks"] if c["status"] == "fail"]  # first: a failure names its row
    assert proc.returncode == 0 and not failed, failed
    assert report["script"] == "scripts/run_all_checks.py" and report["ok"] is True
    prefixes = {c["name"].split(":", 1)[0] for c in report["checks"]}
    expected = {f"{sr.script_area(p)}/{p.stem}" for p in SCRIPTS if p != RUNNER}
    assert prefixes == expected
    assert list(tmp_path.iterdir()) == []


def test_only_narrows_to_one_area_in_text_mode(tmp_path):
    # also the runner's text-mode contract run (test_script_contract.py leaves it out): rows,
    # the summary line, exit 0 and nothing left in the working folder
    proc = run_python([str(RUNNER), "--only", "root"], cwd=tmp_path, warm=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-1500:]
    rows = [ln.split()[:2] for ln in proc.stdout.splitlines() if ln.split(" ")[0] in ("PASS", "FAIL", "SKIP", "MISSING")]
    assert rows and {name.split("/", 1)[0] for _, name in rows} == {"root"}
    assert proc.stdout.strip().splitlines()[-1].startswith("OK: ")
    assert list(tmp_path.iterdir()) == []


def test_unknown_area_exits_2(tmp_path):
    proc = run_python([str(RUNNER), "--only", "no-such-area"], cwd=tmp_path, warm=True)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_a_failing_script_fails_the_run(tmp_path, monkeypatch):
    broken = tmp_path / "broken_check.py"
    broken.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(BUNDLE / 'src')!r})\n"
        "from torchrl_skill.report import skill_report as sr\n"
        "def build_parser():\n    return sr.make_parser('x', 'python broken_check.py')\n"
        "def run_checks(args, report):\n    report.run('always-fails', lambda: sr.expect(False, 'planted fault'))\n"
        "def main(argv=None):\n    return sr.standard_main(__file__, build_parser, run_checks, argv)\n"
    )
    crashing = tmp_path / "crashing_check.py"
    crashing.write_text("raise RuntimeError('cannot even import')\n")
    report = sr.Report(str(RUNNER), json_mode=True)
    monkeypatch.setattr(sr, "script_area", lambda path, root=None: "planted")
    run_all_checks.run_script(broken, report)
    run_all_checks.run_script(crashing, report)
    rows = {c.name: c for c in report.checks}
    assert rows["planted/broken_check:always-fails"].status == "fail"
    assert "planted fault" in rows["planted/broken_check:always-fails"].detail
    assert rows["planted/crashing_check:script-error"].status == "fail"
    assert "cannot even import" in rows["planted/crashing_check:script-error"].detail
    assert report.finish() == 1


def test_a_scripts_timeout_holds_inside_the_runner(tmp_path, monkeypatch):
    hanging = tmp_path / "hanging_check.py"
    hanging.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(BUNDLE / 'src')!r})\n"
        "from torchrl_skill.report import skill_report as sr\n"
        "def build_parser():\n"
        "    parser = sr.make_parser('x', 'python hanging_check.py')\n"
        "    sr.add_timeout_flag(parser, default=1.0)\n"
        "    return parser\n"
        "def run_checks(args, report):\n    report.run('hangs', lambda: time.sleep(120))\n"
    )
    report = sr.Report(str(RUNNER), json_mode=True)
    monkeypatch.setattr(sr, "script_area", lambda path, root=None: "planted")
    run_all_checks.run_script(hanging, report)
    row = report.result("planted/hanging_check:hangs")
    assert row.status == "fail" and row.seconds < 60, row


def _planted(tmp_path, name: str, body: str):
    path = tmp_path / f"{name}.py"
    path.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(BUNDLE / 'src')!r})\n"
        "from torchrl_skill.report import skill_report as sr\n"
        f"def build_parser():\n    return sr.make_parser('x', 'python {name}.py')\n"
        f"def run_checks(args, report):\n{body}\n"
    )
    return path


def test_parallel_workers_keep_discovery_order_and_each_scripts_verdict(tmp_path, monkeypatch):
    # the first script is the slowest, so its worker finishes last: its rows still come first
    slow = _planted(tmp_path, "slow_check", "    time.sleep(1.5)\n    report.run('slow', lambda: 'done')")
    fast = _planted(tmp_path, "fast_check", "    report.run('fast', lambda: 'done')")
    failing = _planted(tmp_path, "failing_check", "    report.run('planted', lambda: sr.expect(False, 'planted fault'))")
    dying = _planted(tmp_path, "dying_check", "    import os\n    os._exit(9)")
    monkeypatch.setattr(sr, "script_area", lambda path, root=None: "planted")
    report = sr.Report(str(RUNNER), json_mode=True)
    run_all_checks.run_parallel([slow, fast, failing, dying], 2, report)
    names = [(c.name, c.status) for c in report.checks]
    assert names[:3] == [("planted/slow_check:slow", "pass"), ("planted/fast_check:fast", "pass"),
                         ("planted/failing_check:planted", "fail")], names
    assert names[3] == ("planted/dying_check:script-error", "fail")
    assert "worker process died" in report.checks[3].detail
    assert report.finish() == 1


def test_scripts_sharing_a_heavy_import_run_on_one_worker_and_the_longest_start_first(tmp_path, monkeypatch):
    """Two scripts of one SHARED_IMPORT group land on the same worker even when another
    worker is idle first; LONGEST_FIRST starts the named script before earlier ones."""
    body = "    import os\n    report.run('pid', lambda: str(os.getpid()))"
    first, second = (_planted(tmp_path, name, body) for name in ("group_a", "group_b"))
    others = [_planted(tmp_path, f"other_{i}", body) for i in range(3)]
    longest = _planted(tmp_path, "longest", "    import os, time\n    time.sleep(1.0)\n    report.run('pid', lambda: str(os.getpid()))")
    monkeypatch.setattr(sr, "script_area", lambda path, root=None: "planted")
    monkeypatch.setattr(run_all_checks, "SHARED_IMPORT", {"group_a": "heavy", "group_b": "heavy"})
    monkeypatch.setattr(run_all_checks, "LONGEST_FIRST", ("longest",))
    paths = [first, *others, second, longest]
    assert [p.stem for _, p in run_all_checks.dispatch_order(paths)][:2] == ["longest", "group_a"]
    report = sr.Report(str(RUNNER), json_mode=True)
    run_all_checks.run_parallel(paths, 2, report)
    pid = {c.name.split("/")[1].split(":")[0]: c.detail for c in report.checks}
    assert [c.name.split("/")[1].split(":")[0] for c in report.checks] == [p.stem for p in paths]  # discovery order
    assert pid["group_a"] == pid["group_b"] != pid["longest"], pid


def test_next_job_leaves_a_group_to_the_worker_that_has_it_and_waits_rather_than_import_it_twice(monkeypatch):
    from pathlib import Path

    monkeypatch.setattr(run_all_checks, "SHARED_IMPORT", {"lm_a": "transformers", "lm_b": "transformers"})
    todo = [(0, Path("lm_b.py")), (1, Path("plain.py"))]
    assert run_all_checks.next_job(todo, has={"transformers"}, elsewhere=set()) == 0  # its group first
    assert run_all_checks.next_job(todo, has=set(), elsewhere={"transformers"}) == 1  # left to the other
    assert run_all_checks.next_job(todo[:1], has=set(), elsewhere={"transformers"}) is None  # waits
    assert run_all_checks.next_job(todo[:1], has=set(), elsewhere=set()) == 0  # nobody has it yet


def test_dispatch_names_are_bundled_scripts():
    stems = {p.stem for p in SCRIPTS}
    assert set(run_all_checks.LONGEST_FIRST) <= stems and set(run_all_checks.SHARED_IMPORT) <= stems


def test_what_a_check_starts_gets_sigterm_back_while_the_worker_outlives_it(tmp_path, monkeypatch):
    """A worker swallows SIGTERM (the runner decides), but a process a check execs or forks
    gets the default, as when the script runs alone: with SIG_IGN inherited, torchrl's
    PythonExecutorService.cleanup() waited 1 s for a SIGTERM that did nothing."""
    body = (
        "    import os, signal, subprocess, sys\n"
        "    code = 'import signal; print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)'\n"
        "    execd = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True).stdout.strip()\n"
        "    r, w = os.pipe()\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os.write(w, str(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL).encode())\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
        "    forked = os.read(r, 10).decode()\n"
        "    os.kill(os.getpid(), signal.SIGTERM)  # the worker itself lives on\n"
        "    report.run('dispositions', lambda: f'exec {execd} fork {forked}')"
    )
    probe = _planted(tmp_path, "probe", body)
    monkeypatch.setattr(sr, "script_area", lambda path, root=None: "planted")
    report = sr.Report(str(RUNNER), json_mode=True)
    run_all_checks.run_parallel([probe, probe], 2, report)
    assert [(c.status, c.detail) for c in report.checks] == [("pass", "exec True fork True")] * 2


def test_parallel_and_sequential_runs_give_the_same_rows(tmp_path):
    area = ["--only", "modules-and-policies", "--json"]
    seq = run_python([str(RUNNER), *area, "--jobs", "1"], cwd=tmp_path, timeout=570, warm=True)
    par = run_python([str(RUNNER), *area, "--jobs", "2"], cwd=tmp_path, timeout=570, warm=True)
    assert seq.returncode == par.returncode == 0, par.stderr[-1500:]
    rows = [[(c["name"], c["status"]) for c in json.loads(p.stdout)["checks"]] for p in (seq, par)]
    assert rows[0] == rows[1] and len(rows[0]) > 3


@pytest.mark.parametrize("how", ["ctrl-c to the runner", "sigterm to the group"])
def test_ctrl_c_or_sigterm_stops_every_worker_and_what_it_started(how, tmp_path):
    """SIGINT to the runner alone: it must stop its workers itself. SIGTERM to the whole
    process group, as ``timeout`` sends it: the workers must not die before the runner kills
    what they started (they ignore it), and the runner exits 143 after the same clean-up."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    temp = tmp_path / "tmp"  # where the workers' temporary files go (the auditor's run folder among them)
    temp.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen([sys.executable, str(RUNNER), "--jobs", "2"], cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(temp)},
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        kids = []
        while time.monotonic() < deadline and len(kids) < 2:  # wait for both workers
            kids = psutil.Process(proc.pid).children(recursive=True)
            time.sleep(0.2)
        time.sleep(2.0)
        kids = psutil.Process(proc.pid).children(recursive=True)
        if how == "ctrl-c to the runner":
            proc.send_signal(signal.SIGINT)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    code, last = (130, "interrupted") if how == "ctrl-c to the runner" else (143, "terminated by SIGTERM")
    assert proc.returncode == code, stderr[-1500:]
    assert stderr.strip().splitlines()[-1] == f"run_all_checks.py: {last}"
    assert "Traceback" not in stderr, stderr[-1500:]
    gone, alive = psutil.wait_procs(kids, timeout=10)
    assert len(kids) >= 2 and not alive, alive
    # torchinductor_<user>: torch's compile cache, made (empty) by `import torch._dynamo`, which
    # tensordict imports; shared by every process of the user, not ours to remove
    assert list(work.iterdir()) == [] and [p.name for p in temp.iterdir() if not p.name.startswith("torchinductor_")] == []
