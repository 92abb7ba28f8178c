"""Smoke-test TorchRL replay buffers: storages, samplers, priorities, slices, checkpoints.

Every check extends a buffer with known data (obs = 10 * index, so any sample can be
checked against where it came from) and reports what it sampled. Storages: ListStorage,
LazyTensorStorage, LazyMemmapStorage (files in a temporary directory), LazyStackStorage,
CompressedListStorage. Samplers: RandomSampler, SamplerWithoutReplacement, PrioritizedSampler
with update_priority, SliceSampler (traj_key, strict_length, pad_output) and
PrioritizedSliceSampler. Also a writer (TensorDictMaxValueWriter), a buffer transform, and a
dumps/loads round trip in a temporary directory that must restore contents and priorities.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import skill_report as sr  # noqa: E402

EXAMPLE = "python sub-skills/collectors-and-replay/scripts/smoke_replay_buffer.py --storage memmap --sampler slice --json"

STORAGES = ["list", "tensor", "memmap", "stack", "compressed"]
SAMPLERS = ["random", "without-replacement", "prioritized", "slice", "prioritized-slice"]
N_ITEMS = 100
# Trajectory lengths of the slice fixture: two are shorter than SLICE_LEN.
TRAJ_LENGTHS = (30, 4, 30, 6, 30)
SLICE_LEN = 10


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument(
        "--storage", choices=STORAGES + ["all"], default="all", help="storage to check (default: all)"
    )
    parser.add_argument(
        "--sampler", choices=SAMPLERS + ["all"], default="all", help="sampler to check (default: all)"
    )
    parser.add_argument("--batch-size", type=int, default=20, help="sample size, a multiple of 10 (default: 20)")
    return parser


def make_data(n: int = N_ITEMS):
    """TensorDict [n]: "obs" [n, 3] float = 10*i, "reward" [n, 1], "step" [n] = i (int64)."""
    import torch
    from tensordict import TensorDict

    i = torch.arange(n)
    return TensorDict(
        {"obs": (10.0 * i).unsqueeze(-1).expand(n, 3).clone(), "reward": torch.rand(n, 1), "step": i},
        batch_size=[n],
    )


def make_trajectories(lengths=TRAJ_LENGTHS):
    """Concatenated trajectories [sum(lengths)]: "episode" id per step, "obs" [N, 3] = 10*i, "step" = i."""
    import torch

    data = make_data(sum(lengths))
    data["episode"] = torch.cat([torch.full((n,), k) for k, n in enumerate(lengths)])
    return data


def _consistent(sample) -> bool:
    """Every sampled obs row equals 10 * its step (the data was not mixed up)."""
    return bool((sample["obs"] == 10.0 * sample["step"].unsqueeze(-1).float()).all())


def make_storage(name: str, max_size: int, scratch_dir: str):
    """The storage called ``name`` (STORAGES), torchrl.data 0.14.1."""
    from torchrl.data import (
        CompressedListStorage,
        LazyMemmapStorage,
        LazyStackStorage,
        LazyTensorStorage,
        ListStorage,
    )

    if name == "list":
        return ListStorage(max_size)
    if name == "tensor":
        return LazyTensorStorage(max_size)
    if name == "memmap":
        return LazyMemmapStorage(max_size, scratch_dir=scratch_dir)
    if name == "stack":
        return LazyStackStorage(max_size)
    if name == "compressed":
        return CompressedListStorage(max_size)
    raise ValueError(name)


def check_storage(name: str, batch_size: int) -> str:
    """Extend N_ITEMS into a storage of capacity 80 (wraps), sample, check contents."""
    import torch
    from torchrl.data import TensorDictReplayBuffer

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        storage = make_storage(name, 80, tmp)
        rb = TensorDictReplayBuffer(storage=storage, batch_size=batch_size)
        rb.extend(make_data())
        sr.expect(len(rb) == 80, f"{type(storage).__name__} holds {len(rb)} after 100 writes into capacity 80")
        sample = rb.sample()
        sr.expect(sample.batch_size == torch.Size([batch_size]), f"sample {list(sample.batch_size)}")
        sr.expect(_consistent(sample), "sampled obs != 10 * step: rows were mixed up")
        steps = sample["step"]
        sr.expect(bool((steps >= 20).all()), f"sampled overwritten steps {steps[steps < 20].tolist()} (writer wrap failed)")
        extra = ""
        if name == "memmap":
            files = [p for p in Path(tmp).rglob("*.memmap")]
            sr.expect(bool(files), f"LazyMemmapStorage wrote no .memmap file under scratch_dir")
            extra = f"; {len(files)} .memmap files in scratch_dir"
        cls_name = type(storage).__name__
        del rb, storage
    return (
        f"{cls_name}(80) after 100 writes: len 80, sampled "
        f"{batch_size} steps in [{int(steps.min())}, {int(steps.max())}], obs consistent{extra}"
    )


def check_random(batch_size: int) -> str:
    import torch
    from torchrl.data import LazyTensorStorage, RandomSampler, TensorDictReplayBuffer

    torch.manual_seed(0)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(N_ITEMS), sampler=RandomSampler(), batch_size=batch_size)
    rb.extend(make_data())
    sample = rb.sample()
    sr.expect(_consistent(sample), "sampled obs != 10 * step")
    uniq = sample["step"].unique().numel()
    return f"RandomSampler: {batch_size} draws with replacement, {uniq} distinct steps"


def check_without_replacement(batch_size: int) -> str:
    """N_ITEMS / batch_size samples cover every item exactly once (one epoch)."""
    import torch
    from torchrl.data import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer

    torch.manual_seed(0)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(N_ITEMS), sampler=SamplerWithoutReplacement(), batch_size=batch_size
    )
    rb.extend(make_data())
    n = N_ITEMS // batch_size
    seen = torch.cat([rb.sample()["step"] for _ in range(n)])
    sr.expect(
        sorted(seen.tolist()) == list(range(n * batch_size)) if n * batch_size == N_ITEMS else seen.unique().numel() == seen.numel(),
        f"{n} samples of {batch_size} repeated items: {seen.numel() - seen.unique().numel()} duplicates",
    )
    return f"SamplerWithoutReplacement: {n} samples of {batch_size} drew {seen.unique().numel()} distinct steps, no repeat"


def check_prioritized(batch_size: int) -> str:
    """update_priority(index, priority) concentrates sampling; sample carries "priority_weight"."""
    import torch
    from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

    torch.manual_seed(0)
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=0.4, storage=LazyTensorStorage(N_ITEMS), batch_size=batch_size
    )
    idx = rb.extend(make_data())
    before = rb.sample()
    sr.expect("priority_weight" in before.keys(), 'prioritized sample lacks "priority_weight"')
    priority = torch.full((N_ITEMS,), 1e-6)
    priority[7] = 1.0
    rb.update_priority(idx, priority)
    after = rb.sample()
    share = float((after["step"] == 7).float().mean())
    sr.expect(share > 0.9, f"after update_priority favouring step 7 it was drawn {share:.0%} of the time, expected > 90%")
    w = after["priority_weight"]
    return (
        f"TensorDictPrioritizedReplayBuffer(alpha=1, beta=0.4): before update {before['step'].unique().numel()} "
        f"distinct steps; after update_priority step 7 drawn {share:.0%} of {batch_size}, priority_weight in "
        f"[{float(w.min()):.3g}, {float(w.max()):.3g}]"
    )


def sample_slices(lengths, slice_len: int, batch_size: int, strict_length: bool = True, pad_output: bool = False):
    """Sample once from SliceSampler(slice_len, traj_key="episode") over ``lengths`` trajectories.

    Returns ``(n_items, n_real, contiguous)``: items returned, items not padding (from
    ("collector", "mask") when pad_output=True, else n_items), and whether every slice is a
    run of consecutive steps of one episode. Raises what the sampler raises (0.14.1):
    ``RuntimeError: Did not find a single trajectory with sufficient length ...`` when every
    trajectory is shorter than slice_len under strict_length=True.
    """
    import torch
    from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

    torch.manual_seed(0)
    sampler = SliceSampler(slice_len=slice_len, traj_key="episode", strict_length=strict_length, pad_output=pad_output)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(sum(lengths)), sampler=sampler, batch_size=batch_size)
    rb.extend(make_trajectories(lengths))
    sample = rb.sample()
    n_items = sample.batch_size[0]
    mask = sample.get(("collector", "mask"), None)  # written only when a slice was padded
    n_real = int(mask.sum()) if mask is not None else n_items
    contiguous = True
    if strict_length:
        steps = sample["step"].reshape(-1, slice_len)
        eps = sample["episode"].reshape(-1, slice_len)
        contiguous = bool(((steps[:, 1:] - steps[:, :-1]) == 1).all() and (eps == eps[:, :1]).all())
    return n_items, n_real, contiguous


def check_slice(batch_size: int) -> str:
    """strict_length=True: full batch of contiguous slices; False: fewer items; pad_output: full + mask."""
    n_strict, _, contiguous = sample_slices(TRAJ_LENGTHS, SLICE_LEN, batch_size * 5)
    sr.expect(n_strict == batch_size * 5, f"strict_length=True returned {n_strict} of {batch_size * 5}")
    sr.expect(contiguous, "a strict slice is not a run of consecutive steps of one episode")
    n_loose, _, _ = sample_slices(TRAJ_LENGTHS, SLICE_LEN, batch_size * 5, strict_length=False)
    n_pad, n_real, _ = sample_slices(TRAJ_LENGTHS, SLICE_LEN, batch_size * 5, strict_length=False, pad_output=True)
    sr.expect(n_loose < batch_size * 5, f"strict_length=False returned the full {n_loose}; short trajectories were expected to shrink it")
    sr.expect(n_pad == batch_size * 5, f"pad_output=True returned {n_pad} of {batch_size * 5}")
    sr.expect(n_real <= n_pad, "mask marks more real items than returned")
    return (
        f"SliceSampler(slice_len={SLICE_LEN}, traj_key='episode') over trajectories {list(TRAJ_LENGTHS)}, "
        f"batch {batch_size * 5}: strict_length=True -> {n_strict} contiguous; strict_length=False -> "
        f"{n_loose} items; pad_output=True -> {n_pad} items, ('collector','mask') {n_real} real"
    )


def check_prioritized_slice(batch_size: int) -> str:
    """PrioritizedSliceSampler: raising one episode's priority makes its slices dominate."""
    import torch
    from torchrl.data import LazyTensorStorage, PrioritizedSliceSampler, TensorDictReplayBuffer

    torch.manual_seed(0)
    data = make_trajectories()
    n = data.batch_size[0]
    sampler = PrioritizedSliceSampler(max_capacity=n, alpha=1.0, beta=0.4, slice_len=SLICE_LEN, traj_key="episode")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(n), sampler=sampler, batch_size=batch_size * 5)
    idx = rb.extend(data)
    priority = torch.where(data["episode"] == 2, 1.0, 1e-6)
    rb.update_priority(idx, priority)
    sample = rb.sample()
    share = float((sample["episode"] == 2).float().mean())
    sr.expect(share > 0.8, f"episode 2 holds {share:.0%} of the sampled steps after raising its priority, expected > 80%")
    return f"PrioritizedSliceSampler: after update_priority on episode 2, {share:.0%} of {sample.batch_size[0]} sampled steps are episode 2"


def check_writer() -> str:
    """TensorDictMaxValueWriter(rank_key="reward") keeps the highest-reward items."""
    import torch
    from torchrl.data import LazyTensorStorage, TensorDictMaxValueWriter, TensorDictReplayBuffer

    torch.manual_seed(0)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), writer=TensorDictMaxValueWriter(rank_key="reward"), batch_size=10)
    data = make_data()
    for chunk in data.split(10):
        rb.extend(chunk)
    kept = sorted(rb[:]["reward"].reshape(-1).tolist())
    top = sorted(data["reward"].reshape(-1).topk(10).values.tolist())
    sr.expect(kept == top, "TensorDictMaxValueWriter kept items that are not the top-10 rewards")
    return f"TensorDictMaxValueWriter(rank_key='reward'): storage of 10 kept the top-10 of 100 rewards (min kept {kept[0]:.3f})"


def check_transform(batch_size: int) -> str:
    """A buffer transform runs at sample time: stored data unchanged, sample transformed."""
    import torch
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.envs import RenameTransform

    torch.manual_seed(0)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(N_ITEMS), batch_size=batch_size)
    rb.append_transform(RenameTransform(in_keys=["obs"], out_keys=["observation"]))
    rb.extend(make_data())
    sample = rb.sample()
    sr.expect("observation" in sample.keys() and "obs" not in sample.keys(), f"sample keys {sorted(sample.keys())}")
    sr.expect("obs" in rb.storage[:].keys(), "the transform changed the stored data")
    return "append_transform(RenameTransform(obs->observation)): sample has 'observation', storage keeps 'obs'"


def check_checkpoint(batch_size: int) -> str:
    """dumps(dir) then loads(dir) into a fresh buffer restores items, write cursor and priorities."""
    import torch
    from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

    def fresh():
        return TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=0.4, storage=LazyTensorStorage(N_ITEMS), batch_size=batch_size)

    torch.manual_seed(0)
    rb = fresh()
    idx = rb.extend(make_data(60))
    priority = torch.full((60,), 1e-6)
    priority[3] = 1.0
    rb.update_priority(idx, priority)
    with tempfile.TemporaryDirectory() as tmp:
        rb.dumps(tmp)
        files = sorted(p.name for p in Path(tmp).rglob("*") if p.is_file())
        restored = fresh()
        restored.loads(tmp)
    sr.expect(len(restored) == 60, f"restored buffer holds {len(restored)}, expected 60")
    same = bool((restored[:60]["obs"] == rb[:60]["obs"]).all())
    sr.expect(same, "restored contents differ from the saved buffer")
    share = float((restored.sample()["step"] == 3).float().mean())
    sr.expect(share > 0.9, f"priorities not restored: step 3 drawn {share:.0%}, expected > 90%")
    written = restored.extend(make_data(1))
    sr.expect(int(written[0]) == 60, f"write cursor not restored: next write went to index {int(written[0])}, expected 60")
    return f"dumps/loads ({len(files)} files): 60 items equal, priorities kept (step 3 drawn {share:.0%}), next write at index 60"


def run_checks(args, report: sr.Report) -> None:
    if args.batch_size < 10 or args.batch_size % 10:
        sr.cannot_run(f"--batch-size {args.batch_size} is not a positive multiple of 10", "pass e.g. --batch-size 20")
    bs = args.batch_size
    storages = STORAGES if args.storage == "all" else [args.storage]
    for name in storages:
        report.run(f"storage:{name}", lambda n=name: check_storage(n, bs))
    samplers = {
        "random": lambda: check_random(bs),
        "without-replacement": lambda: check_without_replacement(bs),
        "prioritized": lambda: check_prioritized(bs),
        "slice": lambda: check_slice(bs),
        "prioritized-slice": lambda: check_prioritized_slice(bs),
    }
    for name in SAMPLERS if args.sampler == "all" else [args.sampler]:
        report.run(f"sampler:{name}", samplers[name])
    report.run("writer:max-value", check_writer)
    report.run("transform:on-sample", lambda: check_transform(bs))
    report.run("checkpoint:dumps-loads", lambda: check_checkpoint(bs))


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)


if __name__ == "__main__":
    sr.main_guard(main)
