"""Whether a stored replay buffer can be sampled in trajectory slices (smoke_replay_buffer.py).

A SliceSampler with ``traj_key`` reads each run of equal consecutive trajectory ids in
storage order as one trajectory (torchrl/data/replay_buffers/samplers.py, 0.14.1). One-step
batches of a batched env flattened with ``reshape(-1)`` before ``extend`` store the envs
interleaved (ids 0, 1, 0, 1, ...), so every run has length 1 and the sampler raises
``Did not find a single trajectory with sufficient length (length range: 1 - 1 / ...)``;
with ``end_key`` it silently returns slices that mix the envs. :func:`slice_layout` reads a
buffer saved with ``rb.dumps(DIR)``, samples it with the real SliceSampler and names the
interleaving; :func:`one_step_layouts` writes the broken and the fixed layout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# The interleaved layout's entry in src/torchrl_skill/data/error_index.json: its fix is the one printed.
INTERLEAVED_ENTRY = "slice-trajectories-length-one-interleaved"


@dataclass(frozen=True)
class Layout:
    """What :func:`slice_layout` found. ``runs``: number of runs of equal ids per env column;
    ``trajectories``: distinct ids; ``split``: ids that occur in more than one run;
    ``longest``: the longest run; ``sampled``: the sample's description or the sampler's error."""

    ok: bool
    trajectories: int
    runs: int
    split: int
    longest: int
    sampled: str

    def verdict(self) -> str:
        """One line: what was found."""
        return (
            f"{self.trajectories} trajectories in {self.runs} runs of equal ids ({self.split} split), "
            f"longest run {self.longest}; SliceSampler: {self.sampled}"
        )


def parse_key(text: str) -> str | tuple[str, ...]:
    """``"collector.traj_ids"`` -> ``("collector", "traj_ids")``; a plain name stays a str."""
    parts = tuple(p for p in text.split(".") if p)
    return parts[0] if len(parts) == 1 else parts


def load_storage(folder: Path):
    """The stored TensorDict of a buffer dumped with ``rb.dumps(folder)``, time-major:
    ``[T]`` (ndim=1) or ``[T, num_envs]`` (ndim=2), the valid rows only, oldest first."""
    from tensordict import TensorDict

    data = TensorDict.load_memmap(folder / "storage")
    length = json.loads((folder / "storage" / "storage_metadata.json").read_text())["len"]
    envs = data.batch_size[1:].numel()
    rows = length // max(envs, 1)
    if rows >= data.batch_size[0]:  # full: the write cursor marks the oldest row
        writer = folder / "writer" / "metadata.json"
        cursor = json.loads(writer.read_text()).get("cursor", 0) if writer.is_file() else 0
        order = [(cursor + i) % rows for i in range(rows)]
        return data[order]
    return data[:rows]


def _runs(column) -> list[tuple[int, int]]:
    """``(id, length)`` of each run of equal consecutive values of a 1-D tensor."""
    values, counts = column.unique_consecutive(return_counts=True)
    return list(zip(values.tolist(), counts.tolist()))


def slice_layout(folder: Path, traj_key, slice_len: int) -> Layout:
    """Sample the buffer saved in ``folder`` with ``SliceSampler(slice_len, traj_key=traj_key)``
    and count its trajectories, runs and split ids.

    ``ok`` is True when no id is split across runs and the sampler returned a batch.
    Raises KeyError when ``traj_key`` is not stored, OSError/ValueError when ``folder`` is
    not a dump.
    """
    import torch
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler

    data = load_storage(folder)
    ids = data.get(traj_key, None)
    if ids is None:
        raise KeyError(traj_key)
    ids = ids.reshape(ids.shape[0], -1)  # [T, num_envs]
    runs = [_runs(ids[:, env]) for env in range(ids.shape[1])]
    per_id: dict[tuple[int, int], int] = {}
    for env, column in enumerate(runs):
        for value, _ in column:
            per_id[(env, value)] = per_id.get((env, value), 0) + 1
    split = sum(1 for n in per_id.values() if n > 1)
    longest = max((n for column in runs for _, n in column), default=0)

    storage = LazyTensorStorage(data.batch_size.numel(), ndim=data.batch_dims)
    rb = ReplayBuffer(storage=storage, sampler=SliceSampler(slice_len=slice_len, traj_key=traj_key))
    rb.extend(data if data.batch_dims == 1 else data.transpose(0, 1))  # extend takes [num_envs, T]
    torch.manual_seed(0)
    try:
        sample = rb.sample(4 * slice_len)
        sampled, sampled_ok = f"4 slices of {slice_len} ({sample.batch_size[0]} steps)", True
    except RuntimeError as err:
        sampled, sampled_ok = f"{type(err).__name__}: {str(err).strip()}", False
    return Layout(sampled_ok and split == 0, len(per_id), sum(map(len, runs)), split, longest, sampled)


def one_step_layouts(root: Path, envs: int = 2, steps: int = 12, traj_len: int = 4) -> dict[str, Path]:
    """Write one-step batches (``[envs, 1]``: step t of every env, each env running
    trajectories of ``traj_len`` steps with its own ids) two ways and dump each under ``root``:

    - ``"reshape(-1)"``: ``rb.extend(batch.reshape(-1))`` into a 1-D storage (interleaved);
    - ``"ndim=2"``: ``rb.extend(batch)`` into ``ReplayBuffer(LazyTensorStorage(n, ndim=2))``.

    (The third layout, ``Collector(trajs_per_batch=..., replay_buffer=rb)``, is
    smoke_collector.py's ``collector:trajs-per-batch``.)
    """
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    buffers = {name: ReplayBuffer(storage=LazyTensorStorage(envs * steps, ndim=ndim)) for name, ndim in (("reshape(-1)", 1), ("ndim=2", 2))}
    for t in range(steps):
        ids = torch.arange(envs).unsqueeze(-1) + envs * (t // traj_len)  # [envs, 1]
        batch = TensorDict({("collector", "traj_ids"): ids, "step": torch.full((envs, 1), t)}, batch_size=[envs, 1])
        buffers["reshape(-1)"].extend(batch.reshape(-1))
        buffers["ndim=2"].extend(batch)
    out = {}
    for name, rb in buffers.items():
        out[name] = root / name.replace("(-1)", "").replace("=", "")
        rb.dumps(out[name])
    return out
