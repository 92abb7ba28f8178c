"""exploration: do collected actions explore, and does the annealing follow the frames?

On the first batches of every collector and every ``env.rollout(..., policy)``, it re-runs
the policy under ``ExplorationType.DETERMINISTIC`` on the same inputs and counts how many
taken actions equal that deterministic action (no side effect: nothing is sampled). It
follows every ``EGreedyModule``, ``AdditiveGaussianModule`` and
``OrnsteinUhlenbeckProcessModule``: the ``step(frames)`` calls, the frames they counted
against the frames collected, and the annealing curve (value against frames).

Faults: every checked action is the deterministic one (a rollout outside an exploration
context: ``ProbabilisticActor`` then takes its mode, pytorch/rl#2175; or a deterministic
policy without an exploration module); an exploration module never stepped (its value stays
at ``eps_init``/``sigma_init``); stepped with counts far from the frames collected (per
update, or ``step()`` without ``frames``), so ``annealing_num_steps`` is not in frames.

Facts (torchrl 0.14.1): outside any ``set_exploration_type`` context ``exploration_type()``
is None and ``ProbabilisticActor`` acts deterministically; a ``Collector`` samples
(``exploration_type`` RANDOM by default); ``EGreedyModule.step(frames=1)`` anneals by
``frames`` steps (torchrl/modules/tensordict_module/exploration.py); a collector acts with
a ``RandomPolicy`` for its first ``init_random_frames`` frames, so those batches say nothing
about the policy and are not checked.

Minimum evidence: MIN_FRAMES collected actions checked (outside init_random_frames).
"""

from __future__ import annotations

import weakref

from torchrl_skill.report import skill_report as sr

from .evidence import MORE, Short, need

NAME = "exploration"
MODULES = ("EGreedyModule", "AdditiveGaussianModule", "OrnsteinUhlenbeckProcessModule")
CHECK_BATCHES = 6
MIN_FRAMES = 32


def _value(module) -> float:
    for attr in ("eps", "sigma"):
        v = getattr(module, attr, None)
        if v is not None:
            return round(float(v), 4)
    return float("nan")


def install(hub) -> None:
    from tensordict.nn import ProbabilisticTensorDictModule

    from .probe import user_site
    from .tdtools import ObjectKeys, deterministic_match

    key_of = ObjectKeys()

    sec = hub.section(NAME)
    sites: dict[int, str] = {}
    sources: dict = {}
    random_only: dict = {}
    modules: dict[int, dict] = {}

    def module_info(m, in_policy: bool):
        info = modules.get(id(m))
        if info is None:
            init = getattr(m, "eps_init", getattr(m, "sigma_init", None))
            end = getattr(m, "eps_end", getattr(m, "sigma_end", None))
            info = modules[id(m)] = {
                "ref": weakref.ref(m), "cls": type(m).__name__, "init": float(init) if init is not None else None,
                "end": float(end) if end is not None else None, "annealing_num_steps": int(getattr(m, "annealing_num_steps", 0) or 0),
                "steps": 0, "counted": 0, "in_policy": False, "curve": [(hub.meta["frames"], _value(m))],
            }
        info["in_policy"] = info["in_policy"] or in_policy
        return info

    def scan(policy) -> dict:
        found = {"stochastic": False, "explorers": []}
        if hasattr(policy, "modules"):
            for m in policy.modules():
                if isinstance(m, ProbabilisticTensorDictModule):
                    found["stochastic"] = True
                if type(m).__name__ in MODULES:
                    module_info(m, True)
                    found["explorers"].append(type(m).__name__)
        return found

    def check(key, kind, site, policy, td, action_key, note=""):
        src = sources.get(key)
        if src is None:
            src = sources[key] = {"kind": kind, "site": site, "batches": 0, "frames": 0, "equal": 0.0, "note": note, **scan(policy)}
        if src["batches"] >= CHECK_BATCHES or src.get("error"):
            return
        try:
            frac, n = deterministic_match(policy, td, action_key)
        except Exception as err:  # a policy that cannot take a whole batch at once: say so, do not guess
            src["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}"
            return
        if n:
            src["batches"] += 1
            src["frames"] += n
            src["equal"] += frac * n

    def on_batch(col, batch):
        policy = getattr(col, "policy", None)
        if batch is None or policy is None or type(policy).__name__ == "RandomPolicy":  # policy=None: random actions
            return
        random_frames = getattr(col, "init_random_frames", None) or 0
        if random_frames and getattr(col, "_frames", 0) <= random_frames:
            early = random_only.setdefault(key_of(col), {"kind": type(col).__name__, "site": sites.get(key_of(col), "?"),
                                                          "init_random_frames": int(random_frames), "frames": 0})
            early["frames"] = int(getattr(col, "_frames", 0))
            return
        env = getattr(col, "env", None)
        note = f"exploration_type={getattr(col, 'exploration_type', '?')}"
        check(key_of(col), type(col).__name__, sites.get(key_of(col), "?"), col.policy, batch, getattr(env, "action_key", "action"), note)

    def on_rollout(env, policy, td):
        if policy is None or td is None or not callable(policy):
            return
        from torchrl.envs.utils import exploration_type

        note = f"exploration_type={exploration_type()}"
        check(("rollout", key_of(env), key_of(policy)), "env.rollout", user_site(), policy, td, env.action_key, note)

    def on_step(m, frames):
        info = module_info(m, False)
        info["steps"] += 1
        info["counted"] += int(frames)
        info["step_site"] = info.get("step_site") or user_site()
        info["curve"].append((hub.meta["frames"], _value(m)))
        if len(info["curve"]) > 400:
            info["curve"] = info["curve"][::2]

    def summarise():
        sec["sources"] = list(sources.values())
        sec["random_only"] = [v for k, v in random_only.items() if k not in sources]
        sec["modules"] = [{k: v for k, v in m.items() if k != "ref"} | {"now": _value(m["ref"]()) if m["ref"]() is not None else None}
                          for m in modules.values()]
        sec["frames"] = hub.meta["frames"]

    hub.on("collector_built", lambda col, site: sites.__setitem__(key_of(col), site))
    hub.on("collector_batch", on_batch)
    hub.on("env_rollout", on_rollout)
    hub.on("explore_step", on_step)
    hub.summariser(summarise)


def _curve(m: dict, points: int = 5) -> str:
    curve = m["curve"]
    picks = [curve[round(i * (len(curve) - 1) / (points - 1))] for i in range(points)] if len(curve) >= points else curve
    return ", ".join(f"{v:g} at {f} frames" for f, v in picks)


def judge(obs: dict) -> str:
    sec = obs["sections"].get(NAME, {})
    sources = [s for s in sec.get("sources", []) if s["frames"]]
    unchecked = [s for s in sec.get("sources", []) if s.get("error") and not s["frames"]]
    annealed = [m for m in sec.get("modules", []) if m["in_policy"] and m["annealing_num_steps"] and m["init"] != m["end"]]
    frames = sec.get("frames", 0)
    if not sources and sec.get("random_only"):
        r = sec["random_only"][0]
        raise Short(f"the {r['kind']} built at {r['site']} has a policy, but all {r['frames']} frames it collected fell inside its "
                    f"init_random_frames={r['init_random_frames']}, where it acts at random: no action of the policy was checked; {MORE}")
    if not sources and not annealed and not unchecked:
        raise sr.CheckSkipped("no collector or env.rollout with a policy was seen")
    if sources:
        need(sum(s["frames"] for s in sources), MIN_FRAMES, "collected actions", "checked against the deterministic action")
    faults, notes = [], []
    if sources and all(s["equal"] >= s["frames"] for s in sources):
        where = "; ".join(f"{s['kind']} at {s['site']} ({s['frames']} frames checked, {s['note']})" for s in sources)
        if not any(s["stochastic"] or s["explorers"] for s in sources):
            cause = "the policy is deterministic and has no exploration module; fix: wrap it with an exploration module, e.g. TensorDictSequential(policy, EGreedyModule(spec, ...)) or AdditiveGaussianModule(spec, ...)"
        else:
            cause = ("the rollouts ran outside an exploration context, where ProbabilisticActor takes its deterministic action "
                     "(pytorch/rl#2175); fix: collect under `with set_exploration_type(ExplorationType.RANDOM):` or use a Collector "
                     "(it samples: exploration_type=ExplorationType.RANDOM by default)")
        faults.append(f"every checked action equals the policy's deterministic action: {where}; {cause}")
    elif sources:
        share = 1 - sum(s["equal"] for s in sources) / sum(s["frames"] for s in sources)
        notes.append(f"{share:.0%} of {sum(s['frames'] for s in sources)} checked actions differ from the deterministic action")
    for m in annealed:
        if m["steps"] == 0 and frames:
            loop = next((f" (in the loop over the {s['kind']} built at {s['site']})" for s in sources if s["kind"] != "env.rollout"), "")
            faults.append(f"{m['cls']} stayed at {m['init']:g} (its initial value) over {frames} collected frames: step() was never called; "
                          f"fix: call exploration_module.step(data.numel()) once per collected batch{loop}")
        elif m["steps"] and frames and not 0.2 <= m["counted"] / frames <= 5:
            rate = m["counted"] / frames
            faults.append(f"{m['cls']}.step() counted {m['counted']} over {frames} collected frames ({rate:.3g} per frame), so "
                          f"annealing_num_steps={m['annealing_num_steps']} is reached after about {round(m['annealing_num_steps'] / rate)} frames; "
                          f"curve: {_curve(m)}; fix: replace the step() call at {m.get('step_site', '?')} with exploration_module.step(data.numel()), "
                          "called once per collected batch, not per update")
        elif m["steps"]:
            notes.append(f"{m['cls']} {m['init']:g} -> {m['now']} over {frames} frames (annealing_num_steps={m['annealing_num_steps']}; curve: {_curve(m)})")
    not_run = [f"{s['kind']} at {s['site']}: policy not re-run on its batch ({s['error']})" for s in unchecked]
    if faults:
        raise sr.CheckFailed(" | ".join(faults + not_run))
    if not notes:  # nothing measured: a note that the policy could not be re-run is not a pass
        raise sr.CheckSkipped("no collected action could be compared with the policy's deterministic action"
                              + (f" ({'; '.join(not_run)})" if not_run else ""))
    return "; ".join(notes + not_run)
