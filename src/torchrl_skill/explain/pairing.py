"""What the env receives when a discrete distribution's sample goes through an action
spec, for ``explain.py`` on a probabilistic module (``ProbabilisticActor``: a
``distribution_class`` parameter, its own or forwarded) or on a distribution class.
Measured on the live classes, never tabled:

- each discrete distribution of torch and torchrl draws 64 samples from 4 uniform logits
  (seeded); each sample goes through ``spec.to_numpy(sample, safe=False)``, which is what
  ``GymLikeEnv.read_action`` hands the wrapped env (torchrl/envs/gym_like.py, 0.14.1), for
  a ``Categorical(4)`` and a ``OneHot(4)`` spec (torchrl.data), and what comes out is
  compared with the sampled action (the index, or the argmax of a one-hot sample). A
  torch ``Categorical`` through a one-hot spec gives 0 whatever was sampled: on GymEnv's
  default one-hot spec the env is stepped with action 0 every step, silently
  (tests/test_explain_pairing.py runs it on CartPole-v1);
- which spec GymEnv builds for a ``Discrete`` space with ``categorical_action_encoding``
  at its default (read from ``GymWrapper``'s signature) and True, from torchrl's own space
  converter when gymnasium is installed.

A module's ``safe`` default (read from its signature) says whether it projects a sample
onto its spec at all.
"""

from __future__ import annotations

import functools
import importlib.util

N = 4


def _distributions():
    import torch
    from torchrl.modules import MaskedCategorical, MaskedOneHotCategorical, OneHotCategorical

    mask = {"mask": torch.ones(N, dtype=torch.bool)}
    return (("torch.distributions.Categorical", torch.distributions.Categorical, {}),
            ("torch.distributions.OneHotCategorical", torch.distributions.OneHotCategorical, {}),
            ("torchrl.modules.OneHotCategorical", OneHotCategorical, {}),
            ("torchrl.modules.MaskedCategorical", MaskedCategorical, mask),
            ("torchrl.modules.MaskedOneHotCategorical", MaskedOneHotCategorical, mask))


@functools.lru_cache(maxsize=None)
def received(cls) -> dict[str, str] | None:
    """``{"Categorical(4)": what the env receives, "OneHot(4)": ...}`` for a discrete
    distribution class: "the sampled action", "always 0 (sampled 0..3)" or "an array of
    shape [4], not an index"; None when the class is not built from ``logits`` alone (a
    continuous distribution) or samples neither an index nor a one-hot vector."""
    import numpy as np
    import torch
    from torchrl.data import Categorical, OneHot

    extra = next((kw for _, klass, kw in _distributions() if klass is cls), {})
    try:
        torch.manual_seed(0)
        draws = cls(logits=torch.zeros(N), **extra).sample((64,))
    except Exception:  # noqa: BLE001  a continuous or differently-parametrised distribution
        return None
    index = draws.shape == (64,) and not draws.is_floating_point()
    one_hot = draws.shape == (64, N) and bool(((draws == 0) | (draws == 1)).all() and (draws.sum(-1) == 1).all())
    if not (index or one_hot):  # Bernoulli's multi-hot draws, a continuous sample
        return None
    intended = [int(d) if d.ndim == 0 else int(d.argmax(-1)) for d in draws]
    out = {}
    for name, spec in ((f"Categorical({N})", Categorical(N)), (f"OneHot({N})", OneHot(N))):
        got = [spec.to_numpy(d, safe=False) for d in draws]
        if any(np.ndim(g) for g in got):
            out[name] = f"an array of shape {list(np.shape(got[0]))}, not an index"
        elif [int(g) for g in got] == intended:
            out[name] = "the sampled action"
        else:
            values = sorted({int(g) for g in got})
            out[name] = f"always {values[0] if len(values) == 1 else values} (sampled {sorted(set(intended))})"
    return out


def _line(name: str, cls) -> str | None:
    seen = received(cls)
    return None if seen is None else f"{name}: " + ", ".join(f"through {s} the env gets {what}" for s, what in seen.items())


def _gym_encoding() -> str:
    from torchrl.envs import GymWrapper

    from .facts import live_signature

    default = live_signature(GymWrapper).parameters.get("categorical_action_encoding")
    shown = f"categorical_action_encoding={default.default!r} by default" if default is not None else "no categorical_action_encoding"
    if importlib.util.find_spec("gymnasium") is None:
        return f"GymEnv: {shown}"
    try:
        import gymnasium
        from torchrl.envs.libs.gym import _gym_to_torchrl_spec_transform

        built = {enc: type(_gym_to_torchrl_spec_transform(gymnasium.spaces.Discrete(N), categorical_action_encoding=enc)).__name__
                 for enc in (False, True)}
    except Exception:  # noqa: BLE001  another torchrl: say only what the signature says
        return f"GymEnv: {shown}"
    return (f"GymEnv ({shown}) builds a {built[False]} spec for a Discrete space, and a {built[True]} spec "
            "with categorical_action_encoding=True")


HOW = (f"what the env receives (spec.to_numpy(sample, safe=False), as GymLikeEnv.read_action sends it; 64 samples "
       f"from {N} uniform logits)")


def distribution_facts(cls) -> list[str]:
    """The pairing of one discrete distribution class (``[]`` for a continuous one)."""
    line = _line(cls.__name__, cls)
    return [] if line is None else [f"{HOW}: {line}", _gym_encoding()]


def module_facts(params: dict) -> list[str]:
    """Pairing lines for a module with a ``distribution_class`` parameter (``params``: its
    own and forwarded parameters), one per discrete distribution of torch and torchrl;
    with its ``safe`` default (whether it projects a sample onto its spec)."""
    if "distribution_class" not in params:
        return []
    lines = [line for name, klass, _ in _distributions() if (line := _line(name, klass))]
    safe = params.get("safe")
    check = (f"; with safe={safe.default!r} (its default) the module does not check a sample against its spec"
             if safe is not None and safe.default is False else "")
    return [f"distribution_class vs action spec, {HOW}: " + "; ".join(lines) + check, _gym_encoding()]
