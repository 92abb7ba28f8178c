"""target-network: does each loss's target network move as configured?

For every loss module with ``target_*_params`` (DQNLoss, SACLoss, TD3Loss, DDPGLoss, IQL,
CQL, ...) that training calls, it counts the optimizer steps that touch the loss's
parameters and the steps at which the target parameters changed, and follows every
``SoftUpdate``/``HardUpdate``: which loss it was built for, where, how often it is
stepped. Faults: the target never moves (no updater, or one never stepped, or one built
for another loss object); an updater built again and again (each construction copies the
online weights into the target, ``TargetNetUpdater.init_``, so the target equals the
online net); a ``HardUpdate`` stepped at a rate that makes its copies K optimizer steps
apart where ``value_network_update_interval`` said N.

Facts (torchrl 0.14.1, torchrl/objectives/utils.py): ``HardUpdate.step`` copies on the call
after its counter reaches the interval, so ``value_network_update_interval=N`` copies every
N+1 calls; a loss with target parameters and no updater warns "No target network updater
has been associated with this loss module" when called, which is easy to miss in a log
(tests/test_audit_facts.py). Public reports:
pytorch/rl#1181 (DDPG that does not learn), pytorch/rl#1401 (decoupling updaters from losses).
"""

from __future__ import annotations

import weakref

import skill_report as sr

NAME = "target-network"
FIX_UPDATER = "build the updater once, after the loss: updater = SoftUpdate(loss, tau=0.005) (or HardUpdate(loss, value_network_update_interval=N)), then call updater.step() after each optimizer.step()"


def install(hub) -> None:
    import torch

    from .tdtools import param_sample

    sec = hub.section(NAME)
    sites: dict[int, str] = {}
    tracked: dict[int, dict] = {}
    updaters: dict[int, dict] = {}

    def pairs(loss):
        out = []
        for name, tgt in loss.named_children():
            if not (name.startswith("target_") and name.endswith("_params")):
                continue
            src = getattr(loss, name[len("target_"):], None)
            if src is None:
                continue
            for key in tgt.keys(True, True):
                s = src.get(key, None)
                if s is not None and getattr(s, "requires_grad", False):
                    out.append((tgt.get(key), s))
        return out

    def track(loss):
        key = id(loss)
        if key not in tracked:
            p = pairs(loss)
            tracked[key] = None if not p else {
                "ref": weakref.ref(loss), "cls": type(loss).__name__, "site": sites.get(key, "?"),
                "pairs": p, "params": {id(x) for x in loss.parameters()},
                "snap": param_sample([t for t, _ in p]), "source0": param_sample([s for _, s in p]), "source_moved": False,
                "steps": 0, "per_opt": {}, "changes": [],
                "forwards": 0, "forwards_after": 0, "equal": 0, "built_updaters": 0,
            }
        return tracked[key]

    def on_forward(loss, td, out):
        info = track(loss)
        if info is None:
            return
        info["forwards"] += 1
        if info["steps"]:
            info["forwards_after"] += 1
            tgt, src = param_sample([t for t, _ in info["pairs"]]), param_sample([s for _, s in info["pairs"]])
            info["equal"] += int(torch.equal(tgt, src))

    def on_step(opt):
        ids = {id(p) for g in opt.param_groups for p in g["params"]}
        for info in tracked.values():
            if info is None or not (info["params"] & ids):
                continue
            # Steps of the optimizer that steps this loss most: an actor, a critic and an alpha
            # optimizer stepping once each are one training step, not three.
            per_opt = info["per_opt"]
            per_opt[id(opt)] = per_opt.get(id(opt), 0) + 1
            if per_opt[id(opt)] <= info["steps"]:
                continue
            info["steps"] = per_opt[id(opt)]
            if not info["source_moved"]:
                info["source_moved"] = not torch.equal(param_sample([s for _, s in info["pairs"]]), info["source0"])
            snap = param_sample([t for t, _ in info["pairs"]])
            if not torch.equal(snap, info["snap"]):
                info["changes"].append(info["steps"])
                info["snap"] = snap

    def on_updater(upd, site):
        loss = getattr(upd, "loss_module", None)
        info = track(loss) if loss is not None else None
        if info is not None:
            info["built_updaters"] += 1
        updaters[id(upd)] = {
            "ref": weakref.ref(upd), "cls": type(upd).__name__, "site": site,
            "loss": id(loss), "loss_cls": type(loss).__name__, "steps": 0,
            "built_at_step": info["steps"] if info else 0,
        }

    def on_updater_step(upd):
        if id(upd) in updaters:
            updaters[id(upd)]["steps"] += 1

    def summarise():
        losses = []
        for key, info in tracked.items():
            if info is None or not info["forwards"]:
                continue
            losses.append({k: info[k] for k in ("cls", "site", "steps", "forwards", "forwards_after", "equal", "built_updaters", "source_moved")}
                          | {"id": key, "changes": info["changes"][:200], "n_changes": len(info["changes"])})
        ups = []
        for u in updaters.values():
            obj = u["ref"]()
            extra = {}
            if obj is not None:
                if hasattr(obj, "value_network_update_interval"):
                    extra["interval"] = float(obj.value_network_update_interval)
                if hasattr(obj, "eps"):
                    extra["tau"] = round(1 - float(obj.eps), 6)
            ups.append({k: v for k, v in u.items() if k != "ref"} | extra)
        sec["losses"], sec["updaters"] = losses, ups

    hub.on("loss_built", lambda loss, site: sites.__setitem__(id(loss), site))
    hub.on("loss_forward", on_forward)
    hub.on("optimizer_step", on_step)
    hub.on("updater_built", on_updater)
    hub.on("updater_step", on_updater_step)
    hub.summariser(summarise)


def _judge_loss(loss: dict, updaters: list[dict]) -> tuple[bool, str]:
    """``(ok, sentence)`` for one loss with target parameters."""
    mine = [u for u in updaters if u["loss"] == loss["id"]]
    others = [u for u in updaters if u["loss"] != loss["id"] and u["loss_cls"] == loss["cls"]]
    head = f"{loss['cls']} (built at {loss['site']}): {loss['steps']} optimizer steps, target changed {loss['n_changes']} times"
    if loss["built_updaters"] > 1:
        eq = f"; the target equalled the online net at {loss['equal']} of {loss['forwards_after']} loss calls" if loss["forwards_after"] else ""
        return False, (f"{head}; {loss['built_updaters']} {mine[-1]['cls']} built for it (the last at {mine[-1]['site']}): "
                       f"each construction copies the online weights into the target (TargetNetUpdater.init_){eq}; fix: {FIX_UPDATER}")
    if not loss["source_moved"]:
        return True, f"{head}; the online weights it copies from never changed, so there was nothing to follow (see optimizer-coverage)"
    if loss["forwards_after"] >= 3 and loss["equal"] >= 0.9 * loss["forwards_after"]:
        return False, f"{head}; the target equalled the online net at {loss['equal']} of {loss['forwards_after']} loss calls: there is no delay; fix: {FIX_UPDATER}"
    if not mine:
        if others:
            o = others[0]
            return False, (f"{head}; the {o['cls']} built at {o['site']} (stepped {o['steps']} times) updates another {o['loss_cls']} "
                           f"object, not the one training calls; fix: build the updater from the loss you train: SoftUpdate(loss, tau=...) after that loss is built")
        if loss["n_changes"]:
            return True, f"{head} with no torchrl updater (updated by hand)"
        return False, f"{head}; no SoftUpdate/HardUpdate was built for it, so the target keeps its initial weights; fix: {FIX_UPDATER}"
    stepped = sum(u["steps"] for u in mine)
    u = mine[0]
    if stepped == 0:
        return False, f"{head}; {u['cls']} built at {u['site']} but step() never called; fix: call updater.step() after each optimizer.step()"
    per_step = stepped / max(loss["steps"], 1)
    if "interval" in u:
        n = int(u["interval"])
        if loss["n_changes"] == 0 and stepped <= n:
            return True, f"{head}; not due yet: HardUpdate(value_network_update_interval={n}) stepped {stepped} times, it copies on call {n + 1}"
        if loss["n_changes"] == 0:
            return False, f"{head}; HardUpdate(value_network_update_interval={n}) stepped {stepped} times yet the target never changed; fix: {FIX_UPDATER}"
        gaps = [b - a for a, b in zip([0] + loss["changes"], loss["changes"])]
        k = round(sum(gaps) / len(gaps))
        if not 0.9 <= per_step <= 1.1:
            return False, (f"{head}; HardUpdate(value_network_update_interval={n}) is stepped {stepped} times over {loss['steps']} optimizer steps, "
                           f"so the target moves every {k} optimizer steps, not every {n}; fix: call updater.step() once after each optimizer.step()")
        return True, f"{head}; HardUpdate(value_network_update_interval={n}) copied every {k} optimizer steps (it copies on the call after its counter reaches {n})"
    if loss["n_changes"] == 0:
        return False, f"{head}; {u['cls']} stepped {stepped} times yet the target never changed; fix: build the updater from the loss you train and step it after optimizer.step()"
    if per_step < 0.1:
        return False, (f"{head}; {u['cls']}(tau={u.get('tau')}) stepped once per {round(1 / per_step)} optimizer steps: the target lags far behind; "
                       "fix: call updater.step() after each optimizer.step()")
    return True, f"{head}; {u['cls']}(tau={u.get('tau')}) stepped {stepped} times ({per_step:.2f} per optimizer step)"


def judge(obs: dict) -> str:
    sec = obs["sections"].get(NAME, {})
    losses = [loss for loss in sec.get("losses", []) if loss["steps"] > 0]
    if not losses:
        seen = sec.get("losses", [])
        raise sr.CheckSkipped(
            f"{seen[0]['cls']} with a target network was called but no optimizer step touched it" if seen
            else "no loss with a target network (DQN, SAC, TD3, DDPG, ...) was trained"
        )
    verdicts = [_judge_loss(loss, sec.get("updaters", [])) for loss in losses]
    bad = [text for ok, text in verdicts if not ok]
    if bad:
        raise sr.CheckFailed(" | ".join(bad))
    return " | ".join(text for _, text in verdicts)
