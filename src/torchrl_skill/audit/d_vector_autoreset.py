"""vector-autoreset: does a gymnasium vector env inject junk transitions at episode ends?

For every env the script collects from (a collector's env, an ``env.rollout`` env) it finds
the gymnasium vector env underneath (``GymEnv(..., num_envs=N)`` builds an
``AsyncVectorEnv``) and reads its ``autoreset_mode``; on the collected data it looks at the
transition right after each episode end in the same env row. Fault: ``NEXT_STEP`` mode
(gymnasium's default since 1.0): the step after an episode end only resets that sub-env,
ignores the action and returns reward 0, and TorchRL stores it as a normal transition
(pytorch/rl#2477).

Facts (torchrl 0.14.1 with gymnasium 1.4): ``GymEnv("CartPole-v1", num_envs=2)`` wraps an
``AsyncVectorEnv`` with ``AutoresetMode.NEXT_STEP`` and the transition after each done has
reward 0.0 although CartPole pays 1 per step (tests/test_audit_detectors.py).
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

NAME = "vector-autoreset"


def _vector_env(env, with_owner: bool = False):
    """The gymnasium vector env under ``env`` (through TransformedEnv.base_env and a SerialEnv's
    first sub-env), or None; ``with_owner``: ``(vector env, the torchrl env holding it)``."""
    from .tdtools import own_attr

    for _ in range(10):
        if env is None:
            return None
        inner = own_attr(env, "_env")
        if inner is not None and type(inner).__module__.startswith("gymnasium.vector") and hasattr(inner, "num_envs"):
            return inner if not with_owner else (inner, env)
        workers = own_attr(env, "_envs")  # a SerialEnv's sub-envs live in this process
        base = own_attr(env, "base_env")
        env = base if base is not None else (workers[0] if isinstance(workers, (list, tuple)) and workers else None)
    return None


def install(hub) -> None:
    from .tdtools import episode_end, own_attr

    sec = hub.section(NAME)
    envs: dict[int, dict] = {}
    pending: dict[int, list] = {}

    def follow(env, td, key, fresh=False, site="?"):
        vec = _vector_env(env)
        if vec is None or td is None or td.batch_dims == 0:
            return
        mode = getattr(vec, "autoreset_mode", None)
        info = envs.setdefault(key, {"cls": type(vec).__name__, "num_envs": int(vec.num_envs), "site": site,
                                     "mode": str(getattr(mode, "name", mode) or "NEXT_STEP (gymnasium < 1.1)"),
                                     "boundaries": 0, "after_rewards": []})
        ends = episode_end(td)
        reward = td.get(("next", "reward"), None)
        if ends is None or reward is None:
            return
        ends = ends.reshape(-1, ends.shape[-1])
        reward = reward.reshape(ends.shape[0], ends.shape[1], -1)[..., 0]
        carried = pending.get(key)
        if fresh or carried is None or len(carried) != ends.shape[0]:
            carried = [False] * ends.shape[0]
        for r in range(ends.shape[0]):
            prev = carried[r]
            for t in range(ends.shape[1]):
                if prev:
                    info["boundaries"] += 1
                    if len(info["after_rewards"]) < 50:
                        info["after_rewards"].append(round(float(reward[r, t]), 4))
                prev = bool(ends[r, t])
            carried[r] = prev
        pending[key] = carried

    env_sites: dict[int, str] = {}

    def on_env(env, site, by_user=True):
        if type(env).__name__ in ("GymEnv", "GymWrapper"):
            env_sites.setdefault(id(env), site)

    def site_of(env):
        found = _vector_env(env, with_owner=True)
        return env_sites.get(id(found[1]), "?") if found else "?"

    hub.on("env_built", on_env)
    hub.on("collector_batch", lambda col, batch: follow(own_attr(col, "env"), batch, id(col), site=site_of(own_attr(col, "env"))))
    hub.on("env_rollout", lambda env, policy, td: follow(env, td, id(env), fresh=True, site=site_of(env)))
    hub.summariser(lambda: sec.__setitem__("envs", list(envs.values())))


def judge(observed: dict) -> str:
    envs = observed["sections"].get(NAME, {}).get("envs", [])
    if not envs:
        raise sr.CheckSkipped("no gymnasium vector env (GymEnv(..., num_envs=N)) in the main process")
    faults, notes = [], []
    for e in envs:
        name = f"{e['cls']}(num_envs={e['num_envs']}, autoreset_mode={e['mode']}) under the env built at {e.get('site', '?')}"
        rewards = e["after_rewards"]
        if e["mode"].startswith("NEXT_STEP"):
            seen = (f"after {e['boundaries']} episode ends the next transition had reward {sorted(set(rewards))[:5]} and an ignored action"
                    if e["boundaries"] else "no episode ended during the audit, but each one will add such a transition")
            faults.append(f"{name}: in NEXT_STEP mode the step after an episode end only resets the sub-env; {seen} (pytorch/rl#2477); fix: "
                          "build the vector env with autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP and wrap it with GymWrapper(...), "
                          "or batch single envs: ParallelEnv(N, lambda: GymEnv(name))")
        else:
            notes.append(f"{name}: {e['boundaries']} episode ends, no junk step")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    return "; ".join(notes)
