"""value-range: do value or Q estimates stay within what the rewards seen can add up to?

An effect monitor on every value-estimator call (``ValueEstimatorBase.forward``: ``GAE``,
``TD0Estimator``, ... called by the script or by a loss; and ``value_estimate``, which
``DQNLoss``, ``SACLoss``, ``DDPGLoss``, ``TD3Loss`` call for their targets; torchrl
0.14.1 objectives/*.py): the largest |value| among the estimates it wrote (``state_value``,
``value_target``) or returned, the largest |reward| of its input (``("next", "reward")``)
and the estimator's ``gamma``. With rewards bounded by R, no discounted return exceeds
R / (1 - gamma), so an estimate past it is a critic that diverges (a learning rate too
high, bootstrapping from itself without a target network, a wrong sign in a target).

Fault: an estimate above MARGIN x max|r| / (1 - gamma), with max|r| the largest reward of
the whole run, and above GROWTH x the largest estimate of the first call (a critic that
starts large from its initialization is not diverging). Minimum evidence: MIN_CALLS calls
with an optimizer step between the first and the last, a nonzero reward seen and
gamma < 1; fewer: SKIP with the counts.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from . import evidence

NAME = "value-range"
MARGIN = 2.0
GROWTH = 10.0
MIN_CALLS = 3  # estimator calls, with an optimizer step between the first and the last
KEEP = 40


def install(hub) -> None:
    import torch
    from torchrl.objectives.value import ValueEstimatorBase

    from .patches import wrap

    sec = hub.section(NAME)
    ests: dict = {}

    def record(est, td, values):
        if not torch.is_tensor(values) or not values.numel() or not values.is_floating_point():
            return
        gamma = getattr(est, "gamma", None)
        try:
            gamma = float(gamma)
        except (TypeError, ValueError):
            gamma = None
        info = ests.setdefault(type(est).__name__, {"calls": 0, "gamma": gamma, "max_v": 0.0, "first_v": None, "max_r": 0.0,
                                                    "first_step": hub.meta["optimizer_steps"], "curve": []})
        v = values.detach()
        v = float(v[torch.isfinite(v)].abs().max()) if bool(torch.isfinite(v).any()) else float("nan")
        reward = td.get(("next", getattr(getattr(est, "tensor_keys", None), "reward", "reward")), None) if td is not None else None
        if torch.is_tensor(reward) and reward.numel():
            r = reward.detach().float().abs()
            info["bad_r"] = info.get("bad_r", 0) + int((~torch.isfinite(r)).sum())
            r = r[torch.isfinite(r)]
            if r.numel():
                info["max_r"] = max(info["max_r"], float(r.max()))
        info["calls"] += 1
        info["last_step"] = hub.meta["optimizer_steps"]
        if info["first_v"] is None:
            info["first_v"] = v
        if v == v:
            info["max_v"] = max(info["max_v"], v)
        if len(info["curve"]) < KEEP or info["calls"] % 10 == 0:
            info["curve"] = (info["curve"] + [(hub.meta["optimizer_steps"], round(v, 4), round(info["max_r"], 4))])[-KEEP:]

    def after_forward(est, a, k, out):
        td = out if out is not None else (a[0] if a else None)
        if td is None or not hasattr(td, "get"):
            return
        keys = getattr(est, "tensor_keys", None)
        parts = [td.get(key, None) for key in (getattr(keys, "value_target", "value_target"), getattr(keys, "value", "state_value"))]
        parts = [p.reshape(-1) for p in parts if torch.is_tensor(p)]
        if parts:
            hub.emit("value_estimates", est, td, torch.cat(parts))

    def after_estimate(est, a, k, out):
        hub.emit("value_estimates", est, a[0] if a else k.get("tensordict"), out)

    # wrapped once per process (a forked worker keeps the wrappers and subscribes again)
    wrap(hub, ValueEstimatorBase, "forward", after=after_forward, guard="audit-value")
    wrap(hub, ValueEstimatorBase, "value_estimate", after=after_estimate, guard="audit-value")
    hub.on("value_estimates", record)
    hub.summariser(lambda: sec.__setitem__("estimators", dict(ests)))


def judge(observed: dict) -> str:
    ests = observed["sections"].get(NAME, {}).get("estimators", {})
    if not ests:
        raise sr.CheckSkipped("no value estimator was called (GAE, TD0Estimator, a loss's value_estimate)")
    faults, notes, short = [], [], []
    for name, e in ests.items():
        g, r = e["gamma"], e["max_r"]
        trained = e.get("last_step", 0) > e.get("first_step", 0)
        if e["calls"] < MIN_CALLS or not trained or g is None or not g < 1 or r <= 0:
            why = ("gamma >= 1: no bound from rewards" if g is not None and not g < 1 else
                   "no optimizer step between its calls" if not trained else
                   f"no finite nonzero reward ({e.get('bad_r', 0)} non-finite)" if r <= 0 and e.get("bad_r") else
                   "every reward seen was 0" if r <= 0 else f"fewer than {MIN_CALLS} calls")
            short.append(f"{name}: {e['calls']} calls ({why})")
            continue
        bound = r / (1 - g)
        first = e["first_v"] if e["first_v"] == e["first_v"] else 0.0
        text = f"{name}(gamma={g:g}): largest |estimate| {e['max_v']:.4g} over {e['calls']} calls, max|r| {r:.4g} -> bound {bound:.4g}"
        if e["max_v"] > MARGIN * bound and e["max_v"] > GROWTH * first:
            curve = ", ".join(f"{v:.3g} at step {s}" for s, v, _ in e["curve"][:: max(1, len(e["curve"]) // 5)][:6])
            faults.append(f"{text}: the critic diverges (curve: {curve}); no discounted return of these rewards exceeds "
                          f"max|r| / (1 - gamma); fix: lower the critic's learning rate, bootstrap from a target network "
                          "(SoftUpdate(loss, tau=0.005) stepped after each optimizer step), clip its gradients")
        else:
            notes.append(text)
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    if not notes:
        raise evidence.Short("too little to judge: " + "; ".join(short) + "; " + evidence.MORE)
    return "; ".join(notes) + (f"; not judged: {'; '.join(short)}" if short else "")
