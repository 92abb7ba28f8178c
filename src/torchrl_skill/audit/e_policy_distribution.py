"""policy-distribution: does the policy's entropy hold up, and do stored log-probs belong to the actions?

An effect monitor. On sampled collected batches (every collector batch among the first
EARLY, then every EVERY-th; ``env.rollout`` outputs) whose policy holds a probabilistic
actor (a ``ProbabilisticTensorDictSequential``: ``ProbabilisticActor``), it rebuilds the
actor's distribution on up to ROWS steps of the batch (``actor.get_dist``, no sampling, no
side effect) and measures:

- the log-prob of the stored action under it against the stored log-prob
  (``actor.log_prob_keys``, e.g. ``["action_log_prob"]``). The collector checks each batch
  before the script trains on it, so the weights are those that acted: a difference means
  the stored action is not the one the log-prob was computed for (an exploration module or
  a transform changed it afterwards, e.g. ``AdditiveGaussianModule`` after a
  ``ProbabilisticActor``, or ``safe=True`` projected the sample onto the spec) or the
  acting copy's weights differ (a multi-process collector whose workers were not sent the
  new weights);
- the entropy: ``dist.entropy()`` (``TanhNormal``: of its base Normal, before the tanh),
  per action dimension; for a categorical policy as a share of ``log(n)``.

Faults: stored log-probs off by more than ATOL + RTOL*|log-prob| on MISMATCH or more of
MIN_LOGPROBS or more checked steps; the env received other actions than the stored ones
(the env-actions row's encoding fault, read here: the log-probs then belong to actions
never taken); entropy collapsed: a categorical policy below FLOOR of its maximum over its
last two checks (or at every check), a continuous one down DROP nats per dimension from
its first check. Minimum evidence for the entropy verdict: MIN_CHECKS checks and one
optimizer step between the first and the last; fewer: SKIP with the counts seen. While the
run goes on (``evidence.live``: the early stop asking), an entropy short of that, or within
a factor NEAR of its fault line (a categorical one under NEAR x FLOOR of log(n), a
continuous one down DROP / NEAR nats per dimension), is no verdict yet (Short), so the run
is not stopped on a pass of a policy that is collapsing; once the run ended it is judged on
what was seen.
Thresholds: on the correct runs of tests/fixtures/audit (up to 4096 frames) a CartPole PPO
stays at 0.97-1.00 of log(2), Pendulum PPO and SAC policies within 0.25 nats per dimension
of their start (1.44 -> 1.68, 1.43 -> 1.26); FLOOR 0.1 of log(2) is a policy that takes
one of two actions 98.7% of the time, DROP 2.3 nats a standard deviation shrunk tenfold.
A stored log-prob recomputed on a whole batch matches to ~1e-5 (1799 or 1800 of 1800 steps
within ATOL on the correct runs); noise added after the actor moved 1708 of 1800, the
safe=True projection 947 of 1000 (tests/fixtures/audit/effects).
"""

from __future__ import annotations

import math

from torchrl_skill.report import skill_report as sr

from . import evidence

NAME = "policy-distribution"
EARLY, EVERY, MAX_CHECKS = 8, 5, 60  # batches checked: the first EARLY, then every EVERY-th, at most MAX_CHECKS
ROWS = 256  # steps per checked batch
ATOL, RTOL, MISMATCH = 1e-3, 1e-3, 0.05
MIN_LOGPROBS = 100
MIN_CHECKS = 3
FLOOR = 0.1  # categorical: entropy / log(n)
DROP = 2.3  # continuous: nats per action dimension (std / 10)
NEAR = 2.0  # while the run goes on, within this factor of FLOOR or DROP is no verdict yet


def _actor(policy):
    from tensordict.nn import ProbabilisticTensorDictSequential

    if isinstance(policy, ProbabilisticTensorDictSequential):
        return policy
    modules = policy.modules() if hasattr(policy, "modules") else []
    return next((m for m in modules if isinstance(m, ProbabilisticTensorDictSequential)), None)


def _entropy(dist, n: int):
    """Per-row entropy, or None when the distribution has none in closed form."""
    for d in (dist, getattr(dist, "base_dist", None)):
        if d is None:
            continue
        try:
            return d.entropy().reshape(n, -1).sum(-1)
        except Exception:  # NotImplementedError, or a shape the reshape cannot take
            continue
    return None


def install(hub) -> None:
    import torch

    from .probe import user_site
    from .tdtools import ObjectKeys

    sec = hub.section(NAME)
    key_of = ObjectKeys()
    sources: dict = {}

    def measure(src, policy, td):
        actor = _actor(policy)
        if actor is None:
            src["no_actor"] = type(policy).__name__
            return
        action_key = actor.dist_sample_keys[0] if actor.dist_sample_keys else "action"
        try:  # tensordict 0.14.3: the Sequential's log_prob_key property raises; log_prob_keys works
            keys = actor.log_prob_keys
            lp_key = keys[0] if len(keys) == 1 else None
        except Exception:
            lp_key = None
        flat = td.reshape(-1)
        n = min(ROWS, flat.shape[0])
        idx = torch.linspace(0, flat.shape[0] - 1, n).long()
        rows = flat[idx]
        action = rows.get(action_key, None)
        if action is None:
            return
        with torch.no_grad():
            dist = actor.get_dist(rows.exclude("next"))
            h = _entropy(dist, n)
            stored = rows.get(lp_key, None) if lp_key is not None else None
            if stored is not None:
                lp = dist.log_prob(action).reshape(n, -1).sum(-1).float()
                stored = stored.reshape(n, -1).sum(-1).float()
                both = torch.isfinite(lp) & torch.isfinite(stored)
                off = ~both | ((lp - stored).abs() > ATOL + RTOL * stored.abs())
                src["lp_checked"] += n
                src["lp_off"] += int(off.sum())
                if off.any() and src["example"] is None:  # the median one of the first batch that differs
                    diffs = (lp - stored).abs().nan_to_num(float("inf"))
                    i = int(off.nonzero()[:, 0][diffs[off].argsort()[int(off.sum()) // 2]])
                    src["example"] = f"stored {stored[i].item():.4g}, recomputed {lp[i].item():.4g}"
                src["lp_key"] = str(lp_key)
        if h is None:
            return
        logits = getattr(dist, "logits", None)
        if not action.is_floating_point() and logits is not None and logits.shape[-1] > 1:
            value, unit = float(h.mean()) / math.log(logits.shape[-1]), "share"
        else:
            dims = max(1, action[0].numel())
            value, unit = float(h.mean()) / dims, "nats"
        src["unit"] = unit
        src["series"].append((hub.meta["frames"], hub.meta["optimizer_steps"], round(value, 4)))

    def check(key, kind, site, policy, td):
        src = sources.get(key)
        if src is None:
            src = sources[key] = {"kind": kind, "site": site, "batches": 0, "checks": 0, "lp_checked": 0, "lp_off": 0,
                                  "example": None, "series": [], "unit": None, "lp_key": None, "no_actor": None}
        src["batches"] += 1
        i = src["batches"]
        if src["checks"] >= MAX_CHECKS or src["no_actor"] or not (i <= EARLY or i % EVERY == 0):
            return
        src["checks"] += 1
        measure(src, policy, td)

    def on_batch(col, batch):
        policy = getattr(col, "policy", None)
        if batch is None or policy is None or type(policy).__name__ == "RandomPolicy":
            return
        random_frames = getattr(col, "init_random_frames", None) or 0
        if random_frames and getattr(col, "_frames", 0) <= random_frames:
            return
        check(key_of(col), type(col).__name__, "", policy, batch)

    def on_rollout(env, policy, td):
        if policy is not None and td is not None and callable(policy):
            check(("rollout", key_of(env), key_of(policy)), "env.rollout", user_site(), policy, td)

    def summarise():
        sec["sources"] = [dict(s) for s in sources.values()]

    hub.on("collector_batch", on_batch)
    hub.on("env_rollout", on_rollout)
    hub.summariser(summarise)


def _entropy_verdict(s: dict, live: bool = False) -> tuple[str | None, str, str]:
    """``(fault or None, note, state)`` on one source's entropy series; ``state``: "judged",
    "short" (too few checks) or "near" (``live``: the run goes on, and the entropy is within
    NEAR of its fault line: not judged yet)."""
    series = s["series"]
    steps = series[-1][1] - series[0][1] if series else 0
    if len(series) < MIN_CHECKS or not steps:
        return None, f"entropy not judged: {len(series)} checks with {steps} optimizer steps between them (needs {MIN_CHECKS} checks and a step)", "short"
    first, last = series[0][2], sum(v for _, _, v in series[-2:]) / 2
    span = f"over {series[-1][0] - series[0][0]} frames and {steps} optimizer steps ({len(series)} checks)"
    if s["unit"] == "share":
        text = f"entropy {first:.2f} -> {last:.2f} of its maximum log(n) {span}"
        if all(v < FLOOR for _, _, v in series):
            return f"{text}: the policy is nearly deterministic from its first batch (logits far too large), so it explores nothing", text, "judged"
        if last < FLOOR:
            return f"{text}: the policy collapsed to nearly one action", text, "judged"
        if live and last < NEAR * FLOOR:
            return None, f"{text}: within {NEAR:g}x of the collapse line ({FLOOR:g}), judged as the run goes on", "near"
        return None, text, "judged"
    text = f"entropy {first:.2f} -> {last:.2f} nats per action dimension {span}"
    if first - last >= DROP:
        return f"{text}: the policy's spread shrank more than tenfold", text, "judged"
    if live and first - last >= DROP / NEAR:
        return None, f"{text}: down more than {DROP / NEAR:.2f} nats, judged as the run goes on", "near"
    return None, text, "judged"


def judge(observed: dict) -> str:
    sources = [s for s in observed["sections"].get(NAME, {}).get("sources", []) if s["checks"]]
    measured = [s for s in sources if not s["no_actor"]]
    if not measured:
        others = ", ".join(sorted({s["no_actor"] for s in sources if s["no_actor"]}))
        raise sr.CheckSkipped("no collected batch of a probabilistic actor (ProbabilisticActor)" + (f"; policies seen: {others}" if others else ""))
    env_actions = observed["sections"].get("env-actions", {}).get("envs", [])
    remapped = [e["label"] for e in env_actions if e.get("discrete") and any(len(v) > 1 for v in e.get("pairs", {}).values())]
    faults, notes, near, judged = [], [], [], False
    fix_entropy = ("fix: keep the entropy bonus positive (ClipPPOLoss(..., entropy_coeff=0.01)), lower the learning rate, "
                   "and check the scale of the logits (or loc/scale) at initialization: observations far from unit scale make them large")
    for s in measured:
        where = f"{s['kind']}{' at ' + s['site'] if s['site'] else ''}"
        if s["lp_checked"] >= MIN_LOGPROBS:
            judged = True
            if s["lp_off"] / s["lp_checked"] >= MISMATCH:
                faults.append(f"{where}: the stored {s['lp_key']} is not the policy's log-prob of the stored action on {s['lp_off']} of "
                              f"{s['lp_checked']} checked steps (median case of the first batch: {s['example']}): something changed the action after its log-prob was "
                              "computed (an exploration module or transform after the ProbabilisticActor, the projection of "
                              "ProbabilisticActor(safe=True) onto the spec) or the acting copy's weights "
                              "differ (call collector.update_policy_weights_() after each optimizer step); the loss's importance ratio "
                              "is then wrong; fix: explore through the distribution itself (no noise after a ProbabilisticActor; "
                              "a TanhNormal with low/high from env.action_spec instead of safe=True)")
            else:
                notes.append(f"{where}: the stored {s['lp_key']} is the policy's log-prob of the stored action on "
                             f"{s['lp_checked'] - s['lp_off']} of {s['lp_checked']} checked steps")
        elif s["lp_key"]:
            notes.append(f"{where}: log-probs not judged: {s['lp_checked']} steps checked (needs {MIN_LOGPROBS})")
        else:
            notes.append(f"{where}: no stored log-prob (return_log_prob=False)")
        if remapped and s["lp_checked"]:
            judged = True
            faults.append(f"{where}: the stored {s['lp_key']} belongs to the sampled actions, but {', '.join(remapped)} received other "
                          "actions (see env-actions): the loss trains on log-probs of actions never taken")
        watching = evidence.live(observed) and s["checks"] < MAX_CHECKS  # more checks will come
        fault, text, state = _entropy_verdict(s, watching)
        if watching and (state == "near" or state == "short" and s["series"]):
            near.append(f"{where}: {text}")  # an entropy seen but not judged: no verdict while the run goes on
        judged = judged or state == "judged"
        if fault:
            faults.append(f"{where}: {fault}; {fix_entropy}")
        else:
            notes.append(f"{where}: {text}")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    if near:
        raise evidence.Short("entropy not judged yet: " + "; ".join(near) + "; " + evidence.MORE)
    if not judged:
        raise evidence.Short("too little to judge: " + "; ".join(notes) + "; " + evidence.MORE)
    return "; ".join(notes)
