"""Smoke of TorchRL service lifecycles on CPU, proving nothing is left running.

Direct placement: a ``CSVLogger`` used through the ``torchrl.services.Service`` owner
contract (start, client, is_alive, shutdown). Process placement: a ``ProcessLogger``
owning a ``CSVLogger`` in a child process (client logs, owner shuts down, child gone).
``PythonExecutorService`` runs a harmless snippet in its interpreter process, hits its
timeout on a sleeping one, and its processes are gone after ``cleanup()``. With --ray,
the ``get_services()`` registry on a local Ray (started and shut down here) serves a
``PythonExecutorService`` actor for real, then ``reset``/``shutdown`` and ``ray.shutdown``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import skill_report as sr  # noqa: E402

EXAMPLE = "python sub-skills/llm-vla-and-services/scripts/smoke_services.py --ray --json"
SNIPPET = "print(sum(range(10)))"
SLEEPER = "import time\ntime.sleep(30)"


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--ray", action="store_true", help="also start a local Ray and exercise get_services() (10-30 s)")
    parser.add_argument("--timeout", type=float, default=1.0, help="PythonExecutorService timeout in seconds (default: 1.0)")
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
    return f"ProcessLogger child pid(s) {sorted(spawned)} logged {files} and exited on shutdown()"


def check_executor(timeout: float) -> str:
    from torchrl.envs.llm.transforms.tools import PythonExecutorService

    before = sr.child_processes()
    svc = PythonExecutorService(pool_size=1, timeout=timeout)
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
    left = sr.leftover_processes(before, grace=10.0)
    sr.expect(not left, f"interpreter processes still alive after cleanup(): {left}")
    return (
        f"stdout {ok['stdout'].strip()!r}; sleep stopped after {waited:.1f}s with {slow['stderr']!r}; "
        f"{len(spawned)} process(es) gone after cleanup()"
    )


def check_ray(asked: bool, timeout: float) -> str:
    if not asked:
        raise sr.CheckSkipped("not asked for (pass --ray)")
    sr.optional_backend("ray", install="pip install ray")
    import ray
    from torchrl.envs.llm.transforms.tools import PythonExecutorService
    from torchrl.services import get_services

    sr.expect(not ray.is_initialized(), "Ray already initialised in this process; run in a fresh process")
    before = sr.child_processes()
    services = None
    try:
        # address="local" always starts a fresh local Ray, even when RAY_ADDRESS points at a cluster
        services = get_services(
            backend="ray",
            ray_init_config={"address": "local", "num_cpus": 2, "include_dashboard": False, "log_to_driver": False},
            namespace="torchrl_skill_smoke",
        )
        services.register("python_executor", PythonExecutorService, pool_size=1, timeout=timeout, num_cpus=1)
        ray_children = {p: d for p, d in sr.child_processes().items() if p not in before}
        sr.expect(ray_children, "no Ray child process found after register(): this Ray is not local, "
                  "so the leftover check below would prove nothing")
        names = services.list()
        sr.expect(names == ["python_executor"], f"registry lists {names}")
        out = ray.get(services["python_executor"].execute.remote(SNIPPET), timeout=60)
        sr.expect(out["success"] and out["stdout"].strip() == "45", f"remote snippet result {out}")
        services.reset()
        sr.expect(services.list() == [], f"registry not empty after reset(): {services.list()}")
    finally:
        if services is not None:
            services.shutdown(raise_on_error=False)
        ray.shutdown()
    left = sr.leftover_processes(before, grace=30.0)
    sr.expect(not left, f"Ray processes still alive after ray.shutdown(): {left}")
    return (
        f"get_services('ray') served {sorted(names)}; remote stdout '45'; reset() emptied it; "
        f"{len(ray_children)} Ray child process(es) seen while running, none left after ray.shutdown()"
    )


def run_checks(args, report) -> None:
    report.run("services:direct-lifecycle", check_direct)
    report.run("services:process-lifecycle", check_process)
    report.run("services:python-executor", lambda: check_executor(args.timeout))
    report.run("services:ray-registry", lambda: check_ray(args.ray, args.timeout))


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)


if __name__ == "__main__":
    sr.main_guard(main)
