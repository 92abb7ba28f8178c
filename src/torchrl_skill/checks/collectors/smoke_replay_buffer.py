"""Smoke-test TorchRL replay buffers: storages, samplers, priorities, slices, checkpoints.

Every check extends a buffer with known data (obs = 10 * index, so any sample can be checked
against where it came from) and reports what it sampled: five storages (memmap files in a
temporary folder), six samplers (update_priority, strict_length, pad_output), a max-value
writer, a buffer transform, and a dumps/loads round trip that must restore priorities.
sampler:slice-layout writes one-step batches of 2 envs flattened with reshape(-1) and into
an ndim=2 storage: the layout check must reject the first (the envs interleave) and pass
the second. --dumps DIR runs that layout check on your buffer, saved with rb.dumps(DIR)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = (
    "python $SKILL_DIR/sub-skills/collectors-and-replay/scripts/smoke_replay_buffer.py --storage memmap --sampler slice --json\n"
    "  python $SKILL_DIR/sub-skills/collectors-and-replay/scripts/smoke_replay_buffer.py --dumps saved_buffer/ --slice-len 8"
)

STORAGES = ["list", "tensor", "memmap", "stack", "compressed"]
SAMPLERS = ["random", "without-replacement", "prioritized", "slice", "slice-layout", "prioritized-slice"]
N_ITEMS = 100
# Trajectory lengths of the slice fixture: two are shorter than SLICE_LEN.
TRAJ_LENGTHS = (30, 4, 30, 6, 30)
SLICE_LEN = 10


def multiple_of_10(text: str) -> int:
    """argparse type: a positive multiple of 10 (the slice checks cut it into slices of 10)."""
    value = int(text)
    if value < 10 or value % 10:
        raise ValueError(text)
    return value


multiple_of_10.__name__ = "positive multiple of 10"


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument(
        "--storage", choices=STORAGES + ["all"], default="all", help="storage to check (default: all)"
    )
    parser.add_argument(
        "--sampler", choices=SAMPLERS + ["all"], default="all", help="sampler to check (default: all)"
    )
    parser.add_argument("--batch-size", type=multiple_of_10, default=20, help="sample size, a multiple of 10 (default: 20)")
    parser.add_argument(
        "--dumps", metavar="DIR",
        help="check only the buffer saved with rb.dumps(DIR): can a SliceSampler cut it into trajectories?",
    )
    parser.add_argument(
        "--traj-key", default="collector.traj_ids",
        help="with --dumps: the trajectory-id key, dots for nesting (default: collector.traj_ids)",
    )
    parser.add_argument("--slice-len", type=sr.int_at_least(1), default=8, help="with --dumps: slice length to sample (default: 8)")
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
    import torchrl.data as data

    if name == "memmap":
        return data.LazyMemmapStorage(max_size, scratch_dir=scratch_dir)
    classes = {"list": data.ListStorage, "tensor": data.LazyTensorStorage, "stack": data.LazyStackStorage,
               "compressed": data.CompressedListStorage}
    return classes[name](max_size)


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
        sr.evidence(steps.numel(), "sampled items checked")
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
    sr.evidence(sample.batch_size.numel(), "sampled items checked")
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
    sr.evidence(seen.numel(), "items drawn in one epoch")
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
    sr.evidence(after.batch_size.numel(), "draws after update_priority")
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
    sr.evidence(n_strict, "sliced items checked")
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
    sr.evidence(sample.batch_size.numel(), "sampled steps")
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
    sr.evidence(len(kept), "kept items compared with the top rewards")
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
    sr.evidence(sample.batch_size.numel(), "sampled items transformed")
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
    sr.evidence(len(restored), "restored items compared")
    written = restored.extend(make_data(1))
    sr.expect(int(written[0]) == 60, f"write cursor not restored: next write went to index {int(written[0])}, expected 60")
    return f"dumps/loads ({len(files)} files): 60 items equal, priorities kept (step 3 drawn {share:.0%}), next write at index 60"


def check_slice_layout() -> str:
    """The layout check rejects one-step batches of 2 envs flattened with reshape(-1) (the
    envs interleave) and passes the same writes into an ndim=2 storage."""
    from torchrl_skill.checks.collectors import slice_layout as _slice_layout

    with tempfile.TemporaryDirectory() as tmp:
        dumps = _slice_layout.one_step_layouts(Path(tmp))
        found = {name: _slice_layout.slice_layout(path, ("collector", "traj_ids"), 3) for name, path in dumps.items()}
    flat, by_env = found["reshape(-1)"], found["ndim=2"]
    sr.expect(not flat.ok, f"the layout check passed interleaved storage: {flat.verdict()}")
    sr.expect("length range: 1 - 1" in flat.sampled, f"interleaved storage: {flat.sampled}")
    sr.expect(by_env.ok, f"ndim=2 layout rejected: {by_env.verdict()}")
    sr.evidence(len(found), "storage layouts judged")
    return (
        f"one-step writes of 2 envs, SliceSampler(slice_len=3, traj_key=('collector','traj_ids')): "
        f"reshape(-1) -> {flat.split} trajectories split, sampler raises (length range 1 - 1); "
        f"ndim=2 storage -> {by_env.sampled}"
    )


def check_dumps(args) -> str:
    """Can ``SliceSampler(slice_len, traj_key=...)`` cut the buffer saved in ``--dumps DIR``
    into trajectories? Fails naming the interleaving and its fix (src/torchrl_skill/data/error_index.json)."""
    from torchrl_skill.explain import error_index as _error_index
    from torchrl_skill.checks.collectors import slice_layout as _slice_layout

    folder = Path(args.dumps).expanduser()
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        sr.cannot_run(f"--dumps {args.dumps} {what}", "pass the folder you gave rb.dumps(folder)")
    if not (folder / "storage" / "storage_metadata.json").is_file():
        sr.cannot_run(f"--dumps {args.dumps} holds no storage/storage_metadata.json", "pass the folder you gave rb.dumps(folder)")
    key = _slice_layout.parse_key(args.traj_key)
    try:
        layout = _slice_layout.slice_layout(folder, key, args.slice_len)
    except KeyError:
        raise sr.CheckFailed(
            f"the stored data has no {key!r}; SliceSampler(traj_key=...) needs an id per step (a collector writes "
            "('collector', 'traj_ids')); fix: pass --traj-key KEY (dots for nesting) or store the ids"
        ) from None
    except (OSError, ValueError) as err:
        sr.cannot_run(f"--dumps {args.dumps} cannot be read: {sr.first_line(err)}", "pass a folder written by rb.dumps()")
    sr.evidence(layout.trajectories, "trajectories in the saved storage")
    if layout.split:
        entry = _error_index.by_id()[_slice_layout.INTERLEAVED_ENTRY]
        raise sr.CheckFailed(f"{layout.verdict()}; cause: {entry.plain('cause')} fix: {entry.plain('fix')}")
    if not layout.ok:
        raise sr.CheckFailed(f"{layout.verdict()}; fix: python $SKILL_DIR/scripts/explain.py --error '{layout.sampled}'")
    return f"{folder.name}: {layout.verdict()}"


def selected(check: sr.Check, args) -> bool:
    """Whether ``--storage`` / ``--sampler`` ask for this check (other kinds always run)."""
    kind, _, name = check.name.partition(":")
    choice = {"storage": args.storage, "sampler": args.sampler}.get(kind, "all")
    return choice in ("all", name)


CHECKS = [
    *(sr.Check(f"storage:{name}", functools.partial(check_storage, name),
               proves="after a wrapping extend, every sampled item is consistent and none was overwritten") for name in STORAGES),
    sr.Check("sampler:random", check_random, proves="every sampled item is a stored row, consistent"),
    sr.Check("sampler:without-replacement", check_without_replacement, proves="one epoch of samples draws every item once"),
    sr.Check("sampler:prioritized", check_prioritized, proves="update_priority concentrates the draws on the raised item"),
    sr.Check("sampler:slice", check_slice, proves="strict slices are runs of one episode; loose ones shrink; padded ones are masked"),
    sr.Check("sampler:slice-layout", check_slice_layout, proves="the layout check rejects interleaved envs and passes ndim=2"),
    sr.Check("sampler:prioritized-slice", check_prioritized_slice, proves="a raised episode's slices dominate the draws"),
    sr.Check("writer:max-value", check_writer, proves="TensorDictMaxValueWriter keeps the top rewards"),
    sr.Check("transform:on-sample", check_transform, proves="a buffer transform changes samples, not the storage"),
    sr.Check("checkpoint:dumps-loads", check_checkpoint, proves="dumps/loads restores items, priorities and the write cursor"),
]
DUMPS_CHECKS = [sr.Check("layout:slice-trajectories", check_dumps,
                         proves="SliceSampler can cut the saved storage into whole trajectories")]


def run_checks(args, report: sr.Report) -> None:
    if args.dumps:
        sr.run_declared(DUMPS_CHECKS, report, args=args)
        return
    checks = [c for c in CHECKS if selected(c, args)]
    sr.run_declared(checks, report, batch_size=args.batch_size)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
