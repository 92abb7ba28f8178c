"""Start ``python ARGS`` processes by forking a warm interpreter instead of starting a cold one.

A fresh interpreter's first act in this suite is nearly always to import torch, tensordict and
torchrl: about 5 s of CPU here, more than most of the runs it then does. A *zygote* is a plain
interpreter (no pytest, no threads) that imported them once and forks on request; the forked
process becomes what ``subprocess.Popen([sys.executable, *ARGS])`` would have started
(src/torchrl_skill/runtime/fork.py: session, streams, working folder, environment, ``sys.path``, ``sys.argv``,
``__main__``, signal dispositions, threads joined and ``atexit`` run at the end).

What a fork cannot give, and so what must stay on a cold interpreter: environment variables
read while torch/tensordict/torchrl are imported (the zygote imported them with the
environment it was started with; one zygote per such environment), hiding or swapping those
distributions (tests/hide_distributions.py, venvs), and what importing them prints. Each
caller opts in where none of that is under test; ``TORCHRL_SKILL_COLD=1`` turns every zygote
off for a whole run.

Run as ``python zygote.py MODULE...`` it is a zygote: it imports the MODULEs, then reads one
JSON request per stdin line and answers ``{"pid": N}`` per line, until EOF.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


# ------------------------------------------------------------------ inside the zygote
def serve(preload: list[str]) -> None:
    """The zygote's loop: import PRELOAD, then fork one process per request line until EOF."""
    import importlib

    for name in preload:
        importlib.import_module(name)
    sys.path.insert(0, str(HERE.parents[1] / "src"))  # the bundle's package (src/ holds only torchrl_skill)
    from torchrl_skill.runtime import fork as _fork

    base_path = sys.path[2:]  # without src/ and this file's folder, which no forked process has
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the forked processes: no zombies
    reply = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies on the pipe
    while line := sys.stdin.readline():
        request = json.loads(line)
        sys.stderr.flush()
        pid = _fork.fork()
        if pid == 0:
            _fork.become(request["args"], cwd=request["cwd"], env=request["env"], path=base_path,
                         stdin=request["stdin"], stdout=request["stdout"], stderr=request["stderr"],
                         status=request["status"])
        reply.write(json.dumps({"pid": pid}) + "\n")
        reply.flush()


# ------------------------------------------------------------------ the caller's side
class Forked:
    """A process started by a zygote: ``pid`` (a session leader), ``poll()``, ``wait(timeout)``
    and ``returncode`` like a Popen's.

    It is the zygote's child, and the zygote's kernel-side reaping leaves no zombie: a pid
    that no longer answers signal 0 has exited. Its exit code is the one it wrote to its
    status file; a process killed by a signal wrote none: ``-9``.
    """

    def __init__(self, pid: int, status: Path | None):
        self.pid, self.status = pid, status
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                text = self.status.read_text() if self.status is not None and self.status.exists() else ""
                self.returncode = int(text) if text else (0 if self.status is None else -9)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("forked process", timeout)
            time.sleep(0.02)
        return self.returncode

    def kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Zygote:
    """A zygote that imported ``preload`` with environment ``env``; started on first use,
    ended at this process's exit."""

    def __init__(self, preload: tuple[str, ...], env: dict):
        self.preload, self.env = preload, {k: v for k, v in env.items() if k != "PYTHONPATH"}
        self.proc: subprocess.Popen | None = None
        atexit.register(self.close)  # once: a restarted zygote is closed by the same call

    def _spawn(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(HERE), *self.preload], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=self.env, start_new_session=True)

    def start(self, args: list[str], *, cwd: str, env: dict, stdin: str = os.devnull, stdout: str, stderr: str,
              status: str | None = None) -> Forked:
        """Fork ``python ARGS`` (``stdin``/``stdout``/``stderr``: file paths, appended to)."""
        request = json.dumps({"args": list(args), "cwd": str(cwd), "env": dict(env), "stdin": stdin,
                              "stdout": stdout, "stderr": stderr, "status": status})
        for _ in range(2):  # a zygote that died (killed by a test's clean-up) is started again
            if self.proc is None or self.proc.poll() is not None:
                self._spawn()
            try:
                self.proc.stdin.write(request + "\n")
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
            except OSError:
                line = ""
            if line:
                return Forked(json.loads(line)["pid"], Path(status) if status else None)
            self.close()
        raise RuntimeError(f"the zygote for {self.preload} did not fork twice in a row")

    def run(self, args: list[str], *, cwd: str, env: dict, timeout: float | None) -> subprocess.CompletedProcess:
        """``subprocess.run([python, *ARGS], capture_output=True, text=True, timeout=...)``, forked."""
        with tempfile.TemporaryDirectory(prefix="torchrl-skill-zygote-") as tmp:
            out, err, status = (str(Path(tmp) / name) for name in ("out", "err", "status"))
            proc = self.start(args, cwd=cwd, env=env, stdout=out, stderr=err, status=status)
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill_group()
                raise subprocess.TimeoutExpired(["python", *args], timeout) from None
            read = lambda p: Path(p).read_text(errors="replace") if Path(p).exists() else ""  # noqa: E731
            return subprocess.CompletedProcess(["python", *args], code, read(out), read(err))

    def close(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        try:
            proc.stdin.close()
            proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            proc.kill()
            proc.wait()


def enabled() -> bool:
    return os.environ.get("TORCHRL_SKILL_COLD") != "1"


if __name__ == "__main__":
    serve(sys.argv[1:])
