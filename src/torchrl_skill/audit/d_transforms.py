"""transforms: are the env transforms the script built actually applied?

It records every ``TransformedEnv`` (its base env, its transforms, where it was built,
whether ``append_transform`` made it, whether user code or torchrl built it: a collector
wraps the env it is given, ``Collector(env, ..., max_frames_per_traj=N)`` adds a
``StepCounter``, and builds the env a factory returns) and counts the steps and resets each
env object ran, where they run: ``_step``/``_reset`` (a ``SerialEnv`` steps its sub-envs
through ``_step``, never ``step``: torchrl/envs/batched_envs.py 0.14.1; a ``TransformedEnv``
steps its base env the same way). Only an env the user's code built can be "never used";
one torchrl built counts for the base env it wraps. The sub-envs of a ``ParallelEnv`` or of
a multi-process collector run in worker processes: counted there when the workers are
instrumented (workers.py, merged by worker_reports.py), else the row says they are not.
Faults: a ``TransformedEnv`` never stepped nor reset while its base env was stepped
directly (``ObservationNorm.init_stats`` on one of its transforms counts as its use: it rolls
the base env out through a parent it builds) (``env.append_transform(t)`` on a plain env returns a new ``TransformedEnv`` and
leaves ``env`` unchanged, so dropping the return value drops the transform); a user
transform that overrides ``_call`` (or ``_apply_transform``) but not ``_reset`` in an env
that was reset (``Transform._reset`` returns the reset output unchanged, so the first
observation of every episode is untransformed: pytorch/rl#2595); an ``ObservationNorm``
used before its statistics are set (the run stops on "Loc/Scale have not been
initialized"; statistics taken on another env instance than the one collected from, or
never: pytorch/rl#565, pytorch/rl#699); a running normalizer (``VecNorm``, ``VecNormV2``) in
an env the user's code rolled out with a policy (``env.rollout(n, policy)``: an evaluation),
not frozen, with statistics of its own rather than those of the most-stepped env of the same
base class normalizing the same keys: the policy's inputs there are scaled by statistics of
that env's own steps (the class of pytorch/rl#337; fix proven in
sub-skills/envs-and-transforms/references/evaluation-envs.md). Its normalizers are read when
it is rolled out, so an evaluation env built inside a function and then dropped counts too;
an env only stepped by torchrl's own checks (``check_env_specs``) or as a batched env's
sub-env is never such an evaluation.

Minimum evidence: MIN_STEPS steps of the envs in use.

Facts (torchrl 0.14.1, torchrl/envs/common.py and torchrl/envs/transforms/_base.py): the
three behaviours above (tests/test_audit_facts.py reproduces each).
"""

from __future__ import annotations

import weakref
from collections import Counter

from torchrl_skill.report import skill_report as sr

from .evidence import need

NAME = "transforms"
MIN_EPISODES = 3  # ended episodes before init_stats' rollout length is compared with them
MIN_STEPS = 10
RUNNING_NORMS = ("VecNorm", "VecNormV2")  # transforms whose statistics update as they run


def _transforms(env) -> list:
    t = getattr(env, "transform", None)
    if t is None:
        return []
    return list(t) if hasattr(t, "transforms") else [t]


def _statistics_id(t) -> list[int]:
    """The storages of a running normalizer's statistics (``VecNormV2._loc``/``_var``/``_count``,
    ``VecNorm._td``): two transforms with the same list share their statistics
    (``load_state_dict`` hands over the tensors themselves, torchrl 0.14.1); [] before any step."""
    import torch

    found = []
    for attr in ("_loc", "_var", "_count", "_td"):
        value = getattr(t, attr, None)
        leaves = [value] if torch.is_tensor(value) else list(value.values(True, True)) if hasattr(value, "values") else []
        found += [leaf.untyped_storage().data_ptr() for leaf in leaves if torch.is_tensor(leaf)]
    return sorted(found)


def install(hub) -> None:
    from torchrl.envs import ObservationNorm, Transform, TransformedEnv

    from . import boundary
    from .tdtools import ObjectKeys

    sec = hub.section(NAME)
    steps: dict[int, int] = {}  # a TransformedEnv's _step calls
    direct: dict[int, int] = {}  # a base env's step calls
    resets: dict[int, int] = {}
    envs: dict[int, dict] = {}
    appended: dict[int, str] = {}
    key_of = ObjectKeys()

    def user_overrides(t) -> bool:
        cls = type(t)
        if cls.__module__.startswith("torchrl."):
            return False
        overrides = any(getattr(cls, m) is not getattr(Transform, m) for m in ("_call", "_apply_transform"))
        return overrides and getattr(cls, "_reset") is getattr(Transform, "_reset")

    counted_classes: set = set()
    private: dict[int, int] = {}  # _step calls of an env class _count_calls wraps
    leaf: dict[int, int] = {}  # steps of any leaf env, seen by boundary.py

    def count_private_steps(env):
        """Count ``_step`` calls of ``env``'s class: every use of a base env, also through a
        TransformedEnv or a SerialEnv (wrapped once per class, on the first instance built). A
        ``_step`` that is a classmethod (``PendulumEnv``'s) has no instance to count: its env's
        ``step`` calls count instead. A class of the user's script is not wrapped in the
        audited process (see _count_calls): its leaf envs are counted by boundary.py's
        ``leaf_step`` there."""
        cls = type(env)
        if cls in counted_classes or isinstance(env, TransformedEnv):
            return
        counted_classes.add(cls)
        owner = next((k for k in cls.__mro__ if "_step" in k.__dict__), None)
        if owner is not None and not isinstance(owner.__dict__["_step"], (classmethod, staticmethod)):
            _count_calls(hub, owner, "_step", "private_step")

    def skipped(ts) -> list:
        """The user transforms among ``ts`` that override _call but not _reset, with where each
        class is defined (read when the env is built too: a dropped env is gone by the end)."""
        return [f"{type(t).__name__} (defined at {_defined_at(type(t))})" for t in ts if user_overrides(t)]

    def on_env(env, site, by_user=True):
        count_private_steps(env)
        if isinstance(env, TransformedEnv) and key_of(env) not in envs:
            envs[key_of(env)] = {"ref": weakref.ref(env), "site": site, "base": key_of(getattr(env, "base_env", None)),
                                 "base_cls": type(getattr(env, "base_env", None)).__name__, "by_user": bool(by_user),
                                 "transforms": [type(t).__name__ for t in _transforms(env)],
                                 "reset_skipped": skipped(_transforms(env))}

    rolled: dict[int, list] = {}  # envs the user's code rolled out with a policy: their running normalizers then

    def running(ts) -> list:
        return [{"cls": type(t).__name__, "keys": [str(k) for k in t.in_keys], "stats": _statistics_id(t),
                 "frozen": bool(getattr(t, "frozen", False))} for t in ts if type(t).__name__ in RUNNING_NORMS]

    def on_rollout(env, policy, out):
        if policy is not None and isinstance(env, TransformedEnv):
            rolled[key_of(env)] = running(_transforms(env))

    hub.on("env_rollout", on_rollout)

    def summarise():
        out = []
        by_base: dict[int, int] = {}
        for key, info in envs.items():
            by_base[info["base"]] = by_base.get(info["base"], 0) + steps.get(key, 0)
        for key, info in envs.items():
            env = info["ref"]()
            if env is not None:  # transforms appended later count too; a dropped env is gone by now
                ts = _transforms(env)
                info["transforms"] = [type(t).__name__ for t in ts]
                info["reset_skipped"] = skipped(ts)
            else:
                ts = []
            norms = [{"initialised": bool(getattr(t, "initialized", True)), "keys": [str(k) for k in t.in_keys]}
                     for t in ts if isinstance(t, ObservationNorm)]
            out.append({
                "site": info["site"], "base_cls": info["base_cls"], "base_id": info["base"], "steps": steps.get(key, 0), "resets": resets.get(key, 0),
                "by_user": info["by_user"],
                # the base env's use: its _step calls, direct or through any TransformedEnv or batched env
                "base_steps": max(used(info["base"]), by_base[info["base"]] - steps.get(key, 0)), "appended_at": appended.get(key),
                "transforms": info["transforms"], "reset_skipped": info["reset_skipped"],
                "norms": norms,
                "running": running(ts) if env is not None else rolled.get(key, []),
                "rolled_out": key in rolled, "init_stats": stats_runs.get(key, 0),
            })
        sec["envs"] = out

    def count(table, env):
        table[key_of(env)] = table.get(key_of(env), 0) + 1

    def used(key) -> int:
        """Steps of a base env: its ``_step`` calls (every use), or its ``step`` calls."""
        return max(private.get(key, 0), leaf.get(key, 0), direct.get(key, 0))

    def on_init_stats(norm, args, kwargs, _out):
        # ObservationNorm.init_stats rolls its base env out through a parent it builds for the
        # purpose: that stepping is the TransformedEnv's own use, not the base env used without it
        for key, info in envs.items():
            env = info["ref"]()
            if env is not None and any(x is norm for x in _transforms(env)):
                stats_runs[key] = stats_runs.get(key, 0) + 1

    stats_runs: dict[int, int] = {}
    hub.on("env_built", on_env)
    boundary.install(hub)  # the leaf steps of envs whose class is the script's own (not wrapped here)
    hub.on("leaf_step", lambda env: count(leaf, env))
    hub.on("private_step", lambda env: count(private, env))
    # A TransformedEnv's steps and resets are counted where they run (its _step/_reset), so the
    # sub-envs a SerialEnv steps through _step count too; a base env's own steps are its step calls.
    hub.on("env_step", lambda env, out: None if isinstance(env, TransformedEnv) else count(direct, env))
    hub.on("transformed_step", lambda env: count(steps, env))
    hub.on("transformed_reset", lambda env: count(resets, env))
    def on_append(env, ret, site):
        if ret is not env:  # a plain env's append_transform builds a new TransformedEnv (inside torchrl, for the user)
            appended[key_of(ret)] = site
            on_env(ret, site)
            envs[key_of(ret)]["by_user"] = True

    hub.on("append_transform", on_append)
    hub.summariser(summarise)
    _watch_init_stats(hub, sec, ObservationNorm, after=on_init_stats)


def _watch_init_stats(hub, sec: dict, norm_cls, after=None) -> None:
    """Record each ``ObservationNorm.init_stats(num_iter=N)`` call: its N and where. It takes
    its statistics from ``parent.rollout(max_steps=N)`` (torchrl 0.14.1) until N frames were
    collected, so an N shorter than an episode sees only the first N steps of an episode.
    ``after(norm, args, kwargs, out)`` runs after each call: one wrapper per method
    (``patches.wrap`` leaves an already wrapped method alone)."""
    from .patches import wrap
    from .probe import user_site

    calls = sec.setdefault("init_stats", [])
    kept: dict[int, list] = {}  # call index -> [(loc/scale tensor, its values right after init_stats)]

    def before(self, a, k):
        n = a[0] if a else k.get("num_iter")
        if len(calls) < 8 and isinstance(n, int):
            calls.append({"num_iter": n, "site": user_site(), "keys": [str(x) for x in self.in_keys]})
            self.__dict__["_audit_init_stats_call"] = len(calls) - 1

    def after_call(self, a, k, out):
        i = self.__dict__.pop("_audit_init_stats_call", None)
        if i is not None:
            kept[i] = [(t, t.detach().clone()) for t in (getattr(self, "loc", None), getattr(self, "scale", None))
                       if hasattr(t, "detach")]
        if after is not None:
            after(self, a, k, out)

    def overwritten():
        # statistics replaced in place later (load_state_dict, loc.copy_): a short init_stats that
        # only built the lazy buffers (pytorch/rl's coding_ddpg.py: init_stats(3), then
        # load_state_dict of statistics from 5000 steps) did not set what the env uses
        for i, pairs in kept.items():
            calls[i]["overwritten"] = any(t.shape != v.shape or not bool((t.detach() == v).all()) for t, v in pairs)

    wrap(hub, norm_cls, "init_stats", before=before, after=after_call)
    hub.summariser(overwritten)


def _count_calls(hub, owner, name: str, event: str) -> None:
    """Emit ``event(self)`` on ``hub`` after each ``name`` call of ``owner`` and of its
    subclasses that override it with a plain function (classmethods and staticmethods are
    left alone; a ``super()`` chain counts once). In the audited process only classes
    pickled by reference are wrapped (:func:`_by_reference`): a class of the user's script
    (``__main__``) or one defined inside a function is pickled by value when a worker process
    is spawned (cloudpickle pickles it with its methods), and a wrapper holding the auditor's
    state would not pickle (``TypeError: cannot pickle 'weakref.ReferenceType' object``); a
    worker process, which received the class and steps its env there (a ``ParallelEnv``
    worker without buffers calls ``env._step``), wraps them all. The
    marker is this function's own (``_audit_counts``): a method another module wrapped
    already (boundary.py wraps ``GymLikeEnv._step``) is counted too, and a forked worker's
    re-installed listeners get the events of the wrappers it inherited."""
    import functools

    from .patches import _subclasses

    active: set = set()
    for klass in _subclasses(owner):
        fn = klass.__dict__.get(name)
        if (fn is None or isinstance(fn, (classmethod, staticmethod)) or getattr(fn, "_audit_counts", False)
                or not callable(fn) or not (_by_reference(klass) or getattr(hub, "is_worker", False))):
            continue

        def make(fn):
            @functools.wraps(fn)
            def wrapper(self, *args, **kwargs):
                if id(self) in active:
                    return fn(self, *args, **kwargs)
                active.add(id(self))
                try:
                    out = fn(self, *args, **kwargs)
                finally:
                    active.discard(id(self))
                hub.emit(event, self)  # a listener's error is recorded by the hub, never raised here
                return out

            wrapper._audit_wrapped = wrapper._audit_counts = True
            return wrapper

        setattr(klass, name, make(fn))


def _by_reference(klass) -> bool:
    """Whether pickle (and cloudpickle) pickle ``klass`` by reference: its module is imported
    under its name, is not ``__main__``, and holds the class at its qualified name."""
    import sys

    if klass.__module__ in ("__main__", "__mp_main__"):
        return False
    obj = sys.modules.get(klass.__module__)
    for part in klass.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is klass


def _defined_at(cls) -> str:
    """``file.py:LINE`` of a class definition (where a fix goes), or ``?``."""
    import inspect
    from pathlib import Path

    try:
        return f"{Path(inspect.getsourcefile(cls)).name}:{inspect.getsourcelines(cls)[1]}"
    except (OSError, TypeError):
        return "?"


def judge(observed: dict) -> str:
    envs = observed["sections"].get(NAME, {}).get("envs", [])
    end = observed["end"]
    faults = []
    if end.get("how") == "raised" and "Loc/Scale have not been initialized" in end.get("error", ""):
        faults.append(f"ObservationNorm was used before its statistics were set ({end['error']} at {end['site']}); "
                      "fix: call env.transform.init_stats(num_iter=...) on the env you train with (or pass loc= and scale=) before collecting")
    if not envs and not faults:
        raise sr.CheckSkipped("no TransformedEnv was built in the main process")
    used = 0
    for e in envs:
        name = f"TransformedEnv({e['base_cls']}, {'+'.join(e['transforms']) or 'no transform'}) built at {e['appended_at'] or e['site']}"
        # TransformedEnv(TransformedEnv(base, a), b) unwraps into a new env holding a and b:
        # the inner one is then unused but its transforms are not lost.
        merged = any(o is not e and o["base_id"] == e["base_id"] and (o["steps"] or o["resets"])
                     and set(e["transforms"]) <= set(o["transforms"]) for o in envs)
        if e["steps"] == 0 and e["resets"] == 0 and e["base_steps"] > 0 and not merged and e.get("by_user", True) and not e.get("init_stats"):
            how = "env.append_transform(...) returns a new TransformedEnv and leaves env unchanged" if e["appended_at"] else "the script steps the base env, not the TransformedEnv"
            faults.append(f"{name} was never stepped, while its base {e['base_cls']} was stepped {e['base_steps']} times without it: {how}; "
                          "fix: env = env.append_transform(...) (keep the return value) and hand that env to the collector")
            continue
        if e["steps"] or e["resets"]:
            used += 1
        if e["reset_skipped"] and e["resets"]:
            names = ", ".join(e["reset_skipped"])
            faults.append(f"{names} in {name} overrides _call but not _reset, and the env was reset {e['resets']} times: at each reset its "
                          "output is untransformed (Transform._reset returns the reset TensorDict unchanged, pytorch/rl#2595); fix: add to that "
                          "class def _reset(self, tensordict, tensordict_reset): return self._call(tensordict_reset)")
    faults += _init_stats_short(observed)
    faults += _own_statistics(envs)
    if faults:  # the workers of a SerialEnv share one fault: say it once, with the count
        counts = {f: faults.count(f) for f in faults}
        raise sr.CheckFailed(" | ".join(f if n == 1 else f"{n} envs: {f}" for f, n in counts.items()))
    if not used:
        raise sr.CheckSkipped("no TransformedEnv was stepped in the main process")
    need(max(e["steps"] for e in envs), MIN_STEPS, "TransformedEnvs in use", "steps")
    shown = Counter(f"{'+'.join(e['transforms'])} ({e['steps']} steps, {e['resets']} resets{'' if e.get('by_user', True) else ', built by torchrl at ' + e['site']}"
                    for e in envs if (e["steps"] or e["resets"]) and e["transforms"])
    workers = observed["meta"].get("workers", [])
    blind = f"; not counted: the envs inside the worker processes of {', '.join(workers)} (not instrumented)" if workers else ""
    return (f"{used} TransformedEnv(s) used, with the steps and resets each one ran (the sub-envs of a SerialEnv included): "
            + "; ".join(f"{text})" if n == 1 else f"{n} x {text} each)" for text, n in shown.items()) + blind)


def _init_stats_short(observed: dict) -> list[str]:
    """A fault per ``init_stats(num_iter=N)`` whose N is below the median length of the
    episodes the run ended (the time-limit row's section; at least MIN_EPISODES of them), unless
    the statistics it set were overwritten later (``load_state_dict``, ``loc.copy_``)."""
    calls = observed["sections"].get(NAME, {}).get("init_stats", [])
    tl = observed["sections"].get("time-limit", {})
    lengths = []
    for kind in ("terminated", "truncated"):
        for length, n in tl.get(kind, {}).items():
            lengths += [int(length)] * int(n)
    if not calls or len(lengths) < MIN_EPISODES:
        return []
    lengths.sort()
    median = lengths[len(lengths) // 2]
    return [f"ObservationNorm(in_keys={c['keys']}).init_stats(num_iter={c['num_iter']}) at {c['site']} took its statistics from "
            f"{c['num_iter']} steps, shorter than the episodes this run ended (median length {median} of {len(lengths)}, longest "
            f"{lengths[-1]}): it rolls out at most num_iter steps, so loc/scale describe only the first {c['num_iter']} steps of an "
            f"episode and later states are scaled far from unit; fix: init_stats(num_iter={lengths[-1]}) or more (a whole episode), "
            "or VecNormV2 (running statistics)" for c in calls if c["num_iter"] < median and not c.get("overwritten")]


def _own_statistics(envs: list[dict]) -> list[str]:
    """Faults for running normalizers of an env the user rolled out with a policy that are not
    frozen and keep statistics other than those of the most-stepped env of the same base class
    normalizing the same keys."""
    faults = []
    held = [(e, n) for e in envs if e["steps"] for n in e.get("running", []) if n["stats"]]
    for group in {(tuple(n["keys"]), e.get("base_cls")) for e, n in held}:
        same = [(e, n) for e, n in held if (tuple(n["keys"]), e.get("base_cls")) == group]
        main, main_norm = max(same, key=lambda pair: pair[0]["steps"])
        for e, n in same:
            if e is not main and e.get("rolled_out") and n["stats"] != main_norm["stats"] and not n["frozen"]:
                faults.append(
                    f"{n['cls']}(in_keys={list(group[0])}) of the TransformedEnv built at {e['site']} ({e['steps']} steps), rolled out "
                    f"with a policy, keeps running statistics of its own, not those of the one built at {main['site']} "
                    f"({main['steps']} steps): the policy's inputs there are scaled by statistics of that env's own steps (an "
                    "evaluation env built by the same factory, pytorch/rl#337's class); fix: before each evaluation, "
                    "eval_norm.load_state_dict(train_norm.state_dict()) then eval_norm.freeze() "
                    "(sub-skills/envs-and-transforms/references/evaluation-envs.md)")
    return faults
