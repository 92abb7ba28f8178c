"""Check TorchRL's Ray scale-out on a local one-CPU Ray: RayReplayBuffer, Ray collector, clean exit.

Without flags it only probes whether ray is installed (never importing it) and reports the
Ray checks as skipped. With --ray it starts a private local Ray (ray.init(address="local",
num_cpus=1, include_dashboard=False) in a temporary folder, on the loopback address, usage
stats off, no cloud-metadata probe), runs a RayReplayBuffer (extend, sample, len through the
remote actor), optionally (--ray-collector, slower: the actor imports torchrl) a
Collector(backend="ray") on PendulumEnv, then ray.shutdown() and proves that no raylet,
gcs_server or Ray worker process started by this run is left (psutil, waiting up to --grace
seconds) and that no session folder is left. ray missing: the checks say "missing".
"""

from __future__ import annotations


from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/collectors-and-replay/scripts/check_ray_scaling.py --ray --json"
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
    parser.add_argument(
        "--grace", type=sr.number_above(0.0), default=10.0, metavar="SECONDS",
        help="seconds to wait for Ray processes to exit after ray.shutdown() (default: 10)",
    )
    return parser


def make_env():
    """PendulumEnv factory, module-level so a Ray actor can unpickle it by reference."""
    from torchrl.envs import PendulumEnv

    return PendulumEnv()


def is_ray_process(desc: str) -> bool:
    """True when a process description (name + argv head) belongs to a Ray session."""
    low = desc.lower()
    return any(m in low for m in RAY_PROCESS_MARKERS) or "ray/" in low or "ray\\" in low


class RayRun:
    """The local Ray of one run and the child processes seen while it ran."""

    def __init__(self):
        from torchrl_skill.runtime.ray_local import LocalRay

        self.ray = LocalRay()
        self.before: dict = {}
        self.seen: dict = {}

    def __enter__(self) -> "RayRun":
        return self

    def __exit__(self, *exc) -> None:
        self.ray.stop()

    def note_processes(self) -> None:
        try:
            self.seen.update({p: d for p, d in sr.child_processes().items() if p not in self.before})
        except sr.BackendMissing:
            pass


def check_installed() -> str:
    return sr.optional_backend("ray", install=RAY_INSTALL)


def check_init(run: RayRun) -> sr.Passed:
    """Start the private local Ray; its node address must be loopback."""
    sr.optional_backend("ray", install=RAY_INSTALL)
    try:
        run.before = sr.child_processes()
    except sr.BackendMissing:
        run.before = {}
    address = run.ray.start()  # imports ray itself, after setting the environment it reads
    import ray

    res = ray.cluster_resources()
    where = f"node {address}, temp folder {run.ray.temp_dir}"
    if run.ray.imported_before:
        where += " (ray was imported before this check, so it kept its own node address choice)"
    else:
        sr.expect(address in ("127.0.0.1", "::1"), f"Ray's node address is {address}, not loopback")
    sr.evidence(1, "local Ray sessions started")
    return sr.Passed(f"ray {ray.__version__}: local session, CPU={res.get('CPU')}, {where}", run)


def check_replay_buffer(ray_run: RayRun) -> str:
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
        ray_run.note_processes()
        sr.expect(n == 50, f"RayReplayBuffer holds {n} after extending 50")
        sr.expect(sample.batch_size == torch.Size([8]), f"sample batch {list(sample.batch_size)}, expected [8]")
        sr.expect(bool((sample["obs"].squeeze(-1) == sample["step"].float()).all()), "sampled rows mixed up")
        sr.evidence(sample.batch_size.numel(), "sampled rows checked")
    finally:
        rb.close()
    return f"RayReplayBuffer(storage=partial(LazyTensorStorage, 100)): len {n}, sample {list(sample.batch_size)} consistent; actor closed"


def check_collector(ray_run: RayRun) -> str:
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
            ray_run.note_processes()
            shapes.append(list(batch.batch_size))
            sr.expect(("next", "reward") in batch.keys(True), 'Ray collector batch lacks ("next", "reward")')
    finally:
        collector.shutdown()
    sr.expect(sum(torch.Size(s).numel() for s in shapes) == 40, f"Ray collector returned batches {shapes} for 40 frames")
    sr.evidence(len(shapes), "batches from the Ray actor")
    return f"{type(collector).__name__} via Collector(backend='ray'): batches {shapes}; shut down"


def check_no_leftover(ray_run: RayRun, args) -> str:
    """ray.shutdown(), then: no process started during the run is alive
    (sr.leftover_processes) and no session folder is left, in ours or in Ray's default."""
    ray_run.ray.stop()
    sr.child_processes()  # BackendMissing without psutil
    sr.expect(bool(ray_run.seen), "no Ray child process was seen while Ray ran; the leftover check would prove nothing")
    left = sr.leftover_processes(ray_run.before, args.grace)
    sr.expect(not left, f"processes left after ray.shutdown(): {sorted(left.items())[:6]}")
    folders = ray_run.ray.left_behind()
    sr.expect(not folders, f"folders left after ray.shutdown(): {folders}")
    named = sorted({d.split()[0] for d in ray_run.seen.values()})
    sr.evidence(len(ray_run.seen), "Ray child processes seen, then gone")
    return (
        f"ray.shutdown(): all {len(ray_run.seen)} Ray child processes gone ({', '.join(named)[:160]}); "
        "temp folder removed, no session in Ray's default folder"
    )


CHECKS = [
    sr.Check("ray:installed", check_installed, proves="ray is importable"),
    sr.Check("ray:init-local-1cpu", check_init, gives="ray_run", flag="ray", proves="a private Ray session starts on loopback"),
    sr.Check("ray:replay-buffer", check_replay_buffer, flag="ray", proves="RayReplayBuffer extends and samples consistent rows"),
    sr.Check("ray:collector", check_collector, flag="ray_collector", proves="Collector(backend='ray') returns every frame asked for"),
    sr.Check("ray:shutdown-no-leftover", check_no_leftover, flag="ray",
             proves="ray.shutdown() leaves no process and no session folder"),
]


def run_checks(args, report: sr.Report) -> None:
    if args.ray_collector and not args.ray:
        sr.cannot_run("--ray-collector needs --ray", "pass --ray --ray-collector")
    with RayRun() as run:
        sr.run_declared(CHECKS, report, args=args, run=run)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
