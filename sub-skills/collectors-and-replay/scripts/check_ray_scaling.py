"""Check TorchRL's Ray scale-out on a local one-CPU Ray: RayReplayBuffer, Ray collector, clean exit.

Without flags it only probes whether ray is installed (never importing it) and reports the
Ray checks as skipped. With --ray it starts a private local Ray
(ray.init(address="local", num_cpus=1, include_dashboard=False)), runs a RayReplayBuffer
(extend, sample, len through the remote actor), optionally (--ray-collector, slower: the
actor imports torchrl) a Collector(backend="ray") on PendulumEnv, then ray.shutdown() in a
finally block and proves that no raylet, gcs_server or Ray worker process started by this
run is left (psutil, waiting up to --grace seconds). ray missing: the checks say "missing".
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import skill_report as sr  # noqa: E402

EXAMPLE = "python sub-skills/collectors-and-replay/scripts/check_ray_scaling.py --ray --json"
RAY_INSTALL = "pip install ray (or torchrl[distributed])"
# Process names a local Ray session starts (ray 2.60.0): the GCS, the raylet and its agents,
# and the workers ("ray::<ActorClass>" once an actor runs).
RAY_PROCESS_MARKERS = ("raylet", "gcs_server", "ray::", "dashboard", "runtime_env", "default_worker", "log_monitor")


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--ray", action="store_true", help="start a local 1-CPU Ray and run RayReplayBuffer (about 10-20 s)")
    parser.add_argument(
        "--ray-collector",
        action="store_true",
        help="with --ray, also run Collector(backend='ray') on PendulumEnv (slower: the actor imports torchrl)",
    )
    parser.add_argument("--grace", type=float, default=10.0, help="seconds to wait for Ray processes to exit (default: 10)")
    return parser


def make_env():
    """PendulumEnv factory, module-level so a Ray actor can unpickle it by reference."""
    from torchrl.envs import PendulumEnv

    return PendulumEnv()


def is_ray_process(desc: str) -> bool:
    """True when a process description (name + argv head) belongs to a Ray session."""
    low = desc.lower()
    return any(m in low for m in RAY_PROCESS_MARKERS) or "ray/" in low or "ray\\" in low


class RaySession:
    """One local Ray started by this script; ``stop()`` is idempotent and runs in finally."""

    def __init__(self):
        self.started = False
        self.was_started = False
        self.seen: dict = {}
        self.before: dict = {}

    def start(self) -> str:
        import ray

        sr.expect(not ray.is_initialized(), "a Ray session is already initialized in this process")
        try:
            self.before = sr.child_processes()
        except sr.BackendMissing:
            self.before = {}
        ray.init(
            address="local",  # never attach to another cluster found via RAY_ADDRESS or /tmp/ray
            num_cpus=1,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
        self.started = True
        self.was_started = True
        res = ray.cluster_resources()
        return f"ray {ray.__version__}: local session, resources CPU={res.get('CPU')}"

    def note_processes(self) -> None:
        try:
            self.seen.update({p: d for p, d in sr.child_processes().items() if p not in self.before})
        except sr.BackendMissing:
            pass

    def stop(self) -> None:
        if self.started:
            import ray

            ray.shutdown()
            self.started = False


def check_replay_buffer(session: RaySession) -> str:
    """RayReplayBuffer: the buffer lives in a Ray actor; extend/sample/len go through it."""
    from functools import partial

    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, RayReplayBuffer

    rb = RayReplayBuffer(
        storage=partial(LazyTensorStorage, 100),  # constructors, not instances, cross to the actor
        batch_size=8,
        remote_config={"num_cpus": 0, "num_gpus": 0},
    )
    try:
        data = TensorDict({"obs": torch.arange(50.0).unsqueeze(-1), "step": torch.arange(50)}, batch_size=[50])
        rb.extend(data)
        n = len(rb)
        sample = rb.sample()
        session.note_processes()
        sr.expect(n == 50, f"RayReplayBuffer holds {n} after extending 50")
        sr.expect(sample.batch_size == torch.Size([8]), f"sample batch {list(sample.batch_size)}, expected [8]")
        sr.expect(bool((sample["obs"].squeeze(-1) == sample["step"].float()).all()), "sampled rows mixed up")
    finally:
        rb.close()
    return f"RayReplayBuffer(storage=partial(LazyTensorStorage, 100)): len {n}, sample {list(sample.batch_size)} consistent; actor closed"


def check_collector(session: RaySession) -> str:
    """Collector(backend="ray", num_collectors=1): batches come back from a Ray actor."""
    import torch
    from torchrl.collectors import Collector

    collector = Collector(
        make_env,
        None,
        backend="ray",
        num_collectors=1,
        frames_per_batch=20,
        total_frames=40,
        backend_options={"remote_configs": {"num_cpus": 1, "num_gpus": 0, "memory": 2**28}},
    )
    try:
        shapes = []
        for batch in collector:
            session.note_processes()
            shapes.append(list(batch.batch_size))
            sr.expect(("next", "reward") in batch.keys(True), 'Ray collector batch lacks ("next", "reward")')
    finally:
        collector.shutdown()
    sr.expect(sum(torch.Size(s).numel() for s in shapes) == 40, f"Ray collector returned batches {shapes} for 40 frames")
    return f"{type(collector).__name__} via Collector(backend='ray'): batches {shapes}; shut down"


def check_no_leftover(session: RaySession, grace: float) -> str:
    """After ray.shutdown(): no process started during the run is alive (sr.leftover_processes)."""
    if not session.was_started:
        raise sr.CheckSkipped("Ray was not started (see ray:init-local-1cpu); nothing to prove")
    sr.child_processes()  # BackendMissing without psutil
    sr.expect(bool(session.seen), "no Ray child process was seen while Ray ran; the leftover check would prove nothing")
    left = sr.leftover_processes(session.before, grace)
    ray_left = {p: d for p, d in left.items() if is_ray_process(d)}
    sr.expect(not left, f"processes left after ray.shutdown(): {sorted(left.items())[:6]}")
    named = sorted({d.split()[0] for d in session.seen.values()})
    return f"ray.shutdown(): all {len(session.seen)} Ray child processes gone ({', '.join(named)[:160]}); {len(ray_left)} left"


def run_checks(args, report: sr.Report) -> None:
    report.run("ray:installed", lambda: sr.optional_backend("ray", install=RAY_INSTALL))
    probe = report.result("ray:installed")
    names = ["ray:init-local-1cpu", "ray:replay-buffer", "ray:collector", "ray:shutdown-no-leftover"]
    if probe.status == "missing":
        for name in names:
            report.add(name, "missing", f"ray not installed; install: {RAY_INSTALL}")
        return
    if not args.ray:
        for name in names:
            report.add(name, "skip", "not asked for (pass --ray)")
        return
    session = RaySession()
    try:
        report.run(names[0], session.start)
        init = report.result(names[0])
        if init.status == "pass":
            report.run(names[1], lambda: check_replay_buffer(session))
            if args.ray_collector:
                report.run(names[2], lambda: check_collector(session))
            else:
                report.add(names[2], "skip", "not asked for (pass --ray --ray-collector)")
        else:
            for name in names[1:3]:
                report.add(name, "skip", "Ray did not start (see ray:init-local-1cpu)")
    finally:
        session.stop()
    report.run(names[3], lambda: check_no_leftover(session, args.grace))


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)


if __name__ == "__main__":
    sr.main_guard(main)
