"""reward-variety: does the collected reward ever vary, or carry its signal through episode ends?

An effect monitor on collected data (collector batches, ``env.rollout`` outputs): the
smallest and largest ``("next", "reward")`` (the reward key of the collector's env, after
its transforms: what the loss will read) and how many steps ended an episode as
``terminated``. A reward that never changes teaches nothing by itself; CartPole pays 1 at
every step and still teaches, because episodes terminate: the signal is in their length.

Fault: MIN_FRAMES or more collected steps with one reward value and no ``terminated`` step
(a reward transform that flattens it, e.g. ``RewardClipping(0, 1)`` over negative rewards;
a reward written to another key than the env's reward key; a sparse goal never reached,
which is no code fault but still leaves nothing to learn from in this budget).
Minimum evidence: MIN_FRAMES rewards; fewer: SKIP with the count.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from . import evidence

NAME = "reward-variety"
MIN_FRAMES = 500


def install(hub) -> None:
    import torch

    from .probe import user_site
    from .tdtools import ObjectKeys, next_flag, own_attr

    sec = hub.section(NAME)
    key_of = ObjectKeys()
    sources: dict = {}

    def on_data(key, kind, site, env, td):
        if td is None:
            return
        reward_key = getattr(env, "reward_key", "reward") if env is not None else "reward"
        reward = td.get(("next", *reward_key) if isinstance(reward_key, tuple) else ("next", reward_key), None)
        src = sources.setdefault(key, {"kind": kind, "site": site, "key": str(reward_key), "frames": 0, "min": None, "max": None,
                                       "terminated": 0, "truncated": 0, "missing": 0})
        if not torch.is_tensor(reward):
            src["missing"] += 1
            return
        r = reward.detach().float()
        lo, hi = float(r.min()), float(r.max())
        src["min"] = lo if src["min"] is None else min(src["min"], lo)
        src["max"] = hi if src["max"] is None else max(src["max"], hi)
        src["frames"] += int(td.numel())
        for flag in ("terminated", "truncated"):
            value = next_flag(td, flag)
            if value is not None:
                src[flag] += int(value.sum())

    hub.on("collector_batch", lambda col, batch: on_data(key_of(col), type(col).__name__, "", own_attr(col, "env"), batch))
    hub.on("env_rollout", lambda env, policy, td: on_data(("rollout", key_of(env)), "env.rollout", user_site(), env, td))
    hub.summariser(lambda: sec.__setitem__("sources", [dict(s) for s in sources.values()]))


def judge(observed: dict) -> str:
    sources = [s for s in observed["sections"].get(NAME, {}).get("sources", []) if s["frames"]]
    if not sources:
        raise sr.CheckSkipped("no collected reward (no collector batch or env.rollout with a ('next', reward) entry)")
    faults, notes, short = [], [], []
    for s in sources:
        where = f"{s['kind']}{' at ' + s['site'] if s['site'] else ''} ('next', {s['key']!r})"
        if s["frames"] < MIN_FRAMES:
            short.append(f"{where}: {s['frames']} rewards, fewer than {MIN_FRAMES}")
            continue
        ends = f"{s['terminated']} terminated and {s['truncated']} truncated steps"
        if s["min"] == s["max"] and not s["terminated"]:
            faults.append(f"{where} was {s['min']:g} at all {s['frames']} collected steps, with {ends}: nothing in the data tells a good "
                          "action from a bad one; check the env's reward and every reward transform (RewardClipping(0, 1) turns "
                          "negative rewards into 0; RewardScaling(loc, scale) with scale=0), and that the env writes its reward under "
                          "its reward_key; if the task's reward is sparse and no goal was reached yet, the run needs exploration "
                          "or reward shaping before it can learn")
        elif s["min"] == s["max"]:
            notes.append(f"{where}: {s['min']:g} at all {s['frames']} steps; the signal is in the episode ends ({ends})")
        else:
            notes.append(f"{where}: {s['min']:.4g}..{s['max']:.4g} over {s['frames']} steps")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    if not notes:
        raise evidence.Short("too few rewards: " + "; ".join(short) + "; " + evidence.MORE)
    return "; ".join(notes) + (f"; not judged: {'; '.join(short)}" if short else "")
