"""Value estimators as the wiring checks see them (private module of check_loss_wiring.py).

:func:`view_of` and :func:`loss_estimator_view` describe the estimator that will run on a
batch without building one; :func:`trajectory_breaks` finds steps where that batch joins
two trajectories with no done between them (a flattened [env*time] or shuffled batch).
Sources: torchrl 0.14.1 torchrl/objectives/common.py (``value_estimator``,
``_default_value_estimator``), torchrl/objectives/utils.py (``default_value_kwargs``),
torchrl/objectives/value/advantages.py (``_get_time_dim``: the batch's last dim by default).
"""

from __future__ import annotations

from dataclasses import dataclass

from torchrl_skill.report import skill_report as sr
from torchrl_skill.checks.objectives.loss_builders import fmt_key

# Estimators that recurse along time: their result depends on the order of the batch.
MULTI_STEP = ("GAE", "MultiAgentGAE", "TD1Estimator", "TDLambdaEstimator", "VTrace")


@dataclass(frozen=True)
class EstimatorView:
    """What a check needs to know of a value estimator, read without building one.

    ``label``: ``"GAE(gamma=0.99, lmbda=0.95)"``; ``multi_step``: its result depends on the
    order of the batch along ``time_dim`` (None: the batch's last dim); ``done_key``: the
    done entry it reads under "next"; ``network``: its value network (or None).
    """

    label: str
    multi_step: bool
    time_dim: int | None
    done_key: object
    network: object


def _label(class_name: str, hyper: dict) -> str:
    params = [f"{k}={float(hyper[k]):g}" for k in ("gamma", "lmbda") if hyper.get(k) is not None]
    return f"{class_name}({', '.join(params)})"


def view_of(estimator) -> EstimatorView:
    """The view of a built estimator (the user's standalone one or ``loss._value_estimator``)."""
    name = type(estimator).__name__
    hyper = {k: getattr(estimator, k, None) for k in ("gamma", "lmbda")}
    return EstimatorView(_label(name, hyper), name in MULTI_STEP, getattr(estimator, "time_dim", None),
                         estimator.tensor_keys.done, getattr(estimator, "value_network", None))


def loss_estimator_view(loss) -> EstimatorView:
    """The estimator ``loss`` uses at forward: the one ``make_value_estimator`` built, else the
    class default (``loss.default_value_estimator`` with ``default_value_kwargs``, the values
    forward would build it with; torchrl/objectives/common.py ``_default_value_estimator``).
    Building it here would change the loss (a failed build leaves a broken estimator behind)."""
    from torchrl.objectives.utils import default_value_kwargs

    built = getattr(loss, "_value_estimator", None)
    if built is not None:
        return view_of(built)
    kind = loss.default_value_estimator
    try:  # the class registered for this kind (GAE for ValueEstimators.GAE, MultiAgentGAE for MAGAE)
        from torchrl.objectives.utils import _VALUE_ESTIMATOR_REGISTRY

        name = _VALUE_ESTIMATOR_REGISTRY[kind].cls.__name__
    except (ImportError, KeyError, AttributeError):
        name = kind.name
    return EstimatorView(_label(name, default_value_kwargs(kind)), name in MULTI_STEP, None,
                         loss.tensor_keys.done, getattr(loss, "critic_network", None))


def trajectory_breaks(batch, time_dim: int, done_key, state_keys) -> tuple[int, int, str, list[int]]:
    """Steps along ``time_dim`` that continue (no done) into a step of another trajectory.

    Evidence, in order: ``("collector", "traj_ids")`` changing between t and t+1, else a
    state key whose ``("next", key)`` at t differs from ``key`` at t+1. Returns
    ``(breaks, continuing steps, evidence, first flat indices, telling steps)``; evidence
    names what was compared, "" when there is nothing to compare. Telling steps: continuing
    steps whose comparison could show a break (by traj_ids: all of them; by state: those
    whose state changed during the step, since a step that leaves the state as it was looks
    continuous whichever step follows it: a policy that never moves the env, e.g. a
    deterministic rollout from one start).
    """
    import torch

    shape = batch.batch_size
    done = batch.get(sr.next_key(done_key), None)
    done = torch.zeros(shape, dtype=torch.bool) if done is None else done.reshape(*shape, -1).any(-1)
    cont = ~done.movedim(time_dim, -1)[..., :-1]
    ids = batch.get(("collector", "traj_ids"), None)
    if ids is not None:
        ids = ids.reshape(shape).movedim(time_dim, -1)
        same, evidence = ids[..., 1:] == ids[..., :-1], "('collector', 'traj_ids')"
        moved = torch.ones_like(cont)
    else:
        keys = [k for k in state_keys if k in batch.keys(True) and sr.next_key(k) in batch.keys(True)]
        if not keys:
            return 0, int(cont.sum()), "", [], 0
        same, moved = torch.ones_like(cont), torch.zeros_like(cont)
        for key in keys:
            now = batch.get(key).reshape(*shape, -1).movedim(time_dim, -2).float()
            nxt = batch.get(sr.next_key(key)).reshape(*shape, -1).movedim(time_dim, -2).float()
            same &= torch.isclose(nxt[..., :-1, :], now[..., 1:, :]).all(-1)
            moved |= ~torch.isclose(nxt[..., :-1, :], now[..., :-1, :]).all(-1)
        evidence = f"('next', {fmt_key(keys[0])!r}) at t vs {fmt_key(keys[0])!r} at t+1"
    breaks = cont & ~same
    where = breaks.reshape(-1).nonzero().squeeze(-1)[:3].tolist()
    return int(breaks.sum()), int(cont.sum()), evidence, where, int((cont & moved).sum())


# Estimators the reference below recomputes, and the lambda each stands for (None: read
# ``estimator.lmbda``). TD1 is TD(lambda=1), TD0 has no recursion.
REFERENCE_LAMBDA = {"GAE": None, "TDLambdaEstimator": None, "TD1Estimator": 1.0, "TD0Estimator": 0.0}


def _flag(batch, key, shape):
    """The ``("next", key)`` entry as a bool tensor of the batch's shape, or None."""
    import torch

    value = batch.get(sr.next_key(key), None)
    return None if value is None else value.reshape(*shape, -1).any(-1).to(torch.bool)


def _values(estimator, batch):
    """``(V(s_t), V(s'_t))`` as float64 tensors of the batch's shape, read by running the
    estimator's value network on copies of the batch and of ``batch["next"]`` (never its
    shifted trick), or read from the batch when the estimator has no network."""
    import torch

    key = estimator.tensor_keys.value
    net = getattr(estimator, "value_network", None)
    now, nxt = batch.clone(False), batch.get("next").clone(False)
    if net is not None:
        with torch.no_grad():
            now, nxt = net(now), net(nxt)
    shape = batch.batch_size
    return (now.get(key).reshape(*shape, -1)[..., 0].double(), nxt.get(key).reshape(*shape, -1)[..., 0].double())


def reference_advantage(estimator, batch):
    """The advantage ``estimator`` should write on ``batch``, recomputed by a plain loop.

    Independent of torchrl's vectorised kernels: per step t along the time dim (the
    estimator's ``time_dim``, else the batch's last dim), with V from the value network
    run on the step's state and on its ``("next", ...)`` state,
    ``delta_t = r_t + gamma * (1 - terminated_t) * V(s'_t) - V(s_t)``; GAE:
    ``A_t = delta_t + gamma * lmbda * (1 - done_t) * A_{t+1}``; TD(lambda) (TD1 with
    lambda 1, TD0 with 0): ``G_t = r_t + gamma * (1 - terminated_t) * ((1 - lmbda) V(s'_t) +
    lmbda * (G_{t+1} if not done_t else V(s'_t)))``, ``A_t = G_t - V(s_t)``; the last step
    of the batch bootstraps from V(s'_T). ``terminated`` is the batch's own
    ``("next", "terminated")`` (the estimator's terminated key only when the batch has
    none) and ``done`` its ``("next", "done")`` or terminated | truncated: a truncation
    (time limit) bootstraps, a termination does not (torchrl 0.14.1
    torchrl/objectives/value/functional.py states the same recursions). ``average_gae``
    standardizes the result as the estimator does.

    Returns ``(reference [*batch] float64, gamma, lmbda)``; raises CheckSkipped for an
    estimator this loop does not cover (VTrace, MultiAgentGAE) or a batch without reward.
    """
    import torch

    name = type(estimator).__name__
    if name not in REFERENCE_LAMBDA:
        raise sr.CheckSkipped(f"not verified: no independent reference for {name} (covered: {', '.join(REFERENCE_LAMBDA)})")
    shape = batch.batch_size
    if not shape:
        raise sr.CheckSkipped(f"not verified: the batch has batch_size [], and {name} runs along a time dim")
    unmatched = [opt for opt in ("average_rewards", "group_key") if getattr(estimator, opt, None)]
    if unmatched:
        raise sr.CheckSkipped(f"not verified: the reference does not reproduce {name}'s {', '.join(unmatched)}")
    keys = estimator.tensor_keys
    if getattr(keys, "steps_to_next_obs", None) is not None and keys.steps_to_next_obs in batch.keys(True):
        raise sr.CheckSkipped(f"not verified: the batch holds {keys.steps_to_next_obs!r} (multi-step returns), which the reference does not reproduce")
    reward = batch.get(sr.next_key(keys.reward), None)
    if reward is None:
        raise sr.CheckSkipped(f"not verified: the batch has no {sr.next_key(keys.reward)} to recompute {name} from")
    reward = reward.reshape(*shape, -1)[..., 0].double()
    terminated = _flag(batch, "terminated", shape)
    if terminated is None:
        terminated = _flag(batch, keys.terminated, shape)
    if terminated is None:
        terminated = _flag(batch, keys.done, shape)
    if terminated is None:
        terminated = torch.zeros(shape, dtype=torch.bool)
    done = _flag(batch, "done", shape)
    truncated = _flag(batch, "truncated", shape)
    if done is None:
        done = terminated if truncated is None else terminated | truncated
    done = done | terminated
    value, next_value = _values(estimator, batch)
    gamma = float(estimator.gamma)
    lmbda = REFERENCE_LAMBDA[name]
    lmbda = float(estimator.lmbda) if lmbda is None else lmbda
    time_dim = (getattr(estimator, "time_dim", None) or -1) % len(shape)
    r, v, nv, term, dn = (x.movedim(time_dim, -1) for x in (reward, value, next_value, terminated, done))
    out = torch.zeros_like(r)
    steps = r.shape[-1]
    for t in reversed(range(steps)):
        boot = gamma * (~term[..., t]).double() * nv[..., t]
        if name == "GAE":
            following = out[..., t + 1] if t + 1 < steps else torch.zeros_like(r[..., t])
            out[..., t] = r[..., t] + boot - v[..., t] + gamma * lmbda * (~dn[..., t]).double() * following
        else:  # out holds the return G until the end
            following = out[..., t + 1] if t + 1 < steps else nv[..., t]
            following = torch.where(dn[..., t], nv[..., t], following)
            out[..., t] = r[..., t] + gamma * (~term[..., t]).double() * ((1 - lmbda) * nv[..., t] + lmbda * following)
    if name != "GAE":
        out = out - v
    out = out.movedim(-1, time_dim)
    if getattr(estimator, "average_gae", False):
        out = (out - out.mean()) / out.std().clamp_min(1e-4)  # GAE._normalize_advantage, no group
    return out, gamma, lmbda
