"""The probe ladder's judge (child side): the loss module's networks against a rung's known answer.

Called by ladder_child.py when a rung's run stops, and 16 times over its budget (interim judgments). It reads what
the script built: the env the policy sees (the last collector's env, else the outermost env
stepped most), the probe leaves under it (probe_env.py), and the networks of the loss module
called most, run with the loss's own parameters (``loss.<name>_params.to_module(net)``,
torchrl 0.14.1 ``LossModule.convert_to_functional``: SAC and TD3 train stacked copies, not
the module the script built). Known values are read in the units of the reward the script's
env returns (its reward transforms applied); actions are scored by stepping the script's env
(its action transforms applied) and reading the probe's reward at the leaf. The leaves'
episode state is put back after, so a judgment between two collection steps changes nothing.
"""

from __future__ import annotations

from . import ladder_rungs as lr
from . import probe_env


def _top_env(st):
    """The env the policy sees: the last collector's env, else the outermost env stepped most."""
    from torchrl.envs import TransformedEnv

    for ref in reversed(st["collectors"]):
        col = ref()
        env = getattr(col, "env", None) if col is not None else None
        if env is not None and _has_probe(env):
            return env
    envs = [e for e in (r() for r in st["envs"]) if e is not None]
    inner = set()
    for env in envs:
        if isinstance(env, TransformedEnv):
            inner.add(id(env.base_env))
        for sub in env.__dict__.get("_envs") or []:
            inner.add(id(sub))
    outer = [e for e in envs if id(e) not in inner and _has_probe(e)]
    if not outer:
        raise RuntimeError("no env built by the script carries the probe")
    return max(outer, key=lambda e: st["steps"].get(id(e), 0))


def _leaves(env):
    from torchrl.envs import TransformedEnv

    if isinstance(env, TransformedEnv):
        return _leaves(env.base_env)
    subs = env.__dict__.get("_envs")  # not getattr: a SerialEnv forwards unknown attributes to its sub-envs
    if subs:
        return [leaf for sub in subs for leaf in _leaves(sub)]
    return [env] if hasattr(env, "_probe_dynamics") else []


def _has_probe(env) -> bool:
    try:
        return bool(_leaves(env))
    except Exception:
        return False


def _observe(top, leaves, state: float, steps: int = 0):
    """The root TensorDict the script's env gives for probe ``state`` (after ``steps`` random steps)."""
    from torchrl.envs.utils import step_mdp

    for leaf in leaves:
        leaf._probe_dynamics.force = state
    try:
        td = top.reset()
        for _ in range(steps):
            td = step_mdp(top.rand_step(td), keep_other=True)
    finally:
        for leaf in leaves:
            leaf._probe_dynamics.force = None
    return td


def _run(loss, name: str, td):
    """``[outputs]`` of ``loss.<name>`` run with the loss's own parameters (one per stacked copy)."""
    net = getattr(loss, name)
    params = getattr(loss, f"{name}_params", None)
    if params is None:
        return [net(td.clone())]
    if params.batch_dims:
        outs = []
        for i in range(params.batch_size[0]):
            with params[i].to_module(net):
                outs.append(net(td.clone()))
        return outs
    with params.to_module(net):
        return [net(td.clone())]


def _has_net(loss, name: str) -> bool:
    return isinstance(getattr(loss, name, None), _module_types())


def _module_types():
    from torch import nn

    return (nn.Module,)


VALUE_KEYS = ("state_action_value", "action_value", "chosen_action_value", "state_value")


def _policy(loss, td):
    """The td with the policy's action (deterministic exploration) written in."""
    if _has_net(loss, "actor_network"):
        return _run(loss, "actor_network", td)[0]
    if _has_net(loss, "value_network"):
        out = _run(loss, "value_network", td)[0]
        if "action" in out.keys():
            return out
    raise RuntimeError(f"{type(loss).__name__} has no actor_network or Q-network to read actions from")


def _values(loss, td):
    """``(values, per_action)``: the critic's value of each row (a ``[rows]`` tensor,
    averaged over stacked copies and, for a Q-table, over actions), and the Q-table
    ``[rows, n]`` where the critic has one (else None)."""
    import torch

    keys = getattr(loss, "tensor_keys", None)
    if _has_net(loss, "critic_network"):
        outs = _run(loss, "critic_network", td)
        key = getattr(keys, "value", "state_value")
        return torch.stack([o.get(key).reshape(-1) for o in outs]).mean(0), None
    for name in ("qvalue_network", "value_network"):
        if not _has_net(loss, name):
            continue
        net = getattr(loss, name)
        action_key = getattr(keys, "action", "action")
        needs_action = action_key in getattr(net, "in_keys", [])
        src = _policy(loss, td) if needs_action else td
        outs = _run(loss, name, src.select(*[k for k in net.in_keys if k in src.keys(True)]) if needs_action else src)
        for key in VALUE_KEYS:
            if key in outs[0].keys():
                v = torch.stack([o.get(key).float() for o in outs]).mean(0)
                if key == "action_value":
                    table = v.reshape(-1, v.shape[-1])
                    return table.mean(-1), table
                return v.reshape(-1), None
        raise RuntimeError(f"{type(loss).__name__}.{name} wrote none of {VALUE_KEYS}")
    raise RuntimeError(f"{type(loss).__name__} has no critic_network, qvalue_network or value_network")


def _soft_bonus(loss, td) -> float:
    """SAC's entropy term in its value target, alpha x H(pi(.|s)): its Q-values include it."""
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    alpha = getattr(loss, "_alpha", None)
    if alpha is None or not _has_net(loss, "actor_network"):
        return 0.0
    actor, params = loss.actor_network, loss.actor_network_params
    with params.to_module(actor), set_exploration_type(ExplorationType.RANDOM):
        dist = actor.get_dist(td.clone())
        sample = dist.sample((64,))  # H = -E[log pi(a|s)], estimated on 64 draws (any distribution, discrete too)
        h = -dist.log_prob(sample).float().mean()
    return float(alpha) * float(h)


def _seen_reward(top, leaves, state: float, steps: int) -> float:
    """The reward the script's env returns (``("next", reward_key)``, its transforms
    applied) for the probe step taken after ``steps`` random steps from ``state``."""
    td = _observe(top, leaves, state, steps)
    out = top.rand_step(td)
    return float(out.get(("next", *_as_tuple(top.reward_keys[0]))).float().mean())


def _as_tuple(key):
    return key if isinstance(key, tuple) else (key,)


def _step_reward(top, leaves, td) -> float:
    """Step the script's env with the action in ``td``; the probe's reward as the leaves paid it."""
    top.step(td.select(*[k for k in td.keys(True, True) if k != "next"]))
    rewards = [leaf._probe_dynamics.last_reward for leaf in leaves]
    return float(sum(float(r.float().mean()) for r in rewards) / len(rewards))


def judge(rung: int, st) -> dict:
    """The rung's verdict; the probe leaves' episode state is put back after (the judge's
    resets and steps happen between two steps of the script's collection)."""
    saved = [(d, d.state, d.t, d.last_action, d.last_index, d.last_reward) for d in st["dyn"] if d.space is not None]
    try:
        return _judge_now(rung, st)
    finally:
        for d, *values in saved:
            d.state, d.t, d.last_action, d.last_index, d.last_reward = values


def _judge_now(rung: int, st) -> dict:
    import torch
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    live = {k: r() for k, r in st["losses"].items()}
    live = {k: v for k, v in live.items() if v is not None}
    if not live:
        return {"ok": None, "reason": "no loss module was called: the ladder judges the networks of the loss module the script trains"}
    loss = live[max(live, key=lambda k: st["calls"].get(k, 0))]
    top = _top_env(st)
    leaves = _leaves(top)
    fam = lr.family(type(loss).__name__)
    gamma = st["gamma"]
    if gamma is None:
        with torch.no_grad():
            gamma = float(getattr(getattr(loss, "value_estimator", None), "gamma", float("nan")))
    checks = []

    def value_check(what, got, want, tol=lr.VALUE_TOL):
        checks.append({"what": what, "got": round(got, 3), "want": round(want, 3), "tol": tol, "ok": abs(got - want) <= tol})

    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        if rung in (1, 2, 3):
            # Known values in the units of the reward the script's env returns (its reward
            # transforms applied): the reward of each probe step, read through that env.
            if rung == 1:
                wants = {"V(s)": (1.0, 0, _seen_reward(top, leaves, 1.0, 0))}
            elif rung == 2:
                wants = {"V(+)": (1.0, 0, _seen_reward(top, leaves, 1.0, 0)), "V(-)": (-1.0, 0, _seen_reward(top, leaves, -1.0, 0))}
            else:
                r_a, r_b = _seen_reward(top, leaves, -1.0, 0), _seen_reward(top, leaves, -1.0, 1)
                td_b = _observe(top, leaves, -1.0, 1)
                with torch.enable_grad():
                    bonus = _soft_bonus(loss, td_b)
                if bonus:
                    checks.append({"what": "alpha x H(B)", "got": round(bonus, 3), "info": True, "ok": True})
                wants = {"V(B)": (-1.0, 1, r_b), "V(A)": (-1.0, 0, r_a + gamma * (r_b + bonus))}
            unit = max(abs(r) for r in ([w[2] for w in wants.values()] if rung < 3 else [r_a, r_b]))  # the reward's unit
            if unit < 1e-6:
                raise probe_env.ProbeUnsupported("the script's env returns a reward of 0 for every probe step (a reward transform "
                                                 "that zeroes it): no value to learn")
            got = {}
            for what, (state, steps, want) in wants.items():
                v, _ = _values(loss, _observe(top, leaves, state, steps))
                got[what] = float(v.mean())
                value_check(what, got[what], want, round(lr.VALUE_TOL * unit, 4))
            if rung == 3:  # the effect of discounting: B's reward reaches A (gamma=0 would pass V(A) = gamma x V(B))
                ratio = (got["V(A)"] - r_a) / got["V(B)"] if abs(got["V(B)"]) > 1e-6 else 0.0
                checks.append({"what": "(V(A) - r(A)) / V(B)" if abs(r_a) > 1e-6 else "V(A) / V(B)", "got": round(ratio, 3),
                               "want": f">= {lr.MIN_GAMMA}", "ok": ratio >= lr.MIN_GAMMA})
        else:
            for state in ([1.0] if rung == 4 else [1.0, -1.0]):
                td = _observe(top, leaves, state)
                acted = _policy(loss, td)
                reward = _step_reward(top, leaves, acted)
                sent = leaves[0]._probe_dynamics.last_action
                label = "s" if rung == 4 else ("+" if state > 0 else "-")
                space = leaves[0]._probe_dynamics.space
                if space.n_actions is None:
                    best = space.best_action(rung, torch.tensor(state)).reshape(-1)
                    checks.append({"what": f"reward of pi({label})", "got": round(reward, 3), "want": f">= {1 - lr.ACTION_TOL ** 2:.4f}",
                                   "ok": reward >= 1 - lr.ACTION_TOL ** 2,
                                   "action": [round(float(x), 3) for x in sent.reshape(-1)[:4]], "best": [round(float(x), 3) for x in best[:4]]})
                else:
                    best = int(space.best_action(rung, torch.tensor(state)))
                    index = int(leaves[0]._probe_dynamics.last_index.reshape(-1)[0])
                    checks.append({"what": f"greedy action at {label}", "got": index, "want": best, "ok": reward >= 1.0})
                    checks.append(_discrete_margin(loss, td, best, label, space.one_hot))
    return {"ok": all(c["ok"] for c in checks), "checks": checks, "loss": type(loss).__name__, "family": fam,
            "gamma": gamma, "env": type(top).__name__}


def _discrete_margin(loss, td, best: int, label: str, one_hot: bool) -> dict:
    """A discrete policy right by luck (1 in n) is not learning: a Q-network needs Q(best) -
    Q(other) >= Q_GAP (known gap 1); a stochastic actor samples the best action in at least
    SAMPLED_BEST of 256 draws."""
    import torch
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    if not _has_net(loss, "actor_network"):
        _, table = _values(loss, td)
        if table is None:
            return {"what": f"Q gap at {label}", "got": None, "ok": True, "info": True}
        q = table.mean(0)
        other = torch.cat([q[:best], q[best + 1:]]).max()
        gap = float(q[best] - other)
        return {"what": f"Q(best) - Q(other) at {label}", "got": round(gap, 3), "want": f">= {lr.Q_GAP}", "ok": gap >= lr.Q_GAP}
    big = td.expand(256, *td.batch_size).clone() if td.batch_dims == 0 else td.reshape(-1)[:1].expand(256).clone()
    with set_exploration_type(ExplorationType.RANDOM):
        out = _run(loss, "actor_network", big)[0]
    action = out.get(getattr(getattr(loss, "tensor_keys", None), "action", "action"))
    index = action.argmax(-1) if one_hot else action.reshape(256, -1)[:, 0]
    share = float((index.reshape(-1) == best).float().mean())
    return {"what": f"sampled best action at {label}", "got": round(share, 3), "want": f">= {lr.SAMPLED_BEST}", "ok": share >= lr.SAMPLED_BEST}
