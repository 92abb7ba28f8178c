"""learning-rate: does each step's update agree with the optimizer's learning rate, read live?

An invariant of any optimizer loop. At every step it reads each parameter group's ``lr``
from ``opt.param_groups`` (what the step uses, after any scheduler): finite, positive, not
collapsed to a vanishing fraction of its first value. On sampled steps (``sampled``)
it copies the tensors before the step and measures the update ``delta = after - before``
against the gradient ``g`` the step used: its sign (the cosine of delta and g is negative
for a descent step; positive for ``maximize=True`` groups) and its size (``|delta|`` is 0
only when lr is 0).

Faults: a learning rate that is non-finite, 0 or negative at some step (named with the
step and the scheduler stepped before it), or fell below COLLAPSE of its first value
(annealed to nothing mid-run); updates that climb the gradient at most sampled steps (a
negative lr, a sign-flipped loss handed to a minimizer is not this: its gradient is the
flipped one); a group with lr > 0 and nonzero gradients that never moved.

Facts (torch 2.14): ``torch.optim.lr_scheduler.LambdaLR`` sets ``lr = base_lr * lambda(epoch)``
with no floor, so a linear decay passing its end gives 0 then negative values, which
``Adam`` takes without a warning (tests/test_audit_invariants.py).
"""

from __future__ import annotations

import math
import statistics

from torchrl_skill.report import skill_report as sr

from .evidence import need, optimizer_label

NAME = "learning-rate"
MIN_STEPS = 4
MIN_SIGNED = 3  # sampled steps with a nonzero update and gradient before the sign is judged
COLLAPSE = 1e-4  # an lr below this fraction of its first value trains nothing more
MAX_COPY = 2_000_000  # values copied per sampled step at most (the rest is not measured)
SAMPLE_FIRST, SAMPLE_EVERY = 20, 20


def sampled(step: int) -> bool:
    """The steps whose update is measured: each of the first SAMPLE_FIRST, then every SAMPLE_EVERY-th."""
    return step <= SAMPLE_FIRST or step % SAMPLE_EVERY == 0


def _lr(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def install(hub) -> None:
    import torch

    from .probe import user_site

    sec = hub.section(NAME)
    opts: dict[int, dict] = {}
    before: dict = {}
    scheds: dict[int, dict] = {}

    def on_pre(opt):
        o = opts.get(id(opt))
        if o is None:
            o = opts[id(opt)] = {"cls": type(opt).__name__, "n": len(opts) + 1, "site": user_site(), "steps": 0,
                                 "first": None, "last": None, "min": None, "bad": None, "collapsed": None,
                                 "signed": 0, "ascent": 0, "cos": [], "moved": 0, "still": 0, "ratio": []}
        o["steps"] += 1
        lrs = [_lr(g.get("lr")) for g in opt.param_groups]
        if o["first"] is None:
            o["first"] = lrs
        o["last"] = lrs
        o["min"] = lrs if o["min"] is None else [min(a, b) for a, b in zip(o["min"], lrs)]
        for i, lr in enumerate(lrs):
            if o["bad"] is None and not (math.isfinite(lr) and lr > 0):
                o["bad"] = {"step": o["steps"], "lr": lr, "group": i, "sched": _last_sched(opt)}
            first = o["first"][i] if i < len(o["first"]) else lr
            if o["collapsed"] is None and math.isfinite(lr) and 0 < lr < COLLAPSE * first:
                o["collapsed"] = {"step": o["steps"], "lr": lr, "group": i, "first": first, "sched": _last_sched(opt)}
        if not sampled(o["steps"]):
            return
        kept, count = [], 0
        for g in opt.param_groups:
            for p in g["params"]:
                if p.grad is None or p.grad.is_sparse or not p.is_floating_point() or count + p.numel() > MAX_COPY:
                    continue
                count += p.numel()
                kept.append((p, p.detach().clone(), p.grad.detach().clone(), bool(g.get("maximize", False)), _lr(g.get("lr"))))
        before[id(opt)] = kept

    def on_post(opt):
        kept = before.pop(id(opt), None)
        o = opts.get(id(opt))
        if not kept or o is None:
            return
        lr, flip = kept[0][4], kept[0][3]
        with torch.no_grad():  # one flat vector each: three reductions and one read, whatever the tensor count
            d = torch.cat([(p.detach() - old).reshape(-1) for p, old, *_ in kept]).double()
            gd = torch.cat([grad.reshape(-1) for _, _, grad, *_ in kept]).double()
            dot, dd, gg = torch.stack([(d * gd).sum(), (d * d).sum(), (gd * gd).sum()]).tolist()
        if gg == 0:
            return
        if dd == 0:
            o["still"] += 1
            return
        o["moved"] += 1
        cos = dot / math.sqrt(dd * gg)
        cos = -cos if flip else cos
        o["signed"] += 1
        o["ascent"] += cos > 0
        if len(o["cos"]) < 200:
            o["cos"].append(round(cos, 4))
            n = sum(p.numel() for p, *_ in kept)
            o["ratio"].append(math.sqrt(dd / n) / lr if lr and math.isfinite(lr) and lr > 0 else None)

    def _last_sched(opt):
        s = [v for v in scheds.values() if v["opt"] == id(opt)]
        return f"{s[-1]['cls']} (stepped at {s[-1]['site']}, {s[-1]['steps']} times)" if s else None

    def on_sched(s):
        opt = getattr(s, "optimizer", None)
        info = scheds.setdefault(id(s), {"cls": type(s).__name__, "opt": id(opt), "site": user_site(), "steps": 0})
        info["steps"] += 1

    def summarise():
        sec["optimizers"] = list(opts.values())

    hub.on("optimizer_pre_step", on_pre)
    hub.on("optimizer_step", on_post)
    hub.on("scheduler_step", on_sched)
    hub.summariser(summarise)


def judge(obs: dict) -> str:
    sec = obs["sections"].get(NAME, {})
    opts = [o for o in sec.get("optimizers", []) if o["steps"]]
    if not opts:
        raise sr.CheckSkipped("no optimizer stepped")
    need(max(o["steps"] for o in opts), MIN_STEPS, "optimizers", "steps of the most-stepped one")
    faults, notes = [], []
    for o in opts:
        if o["bad"]:
            b = o["bad"]
            by = f", after {b['sched']}" if b["sched"] else ""
            faults.append(f"{optimizer_label(o)}: lr of group {b['group']} was {b['lr']:g} at step {b['step']} of {o['steps']}{by} (first {o['first'][b['group']]:g}): "
                          "a step with lr 0 trains nothing and a negative lr climbs the loss; fix: keep the schedule above 0 "
                          "(a LambdaLR factor max(1 - t / total, 0.0) with total counting the steps you take, or a min lr)")
        elif o["collapsed"]:
            c = o["collapsed"]
            faults.append(f"{optimizer_label(o)}: lr of group {c['group']} fell to {c['lr']:.3g} at step {c['step']} of {o['steps']} "
                          f"({c['lr'] / c['first']:.2g} of its first value {c['first']:g}){', after ' + c['sched'] if c['sched'] else ''}: "
                          "later steps move nothing; fix: make the schedule's horizon the number of steps the run takes")
        if o["signed"] >= MIN_SIGNED and o["ascent"] > 0.5 * o["signed"]:
            faults.append(f"{optimizer_label(o)}: at {o['ascent']} of {o['signed']} sampled steps the update went up the gradient "
                          f"(median cosine of update and gradient {statistics.median(o['cos']):+.2f}; a descent step gives < 0) with lr {o['last'][0]:g}: "
                          "the step climbs the loss; fix: a positive lr (and maximize=False unless you maximize)")
        if o["still"] >= MIN_SIGNED and not o["moved"] and all(lr > 0 for lr in o["last"] if math.isfinite(lr)):
            faults.append(f"{optimizer_label(o)}: with lr {o['last'][0]:g} and nonzero gradients its tensors did not change at {o['still']} sampled steps")
        if o["signed"]:
            ratios = [r for r in o["ratio"] if r is not None]
            size = f", update rms {statistics.median(ratios):.2g} x lr" if ratios else ""
            lr = ", ".join(f"{a:g} -> {b:g}" for a, b in zip(o["first"], o["last"]))
            notes.append(f"{optimizer_label(o)}: lr {lr} over {o['steps']} steps (finite, > 0); {o['signed'] - o['ascent']} of {o['signed']} sampled "
                         f"updates descend the gradient (median cosine {statistics.median(o['cos']):+.2f}){size}")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    if not notes:
        raise sr.CheckSkipped("no sampled step had both a gradient and an update to compare (" +
                              ", ".join(f"{optimizer_label(o)}: {o['steps']} steps" for o in opts) + ")")
    return "; ".join(notes)
