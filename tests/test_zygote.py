"""The warm-interpreter harness (tests/zygote.py) gives what a cold ``python ARGS`` gives.

Tests that opt in (``run_python(..., warm=True)``, every in-process audit) trust a forked
process to behave as a fresh interpreter would: exit codes, streams, working folder,
``sys.argv``/``sys.path``/``__main__``, environment, ``atexit`` and non-daemon threads at
exit, an uncaught exception's traceback, and the auditor's rows. Each is compared here with a
cold interpreter on the same input.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import FIXTURES, rows, run_main, run_python

PROBE = textwrap.dedent("""
    import atexit, json, os, sys, threading, time
    print("out line")
    print("err line", file=sys.stderr)
    atexit.register(lambda: print("atexit ran", flush=True))
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread joined", flush=True))).start()
    print(json.dumps({"argv": sys.argv[1:], "argv0": os.path.basename(sys.argv[0]), "path0": sys.path[0],
                      "cwd": os.getcwd(), "name": __name__, "env": os.environ.get("ZYGOTE_PROBE"),
                      "pythonpath_first": "PYTHONPATH_DIR" in sys.path[1]}), flush=True)
    if "raise" in sys.argv:
        def deep():
            raise ValueError("from the script")
        deep()
    sys.exit(int(sys.argv[1]))
""")


def _both(args, **kwargs):
    return run_python(args, warm=False, **kwargs), run_python(args, warm=True, **kwargs)


@pytest.mark.parametrize("code", ["0", "3"])
def test_a_script_runs_as_in_a_cold_interpreter(tmp_path, code):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    (tmp_path / "PYTHONPATH_DIR").mkdir()
    cold, warm = _both([str(script), code, "more"], cwd=tmp_path,
                       env={"ZYGOTE_PROBE": "seen", "PYTHONPATH": str(tmp_path / "PYTHONPATH_DIR")})
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert cold.returncode == int(code)
    seen = json.loads(cold.stdout.splitlines()[1])
    assert seen == {"argv": [code, "more"], "argv0": "probe.py", "path0": str(tmp_path), "cwd": str(tmp_path),
                    "name": "__main__", "env": "seen", "pythonpath_first": True}
    assert cold.stdout.splitlines()[-2:] == ["thread joined", "atexit ran"]


def test_an_uncaught_exception_prints_the_same_traceback_and_exits_1(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    cold, warm = _both([str(script), "0", "raise"], cwd=tmp_path)
    assert cold.returncode == warm.returncode == 1
    assert warm.stderr == cold.stderr and "in deep" in cold.stderr and "zygote" not in warm.stderr


def test_dash_c_runs_as_in_a_cold_interpreter(tmp_path):
    code = "import os, sys; print(sys.argv, repr(sys.path[0]), __name__, os.getcwd()); sys.exit('bye')"
    cold, warm = _both(["-c", code, "x"], cwd=tmp_path)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr) == (1, f"['-c', 'x'] '' __main__ {tmp_path}\n", "bye\n")


def test_a_timeout_kills_the_forked_process_group(tmp_path):
    import subprocess

    script = tmp_path / "hang.py"
    script.write_text("import time\nwhile True:\n    time.sleep(0.1)\n")
    with pytest.raises(subprocess.TimeoutExpired):
        run_python([str(script)], timeout=2, warm=True, cwd=tmp_path)


@pytest.mark.slow
def test_the_auditor_gives_the_same_rows_from_a_warm_child(tmp_path, monkeypatch):
    # a fixture with failing and passing rows: env-seeding's re-seeding env
    from torchrl_skill.audit import runner

    target = str(FIXTURES / "audit" / "env_seeding" / "broken.py")
    argv = ("--seconds", "240", target, "--max-frames", "300")
    warm = rows(run_main("scripts/audit_run", *argv)[1])
    monkeypatch.setattr(runner, "START", runner.start_child)
    cold = rows(run_main("scripts/audit_run", *argv)[1])
    assert {k: v[0] for k, v in warm.items()} == {k: v[0] for k, v in cold.items()}
    assert warm["env-seeding"][0] == "fail" and sum(s == "pass" for s, _ in cold.values()) >= 5


FORKED_AUDIT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import torchrl  # noqa: F401 - as in the all-checks runner's worker: imported before the audit
from torchrl_skill.audit import runner
from torchrl_skill.audit import cli as audit_run
started = []
def start(*args):
    started.append(runner.fork_child(*args))
    return started[-1]
runner.START = start
import contextlib, io
out = io.StringIO()
with contextlib.redirect_stdout(out):
    audit_run.main(["--json", *sys.argv[2:]])
print("ROWS " + json.dumps({c["name"]: c["status"] for c in json.loads(out.getvalue())["checks"]}))
print("STARTED " + json.dumps([type(s).__name__ for s in started]))
"""


@pytest.mark.slow
def test_the_runner_forking_its_own_child_gives_the_same_rows():
    # run_all_checks.py's workers start the auditor's child with torchrl_skill.audit.runner.fork_child
    from conftest import BUNDLE

    target = str(FIXTURES / "audit" / "env_seeding" / "broken.py")
    argv = ("--seconds", "240", target, "--max-frames", "300")
    proc = run_python(["-c", FORKED_AUDIT, str(BUNDLE / "src"), *argv], timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ROWS ")), None)
    assert line, proc.stderr[-2000:]
    forked = json.loads(line[5:])
    warm = {k: v[0] for k, v in rows(run_main("scripts/audit_run", *argv)[1]).items()}
    assert forked == warm and forked["env-seeding"] == "fail"
    assert "STARTED " + json.dumps(["_Forked"]) in proc.stdout  # forked, not the cold fallback


FREEZE = r"""
import gc, os, sys
sys.path.insert(0, sys.argv[1])
from torchrl_skill.runtime import fork as _fork
garbage = [[i] for i in range(1000)]  # tracked objects the fork inherits
read, write = os.pipe()
pid = _fork.fork()
if pid == 0:
    os.write(write, str(gc.get_freeze_count()).encode())
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(read, 64).decode(), gc.get_freeze_count())
"""


def test_a_fork_leaves_the_inherited_objects_frozen_in_the_child_only(tmp_path):
    # what keeps a forked process's exit collection off the inherited heap (_fork.fork)
    from conftest import BUNDLE

    proc = run_python(["-c", FREEZE, str(BUNDLE / "src")], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    child, parent = map(int, proc.stdout.split())
    assert child > 1000 and parent == 0


def test_the_processes_tests_start_get_a_real_ctrl_c(tmp_path):
    """The Ctrl-C tests interrupt the scripts they start. A suite launched as a background job
    (`pytest &` from a script) inherits SIGINT ignored; conftest resets it, so cold and
    warm children alike install Python's KeyboardInterrupt handler. Without the reset, both
    print SIG_IGN here (and the Ctrl-C tests fail with exit 0 or a child that never stops)."""
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    for proc in _both(["-c", code], cwd=tmp_path):
        assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stdout + proc.stderr
