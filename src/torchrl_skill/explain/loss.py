"""Loss-module facts for ``scripts/explain.py``, measured on a loss built from tiny real
modules (a 3-feature observation, a 2-dim continuous or 4-way one-hot action).

What is measured, not tabled (torchrl/objectives/common.py, 0.14.1):
- ``convert_to_functional`` stores each network's parameters under
  ``loss.<name>_params``: the very ``nn.Parameter`` objects of the module you passed
  (shared: an optimizer over your module trains the loss) or new, expanded and
  re-initialised ones (the loss trains its own copy: an optimizer over your module does
  nothing). Read by identity of the parameters;
- target parameters live under ``loss.target_<name>_params``; ``_has_update_associated``
  says whether a target updater (``SoftUpdate``/``HardUpdate``) was built for them;
- the default value estimator is what ``loss.value_estimator`` builds on first access,
  with its gamma/lambda; each ``ValueEstimators`` member is tried on
  ``make_value_estimator``.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import warnings

OBS, ACT, N_ACTIONS = 3, 2, 4
NETWORK_PARAMS = ("actor_network", "critic_network", "value_network", "qvalue_network")


def _continuous():
    import torch
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torch import nn
    from torchrl.data import Bounded
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator

    spec = Bounded(-1.0, 1.0, (ACT,))
    head = TensorDictModule(nn.Sequential(nn.Linear(OBS, 2 * ACT), NormalParamExtractor()), ["observation"], ["loc", "scale"])
    actor = ProbabilisticActor(head, in_keys=["loc", "scale"], spec=spec, distribution_class=TanhNormal, return_log_prob=True)

    class QNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(OBS + ACT, 1)

        def forward(self, observation, action):
            return self.linear(torch.cat([observation, action], -1))

    critic = ValueOperator(nn.Linear(OBS, 1), in_keys=["observation"])
    qvalue = ValueOperator(QNet(), in_keys=["observation", "action"])
    label = "ProbabilisticActor(TanhNormal), ValueOperator(state_value), ValueOperator(observation, action)"
    return label, {"actor_network": actor, "critic_network": critic, "value_network": critic, "qvalue_network": qvalue, "action_spec": spec}


def _discrete():
    from tensordict.nn import TensorDictModule
    from torch import nn
    from torchrl.data import OneHot
    from torchrl.modules import OneHotCategorical, ProbabilisticActor, QValueActor, ValueOperator

    spec = OneHot(N_ACTIONS)
    head = TensorDictModule(nn.Linear(OBS, N_ACTIONS), ["observation"], ["logits"])
    actor = ProbabilisticActor(head, in_keys=["logits"], spec=spec, distribution_class=OneHotCategorical, return_log_prob=True)
    qactor = QValueActor(nn.Linear(OBS, N_ACTIONS), in_keys=["observation"], spec=spec)
    qvalue = ValueOperator(nn.Linear(OBS, N_ACTIONS), in_keys=["observation"], out_keys=["action_value"])
    label = "ProbabilisticActor(OneHotCategorical), QValueActor, ValueOperator(action_value)"
    return label, {"actor_network": actor, "value_network": qactor, "qvalue_network": qvalue, "action_spec": spec, "num_actions": N_ACTIONS}


def _continuous_q():
    """The continuous world with a Q(s, a) network as ``value_network`` (DDPG's critic)."""
    label, pool = _continuous()
    return label.replace("ValueOperator(state_value), ", ""), {**pool, "value_network": pool["qvalue_network"]}


def _required(params) -> list[str]:
    return [p.name for p in params.values() if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def build(cls, **overrides):
    """``(loss, label, kwargs)`` built from the first tiny world it accepts, or
    ``(None, reason, {})``. Passes the networks the constructor requires plus
    ``actor_network``/``critic_network`` (PPO-style losses default them to None)."""
    if cls.__module__.startswith("torchrl.objectives.llm"):
        return None, "not built: an LLM loss needs an LLM wrapper (TransformersWrapper, vLLMWrapper)", {}
    params = inspect.signature(cls).parameters
    reason, fallback = "", None
    for world in (_continuous, _continuous_q, _discrete):
        label, pool = world()
        wanted = set(_required(params)) | ({"actor_network", "critic_network", "action_spec", "num_actions"} & set(params))
        kwargs = {k: pool[k] for k in wanted if k in pool}
        if "gamma" in _required(params):
            kwargs["gamma"] = 0.99
            label += ", gamma=0.99 (required)"
        kwargs.update(overrides)
        missing = [p for p in _required(params) if p not in kwargs]
        if missing:
            return None, f"not built: needs {', '.join(missing)} (no tiny stand-in)", {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loss = cls(**kwargs)
                if cls.default_value_estimator is not None:
                    loss.value_estimator  # a world whose critic does not fit fails here
            return loss, label, kwargs
        except Exception as err:  # the next world may fit; keep the reason for the report
            if "loss" in locals() and fallback is None:
                fallback = (loss, label, kwargs)
            reason = f"not built from tiny modules: {type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}"
        loss = None
        del loss
    return fallback or (None, reason, {})


def _share(loss, name: str, module) -> str:
    import torch

    params = getattr(loss, f"{name}_params", None)
    if params is None or module is None:
        return "not found"
    mine = {id(p) for p in module.parameters()}
    leaves = [v for v in params.values(True, True) if isinstance(v, torch.nn.Parameter)]
    if not leaves:
        return "no trainable parameters in the loss (detached)"
    shared = sum(id(v) in mine for v in leaves)
    if shared == len(leaves):
        return "shared: the loss trains the parameters of the module you passed"
    shape = tuple(leaves[0].shape)
    if shared == 0:
        return (f"own copy ({shape[0]} stacked, re-initialised): an optimizer over the module you passed "
                f"does nothing; optimize loss.parameters() and read loss.{name}_params")
    return f"mixed: {shared} of {len(leaves)} parameters shared, the rest are the loss's own copies"


def _network_of(loss, name: str, kwargs: dict):
    module = loss.__dict__.get(name)
    arg = next((k for k, v in kwargs.items() if v is module), name)
    return arg, module


def _value_estimator_facts(loss) -> list[str]:
    from torchrl.objectives.utils import ValueEstimators

    out = []
    default = type(loss).default_value_estimator
    if default is None:
        return ["value estimator: none (this loss does not use one)"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = loss.value_estimator
        hp = []
        for attr in ("gamma", "lmbda"):
            value = getattr(est, attr, None)
            if value is not None:
                hp.append(f"{attr}={float(value):g}")
        when = (f"; forward runs it only when the batch has no {loss.tensor_keys.advantage!r} entry"
                if _estimates_when_missing(type(loss)) else "")
        out.append(f"value estimator by default: {type(est).__name__} ({', '.join(hp) or 'no gamma/lmbda'}), "
                   f"built on first use{when}; set yours with loss.make_value_estimator(ValueEstimators.X, gamma=...)")
    except Exception as err:
        out.append(f"value estimator by default: {default.name} (not built here: {type(err).__name__}: {str(err)[:100]})")
    ok, no = [], []
    for member in ValueEstimators:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loss.make_value_estimator(member)
            ok.append(member.name)
        except Exception as err:
            no.append(f"{member.name} ({type(err).__name__})")
    out.append(f"make_value_estimator accepts: {', '.join(ok) or 'none'}" + (f"; rejects: {', '.join(no)}" if no else "")
               + "; also a ValueEstimatorBase instance (e.g. GAE(gamma=..., lmbda=..., value_network=...))")
    return out


def _estimates_when_missing(cls) -> bool:
    """True when ``cls.forward`` reads ``tensor_keys.advantage`` with a default and runs the
    estimator only when it is absent (the PPO family, A2C, Reinforce in 0.14.1), read from
    the source of ``forward``."""
    try:
        source = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False
    after = re.split(r"\bif advantage is None:", source, maxsplit=1)
    return bool(re.search(r"advantage = \w+\.get\(\s*self\.tensor_keys\.advantage,\s*None", source)
                and len(after) == 2 and "self.value_estimator(" in after[1][:600])


def _static_facts(cls) -> list[str]:
    out = []
    keys = getattr(cls, "_AcceptedKeys", None)
    if keys is not None and dataclasses.is_dataclass(keys):
        out.append("tensor_keys (class defaults): " + _fmt_keys(dataclasses.asdict(keys())))
    default = getattr(cls, "default_value_estimator", None)
    if default is not None:
        from torchrl.objectives.utils import default_value_kwargs

        hp = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in default_value_kwargs(default).items())
        out.append(f"value estimator by default: {default.name} ({hp})")
    return out


def _fmt_keys(keys: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in keys.items())


def loss_facts(cls) -> list[str]:
    """Fact lines for a LossModule subclass (built when a tiny world fits)."""
    loss, label, kwargs = build(cls)
    if loss is None:
        return [label] + _static_facts(cls)
    out = [f"measured on a loss built from: {label}"]
    out.append("tensor_keys (defaults; change with loss.set_keys(...)): " + _fmt_keys(dataclasses.asdict(loss.tensor_keys)))
    for attr in ("in_keys", "out_keys"):
        try:
            out.append(f"{attr}: {list(getattr(loss, attr))}")
        except Exception as err:
            out.append(f"{attr}: not available before a forward ({type(err).__name__})")
    params = inspect.signature(cls).parameters
    for name in loss._has_update_associated:
        arg, module = _network_of(loss, name, kwargs)
        line = f"{arg}: {_share(loss, name, module)}"
        for count in (p for p in params if p.startswith("num_") and p.endswith("_nets")):
            default = params[count].default
            if isinstance(default, int) and default > 1 and name.startswith(count[4:-5]):
                one, _, kw1 = build(cls, **{count: 1})
                if one is not None:
                    verdict = _share(one, name, _network_of(one, name, kw1)[1]).split(":")[0]
                    line += f" [{count}={default} by default; with {count}=1: {verdict}]"
        if f"target_{name}_params" in loss._modules:
            line += "; has target parameters: build SoftUpdate(loss, tau=...) or HardUpdate(loss, value_network_update_interval=...) and call updater.step() after each optimizer step"
        out.append(line)
    delays = {p: v.default for p, v in params.items() if p.startswith("delay_")}
    if delays:
        out.append("target networks switched by: " + ", ".join(f"{k}={v}" for k, v in delays.items()))
    if not any(f"target_{n}_params" in loss._modules for n in loss._has_update_associated):
        out.append("target parameters: none with the defaults (no target updater needed)")
    out += _value_estimator_facts(loss)
    return out
