"""Facts ``scripts/explain.py`` measures per kind of object, on the live library: what a
transform acts on, which class each way of calling ``Collector`` builds, how a storage
counts a batched write, what a replay buffer builds by default, which abstract methods an
env defines, a value estimator's keys, a module's default interaction type, and what an
env receives from each discrete distribution through each action spec (``pairing.py``).

Nothing here starts a process or a backend: ``Collector``'s dispatch runs with the
concrete classes' ``__init__`` intercepted, and classes that live with Ray or a service
are never built.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings

from .facts import _default, _short_repr, forwarded_params, live_signature


def _defined_in(cls, method: str) -> str:
    return next((k.__name__ for k in cls.__mro__ if method in k.__dict__), "")


def transform_facts(cls) -> list[str]:
    """Which hooks a Transform subclass overrides, said as what it acts on.

    torchrl/envs/transforms/_base.py (0.14.1): ``TransformedEnv.step`` calls
    ``transform._step``, whose default calls ``_call``; ``TransformedEnv.reset`` calls
    ``transform._reset``, whose default returns the reset output unchanged (it does NOT call
    ``_call``); ``_inv_call`` runs on the input before the base env's step;
    ``forward`` (replay buffers, modules) calls ``_apply_transform`` by default."""
    base = next(k for k in cls.__mro__ if k.__name__ == "Transform" and k.__module__.startswith("torchrl.envs.transforms"))
    own = {m: _defined_in(cls, m) for m in ("_call", "_reset", "_step", "_inv_call", "_apply_transform", "_inv_apply_transform", "forward")}
    mine = {m: where for m, where in own.items() if where != base.__name__}
    out = []
    if "_step" in mine:
        out.append(f"acts on step output: yes ({mine['_step']}._step)")
    elif "_call" in mine or "_apply_transform" in mine:
        out.append(f"acts on step output: yes ({mine.get('_call', mine.get('_apply_transform'))} via Transform._step -> _call)")
    else:
        out.append("acts on step output: no (inherits Transform._step/_call unchanged)")
    if "_reset" in mine:
        out.append(f"acts on reset output: yes ({mine['_reset']}._reset)")
    else:
        user = not cls.__module__.startswith("torchrl.")
        extra = ("; _call is not applied at reset: also define _reset(self, tensordict, tensordict_reset) "
                 "returning self._call(tensordict_reset)") if user and ("_call" in mine or "_apply_transform" in mine) else ""
        out.append("acts on reset output: no: inherits Transform._reset, which returns the reset output unchanged" + extra)
    if "_inv_call" in mine or "_inv_apply_transform" in mine:
        where = mine.get("_inv_call") or mine.get("_inv_apply_transform")
        out.append(f"acts on actions (the input of the base env's step): yes ({where}; on in_keys_inv)")
    else:
        out.append("acts on actions (the input of the base env's step): no")
    if "forward" in mine:
        out.append(f"outside an env (replay-buffer sample, module call): {mine['forward']}.forward")
    elif "_apply_transform" in mine:
        out.append(f"outside an env (replay-buffer sample, module call): forward applies {mine['_apply_transform']}._apply_transform")
    else:
        out.append("outside an env (replay-buffer sample, module call): forward calls _apply_transform, which this class does not define (raises NotImplementedError)")
    specs = [m for m in sorted(vars_of(cls)) if m.startswith("transform_") and m.endswith("_spec") and _defined_in(cls, m) != base.__name__]
    out.append("changes specs: " + (", ".join(f"{m} ({_defined_in(cls, m)})" for m in specs) if specs else
                                   "no transform_*_spec method: a key it adds or renames is not in the env's specs"))
    return out


def vars_of(cls) -> set[str]:
    return {name for k in cls.__mro__ for name in k.__dict__}


def collector_facts(cls) -> list[str]:
    """For ``Collector``: which class each way of calling it builds, read by running its
    dispatch with the concrete classes' ``__init__`` intercepted (no env, no process)."""
    if cls.__name__ != "Collector" or "num_collectors" not in inspect.signature(type(cls).__call__).parameters:
        return []
    out = []
    for label, kwargs in (("Collector(make_env, policy)", {}),
                          ("num_collectors=N alone", {"num_collectors": 2}),
                          ("num_collectors=N, sync=True", {"num_collectors": 2, "sync": True})):
        out.append(f"{label} builds: {_dispatch(cls, kwargs)}")
    return out


class _Built(Exception):
    pass


def _dispatch(cls, kwargs) -> str:
    base = next(k for k in cls.__mro__ if k.__name__ == "BaseCollector")
    classes, seen = [base], []
    while classes:
        k = classes.pop()
        seen.append(k)
        classes += [s for s in k.__subclasses__() if s not in seen]

    def intercept(self, *a, **kw):
        raise _Built(type(self).__name__)

    saved = {k: k.__dict__.get("__init__") for k in seen}
    try:
        for k in seen:
            k.__init__ = intercept
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cls(lambda: None, None, frames_per_batch=1, total_frames=1, **kwargs)
        return "(no class was built)"
    except _Built as built:
        return str(built)
    except Exception as err:
        return f"(dispatch raised {type(err).__name__}: {err})"
    finally:
        for k, init in saved.items():
            if init is None:
                with contextlib.suppress(AttributeError):
                    del k.__init__
            else:
                k.__init__ = init


def storage_facts(cls) -> list[str]:
    """For an in-memory storage with an ``ndim`` parameter: how ``extend`` counts a
    ``[2 envs, 3 steps]`` batch with the default ``ndim`` and with ``ndim=2``, measured."""
    params = inspect.signature(cls).parameters
    first = next(iter(params), None)
    if "ndim" not in params or first != "max_size" or _remote(cls) or "Memmap" in cls.__name__:
        return []  # a memmap storage writes files; a remote one starts a backend
    from tensordict import TensorDict
    from torchrl.data import ReplayBuffer

    counts = {}
    for ndim in (params["ndim"].default, 2):
        rb = ReplayBuffer(storage=cls(10, ndim=ndim), batch_size=2)
        rb.extend(TensorDict({"obs": __import__("torch").zeros(2, 3)}, batch_size=[2, 3]))
        counts[ndim] = len(rb)
    d = params["ndim"].default
    return [f"ndim (default {d}): extend() of a [2 envs, 3 steps] batch stores {counts[d]} items with ndim={d} "
            f"(each env's row is one item) and {counts[2]} with ndim=2; a batched env's collector yields "
            "[num_envs, T] batches: use ndim=2 so that trajectories run along dim 1"]


def buffer_facts(cls) -> list[str]:
    """The storage, sampler and writer a replay buffer builds when given none (not for a
    buffer that would start Ray or another service)."""
    params = inspect.signature(cls).parameters
    if _remote(cls) or any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params.values()):
        return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rb = cls()
    except Exception:
        return []
    parts = [f"{attr[1:]} {_short_repr(getattr(rb, attr, None), 60)}" for attr in ("_storage", "_sampler", "_writer")]
    return ["built with no arguments: " + ", ".join(parts)]


def _remote(cls) -> bool:
    """True for a class that lives with an optional backend or a service (building it could
    start Ray, a server or worker processes)."""
    from .names import wanted_backends

    return bool(wanted_backends(cls.__name__) or wanted_backends(cls.__module__)
                or any(w in cls.__module__ for w in ("distributed", "services", "remote")))


def env_facts(cls) -> list[str]:
    """Which of EnvBase's abstract methods the class defines itself."""
    base = next(k for k in cls.__mro__ if k.__name__ == "EnvBase")
    needed = sorted(getattr(base, "__abstractmethods__", ()) or ("_reset", "_step", "_set_seed"))
    if cls is base:
        return [f"a subclass implements: {', '.join(needed)} (abstract in EnvBase), and declares its specs in __init__"]
    mine = [m for m in needed if _defined_in(cls, m) not in ("", base.__name__)]
    return [f"implements {', '.join(mine) or 'none'} of EnvBase's {', '.join(needed)}"]


def keys_facts(cls) -> list[str]:
    """Default ``tensor_keys`` of a value estimator (its ``_AcceptedKeys`` dataclass)."""
    import dataclasses

    keys = getattr(cls, "_AcceptedKeys", None)
    if keys is None or not dataclasses.is_dataclass(keys):
        return []
    values = ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(keys()).items())
    return [f"tensor_keys (defaults; change with .set_keys(...)): {values}"]


def module_facts(obj) -> list[str]:
    """For modules with a ``default_interaction_type`` (own or through ``**kwargs``): what
    they do outside any exploration context."""
    try:
        params = dict(live_signature(obj).parameters)
    except (TypeError, ValueError):
        return []
    for _, extra in forwarded_params(obj):
        params.update({p.name: p for p in extra})
    from .pairing import module_facts as pairing

    p = params.get("default_interaction_type")
    if p is None or p.default is p.empty:
        return pairing(params)
    return [f"outside set_exploration_type(...) it acts by default_interaction_type={_default(p.default)} "
            "(set_exploration_type(ExplorationType.RANDOM) to sample)"] + pairing(params)


def kind_facts(obj, kind: str) -> list[str]:
    """The measured facts for ``obj`` of ``kind`` (empty when there are none)."""
    if not isinstance(obj, type):
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "loss module":
            from .loss import loss_facts

            return loss_facts(obj)
        from .pairing import distribution_facts

        table = {
            "distribution": distribution_facts,
            "transform": transform_facts,
            "collector": collector_facts,
            "storage": storage_facts,
            "replay buffer": buffer_facts,
            "env": env_facts,
            "value estimator": keys_facts,
            "module": module_facts,
        }
        return table[kind](obj) if kind in table else []
