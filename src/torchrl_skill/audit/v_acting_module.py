"""acting-module: is the module that acts in the env the one that learns, or fed its weights?

An invariant of any loop that collects with a policy and trains with an optimizer. For
each policy a collector or a user's ``env.rollout(policy=...)`` acts with, it reads the
policy's tensors at every collection: which of them are tensors an optimizer steps (the
same objects: it is the module that learns) and whether their values changed between
collections (it receives the learner's weights: ``collector.update_policy_weights_()``,
``load_state_dict``). A policy that holds none of the optimized tensors and whose weights
never change while the optimizers step acts with a copy that never learns: the env is
driven by the initial weights for the whole run.

A policy with no tensors (a scripted controller, ``RandomPolicy``) is skipped: nothing of it
can learn. Policies inside worker processes (multi-process collectors) are read through
the main process's ``collector.policy`` only. Minimum evidence: MIN_BATCHES collections
after the first optimizer step.
"""

from __future__ import annotations

import weakref

from torchrl_skill.report import skill_report as sr

from .evidence import need

NAME = "acting-module"
MIN_BATCHES = 3


def install(hub) -> None:
    import torch

    from .probe import user_site
    from .tdtools import ObjectKeys, param_sample

    sec = hub.section(NAME)
    key_of = ObjectKeys()
    optimized: set[int] = set()
    policies: dict[int, dict] = {}

    def tensors_of(policy):
        if not isinstance(policy, torch.nn.Module):
            return []
        return [p for p in policy.parameters() if p.is_floating_point()]

    def seen(policy, kind, site):
        if policy is None or type(policy).__name__ == "RandomPolicy":
            return
        key = key_of(policy)
        info = policies.get(key)
        if info is None:
            params = tensors_of(policy)
            info = policies[key] = {"ref": weakref.ref(policy) if isinstance(policy, torch.nn.Module) else None, "cls": type(policy).__name__,
                                    "kind": kind, "site": site, "tensors": len(params), "numel": sum(p.numel() for p in params),
                                    "ids": [id(p) for p in params], "snap": param_sample(params) if params else None,
                                    "batches": 0, "after_steps": 0, "changed": 0, "shared": 0}
        info["batches"] += 1
        if not info["tensors"]:
            return
        if hub.meta["optimizer_steps"]:
            info["after_steps"] += 1
        policy_now = info["ref"]() if info["ref"] else None
        if policy_now is None:
            return
        params = tensors_of(policy_now)
        snap = param_sample(params)
        if snap.shape != info["snap"].shape or not torch.equal(snap, info["snap"]):
            info["changed"] += 1
            info["snap"] = snap
        info["shared"] = sum(id(p) in optimized for p in params)

    def on_batch(col, batch):
        if batch is None:
            return
        random_frames = getattr(col, "init_random_frames", None) or 0
        if random_frames and getattr(col, "_frames", 0) <= random_frames:
            return
        seen(getattr(col, "policy", None), type(col).__name__, user_site())

    def on_rollout(env, policy, td):
        if policy is not None:
            seen(policy, "env.rollout", user_site())

    def on_step(opt):
        for g in opt.param_groups:
            for p in g["params"]:
                optimized.add(id(p))

    def summarise():
        sec["policies"] = [{k: v for k, v in i.items() if k not in ("ref", "snap", "ids")} for i in policies.values()]
        sec["steps"] = hub.meta["optimizer_steps"]

    hub.on("collector_batch", on_batch)
    hub.on("env_rollout", on_rollout)
    hub.on("optimizer_pre_step", on_step)
    hub.summariser(summarise)


def judge(obs: dict) -> str:
    sec = obs["sections"].get(NAME, {})
    pols = sec.get("policies", [])
    if not pols:
        raise sr.CheckSkipped("no collector or env.rollout acted with a policy")
    learned = [p for p in pols if p["tensors"]]
    if not learned:
        raise sr.CheckSkipped("every policy that acted has no tensors (a scripted controller or RandomPolicy): nothing of it can learn")
    if not sec.get("steps"):
        raise sr.CheckSkipped("no optimizer stepped")
    need(max(p["after_steps"] for p in learned), MIN_BATCHES, "policies", "collections after the first optimizer step")
    faults, notes = [], []
    for p in learned:
        if p["after_steps"] < MIN_BATCHES:
            continue
        head = f"the {p['cls']} the {p['kind']} at {p['site']} acts with ({p['tensors']} tensors)"
        if p["shared"]:
            notes.append(f"{head} holds {p['shared']} of the tensors the optimizers step (it is the module that learns); "
                         f"its weights changed between {p['changed']} of {p['batches'] - 1} collections")
        elif p["changed"]:
            notes.append(f"{head} holds none of the optimized tensors but its weights changed between {p['changed']} of "
                         f"{p['batches'] - 1} collections (it receives the learner's weights)")
        else:
            faults.append(f"{head} holds none of the tensors the optimizers step and its weights never changed over "
                          f"{p['after_steps']} collections while the optimizers stepped {sec['steps']} times: the env is driven by a "
                          "copy that never learns (a deepcopy, a second module built from the same config); fix: pass the trained "
                          "module itself as policy=, or copy its weights after each update (collector.update_policy_weights_() "
                          "for a collector given the trained module, policy.load_state_dict(trained.state_dict()))")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    return "; ".join(notes)
