"""The base env's side of each step: what the env that runs the task receives (child side).

Shared by the effect monitors that judge actions where they take effect (e_env_actions,
e_action_bounds). ``install(hub)`` (once per hub) emits
``base_action(env, sampled, received, deterministic)`` for each step of a leaf env:

- a ``GymLikeEnv`` (``GymEnv``, ``GymWrapper``, ``DMControlEnv``, ...): its ``_step`` reads
  the TensorDict's action and hands the library env ``read_action(action)``, i.e.
  ``full_action_spec.to_numpy(action)`` (torchrl/envs/gym_like.py 0.14.1); ``sampled`` is the
  action tensor given to ``read_action``, ``received`` what it returned (a numpy array or,
  for one discrete action, an int: ``GymWrapper.read_action``, torchrl/envs/libs/gym.py);
- any other env that is neither a ``TransformedEnv`` nor a batched env (a user's
  ``EnvBase`` subclass, ``PendulumEnv``): the action its ``_step`` reads, which is both
  ``sampled`` and ``received``. Its class's ``_step`` is wrapped when its first instance is
  built (user classes are defined after the library is instrumented).

``deterministic``: the step ran under ``ExplorationType.DETERMINISTIC``/``MODE``/``MEAN``
(an evaluation rollout), read from ``torchrl.envs.utils.exploration_type()``; in a
``ParallelEnv`` worker the policy runs in the main process, so it reads False there.
Steps of envs in worker processes are seen where the workers are instrumented (workers.py).
"""

from __future__ import annotations

import threading

_DETERMINISTIC = ("DETERMINISTIC", "MODE", "MEAN")
_local = threading.local()


def install(hub) -> None:
    """Wrap the base-env entry points for ``hub`` (a second call on the same hub does nothing)."""
    shared = hub.__dict__.setdefault("_audit_shared", {})
    if shared.get("boundary"):
        return
    shared["boundary"] = True

    from torchrl.envs import EnvBase, TransformedEnv
    from torchrl.envs.batched_envs import BatchedEnvBase
    from torchrl.envs.gym_like import GymLikeEnv
    from torchrl.envs.utils import exploration_type

    from .patches import wrap

    def deterministic() -> bool:
        kind = exploration_type()
        return kind is not None and getattr(kind, "name", str(kind)) in _DETERMINISTIC

    def action_of(env, td):
        keys = env.action_keys
        return td.get(keys[0], None) if len(keys) == 1 and td is not None else None

    def gym_step(env, a, k):
        if not getattr(env, "_convert_actions_to_numpy", True):  # the library env gets the tensor itself
            action = action_of(env, a[0] if a else k.get("tensordict"))
            if action is not None:
                hub.emit("base_action", env, action, action, deterministic())

    def gym_read(env, a, k, out):
        action = a[0] if a else k.get("action")
        if action is not None and not isinstance(action, dict):
            hub.emit("base_action", env, action, out, deterministic())

    wrap(hub, GymLikeEnv, "_step", before=gym_step, guard="audit-base-step")
    wrap(hub, GymLikeEnv, "read_action", after=gym_read)

    def leaf_step(env, a, k):
        action = action_of(env, a[0] if a else k.get("tensordict"))
        if action is not None:
            hub.emit("base_action", env, action, action, deterministic())

    wrapped: set = set()

    def on_built(env, site, by_user=True):
        if isinstance(env, (TransformedEnv, BatchedEnvBase, GymLikeEnv)):
            return
        owner = next((k for k in type(env).__mro__ if "_step" in k.__dict__), None)
        if owner is None or owner is EnvBase or owner in wrapped:
            return
        wrapped.add(owner)
        wrap(hub, owner, "_step", before=leaf_step, guard="audit-base-step")

    hub.on("env_built", on_built)
