"""User code in worker processes: a worker must import it by the name the checker loaded it under.

The shared loader (src/torchrl_skill/runtime/user_code.py) imports a user's FILE.py or module so that a
spawned worker (multiprocessing spawn: ParallelEnv, multi-process collectors) and a fresh
interpreter that only inherits the environment (how Ray's workers start) import it by the
same name; check_user_env.py reports a worker that still cannot import user code as a
loading problem with its fix, never as a fault of the user's env.

Before the fix, ``check_user_env.py envs.py:make_env`` with ``make_env`` returning
``ParallelEnv(2, factory)`` (factory in the same file) ran for minutes and failed 7 checks
("raised EOFError (no known cause)", "still running after 60 s"): the workers died with
``ModuleNotFoundError: No module named '_user_envs_...'``.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BUNDLE, FIXTURES, load_module, rows, run_in_process, run_python

from torchrl_skill.runtime import user_code as _user_code
from torchrl_skill.runtime import worker_imports as _worker_imports

ENV_FIXTURES = FIXTURES / "envs"
CHECKER = BUNDLE / "sub-skills" / "envs-and-transforms" / "scripts" / "check_user_env.py"
USER_CODE = "import json\n\n\ndef double(x):\n    return {'twice': 2 * x, 'json': json.__name__}\n"


def _child(conn, payload: bytes) -> None:
    """Runs in the spawned process: unpickle ``(fn, arg)`` there (by module name, as a worker
    does) and send back ``("ok", fn(arg))`` or ``("error", "Type: message")``."""
    import pickle

    try:
        fn, arg = pickle.loads(payload)
        conn.send(("ok", fn(arg)))
    except Exception as err:  # the failure is the answer
        conn.send(("error", f"{type(err).__name__}: {err}"))


def _in_spawned_worker(fn, arg):
    """``fn(arg)`` in a process started with multiprocessing's spawn, unpickling ``fn`` by its
    module name with this process's sys.path (what ParallelEnv's workers do); raises
    ModuleNotFoundError with the worker's message when the worker cannot import it."""
    import pickle

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child, pickle.dumps((fn, arg))))
    proc.start()
    child.close()
    try:
        status, value = parent.recv()
    finally:
        proc.join(60)
    if status == "error":
        raise ModuleNotFoundError(value) if value.startswith("ModuleNotFoundError") else RuntimeError(value)
    return value


def _in_fresh_interpreter(fn, arg) -> subprocess.CompletedProcess:
    """``fn(arg)`` in a new ``python`` that inherits only the environment (PYTHONPATH), not
    sys.path: how a Ray worker started by ``ray.init()`` sees the driver. ``fn`` travels
    through cloudpickle, which sends a module-level function by reference."""
    import cloudpickle

    code = "import cloudpickle, sys; print(cloudpickle.loads(sys.stdin.buffer.read())(%r)['twice'])" % arg
    return subprocess.run([sys.executable, "-c", code], input=cloudpickle.dumps(fn), capture_output=True,
                          env=dict(os.environ), cwd="/", timeout=300)


def _write(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text(USER_CODE)
    return path


@pytest.mark.parametrize("file_name", ["user_code_plain_mod.py", "user-code-with-hyphens.py", "json.py"],
                         ids=["module-name", "not-a-module-name", "shadows-stdlib-json"])
def test_file_target_is_importable_by_its_name_in_workers(tmp_path, file_name):
    """A FILE.py:func target: the function's module name resolves, in a spawned worker and in
    a fresh interpreter, to the user's file; a stem that is no module name or that another
    module already holds (json) gets an importable alias, never the other module."""
    path = _write(tmp_path, file_name)
    fn = _user_code.load_attr(_user_code.parse_target(f"{path}:double"))
    assert fn(1) == {"twice": 2, "json": "json"}
    assert _in_spawned_worker(fn, 21) == {"twice": 42, "json": "json"}
    fresh = _in_fresh_interpreter(fn, 4)
    assert fresh.returncode == 0 and fresh.stdout.decode().split() == ["8"], fresh.stderr[-600:]
    assert _worker_imports.unimportable_in_workers(fn) == []
    if file_name == "user_code_plain_mod.py":
        assert fn.__module__ == "user_code_plain_mod"  # the same name the user's own import gives


def test_module_target_is_importable_in_workers(tmp_path, monkeypatch):
    """A module:func target found from the current folder stays importable after the load
    (the folder was taken off sys.path again before the fix)."""
    _write(tmp_path, "user_code_cwd_mod.py")
    monkeypatch.chdir(tmp_path)
    fn = _user_code.load_attr(_user_code.parse_target("user_code_cwd_mod:double"))
    monkeypatch.chdir("/")
    assert _in_spawned_worker(fn, 5)["twice"] == 10
    fresh = _in_fresh_interpreter(fn, 6)
    assert fresh.returncode == 0 and fresh.stdout.decode().split() == ["12"], fresh.stderr[-600:]


def test_a_module_loaded_by_path_under_another_name_is_not_importable(tmp_path):
    """The nearest excluded case, and what the checker saw before the fix: a module loaded by
    path under a name no folder provides cannot be imported by a worker, and
    unimportable_in_workers names it (module, where it was loaded from, what it holds)."""
    path = _write(tmp_path, "impl.py")
    spec = importlib.util.spec_from_file_location("user_code_private_name", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        with pytest.raises(ModuleNotFoundError, match="user_code_private_name"):
            _in_spawned_worker(module.double, 1)
        problems = _worker_imports.unimportable_in_workers(module.double)
        assert len(problems) == 1 and "'user_code_private_name'" in problems[0] and "impl.py" in problems[0], problems
        assert "double" in problems[0]
    finally:
        sys.modules.pop(spec.name, None)


def _checker_json(target: str, cwd: Path | None = None) -> tuple[int, dict]:
    proc = run_python([str(CHECKER), target, "--json", "--timeout", "600"], timeout=900, cwd=cwd, warm=True)
    assert proc.stdout.strip(), proc.stderr[-2000:]
    return proc.returncode, rows(json.loads(proc.stdout))


@pytest.mark.slow
@pytest.mark.parametrize("form", ["file", "module"])
def test_parallel_env_with_the_factory_in_the_users_file_passes(form):
    """The reproduction of defect 5, run as a user runs it: every check passes (or is skipped
    with its reason) and the workers really started, for both target forms."""
    target = f"{ENV_FIXTURES / 'parallel_user_factory.py'}:make_env" if form == "file" else "parallel_user_factory:make_env"
    code, st = _checker_json(target, cwd=ENV_FIXTURES if form == "module" else None)
    failed = {k: v for k, v in st.items() if v[0] not in ("pass", "skip")}
    assert code == 0 and not failed, failed
    assert "2 worker processes started" in st["target:build"][1], st["target:build"]
    for check in ("env:reset-output", "env:check_env_specs", "env:rollout-next-keys-in-spec", "env:seed-reproducible"):
        assert st[check][0] == "pass", (check, st[check])


def test_worker_that_cannot_import_user_code_is_a_loading_row():
    """Found before any worker starts: the build row names the module, where it came from and
    the fix, says it is not a fault of the env, and the env checks do not run (no hang)."""
    st = run_in_process("envs-and-transforms/check_user_env", f"{ENV_FIXTURES / 'parallel_unimportable_factory.py'}:make_env")
    status, detail = st["target:build"]
    assert status == "fail" and detail.startswith("user-code loading problem, not a fault of the env"), detail
    assert "'hidden_env_factory'" in detail and "env_factory_impl.py" in detail and "fix:" in detail, detail
    env_rows = {k: v for k, v in st.items() if k.startswith("env:")}
    assert env_rows and all(s == "skip" and "target:build" in d for s, d in env_rows.values()), env_rows


@pytest.mark.slow
def test_worker_import_failure_is_also_caught_by_its_effect(monkeypatch):
    """With the static probe blind (it returns nothing), the workers really start and die;
    the build row quotes the worker's own error line and still calls it a loading problem."""
    load_module("envs-and-transforms/check_user_env")  # puts the checker's folder on sys.path
    from torchrl_skill.checks.envs import env_workers as _env_workers

    monkeypatch.setattr(_env_workers, "unimportable_in_workers", lambda obj: [])
    st = run_in_process("envs-and-transforms/check_user_env", f"{ENV_FIXTURES / 'parallel_unimportable_factory.py'}:make_env",
                        "--timeout", "600")
    status, detail = st["target:build"]
    assert status == "fail" and detail.startswith("user-code loading problem, not a fault of the env"), detail
    assert "ModuleNotFoundError: No module named 'hidden_env_factory'" in detail, detail
    assert all(v[0] == "skip" for k, v in st.items() if k.startswith("env:")), st


@pytest.mark.slow
def test_ray_workers_import_user_code_by_the_same_name(tmp_path):
    """Ray workers inherit the driver's environment, not its sys.path: PYTHONPATH carries
    the user's folder and the shim folder to them (a real local Ray, one CPU)."""
    pytest.importorskip("ray")
    (tmp_path / "my-ray-code.py").write_text("def double(x):\n    return 2 * x\n")
    (tmp_path / "plainmod_ray.py").write_text("def triple(x):\n    return 3 * x\n")
    proc = run_python([str(FIXTURES / "envs" / "ray_user_code.py"), str(tmp_path)], timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stderr[-3000:]
    row = json.loads(lines[-1])
    assert row["results"] == [8, 15], row
    assert row["modules"][1] == "plainmod_ray" and row["modules"][0].startswith("_user_my_ray_code_")
