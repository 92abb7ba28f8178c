"""target-network: does each loss's target network move as configured?

For every loss module with ``target_*_params`` (DQNLoss, SACLoss, TD3Loss, DDPGLoss, IQL,
CQL, ...) that training calls (``loss(td)``, or its parts: ``loss.value_loss(td)``), it
counts the steps of each optimizer that touches the loss's parameters, reads the target
after every optimizer step and after every updater step (an updater's last copy comes after
the last optimizer step), and follows every ``SoftUpdate``/``HardUpdate``: which loss it
was built for, where, where and how often it is stepped.

Faults: the target never moves (no updater, one never stepped, one built for another loss
object); an updater built again and again (each construction copies the online weights into
the target, ``TargetNetUpdater.init_``, so the target equals the online net); an updater
stepped at another rate than every optimizer of its loss (once per collected batch of K
updates, every K-th update, twice per update): judged on the rates, whether or not a copy
fell inside the audit, because the rate decides the delay for the whole run. Reference
rate: some optimizer that trains the loss (TD3 steps its updater with its delayed actor
optimizer, torchrl's own TD3 script does). ``HardUpdate(value_network_update_interval=0)``
copies on every call: the script schedules its copies itself, so any rate passes.

Lag: on sampled optimizer steps (gradstats.sampled) it measures how far the target trails,
in optimizer steps: its distance to the online weights (before this step's updater call)
over the online weights' movement in that step. A SoftUpdate of coefficient tau (eps =
1 - tau) implies about 1/tau steps at steady state, a HardUpdate copying every N+1 steps
(N+2)/2 on average; the row states both. Fault: a measured lag under MIN_LAG steps (the
target follows the online net almost at once: ``SoftUpdate(loss, eps=0.005)``, eps and tau
swapped), whatever rate the updater is stepped at; a rate that matches proves nothing about
the coefficient.

Minimum evidence: MIN_STEPS optimizer steps touching the loss; MIN_LAGS lag measurements
before the lag is judged (fewer: the pass says the lag was not measured).

Facts (torchrl 0.14.1, torchrl/objectives/utils.py): ``HardUpdate.step`` copies on the call
after its counter reaches the interval, so ``value_network_update_interval=N`` copies every
N+1 calls; a loss with target parameters and no updater warns "No target network updater
has been associated with this loss module" when called, which is easy to miss in a log
(tests/test_audit_facts.py). Public reports:
pytorch/rl#1181 (DDPG that does not learn), pytorch/rl#1401 (decoupling updaters from losses).
"""

from __future__ import annotations

import weakref

from torchrl_skill.report import skill_report as sr

from .evidence import need

NAME = "target-network"
MIN_STEPS = 8
MIN_LAG = 3.0  # optimizer steps: a target closer than this follows the online net almost at once
MIN_LAGS = 5  # sampled lag measurements before the lag is judged
LAG_KEEP = 40
FIX_UPDATER = "build the updater once, after the loss: updater = SoftUpdate(loss, tau=0.005) (or HardUpdate(loss, value_network_update_interval=N)), then call updater.step() after each optimizer.step()"


def install(hub) -> None:
    import torch

    from . import gradstats
    from .probe import user_site
    from .tdtools import param_sample

    sec = hub.section(NAME)
    sites: dict[int, str] = {}
    tracked: dict[int, dict] = {}
    updaters: dict[int, dict] = {}
    opt_sites: dict[int, str] = {}

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

    def observe(info):
        """Record a change of the target at the current optimizer step."""
        snap = param_sample([t for t, _ in info["pairs"]])
        if not torch.equal(snap, info["snap"]):
            info["changes"].append(info["steps"])
            info["snap"] = snap

    def lag(info, src):
        """The target's lag in optimizer steps: its distance to the online weights (before
        this step's updater call) over the online weights' movement in this step."""
        prev, info["prev_src"] = info.get("prev_src"), src
        if prev is None or not gradstats.sampled(info["steps"]):
            return
        moved = float((src - prev).norm())
        if moved > 0:
            dist = float((param_sample([t for t, _ in info["pairs"]]) - src).norm())
            info["lags"] = (info.get("lags", []) + [dist / moved])[-LAG_KEEP:]

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
            if id(opt) not in opt_sites:
                opt_sites[id(opt)] = user_site()
            # Steps of the optimizer that steps this loss most: an actor, a critic and an alpha
            # optimizer stepping once each are one training step, not three.
            per_opt = info["per_opt"]
            per_opt[id(opt)] = per_opt.get(id(opt), 0) + 1
            if per_opt[id(opt)] <= info["steps"]:
                continue
            info["steps"] = per_opt[id(opt)]
            src = param_sample([s for _, s in info["pairs"]])
            if not info["source_moved"]:
                info["source_moved"] = not torch.equal(src, info["source0"])
            lag(info, src)
            observe(info)

    def on_updater(upd, site):
        loss = getattr(upd, "loss_module", None)
        info = track(loss) if loss is not None else None
        if info is not None:
            info["built_updaters"] += 1
        updaters[id(upd)] = {
            "ref": weakref.ref(upd), "cls": type(upd).__name__, "site": site,
            "loss": id(loss), "loss_cls": type(loss).__name__, "steps": 0, "step_sites": [],
            "built_at_step": info["steps"] if info else 0,
        }

    def on_updater_step(upd):
        u = updaters.get(id(upd))
        if u is None:
            return
        u["steps"] += 1
        if len(u["step_sites"]) < 3:
            site = user_site()
            if site not in u["step_sites"]:
                u["step_sites"].append(site)
        info = tracked.get(u["loss"])
        if info is not None:  # the copy this call made belongs to the optimizer step before it
            observe(info)

    def summarise():
        losses = []
        for key, info in tracked.items():
            if info is None or not info["forwards"]:
                continue
            observe(info)  # a copy made by hand after the last optimizer step
            losses.append({k: info[k] for k in ("cls", "site", "steps", "forwards", "forwards_after", "equal", "built_updaters", "source_moved")}
                          | {"id": key, "changes": info["changes"][:200], "n_changes": len(info["changes"]),
                             "optimizers": [{"steps": n, "site": opt_sites.get(k, "?")} for k, n in info["per_opt"].items()],
                             "lags": [round(x, 3) for x in info.get("lags", [])]})
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


def _matching(stepped: int, optimizers: list[dict]) -> dict | None:
    """The optimizer whose step count the updater's matches (one call per optimizer step, give
    or take one call or 10%), or None."""
    for opt in sorted(optimizers, key=lambda o: -o["steps"]):
        if abs(stepped - opt["steps"]) <= max(1, 0.1 * opt["steps"]):
            return opt
    return None


def _name(u: dict) -> str:
    if "interval" in u:
        return f"HardUpdate(value_network_update_interval={int(u['interval'])})"
    return f"{u['cls']}(tau={u.get('tau')})"


def _rate_fault(loss: dict, u: dict, stepped: int) -> str:
    """The sentence for an updater stepped at another rate than every optimizer of its loss."""
    opts = sorted(loss["optimizers"], key=lambda o: -o["steps"])
    main = opts[0]
    rate = stepped / max(main["steps"], 1)
    at = ", ".join(u["step_sites"]) or "?"
    if "interval" in u:
        n = int(u["interval"])
        effect = (f"its copies come every {round((n + 1) / rate) if rate else 'never'} optimizer steps, not every {n + 1} "
                  f"(value_network_update_interval={n} counts updater calls)")
    else:
        tau = u.get("tau") or 0.0
        effect = f"the target follows by about {tau * rate:.3g} per optimizer step, not tau={tau:g}"
    return (f"{_name(u)} is stepped {stepped} times over {main['steps']} optimizer steps ({rate:.2f} per optimizer step; built at {u['site']}, "
            f"called at {at}): {effect}; fix: call updater.step() once right after optimizer.step() (at {main['site']}), "
            "not once per batch or every few updates")


def _implied(u: dict | None) -> tuple[float | None, str]:
    """The lag in optimizer steps the updater's coefficient implies, and how: a SoftUpdate
    moves the target by tau of the gap per step, so it trails by about 1/tau = 1/(1-eps) steps;
    a HardUpdate copying every N+1 steps trails by (N+2)/2 on average."""
    if u is None:
        return None, "updated by hand"
    if "interval" in u:
        n = int(u["interval"])
        return (n + 2) / 2, f"HardUpdate copies every {n + 1} steps: about {(n + 2) / 2:g} steps on average"
    tau = u.get("tau")
    if tau:
        return 1 / tau, f"tau={tau:g} (eps={1 - tau:g}): about 1/tau = {1 / tau:.3g} steps"
    return None, "coefficient unknown"


def _judge_loss(loss: dict, updaters: list[dict]) -> tuple[bool | None, str]:
    """``_judge_rates`` plus the lag: a target that trails its online net by fewer than
    MIN_LAG optimizer steps (its distance to the online weights over their movement per step)
    follows it almost at once, whatever rate its updater is stepped at."""
    import statistics

    ok, text = _judge_rates(loss, updaters)
    if ok is not True:
        return ok, text
    mine = [u for u in updaters if u["loss"] == loss["id"]]
    implied, how = _implied(mine[0] if mine else None)
    lags = loss.get("lags", [])
    if len(lags) < MIN_LAGS:
        return True, f"{text}; lag not measured ({len(lags)} sampled steps with movement, {MIN_LAGS} needed)"
    lag = statistics.median(lags[len(lags) // 2:])
    if lag < MIN_LAG:
        return False, (f"{text}; yet the target trails the online net by only {lag:.2f} optimizer steps (its distance to the online "
                       f"weights over their movement per step, median of the last {len(lags) - len(lags) // 2} sampled steps; {how}): "
                       "it follows the online net almost at once, so the bootstrapped target moves with every update; fix: "
                       "SoftUpdate(loss, tau=0.005) (tau is the share of the online weights taken per step; eps=1-tau), "
                       "or HardUpdate(loss, value_network_update_interval=N) with N in the hundreds or more")
    steady = "" if implied is None or lag >= 0.5 * implied else f" (still building up toward it: the lag grows over ~{implied:.3g} steps)"
    return True, (f"{text}; the target trails the online net by about {lag:.3g} optimizer steps (distance / movement per step, median of "
                  f"{len(lags) - len(lags) // 2} sampled steps; {how}){steady}")


def _judge_rates(loss: dict, updaters: list[dict]) -> tuple[bool | None, str]:
    """``(ok, sentence)`` for one loss with target parameters and MIN_STEPS optimizer steps;
    ``ok`` is None when the run could not show it either way (its online weights never moved)."""
    mine = [u for u in updaters if u["loss"] == loss["id"]]
    others = [u for u in updaters if u["loss"] != loss["id"] and u["loss_cls"] == loss["cls"]]
    head = f"{loss['cls']} (built at {loss['site']}): {loss['steps']} optimizer steps, target changed {loss['n_changes']} times"
    if not loss["source_moved"]:  # a target that stays put proves nothing: not a pass
        return None, f"{head}; the online weights it copies from never changed, so whether the target follows them was not seen (see optimizer-coverage)"
    if loss["forwards_after"] >= 3 and loss["equal"] >= 0.9 * loss["forwards_after"]:
        return False, f"{head}; the target equalled the online net at {loss['equal']} of {loss['forwards_after']} loss calls: there is no delay; fix: {FIX_UPDATER}"
    if not mine:
        if others:
            o = others[0]
            return False, (f"{head}; the {o['cls']} built at {o['site']} (stepped {o['steps']} times) updates another {o['loss_cls']} "
                           f"object, not the one training calls; fix: build the updater from the loss you train: SoftUpdate(loss, tau=...) after that loss is built")
        if loss["n_changes"]:
            return True, f"{head} with no torchrl updater (updated by hand)"
        return False, (f"{head}; no SoftUpdate/HardUpdate was built for it, so the target keeps its initial weights; "
                       f"fix: after {loss['site'].split(' in ')[0]} add updater = SoftUpdate(loss, tau=0.005) and call updater.step() after each optimizer.step()")
    stepped = sum(u["steps"] for u in mine)
    u = mine[0]
    if stepped == 0:
        at = loss["optimizers"][0]["site"] if loss["optimizers"] else "?"
        return False, (f"{head}; {u['cls']} built at {u['site']} but step() never called in {loss['steps']} optimizer steps; "
                       f"fix: call updater.step() right after optimizer.step() (at {at})")
    match = _matching(stepped, loss["optimizers"])
    if match is None and not (u.get("interval") == 0):
        return False, f"{head}; {_rate_fault(loss, u, stepped)}"
    rate = f"{stepped / max(match['steps'], 1):.2f} per optimizer step" if match else "its own schedule: it copies on every call"
    if match and match["steps"] < loss["steps"]:
        rate += f" of the optimizer stepped at {match['site']} ({match['steps']} steps, a delayed update)"
    if "interval" in u:
        n = int(u["interval"])
        if loss["n_changes"] == 0 and stepped <= n:
            return True, f"{head}; {_name(u)} stepped {stepped} times ({rate}); its first copy comes on call {n + 1}, after this run"
        if loss["n_changes"] == 0:
            return False, f"{head}; {_name(u)} stepped {stepped} times yet the target never changed; fix: {FIX_UPDATER}"
        gaps = [b - a for a, b in zip([0] + loss["changes"], loss["changes"])]
        return True, f"{head}; {_name(u)} stepped {stepped} times ({rate}), copied every {round(sum(gaps) / len(gaps))} optimizer steps (it copies on the call after its counter reaches {n})"
    if loss["n_changes"] == 0:
        return False, f"{head}; {u['cls']} stepped {stepped} times yet the target never changed; fix: build the updater from the loss you train and step it after optimizer.step()"
    return True, f"{head}; {_name(u)} stepped {stepped} times ({rate})"


def judge(obs: dict) -> str:
    sec = obs["sections"].get(NAME, {})
    seen = sec.get("losses", [])
    if not seen:
        raise sr.CheckSkipped("no loss with a target network (DQN, SAC, TD3, DDPG, ...) was called")
    updaters = sec.get("updaters", [])
    faults, notes = [], []
    for loss in seen:
        mine = [u for u in updaters if u["loss"] == loss["id"]]
        if loss["built_updaters"] > 1 and loss["steps"] >= 2:  # conclusive from the second build on
            eq = f"; the target equalled the online net at {loss['equal']} of {loss['forwards_after']} loss calls" if loss["forwards_after"] else ""
            faults.append(f"{loss['cls']} (built at {loss['site']}): {loss['built_updaters']} {mine[-1]['cls']} built for it (the last at {mine[-1]['site']}): "
                          f"each construction copies the online weights into the target (TargetNetUpdater.init_){eq}; fix: {FIX_UPDATER}")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    trained = max(seen, key=lambda loss: loss["steps"])
    need(trained["steps"], MIN_STEPS, f"{trained['cls']} (built at {trained['site']})", "optimizer steps touching it")
    unseen = []
    for loss in seen:
        if loss["steps"] >= MIN_STEPS:
            ok, text = _judge_loss(loss, updaters)
            {True: notes, False: faults, None: unseen}[ok].append(text)
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    if not notes:
        raise sr.CheckSkipped(" | ".join(unseen))
    return " | ".join(notes + [f"not verified: {text}" for text in unseen])
