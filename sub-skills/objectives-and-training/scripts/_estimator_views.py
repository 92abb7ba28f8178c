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

import skill_report as sr
from _loss_builders import fmt_key

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
