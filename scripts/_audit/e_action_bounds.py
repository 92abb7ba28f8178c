"""action-bounds: are the actions the env receives pinned at its action spec's bounds?

An effect monitor (boundary.py): at each step of a base env with a continuous ``Bounded``
action spec it counts, per action dimension, the values at a bound (within TOL of the
range) or beyond it. A policy that sits at the bounds most of the time is bang-bang whatever
it learned: a saturated squashing (tanh of large pre-activations from unscaled
observations), an unbounded distribution clipped by ``ProbabilisticActor(safe=True)`` or by
the env, a scale far wider than the range. Steps under a deterministic exploration type
are counted apart and not judged.

Fault: one action dimension at or beyond a bound on PINNED or more of its first MAX_VALUES
values, or within NEAR of the range of one on HUGGING or more of them. Minimum evidence: MIN_VALUES values of that dimension (stochastic-policy steps);
fewer: SKIP with the count seen. Why 40% within 0.1% of the range: a continuous
distribution puts mass that close to a bound only where it is clipped or saturated (tanh
gets there past |x| > 3.8). Measured: a policy at initialisation (TanhNormal of scale ~1,
a unit Gaussian clipped to [-2, 2], uniform random actions) puts under 6% there; a
saturated deterministic actor with additive Gaussian exploration noise clamped to the
spec puts up to 50% there (every draw on the far side of the bound) and the rest within
the noise of it, hence the second test: within 10% of the range of a bound, the same
initial policies put under 30% (TanhNormal of scale 1: 27%; uniform: 20%), a saturated
actor with noise of a tenth of the range about 95%. The first MAX_VALUES values are a
run's start, where no policy has learned to push on purpose.
"""

from __future__ import annotations

import skill_report as sr

NAME = "action-bounds"
TOL = 1e-3  # a value within TOL * (high - low) of a bound is at it
PINNED = 0.4  # share of one dimension's values at or beyond a bound that fails
NEAR, HUGGING = 0.1, 0.8  # or this share within NEAR * (high - low) of a bound
MIN_VALUES = 200  # values per dimension before it is judged
MAX_VALUES = 20_000  # values per dimension measured; later steps are only counted


def install(hub) -> None:
    import torch

    from . import boundary
    from .e_env_actions import _label
    from .tdtools import ObjectKeys

    boundary.install(hub)
    sec = hub.section(NAME)
    key_of = ObjectKeys()
    envs: dict = {}

    def on_action(env, sampled, received, deterministic):
        key = key_of(env)
        info = envs.get(key)
        if info is None:
            spec = env.action_spec
            space = getattr(spec, "space", None)
            low, high = getattr(space, "low", None), getattr(space, "high", None)
            ok = (getattr(spec, "domain", "") == "continuous" and torch.is_tensor(low) and torch.is_tensor(high)
                  and bool(torch.isfinite(low).all()) and bool(torch.isfinite(high).all()) and bool((high > low).all()))
            info = envs[key] = {"label": _label(env), "ok": ok, "low": low, "high": high, "steps": 0, "det_steps": 0,
                                "values": None, "at_low": None, "at_high": None, "beyond": None, "processes": 1,
                                "range": f"[{low.min().item():g}, {high.max().item():g}]" if ok else None}
        if not info["ok"] or not torch.is_tensor(sampled) or not sampled.is_floating_point():
            return
        if deterministic:
            info["det_steps"] += 1
            return
        info["steps"] += 1
        if info["values"] is not None and min(info["values"]) >= MAX_VALUES:
            return
        low, high = info["low"], info["high"]
        dims = low.numel()
        a = sampled.detach().reshape(-1, dims).float() if sampled.numel() % dims == 0 else None
        if a is None:
            return
        lo, hi = low.reshape(1, -1).float(), high.reshape(1, -1).float()
        tol = TOL * (hi - lo)
        near = NEAR * (hi - lo)
        counts = [(a <= lo + tol).sum(0), (a >= hi - tol).sum(0), ((a < lo) | (a > hi)).sum(0), ((a <= lo + near) | (a >= hi - near)).sum(0)]
        if info["values"] is None:
            info.update({k: [0] * dims for k in ("values", "at_low", "at_high", "beyond", "near")})
        for name, c in zip(("at_low", "at_high", "beyond", "near"), counts):
            info[name] = [x + y for x, y in zip(info[name], c.tolist())]
        info["values"] = [v + a.shape[0] for v in info["values"]]

    def summarise():  # one record per env label and range (the sub-envs of a SerialEnv are one)
        own = [{k: v for k, v in e.items() if k not in ("low", "high", "ok")} for e in envs.values() if e["ok"]]
        sec["envs"] = _join([own])

    hub.on("base_action", on_action)
    hub.summariser(summarise)


def _join(groups: list[list[dict]]) -> list[dict]:
    """One record per env label and range, counts summed; ``processes``: in how many of the
    groups (one per process) it was seen."""
    out: dict = {}
    for group in groups:
        for key in {(e["label"], e["range"]) for e in group}:
            if key in out:
                out[key]["processes"] += 1
        for e in group:
            key = (e["label"], e["range"])
            cur = out.get(key)
            if cur is None:
                out[key] = {**e, "processes": 1}
                continue
            for k in ("steps", "det_steps"):
                cur[k] += e[k]
            for k in ("values", "at_low", "at_high", "beyond", "near"):
                if cur[k] is None or e[k] is None:
                    cur[k] = cur[k] or e[k]
                elif len(cur[k]) == len(e[k]):
                    cur[k] = [x + y for x, y in zip(cur[k], e[k])]
    return list(out.values())


def merge_workers(main: dict, workers: list[dict]) -> dict:
    """The main process's records joined with the instrumented workers' (workers.py)."""
    return {**main, "envs": _join([main.get("envs", []), *[w.get("envs", []) for w in workers]])}


def judge(observed: dict) -> str:
    envs = observed["sections"].get(NAME, {}).get("envs", [])
    if not envs:
        raise sr.CheckSkipped("no base env with a bounded continuous action spec was stepped")
    faults, notes, short = [], [], []
    for e in envs:
        where = f"{e['label']} (action range {e['range']})"
        procs = f" in {e['processes']} processes" if e.get("processes", 1) > 1 else ""
        values = e["values"] or []
        judged = [d for d, n in enumerate(values) if n >= MIN_VALUES]
        if not judged:
            short.append(f"{where}: {max(values, default=0)} values per action dimension{procs}, fewer than {MIN_VALUES}")
            continue
        shares = {d: (e["at_low"][d] + e["at_high"][d]) / values[d] for d in judged}
        near = {d: e["near"][d] / values[d] for d in judged}
        worst = max(judged, key=lambda d: (shares[d] >= PINNED or near[d] >= HUGGING, shares[d]))
        beyond = e["beyond"][worst] / values[worst]
        text = (f"action[{worst}] at a bound on {shares[worst]:.0%} of {values[worst]} values "
                f"({e['at_low'][worst]} at the low, {e['at_high'][worst]} at the high bound, {beyond:.0%} beyond them) "
                f"and within {NEAR:.0%} of the range of one on {near[worst]:.0%}{procs}")
        if shares[worst] >= PINNED or near[worst] >= HUGGING:
            faults.append(f"{where}: {text}: most actions sit at the bounds, so the policy acts bang-bang; usual causes: a tanh or clamp "
                          "fed unscaled observations (normalize them: ObservationNorm(in_keys=['observation'], standard_normal=True) "
                          "then init_stats), an unbounded distribution clipped by ProbabilisticActor(safe=True) or by the env "
                          "(use TanhNormal with low/high from env.action_spec), or a noise or scale much wider than the range")
        else:
            notes.append(f"{where}: {text}")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    if not notes:
        raise sr.CheckSkipped("too few actions to judge: " + "; ".join(short))
    return "; ".join(notes) + (f"; not judged: {'; '.join(short)}" if short else "")
