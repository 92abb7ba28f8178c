"""grad-norms: does one network's gradient explode, vanish, or never reach some of its tensors?

An effect monitor on the gradient norms of gradstats.py (sampled optimizer steps), grouped
by network (a loss's ``actor_network_params``, ``qvalue_network_params``, ...; else an
optimizer's parameter group). Per network: the norm of all its gradients per step; per
tensor: how often its gradient was exactly zero.

Faults, on MIN_STEPS or more sampled steps of that network (MIN_ZERO of a tensor for the
all-zero share; fewer: SKIP with the count): the median norm of its last WINDOW steps
GROWTH times its first WINDOW steps' (exploding); a network whose median is APART of
another network's of the same loss (no signal reaches it); a tensor whose gradient is
exactly zero on ZERO or more of its steps (a tanh or ReLU saturated by unscaled inputs, a
detached output: the optimizer steps it on nothing). A norm that shrinks is reported, not
failed: a critic whose loss falls toward 0 shrinks its gradient as it converges (the
correct DDPG crane's critic: 262x in 300 steps). Steps from the first non-finite gradient
on are left out (the non-finite row names it; what follows is no longer a trend).
Why 10^3: on the correct runs of tests/fixtures/audit (PPO, SAC, DQN, TD3, DDPG) no
network's norm grew more than 4x; a critic trained with a step far too large grew 10^13x
before it turned NaN.
"""

from __future__ import annotations

import math
import statistics

from torchrl_skill.report import skill_report as sr

from . import evidence

NAME = "grad-norms"
WINDOW = 5
MIN_STEPS = 2 * WINDOW  # sampled steps of a network before its trend is judged
MIN_ZERO = 20  # steps of a tensor before its all-zero share is judged
GROWTH = 1e3
APART = 1e-6  # a network this far below another of the same loss gets no signal
ZERO = 0.9
KEEP = 200  # points kept per network (decimated beyond)


def install(hub) -> None:
    from . import gradstats

    gradstats.install(hub)
    sec = hub.section(NAME)
    nets: dict = {}
    zeros: dict = {}

    frozen = {"at": None}

    def on_norms(opt, step, names, norms):
        if frozen["at"] is not None:
            return  # past the first non-finite gradient everything downstream is garbage
        if not all(math.isfinite(n) for n in norms):
            frozen["at"] = step
            return
        totals: dict = {}
        for name, n in zip(names, norms):
            net = gradstats.network(name)
            totals[net] = totals.get(net, 0.0) + n * n
            z = zeros.setdefault(name, [0, 0])
            z[1] += 1
            z[0] += n == 0.0
        for net, sq in totals.items():
            info = nets.setdefault(net, {"first": [], "last": [], "steps": 0, "first_step": step, "last_step": step, "tensors": 0})
            value = math.sqrt(sq)
            info["steps"] += 1
            info["last_step"] = step
            if len(info["first"]) < WINDOW:
                info["first"].append(value)
            info["last"] = (info["last"] + [value])[-WINDOW:]

    def summarise():
        sec["networks"] = {k: dict(v) for k, v in nets.items()}
        sec["non_finite_at"] = frozen["at"]
        sec["zero"] = {k: v for k, v in zeros.items() if v[0] >= ZERO * v[1] and v[1] >= MIN_ZERO}

    hub.on("grad_norms", on_norms)
    hub.summariser(summarise)


def _med(xs: list) -> float:
    return statistics.median(xs) if xs else float("nan")


def judge(observed: dict) -> str:
    sec = observed["sections"].get(NAME, {})
    nets = sec.get("networks", {})
    if not nets:
        raise sr.CheckSkipped("no optimizer step with gradients")
    judged = {k: v for k, v in nets.items() if v["steps"] >= MIN_STEPS and v["first"] and v["last"]}
    if not judged:
        raise evidence.Short("too few sampled optimizer steps: " + ", ".join(f"{k} {v['steps']}" for k, v in nets.items()) + f" (needs {MIN_STEPS})" + "; " + evidence.MORE)
    faults, notes = [], []
    for net, v in judged.items():
        a, b = _med(v["first"]), _med(v["last"])
        span = f"from {a:.3g} (steps {v['first_step']}..) to {b:.3g} (..step {v['last_step']})"
        if a > 0 and b / a >= GROWTH:
            faults.append(f"{net}: gradient norm grew {b / a:.3g}x {span}: the updates diverge; fix: lower its learning rate, "
                          "clip its gradients (torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)), check its targets (see value-range)")
        else:
            notes.append(f"{net} {a:.3g} -> {b:.3g}")
    by_loss: dict = {}
    for net, v in judged.items():
        if "." in net and " group " not in net:
            by_loss.setdefault(net.split(".")[0], []).append((net, _med(v["first"] + v["last"])))
    for loss, items in by_loss.items():
        top = max(m for _, m in items)
        for net, m in items:
            if top > 0 and m < APART * top:
                faults.append(f"{net}: median gradient norm {m:.3g}, {top / max(m, 1e-300):.3g}x below another network of {loss}: "
                              "no learning signal reaches it (a saturated tanh or dead ReLUs, a detached output)")
    zero = sec.get("zero", {})
    if zero:
        shown = "; ".join(f"{name} ({z} of {n} steps)" for name, (z, n) in list(zero.items())[:4])
        faults.append(f"{len(zero)} tensors got an all-zero gradient on at least {ZERO:.0%} of their steps: {shown}: the optimizer "
                      "steps them on nothing; usual causes: a tanh or ReLU saturated by unscaled or badly normalized inputs (see the info:observation-scale row), "
                      "an output computed under torch.no_grad() or .detach(), a loss term weighted by 0")
    if faults:
        cut = sec.get("non_finite_at")
        raise sr.CheckFailed(" | ".join(faults) + (f" (judged on the steps before step {cut}, where a gradient became non-finite)" if cut else ""))
    cut = sec.get("non_finite_at")
    cut = f"; steps from {cut} on left out (a non-finite gradient, see non-finite)" if cut else ""
    return (f"median gradient norm over the first and last {WINDOW} sampled steps, per network: " + "; ".join(notes)
            + f" (none grew {GROWTH:g}x, no all-zero tensor){cut}")
