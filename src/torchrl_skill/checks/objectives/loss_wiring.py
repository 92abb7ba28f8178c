"""The wiring contract of check_loss_wiring.py (private module): what the user's function
may return, read into :class:`Wiring` objects, and the built-in known-good wirings.

A TARGET function is called with no arguments and may return, unchanged from the user's
own code:

- a loss module (``LossModule``): the checks that need no batch run;
- ``(loss, batch)``: a tuple of a loss module and the TensorDict it trains on;
- a dict with ``"loss"`` and optionally ``"batch"``, ``"modules"`` (``{network name: the
  user's nn.Module}``), ``"value_estimator"`` (a standalone ``GAE``, ``TD0Estimator``, ...)
  and ``"name"`` (the row prefix);
- a list of any of these.

Anything else is the user's fault, reported by :func:`wirings_from` as a check failure
that says what came back and what is expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchrl_skill.report import skill_report as sr

DICT_KEYS = ("name", "loss", "batch", "modules", "value_estimator")
EXPECTED = (
    "return the loss module, (loss, batch), or a dict {'loss': ..., 'batch': ..., 'modules': {...}, "
    "'value_estimator': ...} (or a list of these)"
)


@dataclass
class Wiring:
    """One loss to check. ``batch``: a TensorDict or None; ``modules``: ``{name: nn.Module}``
    where ``loss.<name>_params`` exists; ``value_estimator``: a ``ValueEstimatorBase`` or None."""

    name: str
    loss: Any
    batch: Any = None
    modules: dict = field(default_factory=dict)
    value_estimator: Any = None


def _describe(value) -> str:
    text = repr(value) if isinstance(value, (str, int, float, type(None))) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _one(value, where: str) -> dict:
    """A dict of Wiring fields from one returned item; ``where`` starts the failure message
    (``"build_wiring() returned"``)."""
    from tensordict import TensorDictBase
    from torchrl.objectives import LossModule

    if isinstance(value, LossModule):
        return {"loss": value}
    if isinstance(value, tuple):
        if len(value) == 2 and isinstance(value[0], LossModule) and isinstance(value[1], TensorDictBase):
            return {"loss": value[0], "batch": value[1]}
        raise sr.CheckFailed(f"{where} a tuple of {len(value)} ({', '.join(_describe(v) for v in value)}); expected (loss, batch); fix: {EXPECTED}")
    if isinstance(value, dict):
        unknown = sorted(set(map(str, value)) - set(DICT_KEYS))
        if "loss" not in value:
            raise sr.CheckFailed(f"{where} a dict without 'loss' (keys: {sorted(map(str, value))}); fix: {EXPECTED}")
        if unknown:
            raise sr.CheckFailed(f"{where} a dict with unknown keys {unknown}; accepted: {list(DICT_KEYS)}")
        if not isinstance(value["loss"], LossModule):
            raise sr.CheckFailed(f"{where} a dict whose 'loss' is {_describe(value['loss'])}, not a torchrl LossModule")
        batch = value.get("batch")
        if batch is not None and not isinstance(batch, TensorDictBase):
            raise sr.CheckFailed(f"{where} a dict whose 'batch' is {_describe(batch)}, not a TensorDict")
        modules = value.get("modules") or {}
        if not isinstance(modules, dict):
            raise sr.CheckFailed(f"{where} a dict whose 'modules' is {_describe(modules)}; expected {{network name: your nn.Module}}")
        return {k: value[k] for k in DICT_KEYS if k in value and k != "modules"} | {"modules": modules}
    raise sr.CheckFailed(f"{where} {_describe(value)}; fix: {EXPECTED}")


def wirings_from(value, call: str, default_name: str) -> list[Wiring]:
    """Read what ``call`` (e.g. ``"build_wiring()"``) returned into Wirings with unique names;
    raise CheckFailed saying what came back and what is expected."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise sr.CheckFailed(f"{call} returned an empty list; fix: {EXPECTED}")
    fields = [_one(item, f"{call} returned" if len(items) == 1 else f"{call} returned, at index {i},") for i, item in enumerate(items)]
    wirings, seen = [], set()
    for i, f in enumerate(fields):
        name = str(f.pop("name", None) or (default_name if len(items) == 1 else f"{default_name}[{i}]"))
        if name in seen:
            name = f"{name}[{i}]"
        seen.add(name)
        wirings.append(Wiring(name=name, **f))
    return wirings


def default_wiring() -> list[dict]:
    """Known-good wirings: ClipPPOLoss with a critic writing "state_value", and SACLoss whose
    user Q-module is synced back from the loss's copy after one training step."""
    import torch
    from tensordict import TensorDict
    from torchrl.objectives import ClipPPOLoss, SACLoss

    from torchrl_skill.checks.objectives import loss_builders as builders

    torch.manual_seed(0)
    actor = builders.continuous_actor()
    ppo = ClipPPOLoss(actor, builders.state_value())
    ppo.make_value_estimator(gamma=0.99)
    batch = builders.forward_batch("onpolicy", actor)

    qnet = builders.qsa_value()
    sac = SACLoss(builders.continuous_actor(), qnet, num_qvalue_nets=2, action_spec=builders.bounded_action_spec())
    sac_batch = builders.make_batch("continuous")
    out = sac(sac_batch)
    opt = torch.optim.Adam(sac.parameters(), lr=1e-2)
    (out["loss_qvalue"] + out["loss_actor"]).backward()
    opt.step()
    TensorDict.from_module(qnet).data.update_(sac.qvalue_network_params[0].data)  # the sync
    return [
        {"name": "ppo", "loss": ppo, "batch": batch},
        {"name": "sac", "loss": sac, "batch": sac_batch, "modules": {"qvalue_network": qnet}},
    ]
