"""The base env's side of each step: what the env that runs the task receives (child side).

Shared by the effect monitors that judge actions where they take effect (e_env_actions,
e_action_bounds) and by d_transforms (which counts the steps of the user's env classes
without wrapping them). ``install(hub)`` (once per hub) emits
``base_action(env, sampled, received, deterministic)`` for each step of a leaf env (one that
is neither a ``TransformedEnv`` nor a batched env), and ``leaf_step(env)`` for each step of a
leaf env that is not a ``GymLikeEnv`` (whatever its action):

- a ``GymLikeEnv`` (``GymEnv``, ``GymWrapper``, ``DMControlEnv``, ...): its ``_step`` reads
  the TensorDict's action and hands the library env ``read_action(action)``, i.e.
  ``full_action_spec.to_numpy(action)`` (torchrl/envs/gym_like.py 0.14.1); ``sampled`` is the
  action tensor given to ``read_action``, ``received`` what it returned (a numpy array or,
  for one discrete action, an int: ``GymWrapper.read_action``, torchrl/envs/libs/gym.py);
- any other leaf env (a user's ``EnvBase`` subclass, ``PendulumEnv``): the action its
  ``_step`` gets, both ``sampled`` and ``received``, read where torchrl calls it: the output
  of the ``TransformedEnv``'s ``transform.inv`` (``TransformedEnv._step`` hands its base env
  ``self.transform.inv(tensordict)``, torchrl/envs/transforms/_base.py), the input of a
  ``step`` called on the leaf env itself, or the row a ``SerialEnv._step`` hands each
  sub-env.

Only library classes are wrapped: a class of the user's script is pickled by value when a
worker process is spawned (cloudpickle), and a wrapper on it would not pickle.
``deterministic``: the step ran under ``ExplorationType.DETERMINISTIC``/``MODE``/``MEAN``
(an evaluation rollout), read from ``torchrl.envs.utils.exploration_type()``; in a
``ParallelEnv`` worker the policy runs in the main process, so it reads False there.
"""

from __future__ import annotations

import functools
import threading

_DETERMINISTIC = ("DETERMINISTIC", "MODE", "MEAN")
_local = threading.local()


def _chain(hub, cls, name: str, around) -> None:
    """Wrap ``cls.name`` (and overriding subclasses') once more, on top of patches.py's own
    wrapper: ``around(self)`` is a context manager entered for the call."""
    from .patches import _subclasses

    for klass in _subclasses(cls):
        orig = klass.__dict__.get(name)
        if orig is None or getattr(orig, "_audit_boundary", False):
            continue

        def make(orig):
            @functools.wraps(orig)
            def wrapper(self, *args, **kwargs):
                if not hub.active():
                    return orig(self, *args, **kwargs)
                with around(self):
                    return orig(self, *args, **kwargs)

            wrapper._audit_boundary = True
            return wrapper

        setattr(klass, name, make(orig))


class _Stepping:
    """The TransformedEnv whose ``_step`` runs on this thread, innermost last."""

    def __init__(self, env):
        self.env = env

    def __enter__(self):
        stack = _local.__dict__.setdefault("stepping", [])
        stack.append(self.env)

    def __exit__(self, *exc):
        _local.stepping.pop()


def install(hub) -> None:
    """Wrap the base-env entry points for ``hub`` (a second call on the same hub does nothing)."""
    shared = hub.__dict__.setdefault("_audit_shared", {})
    if shared.get("boundary"):
        return
    shared["boundary"] = True

    from torchrl.envs import EnvBase, SerialEnv, Transform, TransformedEnv
    from torchrl.envs.batched_envs import BatchedEnvBase
    from torchrl.envs.gym_like import GymLikeEnv
    from torchrl.envs.utils import exploration_type

    from .patches import wrap

    def deterministic() -> bool:
        kind = exploration_type()
        return kind is not None and getattr(kind, "name", str(kind)) in _DETERMINISTIC

    def leaf(env) -> bool:
        return isinstance(env, EnvBase) and not isinstance(env, (TransformedEnv, BatchedEnvBase, GymLikeEnv))

    def action_of(env, td):
        keys = env.action_keys
        return td.get(keys[0], None) if len(keys) == 1 and td is not None and hasattr(td, "get") else None

    def emit_leaf(env, td):
        if leaf(env):  # a GymLikeEnv's steps are counted on its own (library) class
            hub.emit("leaf_step", env)
        action = action_of(env, td)
        if action is not None:
            hub.emit("base_action", env, action, action, deterministic())

    # GymLikeEnv: what the library env's step gets, after the conversion
    def gym_step(env, a, k):
        if not getattr(env, "_convert_actions_to_numpy", True):  # the library env gets the tensor itself
            emit_leaf(env, a[0] if a else k.get("tensordict"))

    def gym_read(env, a, k, out):
        action = a[0] if a else k.get("action")
        if action is not None and not isinstance(action, dict):
            hub.emit("base_action", env, action, out, deterministic())

    wrap(hub, GymLikeEnv, "_step", before=gym_step, guard="audit-base-step")
    wrap(hub, GymLikeEnv, "read_action", after=gym_read)

    # a leaf env under a TransformedEnv: the output of the transform's inverse
    _chain(hub, TransformedEnv, "_step", _Stepping)

    def inv_after(transform, a, k, out):
        stack = _local.__dict__.get("stepping")
        if stack and stack[-1].transform is transform and leaf(stack[-1].base_env):
            emit_leaf(stack[-1].base_env, out)

    wrap(hub, Transform, "inv", after=inv_after, guard="audit-inv")

    # a leaf env stepped by the script (or a ParallelEnv worker) through step() or
    # step_and_maybe_reset() (which returns (tensordict, next root): the first holds the action)
    def on_step(env, out):
        if leaf(env):
            emit_leaf(env, out[0] if isinstance(out, tuple) else out)

    hub.on("env_step", on_step)

    # the leaf sub-envs of a SerialEnv, which it steps through their _step
    def serial_step(env, a, k):
        td = a[0] if a else k.get("tensordict")
        envs = getattr(env, "_envs", None) or []
        if td is None or not any(leaf(e) for e in envs):
            return
        mask = td.get("_step", None)
        rows = range(len(envs)) if mask is None else mask.reshape(-1).nonzero().reshape(-1).tolist()
        for j, i in enumerate(rows):
            if leaf(envs[i]):
                emit_leaf(envs[i], td[i] if mask is None else td[mask.reshape(-1)][j])

    wrap(hub, SerialEnv, "_step", before=serial_step, guard="audit-serial-step")
