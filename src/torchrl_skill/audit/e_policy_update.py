"""policy-update: does the loss weight each step's log-prob by that step's advantage?

An effect monitor of advantage-based training (PPO, A2C, REINFORCE; a torchrl loss module or
a hand-written one). When a probabilistic actor (``ProbabilisticTensorDictSequential``:
``ProbabilisticActor``) builds its distribution (``get_dist``) on a TensorDict holding an
advantage (``"advantage"``, or the advantage key of a value estimator that ran), with
gradients on, the log-prob taken from that distribution gets a gradient hook: at the
backward pass it reads d loss / d log pi(a_i|s_i) for each step i. A policy-gradient loss
minimized by the optimizer weights each log-prob by minus its advantage (PPO's clipped
steps weigh 0), so corr(-gradient, advantage) over the steps of a backward pass is near 1,
whatever the step size, the batch or the network.

Fault: the median correlation over MIN_CALLS or more measured backward passes (fewer: SKIP
with the count) below FLOOR: the loss does not weight the log-probs by their advantages.
Measured (tests/fixtures/audit/effects/policy_update/train.py; pytorch/rl#1243's class): a
hand-written ``ratio * advantage`` with a [B] log-prob and GAE's [B, 1] advantage
broadcasts to [B, B], whose mean is mean(ratio) * mean(advantage): every step gets the same
weight, correlation about 0; a flipped sign: about -1.
A log-prob hooked here that no backward pass ever reaches, while the optimizers step on, is
a policy term cut from the graph (``loss_objective.detach()``, the objective computed under
``torch.no_grad()`` or left out of the summed loss): fails when MIN_CALLS or more hooked
log-probs were followed by an optimizer step and none was reached.
Thresholds: FLOOR 0.3. Measured on 0.14.1: the median was 1.00 on every correct run
(ClipPPOLoss on CartPole and Pendulum: modern_example.py, tests/fixtures/audit/reference/ppo.py,
project_ppo; the hand-written loss fixed; A2CLoss in that fixture; ReinforceLoss and
KLPENPPOLoss on a scratch script), -0.01 to 0.02 for the broadcast, -1.00 for the flipped sign. A2CLoss hands
its actor a TensorDict of the actor's keys only: the advantage and action are then read from
the TensorDict the loss was called with (``patches`` keeps it), row for row.
"""

from __future__ import annotations

import statistics

from torchrl_skill.report import skill_report as sr

from . import evidence

NAME = "policy-update"
EARLY, EVERY, MAX_CALLS = 20, 10, 60  # backward passes measured: the first EARLY, then every EVERY-th
MIN_CALLS = 3
MIN_ROWS = 8
FLOOR = 0.3


def _corr(x, y) -> float | None:
    import torch

    ok = torch.isfinite(x) & torch.isfinite(y)
    x, y = x[ok].double(), y[ok].double()
    x, y = x - x.mean(), y - y.mean()
    den = float(x.norm() * y.norm())
    return float((x * y).sum()) / den if den > 0 and int(ok.sum()) >= MIN_ROWS else None


def install(hub) -> None:
    import torch
    from tensordict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential

    from .patches import _state, wrap
    from .probe import user_site

    sec = hub.section(NAME)
    state = {"keys": {"advantage"}, "seen": 0, "calls": [], "constant": 0, "sites": {}, "hooked": [], "reached": 0}

    def advantage_of(td):
        values = (td.get(key, None) for key in state["keys"]) if hasattr(td, "get") else ()
        return next((v for v in values if torch.is_tensor(v)), None)

    def record(grad, advantage, site):
        state["reached"] += 1
        rows = advantage.shape[0]
        if grad is None or grad.numel() % rows:
            return
        weight = -grad.detach().reshape(rows, -1).sum(-1)
        corr = _corr(weight, advantage)
        if corr is None:  # every step weighted alike, or advantages all equal: no correlation to read
            state["constant"] += 1
            return
        state["calls"].append((hub.meta["optimizer_steps"], round(corr, 4), rows))
        state["sites"][site] = state["sites"].get(site, 0) + 1

    def after_get_dist(module, args, kwargs, dist):
        td = args[0] if args else kwargs.get("tensordict")
        if (not getattr(td, "batch_dims", 0) or not torch.is_grad_enabled()
                or getattr(dist, "_audit_policy_update", False)):
            return
        source, advantage = td, advantage_of(td)
        if advantage is None and _state().loss_inputs:
            # a loss that hands its actor only the actor's keys (A2CLoss selects them): the advantage
            # and the action are in the TensorDict the loss was called with, row for row
            outer = _state().loss_inputs[-1]
            if getattr(outer, "batch_size", None) == td.batch_size:
                source, advantage = outer, advantage_of(outer)
        if advantage is None:
            return
        rows = td.batch_size.numel()
        if advantage.numel() % rows:
            return
        advantage = advantage.detach().reshape(rows, -1)[:, 0].float()
        keys = list(getattr(module, "dist_sample_keys", None) or getattr(module, "out_keys", None) or ["action"])
        action = source.get(keys[0], None)
        log_prob = dist.log_prob
        site = user_site()

        def taken(value) -> bool:
            # the log-prob of the stored actions, not of fresh samples (KLPENPPOLoss's Monte-Carlo KL)
            return torch.is_tensor(value) and torch.is_tensor(action) and (value is action or (
                value.shape == action.shape and bool((value.detach() == action.detach()).all())))

        def hooked_log_prob(value, *a, **k):
            out = log_prob(value, *a, **k)
            if torch.is_tensor(out) and out.requires_grad and torch.is_grad_enabled() and taken(value):
                state["seen"] += 1
                i = state["seen"]
                if len(state["calls"]) < MAX_CALLS and (i <= EARLY or i % EVERY == 0):
                    out.register_hook(lambda grad: record(grad, advantage, site))
                    if len(state["hooked"]) < MAX_CALLS:  # the optimizer step count when hooked, and where
                        state["hooked"].append((hub.meta["optimizer_steps"], site))
            return out

        try:
            dist.log_prob = hooked_log_prob
            dist._audit_policy_update = True
        except AttributeError:  # a distribution with __slots__: not measured
            pass

    def on_estimates(est, td, _values):
        key = getattr(getattr(est, "tensor_keys", None), "advantage", None)
        if isinstance(key, (str, tuple)):
            state["keys"].add(key)

    for cls in (ProbabilisticTensorDictSequential, ProbabilisticTensorDictModule):
        wrap(hub, cls, "get_dist", after=after_get_dist, guard="audit-policy-update")
    hub.on("value_estimates", on_estimates)
    hub.summariser(lambda: sec.update({"calls": state["calls"], "constant": state["constant"], "sites": state["sites"],
                                       "reached": state["reached"], "steps": hub.meta["optimizer_steps"],
                                       "stepped_after": sum(s < hub.meta["optimizer_steps"] for s, _ in state["hooked"]),
                                       "hooked_at": sorted({site for _, site in state["hooked"]})}))


def judge(observed: dict) -> str:
    sec = observed["sections"].get(NAME, {})
    calls = sec.get("calls", [])
    constant = sec.get("constant", 0)
    if not sec.get("reached") and sec.get("stepped_after", 0) >= MIN_CALLS:
        raise sr.CheckFailed(f"{sec['stepped_after']} log-probs of the taken actions were computed with gradients on data holding an "
                             f"advantage (at {', '.join(sec.get('hooked_at', [])) or 'library code'}) and the optimizers then stepped "
                             f"({sec.get('steps', 0)} steps in all), but no backward pass reached any of them: the policy-gradient term "
                             "is cut from the graph (a .detach() on it, computed under torch.no_grad(), or left out of the loss that "
                             "backward() runs on), so the policy learns nothing from its advantages; fix: backward() on "
                             "loss['loss_objective'] + loss['loss_critic'] + loss['loss_entropy'], none of them detached")
    if not calls and not constant:
        raise sr.CheckSkipped("no backward pass through the log-prob of a probabilistic actor's distribution built on data "
                              "holding an advantage (an advantage-based loss: PPO, A2C, REINFORCE)")
    if len(calls) + constant < MIN_CALLS:
        raise evidence.Short(f"{len(calls) + constant} backward passes through an advantage-weighted log-prob measured "
                             f"(needs {MIN_CALLS}); " + evidence.MORE)
    corrs = [c[1] for c in calls] + [0.0] * constant
    med = statistics.median(corrs)
    where = ", ".join(sorted(sec.get("sites", {}))) or "library code"
    text = (f"median correlation {med:.2f} between each step's advantage and the weight the loss gives its log-prob "
            f"(minus its gradient) over {len(corrs)} backward passes"
            + (f", {constant} of them weighting every step alike" if constant else "") + f" (log-probs taken at {where})")
    if med <= -FLOOR:
        raise sr.CheckFailed(f"{text}: the loss pushes the policy away from steps with a higher advantage: its sign is "
                             "flipped (minimize -(ratio * advantage).mean()); or use ClipPPOLoss")
    if med < FLOOR:
        raise sr.CheckFailed(f"{text}: the loss does not weight the log-probs by their advantages; usual cause: a [B] log-prob "
                             "times GAE's [B, 1] advantage broadcasts to [B, B], whose mean is mean(ratio) * mean(advantage) "
                             "(pytorch/rl#1243): use batch['advantage'].squeeze(-1), or ClipPPOLoss; else the policy term "
                             "is detached or weighted by 0")
    return f"{text}: each step's log-prob is weighted by its advantage"
