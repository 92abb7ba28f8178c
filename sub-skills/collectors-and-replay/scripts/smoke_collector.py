"""Smoke-test TorchRL collectors on PendulumEnv: Collector into a replay buffer, weight sync.

By default (one process, seconds): a single Collector fills a replay buffer through
replay_buffer= (the iterator then yields None), a batched env (SerialEnv) fills a
LazyTensorStorage(ndim=2) with one row per frame, max_frames_per_traj truncates
trajectories, and update_policy_weights_(TensorDict.from_module(trainer_policy)) copies a
changed trainer policy into the collector's own copy (a control run without the call keeps
the old weights, so the check can fail).
With --workers N: a MultiSyncCollector over N spawned worker processes, each running a
SerialEnv, writes into a shared ndim=2 storage; a weight change pushed with
update_policy_weights_() must show in the NEXT batch's actions; then shutdown() must leave
no worker alive. --diagnose FILE reads a traceback/log and names the fix of each known
collector fault found in it (removed names, 1-D storage under a batched env, ...).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import skill_report as sr  # noqa: E402

EXAMPLE = (
    "python sub-skills/collectors-and-replay/scripts/smoke_collector.py --workers 2 --json\n"
    "  python sub-skills/collectors-and-replay/scripts/smoke_collector.py --diagnose worker.log"
)

# Pendulum's action is clipped to [-2, 2]; the policy below outputs exactly its bias.
BIAS_BEFORE = 0.0
BIAS_AFTER = 0.5

# The bundle's single list of renamed/removed TorchRL names (owned by development-and-testing).
API_CHANGES = Path(__file__).resolve().parents[2] / "development-and-testing" / "scripts" / "api_changes.json"


def renamed_collectors(path: Path | None = None) -> dict[str, dict]:
    """Removed collector names: ``{"torchrl.collectors.Old": row}`` from api_changes.json.

    Each row has ``old``/``new`` (dotted paths), ``changed_in``, optional ``deprecated_in`` and
    ``removed_in`` (the rows of ``names`` whose ``old`` lives under ``torchrl.collectors``).
    Raises ``sr.CannotRun`` (exit 2) when the file is missing or has no such row.
    """
    path = Path(path or API_CHANGES)
    try:
        rows = json.loads(path.read_text())["names"]
    except (OSError, ValueError, KeyError) as exc:
        sr.cannot_run(f"cannot read the renamed-name table {path}: {exc}", "restore the bundle's api_changes.json")
    out = {r["old"]: r for r in rows if r["old"].startswith("torchrl.collectors.")}
    if not out:
        sr.cannot_run(f"{path} lists no torchrl.collectors row", "restore the bundle's api_changes.json")
    return out


def _split(dotted: str) -> tuple[str, str]:
    module, _, name = dotted.rpartition(".")
    return module, name


def diagnose_removed_names(text: str) -> list[str]:
    """``cannot import name 'X' from 'torchrl.collectors...'`` for each X in api_changes.json."""
    found = []
    for m in re.finditer(r"cannot import name '(\w+)' from '(torchrl\.collectors[\w.]*)'", text):
        row = renamed_collectors().get(f"{m.group(2)}.{m.group(1)}")
        if row is None:
            continue
        module, name = _split(row["new"])
        gone = f"removed in torchrl {row['removed_in']}" if row.get("removed_in") else f"changed in torchrl {row['changed_in']}"
        msg = f"{m.group(2)}.{m.group(1)} was {gone}; fix: from {module} import {name}"
        if msg not in found:
            found.append(msg)
    return found


# (regex on a log/traceback, cause, fix). Texts observed on torchrl 0.14.1 / tensordict 0.14.3.
# Removed-name imports are matched by diagnose_removed_names() from api_changes.json.
KNOWN_FAULTS = [
    (
        r"indexed destination TensorDict batch size is torch\.Size\(\[\d+, 1\]\).*differs from the source "
        r"batch size torch\.Size\(\[\d+, \d+\]\)",
        "a collector worker over a batched env (SerialEnv/ParallelEnv) writes [num_envs, T] batches "
        "into a 1-D storage",
        "build the buffer storage with ndim=2, e.g. LazyTensorStorage(max_size, ndim=2) "
        "(or LazyMemmapStorage(max_size, ndim=2)); ndim counts the env batch dims plus time",
    ),
    (
        r"At least one process failed",
        "a collector worker process died; its own traceback is printed above this line in the log",
        "read the worker traceback above it; with replay_buffer= over a batched env use a storage "
        "with ndim=2; keep env/policy factories module-level and the entry point under the __main__ guard",
    ),
    (
        r"An attempt has been made to start a new process before the\s+current process has finished "
        r"its bootstrapping phase",
        "a multi-process collector was built at import time of a module that spawned workers re-import",
        "put the collector construction under if __name__ == \"__main__\": and keep factories module-level",
    ),
    (
        r"Can't (pickle|get attribute) .*(lambda|<locals>)",
        "a lambda or local function was given as env/policy factory to a spawned worker",
        "define the factory with def at module level (spawn pickles functions by reference)",
    ),
]


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument(
        "--workers",
        type=sr.int_at_least(0),
        default=0,
        help="run a MultiSyncCollector over N worker processes and prove weight sync (default: 0, off)",
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
        help="read a traceback or log FILE and report each known collector fault with its fix",
    )
    return parser


# ---------------------------------------------------------------------------------------
# Factories: module-level so that spawned workers unpickle them by reference.


def make_env():
    """A PendulumEnv (torchrl.envs.PendulumEnv, 0.14.1): keys th, thdot [*B]; action [*B, 1]."""
    from torchrl.envs import PendulumEnv

    return PendulumEnv()


def make_batched_env():
    """SerialEnv of 2 PendulumEnv: batch_size [2]; a collector batch from it is [2, T]."""
    from torchrl.envs import SerialEnv

    return SerialEnv(2, make_env)


def __getattr__(name: str):
    """Module attribute hook (PEP 562): builds ``BiasPolicyNet`` on first use.

    torch may not be imported at module level (the contract test hides torchrl), yet a
    spawned worker unpickles the policy class by reference as ``<module>.BiasPolicyNet``;
    this hook creates it there too.
    """
    if name == "BiasPolicyNet":
        return _policy_net_cls()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _policy_net_cls():
    if "BiasPolicyNet" in globals():
        return globals()["BiasPolicyNet"]
    import torch

    class BiasPolicyNet(torch.nn.Module):
        """action = Linear(2, 1)([cos th, thdot]) with zero weight: the action equals the bias."""

        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)
            torch.nn.init.zeros_(self.linear.weight)
            torch.nn.init.constant_(self.linear.bias, BIAS_BEFORE)

        def forward(self, th, thdot):
            return self.linear(torch.stack([th.cos(), thdot], -1))

    BiasPolicyNet.__module__ = __name__
    BiasPolicyNet.__qualname__ = "BiasPolicyNet"
    globals()["BiasPolicyNet"] = BiasPolicyNet
    return BiasPolicyNet


def make_policy():
    """TensorDictModule(in_keys=["th", "thdot"], out_keys=["action"]) whose action is its bias.

    Setting ``policy.module.linear.bias`` changes every action to that value, which makes
    a weight update visible in collected data.
    """
    from tensordict.nn import TensorDictModule

    return TensorDictModule(_policy_net_cls()(), in_keys=["th", "thdot"], out_keys=["action"])


def set_bias(policy, value: float) -> None:
    """Set the policy's output bias in place (weights stay zero)."""
    import torch

    with torch.no_grad():
        policy.module.linear.bias.fill_(value)


def _actions(td) -> list[float]:
    return sorted({round(float(a), 4) for a in td["action"].reshape(-1).tolist()})


# ---------------------------------------------------------------------------------------
# Single-process checks


def check_single_into_buffer(frames: int) -> str:
    """Collector(..., replay_buffer=rb): yields None per batch, rb holds every frame."""
    import torch
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    torch.manual_seed(0)
    rb = ReplayBuffer(storage=LazyTensorStorage(4 * frames), batch_size=8)
    collector = Collector(
        make_env,
        make_policy(),
        frames_per_batch=frames,
        total_frames=2 * frames,
        replay_buffer=rb,
        auto_register_policy_transforms=False,
    )
    try:
        yielded = [batch for batch in collector]
    finally:
        collector.shutdown()
    sr.expect(len(yielded) == 2, f"collector yielded {len(yielded)} batches for total_frames=2*frames_per_batch")
    sr.expect(all(b is None for b in yielded), f"with replay_buffer= the collector yielded {type(yielded[0]).__name__}, expected None")
    sr.expect(len(rb) == 2 * frames, f"buffer holds {len(rb)} items after {2 * frames} frames")
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
    from torchrl.collectors import Collector

    traj = frames // 4
    torch.manual_seed(0)
    collector = Collector(
        make_env(),
        None,
        frames_per_batch=frames,
        total_frames=frames,
        max_frames_per_traj=traj,
    )
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
    return f"max_frames_per_traj={traj}: batch [{frames}], truncated at {want}, {ids} traj_ids"


def check_batched_env_storage(frames: int) -> str:
    """A batched env gives [2, T] batches: ndim=2 storage keeps frames; 1-D stores rows of T."""
    import torch
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
    sr.expect(
        lens[1][0] == 2,
        f"1-D storage under SerialEnv(2) holds {lens[1][0]} items; expected 2 rows of T (the silent fault)",
    )
    return (
        f"SerialEnv(2), frames_per_batch={frames}: LazyTensorStorage(ndim=2) holds {lens[2][0]} frames "
        f"{lens[2][1]}; default ndim=1 holds {lens[1][0]} rows {lens[1][1]} (len counts rows, not frames)"
    )


def collector_copy(trainer_policy):
    """The collector's own policy: a deep copy sharing no tensor with the trainer's."""
    import copy

    return copy.deepcopy(trainer_policy)


def push_weights(collector, trainer_policy) -> None:
    """Copy the trainer's weights into the collector's policy (torchrl 0.14.1).

    ``Collector.update_policy_weights_(weights)`` with no weight sync scheme falls back to
    ``Collector._maybe_fallback_update`` (torchrl/collectors/_single.py), which writes
    ``weights`` in place into the collector's policy. Called with no argument it re-reads
    the policy the collector was built with, which is not the trainer's here.
    """
    from tensordict import TensorDict

    collector.update_policy_weights_(TensorDict.from_module(trainer_policy))


def _two_batches(frames: int, push: bool) -> list[list[float]]:
    """Actions of batch 0 and 1; between them the trainer's bias changes (and is pushed)."""
    import torch
    from torchrl.collectors import Collector

    torch.manual_seed(0)
    trainer = make_policy()
    collector = Collector(
        make_env,
        collector_copy(trainer),
        frames_per_batch=frames,
        total_frames=-1,
        auto_register_policy_transforms=False,
    )
    seen = []
    try:
        for i, batch in enumerate(collector):
            seen.append(_actions(batch))
            if i == 0:
                set_bias(trainer, BIAS_AFTER)
                if push:
                    push_weights(collector, trainer)
            if i == 1:
                break
    finally:
        collector.shutdown()
    return seen


def check_weight_update_single(frames: int) -> str:
    """A Collector on its own policy copy sees a trainer change only once it is pushed.

    Control: without ``update_policy_weights_`` batch 1 keeps the old bias (otherwise the
    collector shares the trainer's tensors and the update proves nothing). Then with
    ``update_policy_weights_(TensorDict.from_module(trainer))`` batch 1 has the new bias.
    """
    control = _two_batches(frames, push=False)
    sr.expect(
        control == [[BIAS_BEFORE], [BIAS_BEFORE]],
        f"without update_policy_weights_ the collector's actions went {control[0]} -> {control[1]}, expected "
        f"[{BIAS_BEFORE}] both times: the collector shares the trainer's weights, so an update proves nothing "
        "(give it its own copy: copy.deepcopy(policy) or policy_factory=)",
    )
    seen = _two_batches(frames, push=True)
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


class _MultiRun:
    """Holds one MultiSyncCollector session shared by the --workers checks."""

    def __init__(self, workers: int):
        self.workers = workers
        self.collector = None
        self.policy = None
        self.rb = None
        self.iterator = None
        self.procs: list = []
        self.frames = 20 * workers  # 20 per worker: a [2, 10] batch from each SerialEnv(2)

    def start_and_fill(self) -> str:
        """Spawn the workers, collect one batch into a shared ndim=2 buffer (actions = old bias)."""
        import torch
        from torchrl.collectors import MultiSyncCollector
        from torchrl.data import LazyTensorStorage, ReplayBuffer

        torch.manual_seed(0)
        self.policy = make_policy()
        self.rb = ReplayBuffer(storage=LazyTensorStorage(10 * self.frames, ndim=2))
        self.collector = MultiSyncCollector(
            [make_batched_env] * self.workers,
            self.policy,
            frames_per_batch=self.frames,
            total_frames=-1,
            replay_buffer=self.rb,
            auto_register_policy_transforms=False,
        )
        self.procs = list(getattr(self.collector, "procs", []))
        self.iterator = iter(self.collector)
        out = next(self.iterator)
        sr.expect(out is None, f"with replay_buffer= the collector yielded {type(out).__name__}, expected None")
        sr.expect(len(self.rb) == self.frames, f"shared buffer holds {len(self.rb)} items after {self.frames} frames")
        acts = _actions(self.rb[:])
        sr.expect(acts == [BIAS_BEFORE], f"first batch actions {acts}, expected [{BIAS_BEFORE}]")
        return (
            f"MultiSyncCollector over {self.workers} workers x SerialEnv(2): LazyTensorStorage(ndim=2) "
            f"holds {len(self.rb)} frames {list(self.rb[:].batch_size)}; actions {acts}"
        )

    def push_weights(self) -> str:
        """Change the bias in the trainer process, update_policy_weights_(), read the next batch."""
        if self.iterator is None:
            raise sr.CheckSkipped("the workers did not start (see the previous check)")
        set_bias(self.policy, BIAS_AFTER)
        self.collector.update_policy_weights_()
        out = next(self.iterator)
        sr.expect(out is None, "second batch was not written to the buffer")
        sr.expect(len(self.rb) == 2 * self.frames, f"buffer holds {len(self.rb)} after two batches of {self.frames}")
        data = self.rb[:]
        acts = data["action"].reshape(-1)
        new = int((acts == BIAS_AFTER).sum())
        old = int((acts == BIAS_BEFORE).sum())
        sr.expect(
            new == self.frames and old == self.frames,
            f"after update_policy_weights_() the next batch has {new} frames at the new bias {BIAS_AFTER} "
            f"and {old} at the old one; expected {self.frames} each (weights did not reach the workers)",
        )
        return (
            f"bias {BIAS_BEFORE} -> {BIAS_AFTER} pushed with update_policy_weights_(): next batch "
            f"{new}/{self.frames} frames at {BIAS_AFTER} from all {self.workers} workers"
        )

    def close(self) -> None:
        if self.collector is not None:
            self.collector.shutdown()

    def check_shutdown(self) -> str:
        """After shutdown() every worker process has exited."""
        sr.expect(bool(self.procs), "no worker process was recorded")
        alive = [p.pid for p in self.procs if p.is_alive()]
        sr.expect(not alive, f"worker processes still alive after shutdown(): {alive}")
        codes = [p.exitcode for p in self.procs]
        return f"shutdown(): {len(self.procs)} workers exited (exit codes {codes})"


# ---------------------------------------------------------------------------------------
# Diagnosis of a log or traceback


def diagnose(text: str) -> list[str]:
    """Known collector faults found in ``text`` (a traceback or log), each as 'cause; fix: ...'.

    Removed-name imports come from api_changes.json (``diagnose_removed_names``); the other
    exact error texts (torchrl 0.14.1 / tensordict 0.14.3) from ``KNOWN_FAULTS``.
    Returns [] when none is found.
    """
    found = diagnose_removed_names(text)
    for pattern, cause, fix in KNOWN_FAULTS:
        if re.search(pattern, text, flags=re.S):
            found.append(f"{cause}; fix: {fix}")
    return found


def check_diagnose(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        sr.cannot_run(f"--diagnose {path}: no such file", "pass the path of a saved traceback or log")
    faults = diagnose(p.read_text(errors="replace"))
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    return f"{p.name}: no known collector fault found"


def run_checks(args, report: sr.Report) -> None:
    if args.diagnose:
        report.run("diagnose:log", lambda: check_diagnose(args.diagnose))
        return
    frames = args.frames + (args.frames % 2)  # SerialEnv(2) splits a batch in two
    report.run("collector:single-into-buffer", lambda: check_single_into_buffer(frames))
    report.run("collector:max-frames-per-traj", lambda: check_truncation(max(frames, 8)))
    report.run("collector:batched-env-ndim2", lambda: check_batched_env_storage(frames))
    report.run("collector:weight-update-single", lambda: check_weight_update_single(frames))

    names = ["multi:shared-buffer-ndim2", "multi:weight-sync-next-batch", "multi:shutdown"]
    if args.workers == 0:
        for name in names:
            report.add(name, "skip", "not asked for (pass --workers 2)")
        return
    run = _MultiRun(args.workers)
    try:
        report.run(names[0], run.start_and_fill)
        report.run(names[1], run.push_weights)
    finally:
        run.close()
    report.run(names[2], run.check_shutdown)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)


if __name__ == "__main__":
    sr.main_guard(main)
