"""optimizer-coverage: does an optimizer that steps hold every tensor the loss trains?

For each loss module training calls, it takes the loss's trainable parameters (its own
stacked critic copies, ``log_alpha``, the actor's weights) and checks each is in some
optimizer that steps; for each optimizer that steps, it checks each tensor received a
gradient at least once. Faults: loss parameters no stepping optimizer holds (the SAC/TD3
critic a user optimizes through their own module, which the loss copied; ``log_alpha``
left out); optimizer tensors that never get a gradient (outside every loss's graph).

Facts (torchrl 0.14.1): ``SACLoss(actor, qvalue, num_qvalue_nets=2)`` trains stacked copies
``loss.qvalue_network_params`` that are not the user's module's tensors, and
``loss.log_alpha`` is a trainable parameter of the loss (tests/test_audit_facts.py).
Public reports: pytorch/rl#2589 (SACLoss with several qvalue networks), openai/spinningup#329
(critic parameters silently missing from the optimizer).

Minimum evidence: MIN_STEPS optimizer steps (a tensor whose gradient comes only from a
delayed update, TD3's actor, gets one within two steps).
"""

from __future__ import annotations

import weakref

from torchrl_skill.report import skill_report as sr

from .evidence import need

NAME = "optimizer-coverage"
MIN_STEPS = 4


def _short(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def install(hub) -> None:
    import gc

    import torch

    from .probe import user_site

    sec = hub.section(NAME)
    sites: dict[int, str] = {}
    opts: dict[int, dict] = {}
    losses: dict[int, dict] = {}
    names: dict[int, str] = {}

    def on_pre_step(opt):
        info = opts.get(id(opt))
        if info is None:
            info = opts[id(opt)] = {"ref": weakref.ref(opt), "cls": type(opt).__name__, "steps": 0, "params": {}, "grad": set(), "site": user_site()}
        info["steps"] += 1
        for group in opt.param_groups:
            for p in group["params"]:
                if id(p) not in info["params"]:  # kept from first sight: an optimizer that is gone by the end still counts
                    info["params"][id(p)] = (weakref.ref(p), p.numel(), p.requires_grad)
                if p.grad is not None:
                    info["grad"].add(id(p))

    def on_forward(loss, td, out):
        if id(loss) in losses:
            return
        named = {id(p): n for n, p in loss.named_parameters() if p.requires_grad}
        losses[id(loss)] = {"cls": type(loss).__name__, "site": sites.get(id(loss), "?"), "named": named,
                            "numel": {id(p): p.numel() for p in loss.parameters() if p.requires_grad}}
        names.update({k: f"{type(loss).__name__}.{v}" for k, v in named.items()})

    def name_of(pid: int) -> str:
        """The longest dotted path to the tensor from any live module: the outermost owner."""
        if pid not in names:
            best = ""
            for obj in gc.get_objects():
                if isinstance(obj, torch.nn.Module):
                    for n, p in obj.named_parameters():
                        if id(p) == pid and len(n) + len(type(obj).__name__) > len(best):
                            best = f"{type(obj).__name__}.{n}"
            names[pid] = best or f"tensor#{pid % 10000}"
        return names[pid]

    def summarise():
        stepping = {pid for o in opts.values() if o["steps"] for pid in o["params"]}
        sec["optimizers"] = []
        for o in opts.values():
            never = [pid for pid, (_, _, trainable) in o["params"].items() if trainable and pid not in o["grad"]]
            sec["optimizers"].append({"cls": o["cls"], "steps": o["steps"], "tensors": len(o["params"]), "site": o["site"],
                                      "never_grad": [name_of(pid) if o["params"][pid][0]() is not None else names.get(pid, f"tensor#{pid % 10000}")
                                                     for pid in never[:12]],
                                      "n_never_grad": len(never), "never_grad_numel": sum(o["params"][pid][1] for pid in never)})
        sec["losses"] = []
        for info in losses.values():
            missing = [pid for pid in info["named"] if pid not in stepping]
            sec["losses"].append({"cls": info["cls"], "site": info["site"], "trainable": len(info["named"]),
                                  "missing": [info["named"][pid] for pid in missing[:12]], "n_missing": len(missing),
                                  "missing_numel": sum(info["numel"][pid] for pid in missing)})

    hub.on("loss_built", lambda loss, site: sites.__setitem__(id(loss), site))
    hub.on("optimizer_pre_step", on_pre_step)
    hub.on("loss_forward", on_forward)
    hub.summariser(summarise)


def _hint(missing: list[str]) -> str:
    hints = []
    if any("log_alpha" in n for n in missing):
        hints.append("log_alpha is the loss's entropy temperature, a parameter of the loss")
    if any(n.startswith(("qvalue_network_params", "value_network_params")) for n in missing):
        hints.append("the loss trains its own copies of the critic, so optimizing your critic module's parameters trains nothing the loss uses")
    return ("; " + "; ".join(hints)) if hints else ""


def _per_network(missing: list[str]) -> str:
    """The loss's own parameter containers the missing tensors live in (``qvalue_network_params``,
    read from their names): an optimizer per network keeps its own learning rate."""
    owners = dict.fromkeys(n.split(".", 1)[0] for n in missing if n.split(".", 1)[0].endswith("_params"))
    if not owners:
        return ""
    return "to keep one optimizer per network: " + ", ".join(
        f"torch.optim.Adam(loss.{o}.parameters(), lr=...)" for o in owners) + " for that network's optimizer, "


def _sites(optimizers: list[dict]) -> str:
    return ", ".join(dict.fromkeys(o.get("site", "?") for o in optimizers))


def _owned_by_loss(names: list[str], sec: dict) -> bool:
    """Whether every named tensor is a parameter of a loss module training called (named
    ``"LossClass.attr..."`` from loss.named_parameters())."""
    classes = {loss["cls"] for loss in sec.get("losses", [])}
    return bool(names) and all(n.split(".", 1)[0] in classes for n in names)


def _term_hint(names: list[str]) -> str:
    if any(n.endswith(".log_alpha") for n in names):
        return " (log_alpha is trained by the loss's alpha term, out['loss_alpha'] or loss.alpha_loss(...))"
    if any(".actor_network_params." in n for n in names):
        return " (the actor's tensors are trained by the actor term, out['loss_actor'] / out['loss_objective'])"
    return ""


def _cleared_before_step(obs: dict) -> str:
    """What grad-flow measured when gradients backward() wrote were cleared before step(),
    or "": the fix text then names the order, not the optimizer's tensors."""
    for o in obs["sections"].get("grad-flow", {}).get("optimizers", []):
        first = o.get("first", {}).get("cleared")
        if first and o.get("cleared", 0) >= 0.5 * max(o.get("judged", 1), 1):
            zero = f" by zero_grad() at {first['zero_site']}" if first.get("zero_site") else ""
            return (f"they were cleared{zero} between backward() at {first.get('backward_site') or '?'} and step() at "
                    f"{first['step_site']} ({o['cleared']} of {o['judged']} steps)")
    return ""


def judge(obs: dict) -> str:
    sec = obs["sections"].get(NAME, {})
    stepping = [o for o in sec.get("optimizers", []) if o["steps"]]
    if not stepping:
        raise sr.CheckSkipped("no optimizer stepped")
    need(max(o["steps"] for o in stepping), MIN_STEPS, "optimizers", "steps of the most-stepped one")
    faults = []
    for loss in sec.get("losses", []):
        if loss["n_missing"]:
            faults.append(
                f"{loss['cls']} (built at {loss['site']}) trains {loss['n_missing']} of its {loss['trainable']} tensors "
                f"({loss['missing_numel']} values) that no stepping optimizer holds: {_short(loss['missing'])}{_hint(loss['missing'])}; "
                f"fix: build the optimizer stepped at {_sites(stepping)} from the loss, torch.optim.Adam(loss.parameters(), lr=...), "
                f"{_per_network(loss['missing'])}or add those tensors to a group"
            )
    cleared = _cleared_before_step(obs)
    for i, o in enumerate(stepping):
        if o["n_never_grad"] and cleared:  # measured: backward wrote them, zero_grad() removed them before step()
            faults.append(
                f"{o['cls']} #{i} stepped {o['steps']} times (at {o.get('site', '?')}) and holds {o['n_never_grad']} tensors with no gradient at "
                f"its steps, although backward() wrote one: {cleared}; see the grad-flow row; fix: call zero_grad() before "
                "backward(), in the order zero_grad(), backward(), step()")
        elif o["n_never_grad"] and _owned_by_loss(o["never_grad"], sec):
            # measured: the tensors are the loss's own and already in the optimizer, so the
            # optimizer is not the cause; no backward() reached them
            faults.append(
                f"{o['cls']} #{i} stepped {o['steps']} times (at {o.get('site', '?')}) and holds {o['n_never_grad']} tensors ({o['never_grad_numel']} values) "
                f"that never received a gradient: {_short(o['never_grad'])}; they are the loss's own parameters and this optimizer holds them, "
                "so no backward() ever reached them: the loss term that trains them is not in the sum backward() is called on"
                f"{_term_hint(o['never_grad'])}; fix: add that term to the total you call backward() on")
        elif o["n_never_grad"]:
            faults.append(
                f"{o['cls']} #{i} stepped {o['steps']} times (at {o.get('site', '?')}) and holds {o['n_never_grad']} tensors ({o['never_grad_numel']} values) "
                f"that never received a gradient: {_short(o['never_grad'])}; they are outside every loss's graph "
                "(e.g. a critic module whose copy the loss trains); fix: optimize loss.parameters() instead of the module's"
            )
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    steps = sum(o["steps"] for o in stepping)
    losses = sec.get("losses", [])
    if not losses:
        return (f"{len(stepping)} optimizer(s), {steps} steps; every optimized tensor got a gradient; no torchrl loss module was "
                "called, so which tensors a loss trains was not checked")
    trained = ", ".join(f"{loss['cls']} ({loss['trainable']} tensors)" for loss in losses)
    return f"{len(stepping)} optimizer(s), {steps} steps; every trainable tensor of {trained} is optimized and every optimized tensor got a gradient"
