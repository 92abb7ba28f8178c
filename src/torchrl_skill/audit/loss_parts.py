"""Report a loss used through its parts (child side), for patches.install.

torchrl's TD3, TD3+BC, CrossQ and discrete IQL scripts call ``loss.value_loss(td)`` and
``loss.actor_loss(td)`` instead of ``loss(td)``; DDPG's parts are ``loss_value``/``loss_actor``
(torchrl 0.14.1, torchrl/objectives/). Each such public method of a ``LossModule`` subclass
is wrapped to emit ``loss_forward(loss, td, out)`` as ``loss(td)`` does, once per outermost
call (``forward`` calling ``actor_loss`` reports once, through ``__call__``).
"""

from __future__ import annotations

import functools


def _is_loss_part(name: str, fn) -> bool:
    """A public method that computes one part of a loss: ``value_loss``, ``actor_loss``,
    ``qvalue_loss`` (TD3, CrossQ, IQL, CQL, SAC), ``loss_value``/``loss_actor`` (DDPG)."""
    return (callable(fn) and not name.startswith(("_", "sync_", "set_", "make_"))
            and (name.endswith("_loss") or name.startswith("loss_")))


def install_loss_methods(hub, loss_base, state) -> None:
    """Report a loss used through its parts (``q_loss, _ = loss.value_loss(td)``, as torchrl's
    TD3, TD3+BC, CrossQ and discrete IQL scripts do) as ``loss_forward``, like ``loss(td)``: a
    part called inside another loss call (``forward`` calling ``actor_loss``) is not reported again.
    Classes defined after torchrl's import (the user's own losses) are reported through ``__call__``."""
    def make(orig):
        @functools.wraps(orig)
        def part(self, *args, **kwargs):
            stack = state().loss_stack
            stack.append(self)
            try:
                out = orig(self, *args, **kwargs)
            finally:
                stack.pop()
            if not stack and args and hub.active():
                hub.emit("loss_forward", self, args[0], out)
            return out

        part._audit_wrapped = True
        return part

    from .patches import _subclasses

    for klass in _subclasses(loss_base):
        for name, fn in list(klass.__dict__.items()):
            if _is_loss_part(name, fn) and not getattr(fn, "_audit_wrapped", False):
                setattr(klass, name, make(fn))
