"""Measurements on TensorDicts and parameters that several detectors share (child side).

Each function imports torch inside, takes what it measures as arguments and returns plain
numbers; none modifies its input.
"""

from __future__ import annotations

import itertools
import weakref

DONE_KEYS = ("done", "terminated", "truncated")


def next_flag(td, name: str):
    """``td["next", name]`` as a bool tensor of the batch shape, or None when absent."""
    value = td.get(("next", name), None)
    if value is None:
        return None
    value = value.bool()
    while value.dim() > td.batch_dims:
        value = value.any(-1)
    return value


def episode_end(td):
    """``("next", "done")`` (or terminated | truncated) as a bool tensor of the batch shape."""
    flags = [f for f in (next_flag(td, k) for k in DONE_KEYS) if f is not None]
    if not flags:
        return None
    out = flags[0]
    for f in flags[1:]:
        out = out | f
    return out


def features(x, batch_dims: int):
    """``x`` as ``[*batch, features]``: every dim after the first ``batch_dims`` folded into
    one, and a leaf with no dim of its own (PendulumEnv's scalar ``"th"`` in a ``[4]`` batch)
    given a feature dim of 1."""
    return x.reshape(*x.shape[:batch_dims], -1)


def state_keys(td, only=None) -> list:
    """Leaf keys found both at the root and under ``"next"`` (the state the step hands on),
    excluding done flags; ``only`` restricts them (e.g. a value network's in_keys)."""
    nxt = td.get("next", None)
    if nxt is None:
        return []
    root = {k for k in td.keys(True, True) if not (isinstance(k, tuple) and k[0] == "next")}
    keys = []
    for k in nxt.keys(True, True):
        name = k[-1] if isinstance(k, tuple) else k
        if name in DONE_KEYS or name in ("reward",) or k not in root:
            continue
        if only is not None and k not in only:
            continue
        keys.append(k)
    return keys


def continuity_breaks(td, time_dim: int, only=None) -> tuple[int, int]:
    """``(breaks, positions)`` along ``time_dim``: steps t where the state handed on at t
    (``("next", key)``) is not the state at t+1 although no done flag marks an episode end.

    Data laid out as trajectories has 0 breaks; [env, time] data flattened to [env*time]
    has one per env boundary; shuffled minibatches break almost everywhere.
    """
    import torch

    keys = state_keys(td, only)
    steps = td.batch_size[time_dim] if td.batch_dims else 0
    if not keys or steps < 2:
        return 0, 0
    same = None
    for k in keys:
        nxt = td.get(("next", *k) if isinstance(k, tuple) else ("next", k))
        cur = td.get(k)
        if not (torch.is_tensor(nxt) and torch.is_tensor(cur)) or nxt.shape != cur.shape:
            continue
        a = features(nxt.narrow(time_dim, 0, steps - 1), td.batch_dims)
        b = features(cur.narrow(time_dim, 1, steps - 1), td.batch_dims)
        eq = (a == b) | (a.isnan() & b.isnan()) if a.is_floating_point() else a == b
        eq = eq.all(-1)
        same = eq if same is None else same & eq
    if same is None:
        return 0, 0
    ends = episode_end(td)
    marked = ends.narrow(time_dim, 0, steps - 1) if ends is not None else torch.zeros_like(same)
    breaks = (~same & ~marked).sum().item()
    return int(breaks), int(same.numel())


def deterministic_match(policy, td, action_key="action") -> tuple[float, int]:
    """``(fraction, frames)``: how many collected actions equal what ``policy`` gives under
    ``ExplorationType.DETERMINISTIC`` on the same inputs (1.0: no exploration at all)."""
    import torch
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    taken = td.get(action_key, None)
    if taken is None:
        return float("nan"), 0
    inp = td.exclude("next", action_key).clone(False)
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        out = policy(inp)
    det = (out if out is not None else inp).get(action_key, None)
    if det is None or det.shape != taken.shape:
        return float("nan"), 0
    # The policy ran one step at a time during collection and on the whole batch here:
    # batched matmuls differ in the last bits, so floats compare with a tolerance.
    if det.is_floating_point():
        eq = features(torch.isclose(det, taken.to(det.dtype), rtol=1e-4, atol=1e-5), td.batch_dims)
    else:
        eq = features(det == taken, td.batch_dims)
    eq = eq.all(-1)
    return float(eq.float().mean().item()), int(eq.numel())


def param_sample(values, per_tensor: int = 256):
    """A detached float vector of the first ``per_tensor`` entries of each tensor: cheap
    enough to keep per optimizer step, exact enough to tell "moved" from "did not"."""
    import torch

    parts = [v.detach().reshape(-1)[:per_tensor].float().cpu().clone() for v in values]
    return torch.cat(parts) if parts else torch.zeros(0)


def rows(td, max_rows: int = 64):
    """``td`` viewed as [rows, time] (all leading dims folded into rows), or None when 1-D."""
    if td.batch_dims < 2:
        return None
    flat = td.reshape(-1, td.batch_size[-1])
    return flat[:max_rows]


def own_attr(obj, name: str):
    """``obj.name`` when set on the instance (or as a registered submodule), else None.

    Never goes through ``__getattr__``: batched envs forward unknown attributes to their
    workers, and looking up a missing one there recurses until RecursionError."""
    if obj is None:
        return None
    found = vars(obj).get(name) if hasattr(obj, "__dict__") else None
    if found is None:
        found = vars(obj).get("_modules", {}).get(name) if hasattr(obj, "__dict__") else None
    return found


class ObjectKeys:
    """``keys(obj)``: one int per object for as long as it lives. ``id()`` alone is not one:
    a dropped ``append_transform`` result is collected and the next ``TransformedEnv`` may
    get its id, which merged the two envs' records (seen as a flaky test). Objects that take
    no weak reference fall back to ``id()``."""

    def __init__(self):
        self._live: dict[int, tuple] = {}
        self._next = itertools.count(1)

    def __call__(self, obj) -> int:
        ref, key = self._live.get(id(obj), (None, None))
        if ref is None or ref() is not obj:
            try:
                ref = weakref.ref(obj)
            except TypeError:
                return id(obj)
            key = next(self._next)
            self._live[id(obj)] = (ref, key)
        return key
