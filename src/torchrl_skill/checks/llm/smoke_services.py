"""Smoke of TorchRL service lifecycles on CPU, proving nothing is left running.

Direct placement: a ``CSVLogger`` used through the ``torchrl.services.Service`` owner
contract (start, client, is_alive, shutdown). Process placement: a ``ProcessLogger``
owning a ``CSVLogger`` in a child process (client logs, owner shuts down, child gone).
``PythonExecutorService`` runs a harmless snippet in its interpreter process, hits its
timeout on a sleeping one, and its processes are gone after ``cleanup()``. With --ray,
the ``get_services()`` registry on a local Ray (started and shut down here) serves a
``PythonExecutorService`` actor for real, then ``cleanup``/``reset``/``shutdown`` and
``ray.shutdown``. Ray runs on 127.0.0.1 only, with its session folder and the workers'
temporary files in a temporary folder this script removes; the check fails if any
temporary file or Ray process is left.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/smoke_services.py --ray --json"
SNIPPET = "print(sum(range(10)))"
SLEEPER = "import time\ntime.sleep(30)"
# PythonExecutorService's ``timeout`` also bounds each interpreter's start: it waits that long
# for the interpreter's ready line (torchrl/envs/llm/transforms/tools.py, 0.14.1). A Ray worker
# on two busy cores missed 0.5 s ("ActorDiedError ... Process failed to initialize within
# timeout"), so the registry check, which runs only the quick snippet, gives the start room.
READY_S = 60.0


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--ray", action="store_true", help="also start a local Ray and exercise get_services() (10-30 s)")
    parser.add_argument("--exec-timeout", type=sr.number_above(0.0), default=0.5, metavar="SECONDS",
                        help="PythonExecutorService timeout in seconds; the sleeping snippet waits it out (default: 0.5)")
    # Starting a local Ray (GCS, raylet, a worker) took 34-60+ s with both cores busy: a 60 s
    # limit failed the registry check on load alone (tests/README.md). A hang still fails.
    sr.add_timeout_flag(parser, default=300.0)
    return parser


def check_direct() -> str:
    from torchrl.record.loggers import CSVLogger

    with tempfile.TemporaryDirectory() as tmp:
        owner = CSVLogger(exp_name="smoke", log_dir=tmp)
        sr.expect(owner.start() is owner, "Service.start() must return the owner")
        sr.expect(owner.is_alive, "owner not alive after start()")
        client = owner.client()
        client.log_scalar("reward", 1.5, step=0)
        owner.shutdown()
        files = [p.name for p in Path(tmp).rglob("*.csv")]
        sr.expect(files, "no CSV file written by the direct logger")
    sr.evidence(len(files), "CSV files the logger wrote")
    return f"CSVLogger start()->self, client().log_scalar, shutdown(); wrote {files}"


def check_process() -> str:
    from torchrl.record.loggers import CSVLogger, ProcessLogger

    before = sr.child_processes()
    with tempfile.TemporaryDirectory() as tmp:
        owner = ProcessLogger(CSVLogger, exp_name="smoke", log_dir=tmp, mp_context="fork")
        try:
            owner.start()
            spawned = {p: d for p, d in sr.child_processes().items() if p not in before}
            sr.expect(owner.is_alive and spawned, "ProcessLogger started no child process")
            owner.client().log_scalar("reward", 2.0, step=0)
        finally:
            owner.shutdown(timeout=10.0)
        left = sr.leftover_processes(before, grace=10.0)
        sr.expect(not left, f"ProcessLogger child processes still alive after shutdown: {left}")
        files = [p.name for p in Path(tmp).rglob("*.csv")]
        sr.expect(files, "the child process wrote no CSV file")
    sr.evidence(len(spawned), "child processes seen, then gone")
    return f"ProcessLogger child pid(s) {sorted(spawned)} logged {files} and exited on shutdown()"


def _private_tempdir(tmp: str):
    """Point ``tempfile`` at ``tmp`` while a check runs (PersistentPythonProcess writes its
    interpreter script with ``tempfile.NamedTemporaryFile``), so leftovers can be counted."""
    previous = tempfile.tempdir
    tempfile.tempdir = tmp
    return previous


def check_executor(args) -> str:
    from torchrl.envs.llm.transforms.tools import PythonExecutorService

    before = sr.child_processes()
    with tempfile.TemporaryDirectory() as tmp:
        previous = _private_tempdir(tmp)
        try:
            svc = PythonExecutorService(pool_size=1, timeout=args.exec_timeout)
            try:
                spawned = {p: d for p, d in sr.child_processes().items() if p not in before}
                sr.expect(spawned, "PythonExecutorService started no interpreter process")
                ok = svc.execute(SNIPPET)
                sr.expect(ok["success"] and ok["stdout"].strip() == "45", f"snippet result {ok}")
                t0 = time.monotonic()
                slow = svc.execute(SLEEPER)
                waited = time.monotonic() - t0
                sr.expect(not slow["success"] and "timed out" in slow["stderr"], f"sleeping snippet not stopped: {slow}")
                again = svc.execute(SNIPPET)
                sr.expect(again["success"], f"interpreter not restarted after the timeout: {again}")
            finally:
                svc.cleanup()
        finally:
            tempfile.tempdir = previous
        left_files = sorted(p.name for p in Path(tmp).iterdir())
    left = sr.leftover_processes(before, grace=10.0)
    sr.expect(not left, f"interpreter processes still alive after cleanup(): {left}")
    sr.expect(not left_files, f"temporary files left after cleanup(): {left_files}")
    sr.evidence(len(spawned), "interpreter processes seen, then gone")
    return (
        f"stdout {ok['stdout'].strip()!r}; sleep stopped after {waited:.1f}s with {slow['stderr']!r}; "
        f"{len(spawned)} process(es) and their temporary scripts gone after cleanup()"
    )


def local_ray_config(tmp: str) -> dict:
    """``ray.init`` arguments for a private Ray (``_ray_local.init_kwargs``: local, loopback,
    its session folder under ``tmp``), plus the workers' temporary files under ``tmp``."""
    from torchrl_skill.runtime import ray_local as _ray_local

    return {
        **_ray_local.init_kwargs(os.path.join(tmp, "ray"), num_cpus=2),
        "runtime_env": {"env_vars": {"TMPDIR": os.path.join(tmp, "workers")}},
    }


def check_ray(args) -> str:
    sr.optional_backend("ray", install="pip install ray")
    from torchrl_skill.runtime import ray_local as _ray_local
    import ray
    from torchrl.envs.llm.transforms.tools import PythonExecutorService
    from torchrl.services import get_services

    sr.expect(not ray.is_initialized(), "Ray already initialised in this process; run in a fresh process")
    before = sr.child_processes()
    services = None
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        os.makedirs(os.path.join(tmp, "workers"))
        try:
            with _ray_local.offline_env():
                services = get_services(backend="ray", ray_init_config=local_ray_config(tmp), namespace="torchrl_skill_smoke")
            services.register("python_executor", PythonExecutorService, pool_size=1, timeout=READY_S, num_cpus=1)
            ray_children = {p: d for p, d in sr.child_processes().items() if p not in before}
            sr.expect(ray_children, "no Ray child process found after register(): this Ray is not local, "
                      "so the leftover check below would prove nothing")
            names = services.list()
            sr.expect(names == ["python_executor"], f"registry lists {names}")
            actor = services["python_executor"]
            out = ray.get(actor.execute.remote(SNIPPET), timeout=args.timeout)
            sr.expect(out["success"] and out["stdout"].strip() == "45", f"remote snippet result {out}")
            ray.get(actor.cleanup.remote(), timeout=args.timeout)  # reset() kills the actor: its files go first
            services.reset()
            sr.expect(services.list() == [], f"registry not empty after reset(): {services.list()}")
            still_up = ray.is_initialized()  # reset() ends the service actors, not Ray
        finally:
            if services is not None:
                services.shutdown(raise_on_error=False)
            ray.shutdown()
        left_files = sorted(p.name for p in Path(tmp, "workers").iterdir())
    left = sr.leftover_processes(before, grace=30.0)
    sr.expect(not left, f"Ray processes still alive after ray.shutdown(): {left}")
    sr.expect(not left_files, f"temporary files left by the Ray worker: {left_files}")
    sr.expect(not Path(tmp).exists(), f"Ray's temporary folder {tmp} could not be removed")
    sr.evidence(len(ray_children), "Ray child processes seen, then gone")
    return (
        f"get_services('ray') served {sorted(names)}; remote stdout '45'; reset() emptied it"
        f"{' and left Ray running' if still_up else ''}; "
        f"{len(ray_children)} Ray child process(es) seen while running, none left after ray.shutdown(); "
        "no temporary file left"
    )


CHECKS = [
    sr.Check("services:direct-lifecycle", check_direct, proves="an in-process logger service starts, logs and shuts down"),
    sr.Check("services:process-lifecycle", check_process, proves="ProcessLogger's child process logs and exits on shutdown()"),
    sr.Check("services:python-executor", check_executor,
             proves="PythonExecutorService runs code, stops a hang at its timeout, restarts, and leaves nothing on cleanup()"),
    sr.Check("services:ray-registry", check_ray, flag="ray",
             proves="the Ray service registry serves a remote executor and leaves no process or file after shutdown"),
]


def run_checks(args, report) -> None:
    sr.run_declared(CHECKS, report, args=args)


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
