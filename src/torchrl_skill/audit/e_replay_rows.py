"""replay-rows: does the replay buffer sample only rows that were written?

An effect monitor of replay buffers over a ``TensorStorage`` (``LazyTensorStorage``,
``LazyMemmapStorage``): the rows each sample drew (``ReplayBuffer._sample``'s
``info["index"]``, any buffer class). Until the writer has written a whole capacity
(``writer._write_count``, rows added by ``add``/``extend``), rows at or past that count hold
the storage's initial zeros; a sample drawing them trains on transitions that never happened
(observation 0, reward 0, not done).

How a buffer gets there (torchrl 0.14.1, ``TensorStorage.set``): ``storage.set(index, data)``
keeps its default ``set_cursor=True``, which adds ``len(index)`` to the storage's length
even when it rewrites rows already there, so the sampler's range grows with every write-back
(pytorch/rl#2209's use: writing a per-row field back after sampling). The user-code calls of
``TensorStorage.set`` that grew the length are named with their line.

Fault: any sampled row at or past the written count. Minimum evidence for a PASS: MIN_SAMPLES
samples of one buffer before its writer wrapped around. Measured (tests/fixtures/audit/effects/
replay_rows/train.py): the write-back through ``storage.set`` drew 83% unwritten rows over
100 samples (96% over 1400 in a SAC project, whose policy never learned); ``rb[index] = data``
and ``storage.set(index, data, set_cursor=False)`` none.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from . import evidence

NAME = "replay-rows"
MIN_SAMPLES = 20


def install(hub) -> None:
    import torch
    from torchrl.data import ReplayBuffer
    from torchrl.data.replay_buffers.storages import TensorStorage

    from .patches import wrap
    from .probe import caller_is_user, user_site

    sec = hub.section(NAME)
    buffers: dict = {}
    growth: dict = {}  # id(storage) -> {site: rows the length grew by}
    before: dict = {}

    def set_before(storage, args, kwargs):
        if kwargs.get("set_cursor", True) and caller_is_user():
            before[id(storage)] = (len(storage), user_site())

    def set_after(storage, args, kwargs, _out):
        seen = before.pop(id(storage), None)
        if seen is not None and len(storage) > seen[0]:
            sites = growth.setdefault(id(storage), {})
            sites[seen[1]] = sites.get(seen[1], 0) + len(storage) - seen[0]

    def on_sample(rb, _args, _kwargs, out):
        storage, writer = getattr(rb, "_storage", None), getattr(rb, "_writer", None)
        written = getattr(writer, "_write_count", None)
        if (not isinstance(storage, TensorStorage) or storage.ndim != 1 or not isinstance(written, int)
                or written >= storage.max_size):
            return
        info = out[1] if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict) else {}
        index = info.get("index", None)
        if not torch.is_tensor(index) or index.ndim == 0:
            return
        index = index.reshape(-1)
        buf = buffers.setdefault(id(rb), {"cls": type(rb).__name__, "storage": type(storage).__name__, "samples": 0,
                                          "rows": 0, "beyond": 0, "written": 0, "length": 0, "sid": id(storage)})
        buf["samples"] += 1
        buf["rows"] += int(index.numel())
        buf["beyond"] += int((index >= written).sum())
        buf["written"], buf["length"] = written, len(storage)

    def summarise():
        sec["buffers"] = [{**b, "grown_by": growth.get(b["sid"], {})} for b in buffers.values()]

    wrap(hub, TensorStorage, "set", before=set_before, after=set_after, guard="audit-replay-rows")
    # ReplayBuffer._sample returns (data, info): info["index"] holds the sampled rows, whatever the buffer class
    wrap(hub, ReplayBuffer, "_sample", after=on_sample, guard="audit-replay-rows-sample")
    hub.summariser(summarise)


def judge(observed: dict) -> str:
    bufs = observed["sections"].get(NAME, {}).get("buffers", [])
    if not bufs:
        raise sr.CheckSkipped("no replay buffer over a TensorStorage (LazyTensorStorage, LazyMemmapStorage) was sampled "
                              "before its writer filled its capacity")
    faults, notes = [], []
    for b in bufs:
        what = f"{b['cls']}({b['storage']})"
        if b["beyond"]:
            grown = "; ".join(f"{site} grew it by {rows} rows" for site, rows in b["grown_by"].items())
            faults.append(
                f"{what}: {b['beyond']} of {b['rows']} sampled rows lie at or past the {b['written']} rows its writer wrote "
                f"(the storage reports {b['length']}): they hold the storage's initial zeros, transitions that never happened"
                + (f"; storage.set(index, data) at {grown}: its default set_cursor=True adds len(index) rows per call even "
                   "when rewriting rows (torchrl 0.14.1); fix: rb[index] = data, or storage.set(index, data, set_cursor=False)"
                   if grown else "; the storage's length grew outside add/extend"))
        else:
            notes.append(f"{what}: {b['samples']} samples ({b['rows']} rows) all within the {b['written']} rows written")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    if max(b["samples"] for b in bufs) < MIN_SAMPLES:
        raise evidence.Short(f"{max(b['samples'] for b in bufs)} samples before the writer wrapped (needs {MIN_SAMPLES}); "
                             + evidence.MORE)
    return "; ".join(notes)
