"""Probes of check_user_env.py: small functions that look at a user's env and return facts.

Each probe returns plain data (lists, tuples, None) and raises nothing of its own; the
checks in check_user_env.py turn the facts into a pass or a named fault. Facts were
observed on torchrl 0.14.1 / tensordict 0.14.3 / gymnasium 1.4.0.
"""

from __future__ import annotations

import ast

# Constructors that start worker processes when called (torchrl 0.14.1 / gymnasium 1.x).
PROCESS_STARTERS = frozenset({
    "ParallelEnv", "MultiSyncCollector", "MultiAsyncCollector", "MultiSyncDataCollector",
    "MultiaSyncDataCollector", "AsyncCollector", "AsyncVectorEnv", "Process", "Pool",
})


def _is_main_guard(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    text = ast.unparse(node.test)
    return "__name__" in text and "__main__" in text


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def unguarded_process_starts(source: str | ast.Module) -> list[tuple[int, str]]:
    """``(line, name)`` of each PROCESS_STARTERS call that runs at import time: at module
    level, outside function and class bodies and outside ``if __name__ == "__main__":``
    (its ``else`` branch runs on import, so it is scanned)."""
    tree = ast.parse(source) if isinstance(source, str) else source
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return
        if _is_main_guard(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Call) and _call_name(node) in PROCESS_STARTERS:
            found.append((node.lineno, _call_name(node)))
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in tree.body:
        visit(stmt)
    return found


def root_spec_shapes(env) -> list[str]:
    """One line per root Composite spec whose shape is not ``env.batch_size``."""
    bad = []
    for name in ("full_observation_spec", "full_state_spec", "full_action_spec", "full_reward_spec", "full_done_spec"):
        spec = getattr(env, name)
        if spec.shape != env.batch_size:
            bad.append(f"env.{name}.shape={tuple(spec.shape)} vs env.batch_size={tuple(env.batch_size)}")
    return bad


def gym_vector_autoreset(env) -> str | None:
    """The AutoresetMode name when ``env`` (or the env under its transforms, or a copy of a
    started SerialEnv) wraps a gymnasium VectorEnv, else None.

    Attributes are read with ``vars()``: on torchrl 0.14.1 ``getattr(SerialEnv(...), "_env")``
    recurses until RecursionError, so nothing here may fall through to ``__getattr__``.
    """
    base = base_env(env)
    for candidate in [base, *(vars(base).get("_envs") or [])]:
        inner = vars(candidate).get("_env")
        mode = getattr(inner, "autoreset_mode", None) if inner is not None else None
        if mode is not None:
            return getattr(mode, "name", str(mode))
    return None


def base_env(env):
    """The env under every TransformedEnv layer of ``env``."""
    from torchrl.envs import TransformedEnv

    while isinstance(env, TransformedEnv):
        env = env.base_env
    return env


def transform_chain(env) -> list:
    """The transforms on ``env``, outermost TransformedEnv last, Compose flattened."""
    from torchrl.envs import Compose, TransformedEnv

    layers, out = [], []
    while isinstance(env, TransformedEnv):
        layers.append(env.transform)
        env = env.base_env

    def walk(t):
        if isinstance(t, Compose):
            for sub in t.transforms:
                walk(sub)
        else:
            out.append(t)

    for layer in reversed(layers):
        walk(layer)
    return out


def transforms_skipping_reset(env, reset_td) -> list[tuple[str, list[str]]]:
    """``(transform class, observation keys it changes)`` for each transform that changes
    observations at step but not at reset.

    A Transform whose class inherits ``Transform._reset`` (torchrl/envs/transforms/
    transforms.py, 0.14.1: it returns the reset output unchanged) leaves the reset output
    alone, even when its ``_call`` or ``_apply_transform`` rewrites observations at every
    step. The probe applies such a transform's ``_call`` to a copy of the reset output and
    reports the observation keys that it would change or add; a transform whose ``_call``
    raises on it is left out (nothing can be said).
    """
    import torch
    from torchrl.envs.transforms import Transform

    obs_keys = set(env.full_observation_spec.keys(True, True))
    found = []
    for t in transform_chain(env):
        if type(t)._reset is not Transform._reset:
            continue
        try:
            after = t._call(reset_td.clone())
        except Exception:  # a transform that needs step-only inputs: no verdict
            continue
        have = set(reset_td.keys(True, True))
        changed = []
        for key in after.keys(True, True):
            if key not in obs_keys:
                continue
            if key not in have or not torch.equal(after.get(key), reset_td.get(key)):
                changed.append(str(key))
        if changed:
            found.append((type(t).__name__, sorted(changed)))
    return found


def expected_mask_shape(action_spec) -> tuple[int, ...] | None:
    """The mask shape ``ActionMask`` accepts for ``action_spec`` (torchrl 0.14.1
    ``update_mask``): ``Categorical(n)`` [*shape, n]; ``OneHot``/``MultiOneHot`` the spec's
    own shape; ``MultiCategorical(nvec)`` [*shape[:-1], sum(nvec)] (one flag per value of
    each sub-action); None for any other spec."""
    from torchrl.data import Categorical, MultiCategorical, MultiOneHot, OneHot

    if isinstance(action_spec, MultiCategorical):
        nvec = action_spec.nvec
        return (*action_spec.shape[:-1], int(nvec.reshape(-1, nvec.shape[-1])[0].sum()))
    if isinstance(action_spec, (OneHot, MultiOneHot)):
        return tuple(action_spec.shape)
    if isinstance(action_spec, Categorical):
        return (*action_spec.shape, action_spec.n)
    return None


def _mask_error(action_spec, shape) -> str | None:
    """The error an all-True bool mask of ``shape`` meets over ``action_spec``, as ActionMask
    meets it: ``update_mask``, then one draw (a MultiCategorical takes a mask of any last
    dim and fails only when it samples); None when both work. Read from the live spec, so
    what it accepts (broadcasting, a Categorical's reshape of n flags) is the library's."""
    import torch

    spec = action_spec.clone()
    try:
        spec.update_mask(torch.ones(shape, dtype=torch.bool))
        spec.rand()
    except Exception as err:
        text = str(err).strip().splitlines()
        return f"{type(err).__name__}: {text[0] if text else ''}"
    return None


def action_mask_mismatch(env) -> str | None:
    """What is wrong with the mask an ``ActionMask`` on ``env`` reads, or None.

    The mask spec (observation or state spec, key ``mask_key``) must be bool, and a mask of
    its shape must work on the action spec (:func:`_mask_error`). The shape offered as the
    fix is :func:`expected_mask_shape`, and only when it works on that very spec.
    """
    import torch
    from torchrl.envs import ActionMask

    for t in transform_chain(env):
        if not isinstance(t, ActionMask):
            continue
        action_key, mask_key = t.in_keys
        action = env.full_action_spec[action_key]
        mask = None
        for spec in (env.full_observation_spec, env.full_state_spec):
            if mask_key in spec.keys(True, True):
                mask = spec[mask_key]
        if mask is None:
            continue
        if mask.dtype != torch.bool:
            return f"mask {mask_key!r} is {mask.dtype}; ActionMask needs torch.bool"
        error = _mask_error(action, tuple(mask.shape))
        if error is None:
            continue
        name = f"{type(action).__name__}{tuple(action.shape)}"
        want = expected_mask_shape(action)
        works = f"; it needs {want}" if want is not None and _mask_error(action, want) is None else ""
        return f"mask {mask_key!r} has shape {tuple(mask.shape)}: ActionMask over {name} raises {error}{works}"
    return None


def gym_flat_multidiscrete(env) -> str | None:
    """What a gymnasium ``MultiDiscrete`` env under ``env`` would receive from
    ``GymWrapper`` when that is not in its action space, else None.

    torchrl 0.11.0 (pytorch/rl#3342, still in 0.14.1) turns a 1-D ``MultiDiscrete(nvec)``
    with an ``"action_mask"`` observation shaped ``nvec`` into one ``Categorical``/``OneHot``
    over ``prod(nvec)`` and hands the gym env that flat index. Read by effect: a drawn
    action through ``GymWrapper.read_action`` (what ``_step`` passes on) against the gym
    ``action_space.contains``.
    """
    import numpy as np

    base = base_env(env)
    for candidate in [base, *(vars(base).get("_envs") or [])]:
        space = getattr(vars(candidate).get("_env"), "action_space", None)
        if type(space).__name__ != "MultiDiscrete" or not hasattr(candidate, "read_action"):
            continue
        spec = candidate.action_spec
        sent = candidate.read_action(spec.rand())
        if not space.contains(np.asarray(sent, dtype=space.dtype)):
            return (f"GymWrapper made the gym env's MultiDiscrete({np.asarray(space.nvec).tolist()}) action a "
                    f"{type(spec).__name__}{tuple(spec.shape)} and env.step hands the gym env {sent!r}, "
                    "which its action_space does not contain")
    return None


def copies_identical(td, keys) -> list[str]:
    """Keys (among ``keys``) whose value is the same in every copy along ``td``'s first
    batch dim (a SerialEnv/ParallelEnv batch); [] when any of them differs between copies."""
    import torch

    same = []
    for key in keys:
        value = td.get(key)
        if value.shape[0] < 2:
            return []
        if not all(torch.equal(value[0], value[i]) for i in range(1, value.shape[0])):
            return []
        same.append(str(key))
    return same


def done_steps(env, td) -> tuple[list[int], int]:
    """Rollout step indexes (time = last batch dim of ``td``) where any done key of ``env``
    is True under "next", and how many done events that makes over the batch."""
    import torch

    have = set(td.keys(True, True))
    flags = None
    for key in env.done_keys:
        nkey = ("next", *key) if isinstance(key, tuple) else ("next", key)
        if nkey in have:
            value = td.get(nkey).reshape(*td.batch_size, -1).any(-1)
            flags = value if flags is None else flags | value
    if flags is None:
        return [], 0
    per_step = flags.reshape(-1, td.batch_size[-1]).any(0)
    return torch.nonzero(per_step).flatten().tolist(), int(flags.sum())


def global_rng_after_set_seed(env, seed: int = 7) -> tuple[bool, bool, bool]:
    """Call ``env.set_seed(seed)`` from two different states of torch's global RNG and return
    ``(reseeded, equals_manual_seed, changed)``: ``reseeded`` when the global state after
    the call is the same both times (set_seed fixed it whatever it was before);
    ``equals_manual_seed`` when that state is the one ``torch.manual_seed(seed)`` gives;
    ``changed`` when set_seed moved the global state at all. The caller's global RNG state
    is restored. EnvBase.set_seed (torchrl/envs/common.py, 0.14.1) only calls _set_seed."""
    import torch

    saved = torch.get_rng_state()
    try:
        afters, changed = [], False
        for prior in (1234, 98765):
            torch.manual_seed(prior)
            torch.rand(3)
            before = torch.get_rng_state()
            env.set_seed(seed)
            after = torch.get_rng_state()
            changed |= not torch.equal(before, after)
            afters.append(after)
        torch.manual_seed(seed)
        reseeded = torch.equal(afters[0], afters[1])
        return reseeded, reseeded and torch.equal(afters[0], torch.get_rng_state()), changed
    finally:
        torch.set_rng_state(saved)


def episodes_from_rollout(td) -> list[tuple[int, bool, bool]]:
    """Whole episodes of a rollout made with break_when_any_done=False, as
    ``(length, terminated, truncated)`` read where done was set, for every batch element
    (batch dims flattened); the unfinished tail is left out. [] without a root done."""
    have = set(td.keys(True, True))
    if ("next", "done") not in have:
        return []
    t = td.batch_size[-1]

    def flag(name):
        if ("next", name) not in have:
            return None
        return td.get(("next", name)).reshape(*td.batch_size, -1).any(-1).reshape(-1, t).tolist()

    done, term, trunc = flag("done"), flag("terminated"), flag("truncated")
    episodes = []
    for i, row in enumerate(done):
        length = 0
        for step, is_done in enumerate(row):
            length += 1
            if is_done:
                episodes.append((length, bool(term[i][step]) if term else False, bool(trunc[i][step]) if trunc else False))
                length = 0
    return episodes


def fixed_terminal_length(episodes: list[tuple[int, bool, bool]]) -> int | None:
    """The step count L at which ``terminated`` ends episodes like a time limit, else None.

    Flagged only when near certain: at least 2 episodes end with terminated at exactly
    L >= 2 steps, none is longer (a cap), and they are at least half of all whole
    episodes. Real end states reached by random actions spread over many lengths; a
    1-step (bandit) task is left alone."""
    if not episodes:
        return None
    longest = max(length for length, _, _ in episodes)
    at_cap = sum(1 for length, term, _ in episodes if length == longest and term)
    if longest >= 2 and at_cap >= 2 and 2 * at_cap >= len(episodes):
        return longest
    return None


def step_against_specs(env, td) -> tuple[int, list, list[str]]:
    """``(number of spec leaves, missing ("next", key)s, problems)`` of one step's output
    ``td`` against every observation, reward and done leaf spec of ``env``: a dtype, a
    shape, or values outside the leaf's bounds (``spec.is_in``)."""
    have, missing, problems = set(td.keys(True, True)), [], []
    leaves = [kv for spec in (env.full_observation_spec, env.full_reward_spec, env.full_done_spec) for kv in spec.items(True, True)]
    for key, leaf in leaves:
        nkey = ("next", *key) if isinstance(key, tuple) else ("next", key)
        if nkey not in have:
            missing.append(nkey)
            continue
        value = td.get(nkey)
        if value.dtype != leaf.dtype:
            problems.append(f"{nkey} dtype {value.dtype} vs spec {leaf.dtype}")
        elif value.shape != leaf.shape:
            problems.append(f"{nkey} shape {tuple(value.shape)} vs spec {tuple(leaf.shape)}")
        elif not leaf.is_in(value):
            problems.append(f"{nkey} values outside the spec's bounds")
    return len(leaves), missing, problems


def seeded_rollout(env, seed: int, steps: int) -> list:
    """The float values of every spec'd observation, reward and done key under "next" of
    ``env.rollout(steps, break_when_any_done=False)`` after ``torch.manual_seed(seed)`` and
    ``env.set_seed(seed)``, in spec order ([] when the rollout holds none of them)."""
    import torch

    torch.manual_seed(seed)
    env.set_seed(seed)
    td = env.rollout(steps, break_when_any_done=False)
    keys = [(k if isinstance(k, tuple) else (k,)) for k in [*env.full_observation_spec.keys(True, True), *env.reward_keys, *env.done_keys]]
    have = set(td.keys(True, True))  # a LazyStackedTensorDict's keys view misses nested keys on `in`
    return [td.get(("next", *k)).float() for k in keys if ("next", *k) in have]


def spec_of(env, key):
    """The observation, reward or done leaf spec of ``key``, or None."""
    for full in (env.full_observation_spec, env.full_reward_spec, env.full_done_spec):
        if key in full.keys(True, True):
            return full[key]
    return None


def done_note(env, td, steps: int) -> str:
    """What rollout(steps, break_when_any_done=False) did at each done, so that a time limit
    (StepCounter(max_steps=50)) with --steps 60 does not look ignored."""
    at, count = done_steps(env, td)
    how = (f"env.rollout({steps}, break_when_any_done=False) resets every finished episode and keeps going, "
           f"so the batch is {steps} steps long whatever the time limit")
    if not count:
        return f"{how}; no done flag was set in these {steps} steps"
    shown = ", ".join(map(str, at[:6])) + (", ..." if len(at) > 6 else "")
    return (f"{how}; done was set {count} time(s), at step index(es) {shown} (each followed by a reset); "
            "a plain env.rollout(n) (break_when_any_done unset, read as True) would have stopped at the first one")
