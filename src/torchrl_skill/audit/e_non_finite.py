"""non-finite: did a loss term, a gradient or a parameter become NaN or infinite, and where first?

An effect monitor: whatever produced it (a division by a batch statistic that can be 0, the
log of 0, a learning rate that diverges, a reward that is already NaN), it names the first
optimizer step at which each kind appeared and the tensor. It checks every loss term
(``loss_*`` entries of each loss module's output) at each loss call, and, on the sampled
optimizer steps of gradstats.py (each of the first 100, then every 10th), each optimized
tensor's gradient norm before the step and each tensor's norm after it.

Fault: any non-finite value seen. Minimum evidence: one optimizer step; a run without one
SKIPs with the count of loss calls checked.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

NAME = "non-finite"
KINDS = ("loss", "gradient", "parameter")


def install(hub) -> None:
    import math

    import torch

    from . import gradstats

    gradstats.install(hub)
    sec = hub.section(NAME)
    state = {"loss_calls": 0, "grad_checks": 0, "param_checks": 0, "first": {}}

    def found(kind, name, value, step, where=""):
        if kind not in state["first"]:
            state["first"][kind] = {"name": name, "value": value, "step": step, "where": where, "frames": hub.meta["frames"]}

    def on_loss(loss, td, out):
        state["loss_calls"] += 1
        if "loss" in state["first"]:
            return
        items = out.items() if hasattr(out, "items") else [("loss", out)]
        for key, value in items:
            if str(key).startswith("loss") and torch.is_tensor(value) and value.is_floating_point():
                if not bool(torch.isfinite(value).all()):
                    bad = "nan" if bool(value.isnan().any()) else "inf"
                    found("loss", f"{type(loss).__name__} {key}", bad, hub.meta["optimizer_steps"] + 1)
                    return

    def on_norms(kind, step, names, norms):
        state["grad_checks" if kind == "gradient" else "param_checks"] += 1
        if kind in state["first"]:
            return
        for name, n in zip(names, norms):
            if not math.isfinite(n):
                found(kind, name, "nan" if math.isnan(n) else "inf", step)
                return

    def summarise():
        sec.update({k: v for k, v in state.items()}, optimizer_steps=hub.meta["optimizer_steps"])

    hub.on("loss_forward", on_loss)
    hub.on("grad_norms", lambda opt, step, names, norms: on_norms("gradient", step, names, norms))
    hub.on("param_norms", lambda opt, step, names, norms: on_norms("parameter", step, names, norms))
    hub.summariser(summarise)


def _growth(observed: dict) -> str:
    """``"the gradient norm of NET grew 1e5x"`` from the grad-norms row's measurements, or ""."""
    from .e_grad_norms import GROWTH, NAME as GRAD, _med

    nets = observed["sections"].get(GRAD, {}).get("networks", {})
    ratios = {k: _med(v["last"]) / _med(v["first"]) for k, v in nets.items() if v.get("first") and _med(v["first"]) > 0}
    if not ratios or max(ratios.values()) < GROWTH:
        return ""
    net = max(ratios, key=ratios.get)
    return f"the gradient norm of {net} grew {ratios[net]:.3g}x"


def judge(observed: dict) -> str:
    sec = observed["sections"].get(NAME, {})
    first = sec.get("first", {})
    if first:
        parts = []
        for kind in KINDS:
            f = first.get(kind)
            if f:
                what = f"loss term {f['name']}" if kind == "loss" else f"{kind} of {f['name']}"
                parts.append(f"{what} became {f['value']} first at optimizer step {f['step']} (after {f['frames']} frames)")
        order = sorted(first, key=lambda k: (first[k]["step"], KINDS.index(k)))
        start = first[order[0]]
        grew = _growth(observed)
        if grew:
            hint = (f"before it, {grew}: the updates diverged; fix: lower that learning rate, clip its gradients "
                    "(torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)), bootstrap from a target network (see value-range)")
        elif order[0] == "loss":
            hint = ("the loss went non-finite while no gradient had grown: look at what it reads from the batch (a reward "
                    "or advantage divided by a batch std that can be 0: (x - x.mean()) / (x.std() + 1e-8); the log of a probability "
                    "or a value that can be 0 or negative; NaN rewards or observations from the env)")
        else:
            hint = ("finite losses gave non-finite gradients or parameters: an update that divides by 0 (Adam(eps=0) on a zero "
                    "gradient) or a learning rate too high (see grad-norms and value-range; clip with "
                    "torch.nn.utils.clip_grad_norm_(params, max_norm=1.0))")
        raise sr.CheckFailed("; ".join(parts) + f"; the first at step {start['step']}: {hint}")
    steps, calls = sec.get("optimizer_steps", 0), sec.get("loss_calls", 0)
    if not steps:
        raise sr.CheckSkipped(f"no optimizer step ({calls} loss calls checked, all finite)")
    return (f"{calls} loss calls, gradients on {sec.get('grad_checks', 0)} and parameters on {sec.get('param_checks', 0)} of "
            f"{steps} optimizer steps (each of the first 100, then every 10th) checked: all finite")
