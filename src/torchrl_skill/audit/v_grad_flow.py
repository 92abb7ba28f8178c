"""grad-flow: does every tensor an optimizer steps receive a fresh gradient before each step?

An invariant of any training loop, whatever the loss: between two ``optimizer.step()``
calls, ``backward()`` writes a gradient into each tensor the step uses, and nothing clears
it before the step. Measured on the tensors themselves (child side), never on the script's
text:

- a hook on each optimized tensor (``Tensor.register_hook``, which runs before the gradient
  is accumulated into ``.grad``) sees every backward contribution; the first one after a step
  reads whether ``.grad`` still holds the previous step's gradient: the same tensor object,
  its version counter unchanged since that step (``zero_grad()`` sets it to None, or zeroes
  it in place, which bumps the version). That gradient is then *added to* (accumulation
  across steps);
- a post-accumulate hook (``register_post_accumulate_grad_hook``) records the gradient
  backward left; at the step, a fresh gradient that is gone (None) or was zeroed in place
  since then was cleared between backward and step (``zero_grad()`` there);
- a step with gradients but no backward since the previous step re-applies the old one.

Each fault is worded from the order measured: the lines of the last ``backward()``, the
``zero_grad()`` call and the ``step()``. Minimum evidence: MIN_STEPS steps of an optimizer
with hooks in place (they go on at its first step, so its first step is not judged).

Facts (torch 2.14): ``Tensor.register_hook`` on a leaf runs before accumulation and
``register_post_accumulate_grad_hook`` after it; ``Optimizer.zero_grad()`` defaults to
``set_to_none=True``; in-place ops bump ``Tensor._version`` (tests/test_audit_invariants.py).
"""

from __future__ import annotations

import weakref

from torchrl_skill.report import skill_report as sr

from .evidence import need, optimizer_label

NAME = "grad-flow"
MIN_STEPS = 4
SHARE = 0.5  # a fault on at least this share of judged steps


def install(hub) -> None:
    import torch

    from .probe import user_site

    sec = hub.section(NAME)
    opts: dict[int, dict] = {}
    tensors: dict[int, dict] = {}  # id(param) -> its state since the last step

    def add_hooks(p):
        pid = id(p)
        st = tensors[pid] = {"fresh": False, "after_bw": None, "after_step": None, "acc": False, "ref": weakref.ref(p)}

        def pre(grad):
            if not st["fresh"]:
                st["fresh"] = True
                q = st["ref"]()
                g = None if q is None else q.grad
                st["acc"] = g is not None and st["after_step"] == (id(g), g._version)
                for o in opts.values():  # the first backward after a step: where it was called
                    if pid in o["ids"] and o["backward_site"] is None:
                        o["backward_site"] = user_site()
            return None

        def post(q):
            g = q.grad
            st["after_bw"] = None if g is None else (id(g), g._version)

        p.register_hook(pre)
        p.register_post_accumulate_grad_hook(post)

    def on_pre(opt):
        o = opts.get(id(opt))
        if o is None:  # hooks go on now: this first step is not judged
            params = [p for g in opt.param_groups for p in g["params"]
                      if isinstance(p, torch.Tensor) and p.requires_grad and p.is_leaf and (p.is_floating_point() or p.is_complex())]
            o = opts[id(opt)] = {"cls": type(opt).__name__, "n": len(opts) + 1, "site": user_site(), "ids": {id(p) for p in params},
                                 "steps": 0, "judged": 0, "acc": 0, "cleared": 0, "stale": 0, "fresh_all": 0, "tensors": len(params),
                                 "backward_site": None, "zero_site": None, "first": {}, "zero_after_bw": None}
            for p in params:
                if id(p) not in tensors:
                    add_hooks(p)
            o["steps"] += 1
            return
        o["steps"] += 1
        o["judged"] += 1
        fresh = acc = cleared = stale = 0
        changed, owners = [], []
        for g in opt.param_groups:
            for p in g["params"]:
                st = tensors.get(id(p))
                if st is None:
                    continue
                grad = p.grad
                if st["fresh"]:
                    fresh += 1
                    acc += st["acc"]
                    if grad is None:
                        cleared += 1
                    elif st["after_bw"] != (id(grad), grad._version):
                        changed.append(grad)  # clipped, or zeroed in place: read below
                        owners.append(st)
                elif grad is not None:
                    stale += 1
        if changed:  # one fused reduction: which of the gradients changed since backward are now all zero
            zero = (torch.stack(torch._foreach_norm([c.detach() for c in changed])) == 0).tolist()
            cleared += sum(zero)
            for st, z in zip(owners, zero):
                st["zeroed"] = z  # a zeroed gradient is not "the previous step's" for the next backward
        site = None
        for kind, n in (("acc", acc), ("cleared", cleared), ("stale", stale)):
            if n:
                o[kind] += 1
                if kind not in o["first"]:
                    site = site or user_site()
                    o["first"][kind] = {"step": o["steps"], "tensors": n, "step_site": site,
                                        "backward_site": o["backward_site"], "zero_site": o["zero_after_bw"]}
        o["fresh_all"] += int(fresh == o["tensors"] and not cleared)

    def on_post(opt):
        o = opts.get(id(opt))
        if o is None:
            return
        for g in opt.param_groups:
            for p in g["params"]:
                st = tensors.get(id(p))
                if st is not None:
                    grad = p.grad
                    st["after_step"] = None if grad is None or st.pop("zeroed", False) else (id(grad), grad._version)
                    st["fresh"] = False
        o["backward_site"] = None
        o["zero_after_bw"] = None

    def on_zero(opt, module):
        ids = {id(p) for g in opt.param_groups for p in g["params"]} if opt is not None else {id(p) for p in module.parameters()}
        for o in opts.values():
            if o["ids"] & ids and any(tensors[i]["fresh"] for i in o["ids"] & ids if i in tensors):
                o["zero_after_bw"] = o["zero_after_bw"] or user_site()

    def summarise():
        sec["optimizers"] = [{k: v for k, v in o.items() if k != "ids"} for o in opts.values()]

    hub.on("optimizer_pre_step", on_pre)
    hub.on("optimizer_step", on_post)
    hub.on("zero_grad", on_zero)
    hub.summariser(summarise)


def fault_texts(o: dict) -> list[str]:
    """The faults of one optimizer's record, each worded from the order measured."""
    out = []
    judged = max(o["judged"], 1)
    if o["cleared"] >= SHARE * judged:
        f = o["first"]["cleared"]
        out.append(f"{optimizer_label(o)}: at {o['cleared']} of {o['judged']} steps the gradients backward() produced (at {f['backward_site'] or '?'}) "
                   f"were cleared before step() (at {f['step_site']}): zero_grad() ran between them"
                   f"{' (at ' + f['zero_site'] + ')' if f['zero_site'] else ''}, so each step applied no gradient "
                   f"({f['tensors']} tensors at step {f['step']}); fix: call optimizer.zero_grad() before loss.backward(), "
                   "in the order zero_grad(), backward(), step()")
    if o["acc"] >= SHARE * judged:
        f = o["first"]["acc"]
        out.append(f"{optimizer_label(o)}: at {o['acc']} of {o['judged']} steps backward() (at {f['backward_site'] or '?'}) added to the gradient the "
                   f"previous step had used ({f['tensors']} tensors still held it, first at step {f['step']}): no zero_grad() between "
                   "step() and the next backward(), so every step applies the sum of all past gradients; "
                   "fix: call optimizer.zero_grad() before each loss.backward()")
    if o["stale"] >= SHARE * judged:
        f = o["first"]["stale"]
        out.append(f"{optimizer_label(o)}: {o['stale']} of {o['judged']} steps came with no backward() since the previous step "
                   f"({f['tensors']} tensors, first at step {f['step']}, step() at {f['step_site']}): each re-applies an old gradient; "
                   "fix: call step() once per backward()")
    return out


def judge(obs: dict) -> str:
    sec = obs["sections"].get(NAME, {})
    opts = [o for o in sec.get("optimizers", []) if o["tensors"]]
    if not opts:
        raise sr.CheckSkipped("no optimizer with trainable floating-point tensors stepped")
    need(max(o["judged"] for o in opts), MIN_STEPS, "optimizers", "judged steps of the most-stepped one (its first step installs the hooks)")
    faults = [t for o in opts for t in fault_texts(o)]
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    judged = [o for o in opts if o["judged"]]
    if not judged:
        raise sr.CheckSkipped("no optimizer stepped twice")
    return "; ".join(
        f"{optimizer_label(o)}: {o['fresh_all']} of {o['judged']} steps had a fresh gradient (written by backward() since the previous step) "
        f"on all {o['tensors']} tensors"
        + (f" (at the others some tensors had no gradient and the step left them alone: a loss term that trains them every few steps)"
           if o["fresh_all"] < o["judged"] else "")
        + f"; accumulated across steps at {o['acc']}, cleared before step() at {o['cleared']}, stepped without backward() at {o['stale']}"
        for o in judged)
