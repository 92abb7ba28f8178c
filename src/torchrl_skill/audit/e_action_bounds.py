"""action-bounds: are the actions the env receives pinned at its action spec's bounds from the start?

An effect monitor (boundary.py): at each step of a base env with a continuous ``Bounded``
action spec it counts, per action dimension, the values at a bound (within TOL of the
range), within NEAR of the range of one, and beyond one. A policy that sits at the bounds
before it could have learned anything is bang-bang by construction: a tanh saturated by
unscaled observations, an unbounded distribution clipped by ``ProbabilisticActor(safe=True)``
or by the env, a scale or noise far wider than the range. Steps under a deterministic
exploration type, and steps while a collector is still in its ``init_random_frames``, are
counted apart and not judged.

Fault: in the first window of the policy's own actions (MIN_VALUES values of one dimension
in each process), PINNED or more at or beyond a bound, or HUGGING or more within NEAR of
the range of one. Later in the run a policy may learn to push on purpose (a correct TD3 on
Pendulum puts 32% of its actions at a bound and 75% near one after 2000 updates), so the
rest of the run is reported, not judged. Minimum evidence: MIN_VALUES values of a
dimension; fewer: SKIP with the count seen.
Why these numbers: a continuous distribution puts mass within 0.1% of the range of a bound
only where it is clipped or saturated (tanh gets there past |x| > 3.8). Measured over a
policy's first values: correct runs put under 10% there and under 40% within 10% of the
range of one (PPO with TanhNormal on Pendulum: 1-4% and 28-35%; TD3 with noise 0.3 after
its random frames: 8% and 34%); a unit-scale Normal projected onto a range of 0.1 by
ProbabilisticActor(safe=True) puts 96% exactly on the bounds
(tests/fixtures/audit/effects/action_bounds).

The other side of the same spec: a policy whose distribution cannot reach part of the range.
Every distribution built that carries its own support (``low`` and
``high``: TanhNormal, TruncatedNormal, TanhDelta) is read, up to MAX_DISTS of them; fails
when it reaches under SIDE of one half of an action dimension's range (below or above the
spec's centre): actions of that side never happen (TanhNormal's ``low`` from 0 on a [-2, 2]
spec). A support narrower on both sides (TanhNormal's default [-1, 1] on [-2, 2]) still acts
in every direction, at a smaller magnitude: it is noted with its share of the range.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from . import evidence

NAME = "action-bounds"
TOL = 1e-3  # a value within TOL * (high - low) of a bound is at it
PINNED = 0.4  # share of one dimension's values at or beyond a bound that fails
NEAR, HUGGING = 0.1, 0.8  # or this share within NEAR * (high - low) of a bound
MIN_VALUES = 200  # values per dimension before it is judged
SIDE, REACH, MAX_DISTS = 0.1, 0.9, 50  # share of each half of a dimension's range a support must reach; under REACH of it is noted
LATER_EVERY, MAX_VALUES = 10, 2_000  # after the first window: one step in LATER_EVERY measured, up to MAX_VALUES


_KINDS = ("values", "at_low", "at_high", "beyond", "near")


def _counts(a, lo, hi) -> dict:
    tol, near = TOL * (hi - lo), NEAR * (hi - lo)
    found = {"at_low": a <= lo + tol, "at_high": a >= hi - tol, "beyond": (a < lo) | (a > hi),
             "near": (a <= lo + near) | (a >= hi - near)}
    out = {k: v.sum(0).tolist() for k, v in found.items()}
    out["values"] = [a.shape[0]] * a.shape[1]
    return out


def _add(into: dict | None, more: dict | None) -> dict | None:
    if into is None or more is None:
        return into or more
    if len(into["values"]) != len(more["values"]):
        return into
    return {k: [x + y for x, y in zip(into[k], more[k])] for k in _KINDS}


def install(hub) -> None:
    import torch

    from . import boundary
    from .e_env_actions import _label
    from .tdtools import ObjectKeys

    boundary.install(hub)
    sec = hub.section(NAME)
    key_of = ObjectKeys()
    envs: dict = {}
    random_frames = {"until": 0}

    def on_collector(col, site):
        random_frames["until"] = max(random_frames["until"], int(getattr(col, "init_random_frames", 0) or 0))

    def on_action(env, sampled, received, deterministic):
        key = key_of(env)
        info = envs.get(key)
        if info is None:
            # the spec of one env: a batched env's action_spec carries its batch dims, whose
            # elements would be counted as action dimensions (a [16, 1] spec read as 16 of them)
            try:
                spec = env.action_spec_unbatched
            except Exception:
                spec = env.action_spec
            space = getattr(spec, "space", None)
            low, high = getattr(space, "low", None), getattr(space, "high", None)
            ok = (getattr(spec, "domain", "") == "continuous" and torch.is_tensor(low) and torch.is_tensor(high)
                  and bool(torch.isfinite(low).all()) and bool(torch.isfinite(high).all()) and bool((high > low).all()))
            info = envs[key] = {"label": _label(env), "ok": ok, "low": low, "high": high, "steps": 0, "det_steps": 0,
                                "lows": low.reshape(-1).tolist() if ok else None, "highs": high.reshape(-1).tolist() if ok else None,
                                "random_steps": 0, "first": None, "all": None,
                                "range": f"[{low.min().item():g}, {high.max().item():g}]" if ok else None}
        if not info["ok"] or not torch.is_tensor(sampled) or not sampled.is_floating_point():
            return
        if deterministic:
            info["det_steps"] += 1
            return
        if hub.meta["frames"] < random_frames["until"]:
            info["random_steps"] += 1
            return
        info["steps"] += 1
        whole, first = info["all"], info["first"]
        if first is not None and min(first["values"]) >= MIN_VALUES and (info["steps"] % LATER_EVERY or min(whole["values"]) >= MAX_VALUES):
            return  # the first window is full: sample the rest, cheaply
        dims = info["low"].numel()
        if sampled.numel() % dims:
            return
        a = sampled.detach().reshape(-1, dims).float()
        got = _counts(a, info["low"].reshape(1, -1).float(), info["high"].reshape(1, -1).float())
        if first is None or min(first["values"]) < MIN_VALUES:
            info["first"] = _add(first, got)
        info["all"] = _add(whole, got)

    supports: dict = {}  # (distribution class, site) -> [count, per-dim lowest low, per-dim highest high]

    def after_init(dist, args, kwargs, _out):
        low, high = getattr(dist, "low", None), getattr(dist, "high", None)
        if not (torch.is_tensor(low) and torch.is_tensor(high)) or sum(s[0] for s in supports.values()) >= MAX_DISTS:
            return
        from .probe import user_site

        dims = low.shape[-1] if low.dim() else 1
        lo = [v + 0.0 for v in low.detach().reshape(-1, dims).min(0).values.tolist()]  # + 0.0: no "-0" in the row
        hi = [v + 0.0 for v in high.detach().reshape(-1, dims).max(0).values.tolist()]
        key = (type(dist).__name__, user_site())
        cur = supports.get(key)
        supports[key] = [1, lo, hi] if cur is None or len(cur[1]) != dims else [
            cur[0] + 1, [min(a, b) for a, b in zip(cur[1], lo)], [max(a, b) for a, b in zip(cur[2], hi)]]

    from .patches import wrap

    # read where each distribution is built (get_dist is wrapped by policy-update: one wrap per method)
    wrap(hub, torch.distributions.Distribution, "__init__", after=after_init, guard="audit-action-support")

    def summarise():  # one record per env label and range (the sub-envs of a SerialEnv are one)
        own = [{k: v for k, v in e.items() if k not in ("low", "high", "ok")} for e in envs.values() if e["ok"]]
        sec["envs"] = _join([own])
        sec["supports"] = [{"cls": k[0], "site": k[1], "n": v[0], "low": v[1], "high": v[2]} for k, v in supports.items()]

    hub.on("collector_built", on_collector)
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
            for k in ("steps", "det_steps", "random_steps"):
                cur[k] += e[k]
            for k in ("first", "all"):
                cur[k] = _add(cur[k], e[k])
    return list(out.values())


def merge_workers(main: dict, workers: list[dict]) -> dict:
    """The main process's records joined with the instrumented workers' (workers.py)."""
    return {**main, "envs": _join([main.get("envs", []), *[w.get("envs", []) for w in workers]])}


def _share(c: dict, d: int) -> tuple[float, float, float]:
    n = c["values"][d]
    return (c["at_low"][d] + c["at_high"][d]) / n, c["near"][d] / n, c["beyond"][d] / n


def premise(observed: dict) -> str | None:
    """Why the bang-bang judgement does not apply to this run, or None. Its premise is a
    learned policy saturated before it could have learned: a run with no optimizer step, or
    whose every acting policy has no tensors (a scripted controller, read from the
    acting-module row's section), has nothing that learns, and a controller may push on
    the bounds by design."""
    if not observed["meta"].get("optimizer_steps"):
        return "no optimizer stepped, so no policy learns here: a bang-bang policy before learning is not judged"
    pols = observed["sections"].get("acting-module", {}).get("policies", [])
    if pols and not any(p["tensors"] for p in pols):
        names = ", ".join(sorted({p["cls"] for p in pols}))
        return (f"the policy that acts ({names}) has no tensors (a scripted controller): the premise of this row, a learned "
                "policy saturated before it could learn, does not hold")
    return None


def _unreachable(envs: list[dict], supports: list[dict], notes: list[str] | None = None) -> list[str]:
    """Faults: a distribution's own support reaching under SIDE of one half of a dimension of
    an env's range (matched by the number of action dimensions); a support covering under
    REACH of the range on both sides goes to ``notes``."""
    out = []
    for e in envs:
        lows, highs = e.get("lows"), e.get("highs")
        if not lows:
            continue
        for s in supports:
            if len(s["low"]) != len(lows):
                continue
            for d, (el, eh, sl, sh) in enumerate(zip(lows, highs, s["low"], s["high"])):
                reach = max(0.0, min(eh, sh) - max(el, sl)) / (eh - el)
                mid = (el + eh) / 2
                below = max(0.0, min(mid, sh) - max(el, sl)) / (mid - el)
                above = max(0.0, min(eh, sh) - max(mid, sl)) / (eh - mid)
                if reach < REACH and min(below, above) >= SIDE and notes is not None:
                    notes.append(f"the policy's {s['cls']} (built at {s['site']}) reaches [{sl:g}, {sh:g}] on action[{d}], {reach:.0%} of "
                                 f"the spec's [{el:g}, {eh:g}], on both sides of its centre (TanhNormal's default bounds are [-1, 1] "
                                 "unless low/high are given)")
                    break
                if min(below, above) < SIDE:
                    out.append(f"{e['label']}: the policy's {s['cls']} (built at {s['site']}, {s['n']} read) reaches [{sl:g}, {sh:g}] on "
                               f"action[{d}], {reach:.0%} of the spec's [{el:g}, {eh:g}]: actions in the rest of the range never happen; "
                               f"fix: {s['cls']}(..., low=env.action_spec_unbatched.space.low, high=env.action_spec_unbatched.space.high)")
                    break
    return out


def judge(observed: dict) -> str:
    sec = observed["sections"].get(NAME, {})
    envs = sec.get("envs", [])
    if not envs:
        raise sr.CheckSkipped("no base env with a bounded continuous action spec was stepped")
    why = premise(observed)
    if why:
        raise sr.CheckSkipped(why)
    support_notes: list[str] = []
    faults, notes, short = _unreachable(envs, sec.get("supports", []), support_notes), [], []
    for e in envs:
        where = f"{e['label']} (action range {e['range']})"
        procs = f" in {e['processes']} processes" if e.get("processes", 1) > 1 else ""
        first, whole = e["first"], e["all"]
        if first is None or max(first["values"]) < MIN_VALUES:
            short.append(f"{where}: {max(first['values']) if first else 0} policy values per action dimension{procs}, fewer than {MIN_VALUES}")
            continue
        dims = [d for d, n in enumerate(first["values"]) if n >= MIN_VALUES]
        worst = max(dims, key=lambda d: (_share(first, d)[0] >= PINNED or _share(first, d)[1] >= HUGGING, _share(first, d)[0]))
        at, near, beyond = _share(first, worst)
        text = (f"action[{worst}] over the policy's first {first['values'][worst]} values{procs}: {at:.0%} at a bound "
                f"({first['at_low'][worst]} low, {first['at_high'][worst]} high, {beyond:.0%} beyond), {near:.0%} within "
                f"{NEAR:.0%} of the range of one")
        w_at, w_near, _ = _share(whole, worst)
        later = f"; over {whole['values'][worst]} values sampled from the whole run: {w_at:.0%} at, {w_near:.0%} near a bound"
        if at >= PINNED or near >= HUGGING:
            faults.append(f"{where}: {text}: the policy acts bang-bang before it could have learned to; usual causes: a tanh or "
                          "clamp fed unscaled observations (normalize them: ObservationNorm(in_keys=['observation'], "
                          "standard_normal=True) then init_stats), an unbounded distribution clipped by ProbabilisticActor(safe=True) "
                          "or by the env (use TanhNormal with low/high from env.action_spec_unbatched.space: one env's bounds, which a flattened batch broadcasts with), or a noise or scale much wider than the range")
        else:
            notes.append(f"{where}: {text}{later}")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    if sec.get("supports") and notes:
        notes += support_notes or [f"the policy's distributions span the spec's range ({sum(s['n'] for s in sec['supports'])} supports read)"]
    if not notes:
        raise evidence.Short("too few actions to judge: " + "; ".join(short) + "; " + evidence.MORE)
    return "; ".join(notes) + (f"; not judged: {'; '.join(short)}" if short else "")
