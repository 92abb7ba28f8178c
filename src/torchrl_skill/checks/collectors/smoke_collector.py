"""Smoke-test TorchRL collectors on PendulumEnv: Collector into a replay buffer, weight sync.

By default (one process, seconds): a Collector fills a replay buffer through replay_buffer=
(the iterator then yields None), max_frames_per_traj truncates trajectories, a batched env
(SerialEnv) fills a LazyTensorStorage(ndim=2) with one row per frame,
Collector(trajs_per_batch=..., replay_buffer=rb) stores whole trajectories that a
SliceSampler cuts into one-trajectory slices, and
update_policy_weights_(TensorDict.from_module(trainer_policy)) copies a changed trainer
policy into the collector's own copy (a control run without the call keeps the old
weights, so the check can fail).
With --workers N: a MultiSyncCollector over N spawned workers, each running a SerialEnv,
writes into a shared ndim=2 storage; a weight change pushed with update_policy_weights_()
must show in the NEXT batch; shutdown() must leave no worker alive. Ctrl-C stops the
workers and exits 130.
--diagnose FILE reads a saved traceback or log and names the cause and fix of every fault
of the bundle's error index found in it (src/torchrl_skill/data/error_index.json), and the replacement of
each removed collector name (src/torchrl_skill/data/api_changes.json).

Testing seams (tests replace them to build the broken setups): collector_copy,
change_trainer_weights, push_weights, TRAJS_PER_BATCH.
"""

from __future__ import annotations

import signal
from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402
from torchrl_skill.checks.collectors.collector_diagnose import diagnose, read_log, renamed_collectors  # noqa: E402,F401
from torchrl_skill.checks.collectors.worker_run import WorkerRun  # noqa: E402

if __name__ == "__mp_main__":
    # A spawned collector worker imports this file before anything else. Ctrl-C in a
    # terminal reaches the whole process group: the main process stops its workers, so a
    # worker ignores SIGINT instead of dying mid-import with a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

EXAMPLE = (
    "python $SKILL_DIR/sub-skills/collectors-and-replay/scripts/smoke_collector.py --workers 2 --json\n"
    "  python $SKILL_DIR/sub-skills/collectors-and-replay/scripts/smoke_collector.py --diagnose worker.log"
)

TRAJS_PER_BATCH = 2  # collector:trajs-per-batch; None is the broken setup (one-step rows)


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument(
        "--workers",
        type=sr.int_at_least(0),
        default=0,
        help="also run a MultiSyncCollector over N worker processes and prove weight sync (default: 0, off; about 15-30 s)",
    )
    parser.add_argument(
        "--frames",
        type=sr.int_at_least(1),
        default=40,
        help="frames_per_batch of the single-process checks; odd values are rounded up (default: 40)",
    )
    parser.add_argument(
        "--diagnose",
        metavar="FILE",
        help="read a traceback or log FILE and report each known fault with its cause and fix (runs nothing else)",
    )
    return parser


# ---------------------------------------------------------------------------------------
# Diagnosis of a log or traceback


def check_diagnose(args) -> str:
    text = read_log(args.diagnose)
    faults = diagnose(text)
    sr.evidence(len(text.strip().splitlines()), "log lines read")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    return f"{Path(args.diagnose).name}: no known fault found; fix: python $SKILL_DIR/scripts/explain.py --error 'LAST LINE'"


# ---------------------------------------------------------------------------------------
# Single-process checks


def check_single_into_buffer(frames: int) -> str:
    """Collector(..., replay_buffer=rb): yields None per batch, rb holds every frame."""
    import torch
    from torchrl_skill.checks.collectors.collector_nets import make_env, make_policy
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    torch.manual_seed(0)
    rb = ReplayBuffer(storage=LazyTensorStorage(4 * frames), batch_size=8)
    collector = Collector(
        make_env, make_policy(), frames_per_batch=frames, total_frames=2 * frames,
        replay_buffer=rb, auto_register_policy_transforms=False,
    )
    try:
        yielded = list(collector)
    finally:
        collector.shutdown()
    sr.expect(len(yielded) == 2, f"collector yielded {len(yielded)} batches for total_frames=2*frames_per_batch")
    sr.expect(all(b is None for b in yielded), f"with replay_buffer= the collector yielded {type(yielded[0]).__name__}, expected None")
    sr.expect(len(rb) == 2 * frames, f"buffer holds {len(rb)} items after {2 * frames} frames")
    sr.evidence(len(rb), "frames written to the buffer")
    sample = rb.sample()
    for key in ("th", "action", ("next", "reward"), ("next", "done"), ("collector", "traj_ids")):
        sr.expect(key in sample.keys(True), f"sampled batch lacks {key!r}")
    return (
        f"Collector(replay_buffer=rb) yielded None x2; rb holds {len(rb)} frames; "
        f"sample {list(sample.batch_size)} has th, action, (next, reward), (collector, traj_ids)"
    )


def check_truncation(frames: int) -> str:
    """max_frames_per_traj=T resets every T steps and marks ("next", "truncated").

    The collector adds its own step counter; an env that already has a StepCounter raises
    ``ValueError: A 'step_count' key is already present in the environment ...`` (0.14.1).
    """
    import torch
    from torchrl_skill.checks.collectors.collector_nets import make_env
    from torchrl.collectors import Collector

    if frames < 8:  # trajectories of under 2 steps show no truncation pattern
        raise sr.CheckSkipped(f"not verified: --frames {frames} is under 8, so max_frames_per_traj=frames//4 would be under 2 steps")
    traj = frames // 4
    torch.manual_seed(0)
    collector = Collector(make_env(), None, frames_per_batch=frames, total_frames=frames, max_frames_per_traj=traj)
    try:
        batch = next(iter(collector))
    finally:
        collector.shutdown()
    sr.expect(batch.batch_size == torch.Size([frames]), f"batch {list(batch.batch_size)}, expected [{frames}]")
    trunc = batch["next", "truncated"].reshape(-1).nonzero().reshape(-1).tolist()
    want = list(range(traj - 1, frames, traj))
    sr.expect(trunc == want, f'("next","truncated") set at steps {trunc}, expected {want}')
    ids = batch["collector", "traj_ids"].unique().numel()
    want_ids = -(-frames // traj)  # ceil: a last, partial trajectory has its own id
    sr.expect(ids == want_ids, f"{ids} trajectory ids in one batch, expected {want_ids}")
    sr.evidence(len(want), "truncation points checked")
    return f"max_frames_per_traj={traj}: batch [{frames}], truncated at {want}, {ids} traj_ids"


def check_batched_env_storage(frames: int) -> str:
    """A batched env gives [2, T] batches: ndim=2 storage keeps frames; 1-D stores rows of T."""
    import torch
    from torchrl_skill.checks.collectors.collector_nets import make_batched_env
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    lens = {}
    for ndim in (1, 2):
        torch.manual_seed(0)
        rb = ReplayBuffer(storage=LazyTensorStorage(4 * frames, ndim=ndim))
        env = make_batched_env()
        collector = Collector(env, None, frames_per_batch=frames, total_frames=frames, replay_buffer=rb)
        try:
            for _ in collector:
                pass
        finally:
            collector.shutdown()
            if not env.is_closed:
                env.close()
        lens[ndim] = (len(rb), list(rb[:].batch_size))
    sr.expect(lens[2][0] == frames, f"ndim=2 storage holds {lens[2][0]} items after {frames} frames")
    sr.expect(lens[1][0] == 2, f"1-D storage under SerialEnv(2) holds {lens[1][0]} items; expected 2 rows of T (the silent fault)")
    sr.evidence(lens[2][0], "frames stored in the ndim=2 storage")
    return (
        f"SerialEnv(2), frames_per_batch={frames}: LazyTensorStorage(ndim=2) holds {lens[2][0]} frames "
        f"{lens[2][1]}; default ndim=1 holds {lens[1][0]} rows {lens[1][1]} (len counts rows, not frames)"
    )


def check_trajs_per_batch() -> str:
    """Collector(trajs_per_batch=2, replay_buffer=rb) over SerialEnv(2), one step per batch,
    writes each finished trajectory contiguously into a 1-D storage: every SliceSampler
    slice holds one trajectory, in step order (what reshape(-1) of the same batches breaks)."""
    import torch
    from torchrl_skill.checks.collectors.collector_nets import make_batched_env
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler

    torch.manual_seed(0)
    frames, traj_len, slice_len = 32, 8, 4  # 2 whole trajectories per env
    rb = ReplayBuffer(storage=LazyTensorStorage(frames), sampler=SliceSampler(slice_len=slice_len, traj_key=("collector", "traj_ids")))
    env = make_batched_env()
    collector = Collector(env, None, frames_per_batch=2, total_frames=frames, max_frames_per_traj=traj_len,
                          trajs_per_batch=TRAJS_PER_BATCH, replay_buffer=rb)
    try:
        yielded = list(collector)
    finally:
        collector.shutdown()
        if not env.is_closed:
            env.close()
    sr.expect(all(b is None for b in yielded), "with replay_buffer= the collector yielded batches, expected None")
    sr.expect(len(rb) == frames, f"buffer holds {len(rb)} frames after {frames} frames of whole trajectories")
    sample = rb.sample(4 * slice_len)
    ids = sample["collector", "traj_ids"].reshape(4, slice_len)
    steps = sample["step_count"].reshape(4, slice_len)
    sr.expect(all(row.unique().numel() == 1 for row in ids), f"a slice mixes trajectories: {ids.tolist()}")
    sr.expect(bool((steps[:, 1:] - steps[:, :-1] == 1).all()), f"a slice is not in step order: {steps.tolist()}")
    sr.evidence(ids.shape[0], "slices checked")
    return (
        f"SerialEnv(2), frames_per_batch=2, trajs_per_batch=2, replay_buffer=rb: {len(rb)} frames in "
        f"{rb[:]['collector', 'traj_ids'].unique().numel()} contiguous trajectories; SliceSampler(slice_len={slice_len}) "
        "slices each hold one trajectory in step order"
    )


def collector_copy(trainer_policy):
    """The collector's own policy: a deep copy sharing no tensor with the trainer's."""
    import copy

    return copy.deepcopy(trainer_policy)


def change_trainer_weights(trainer_policy) -> None:
    """Stands in for an optimizer step: the trainer's bias goes to BIAS_AFTER."""
    from torchrl_skill.checks.collectors.collector_nets import BIAS_AFTER, set_bias

    set_bias(trainer_policy, BIAS_AFTER)


def push_weights(collector, trainer_policy) -> None:
    """Copy the trainer's weights into the collector's policy (torchrl 0.14.1).

    ``Collector.update_policy_weights_(weights)`` with no weight sync scheme writes
    ``weights`` in place into the collector's policy (``Collector._maybe_fallback_update``,
    torchrl/collectors/_single.py). Called with no argument it re-reads the policy the
    collector was built with, which is not the trainer's here.
    """
    from tensordict import TensorDict

    collector.update_policy_weights_(TensorDict.from_module(trainer_policy))


def two_batches(frames: int, push: bool) -> list[list[float]]:
    """Distinct actions of batch 0 and 1; between them the trainer's weights change (and are
    pushed when ``push``)."""
    import torch
    from torchrl_skill.checks.collectors.collector_nets import actions, make_env, make_policy
    from torchrl.collectors import Collector

    torch.manual_seed(0)
    trainer = make_policy()
    collector = Collector(
        make_env, collector_copy(trainer), frames_per_batch=frames, total_frames=-1,
        auto_register_policy_transforms=False,
    )
    seen = []
    try:
        for i, batch in enumerate(collector):
            seen.append(actions(batch))
            if i == 1:
                break
            change_trainer_weights(trainer)
            if push:
                push_weights(collector, trainer)
    finally:
        collector.shutdown()
    return seen


def check_weight_update_single(frames: int) -> str:
    """A Collector on its own policy copy sees a trainer change only once it is pushed.

    Control: without ``update_policy_weights_`` batch 1 keeps the old bias (otherwise the
    collector shares the trainer's tensors and the update proves nothing). Then with
    ``update_policy_weights_(TensorDict.from_module(trainer))`` batch 1 has the new bias.
    """
    from torchrl_skill.checks.collectors.collector_nets import BIAS_AFTER, BIAS_BEFORE

    control = two_batches(frames, push=False)
    sr.expect(
        control == [[BIAS_BEFORE], [BIAS_BEFORE]],
        f"without update_policy_weights_ the collector's actions went {control[0]} -> {control[1]}, expected "
        f"[{BIAS_BEFORE}] both times: the collector shares the trainer's weights, so an update proves nothing "
        "(give it its own copy: copy.deepcopy(policy) or policy_factory=)",
    )
    seen = two_batches(frames, push=True)
    sr.evidence(len(seen) + len(control), "batches compared (control and pushed)")
    sr.expect(seen[0] == [BIAS_BEFORE], f"batch 0 actions {seen[0]}, expected [{BIAS_BEFORE}]")
    sr.expect(
        seen[1] == [BIAS_AFTER],
        f"batch 1 actions {seen[1]} after update_policy_weights_(TensorDict.from_module(trainer)), "
        f"expected [{BIAS_AFTER}] (the weights did not reach the collector's policy)",
    )
    return (
        f"collector on a deepcopy of the trainer policy: without update actions stay {control[1]}; "
        f"update_policy_weights_(TensorDict.from_module(trainer)) -> next batch actions {seen[1]}"
    )


# ---------------------------------------------------------------------------------------
# Multi-process checks (--workers N)


def check_multi_fill(args, workers: WorkerRun) -> sr.Passed:
    """Spawn the workers, collect one batch into the shared ndim=2 buffer (actions = old bias)."""
    from torchrl_skill.checks.collectors.collector_nets import BIAS_BEFORE, actions

    workers.start(args.workers)
    out = next(workers.iterator)
    sr.expect(out is None, f"with replay_buffer= the collector yielded {type(out).__name__}, expected None")
    rb = workers.rb
    sr.expect(len(rb) == workers.frames, f"shared buffer holds {len(rb)} items after {workers.frames} frames")
    acts = actions(rb[:])
    sr.expect(acts == [BIAS_BEFORE], f"first batch actions {acts}, expected [{BIAS_BEFORE}]")
    sr.evidence(len(rb), "frames the workers wrote")
    detail = (
        f"MultiSyncCollector over {args.workers} workers x SerialEnv(2): LazyTensorStorage(ndim=2) "
        f"holds {len(rb)} frames {list(rb[:].batch_size)}; actions {acts}"
    )
    return sr.Passed(detail, workers)


def check_multi_weight_sync(multi: WorkerRun) -> str:
    """Change the bias in the trainer process, update_policy_weights_(), read the next batch."""
    from torchrl_skill.checks.collectors.collector_nets import BIAS_AFTER, BIAS_BEFORE

    change_trainer_weights(multi.policy)
    multi.collector.update_policy_weights_()
    out = next(multi.iterator)
    sr.expect(out is None, "second batch was not written to the buffer")
    sr.expect(len(multi.rb) == 2 * multi.frames, f"buffer holds {len(multi.rb)} after two batches of {multi.frames}")
    acts = multi.rb[:]["action"].reshape(-1)
    new, old = int((acts == BIAS_AFTER).sum()), int((acts == BIAS_BEFORE).sum())
    sr.expect(
        new == multi.frames and old == multi.frames,
        f"after update_policy_weights_() the next batch has {new} frames at the new bias {BIAS_AFTER} "
        f"and {old} at the old one; expected {multi.frames} each (weights did not reach the workers)",
    )
    sr.evidence(new, "frames at the new weights")
    return (
        f"bias {BIAS_BEFORE} -> {BIAS_AFTER} pushed with update_policy_weights_(): next batch "
        f"{new}/{multi.frames} frames at {BIAS_AFTER} from all {len(multi.procs)} workers"
    )


def check_multi_shutdown(multi: WorkerRun) -> str:
    """shutdown() ends every worker process (none is left for the safety net to kill)."""
    multi.collector.shutdown()
    sr.expect(bool(multi.procs), "no worker process was recorded")
    alive = [p.pid for p in multi.procs if p.is_alive()]
    sr.expect(not alive, f"worker processes still alive after shutdown(): {alive}")
    others = [p.pid for p in multi.started_here()]
    sr.expect(not others, f"processes started by the collector still alive after shutdown(): {others}")
    sr.evidence(len(multi.procs), "worker processes seen exiting")
    return f"shutdown(): {len(multi.procs)} workers exited (exit codes {[p.exitcode for p in multi.procs]})"


DIAGNOSE_CHECKS = [sr.Check("diagnose:log", check_diagnose, proves="no known fault of the error index is in the log")]

CHECKS = [
    sr.Check("collector:single-into-buffer", check_single_into_buffer,
             proves="with replay_buffer= the collector yields None and the buffer holds every frame"),
    sr.Check("collector:max-frames-per-traj", check_truncation,
             proves="max_frames_per_traj=T marks ('next', 'truncated') every T steps and starts a new trajectory"),
    sr.Check("collector:batched-env-ndim2", check_batched_env_storage,
             proves="an ndim=2 storage keeps one item per frame of a batched env; a 1-D one keeps rows of T"),
    sr.Check("collector:trajs-per-batch", check_trajs_per_batch,
             proves="trajs_per_batch writes whole trajectories contiguously: each slice holds one trajectory in step order"),
    sr.Check("collector:weight-update-single", check_weight_update_single,
             proves="a pushed weight change reaches the collector's policy at the next batch, and only when pushed"),
    sr.Check("multi:shared-buffer-ndim2", check_multi_fill, gives="multi", flag="workers",
             proves="the workers write every frame into the shared ndim=2 storage"),
    sr.Check("multi:weight-sync-next-batch", check_multi_weight_sync, flag="workers",
             proves="update_policy_weights_() reaches every worker at the next batch"),
    sr.Check("multi:shutdown", check_multi_shutdown, flag="workers", proves="shutdown() ends every worker process"),
]


def run_checks(args, report: sr.Report) -> None:
    if args.diagnose:
        sr.run_declared(DIAGNOSE_CHECKS, report, args=args)
        return
    frames = args.frames + (args.frames % 2)  # SerialEnv(2) splits a batch in two
    with WorkerRun() as workers:
        sr.run_declared(CHECKS, report, args=args, frames=frames, workers=workers)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
