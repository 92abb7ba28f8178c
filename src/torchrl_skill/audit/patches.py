"""Wrap torchrl and torch entry points so that each call reports to the hub (child side).

One job: turn library calls into hub events; what an event means is each detector's
business. Every wrapper calls the original method unchanged and returns its result; event
listeners run after it (or before, for budget checkpoints). Methods are wrapped on the
class named and on every already-imported subclass that overrides them, with a guard so
that a ``super()`` chain reports once. Names are those of torchrl 0.14.1 / torch 2.14.

Events (arguments): ``loss_built(loss, site)``, ``loss_forward(loss, td, out)`` (``loss(td)``, or one
of its parts called from outside the loss, ``loss.value_loss(td)``: ``out`` is then what that
method returned, often a ``(tensor, metadata)`` tuple),
``optimizer_pre_step(opt)``, ``optimizer_step(opt)``, ``updater_built(upd, site)``,
``updater_step(upd)``, ``collector_built(col, site)``, ``collector_batch(col, batch)``,
``env_built(env, site, by_user)``, ``env_step(env, td_out)``, ``env_reset(env, td_out)``,
``env_rollout(env, policy, td_out)`` (rollouts the user's code asked for), ``env_seed(env)``,
``transformed_step(env)`` / ``transformed_reset(env)`` (each ``TransformedEnv._step``/``_reset``:
also the sub-env steps a ``SerialEnv`` makes through ``_step``),
``global_reseed(env, seed, site, by_library, method)`` (``torch.manual_seed`` called under an
``EnvBase._set_seed`` or ``_reset``: emitted by d_env_seeding's own wrapper of it),
``append_transform(env, returned, site)``, ``estimator_call(est, td, loss)``,
``estimator_done(est, td, out, loss)`` (after it returned), ``zero_grad(opt, module)`` (an
``Optimizer.zero_grad`` or ``Module.zero_grad`` call), ``scheduler_step(scheduler)``,
``rb_built(rb, site)``, ``rb_extend(rb, data)``, ``rb_sample(rb, out)``,
``rb_user_priority(rb, method, site, error)`` (when the call ended: ``error`` is None, or
``"TypeName: message"`` for a call that raised), ``sampler_priority(sampler, priority,
in_extend, index)`` (after the call returned: an update that raised is not reported),
``rb_restored(rb)`` (``loads``/``load_state_dict``), ``explore_step(module, frames)``, ``td_read(td, key, site)``.
"""

from __future__ import annotations

import functools
import threading
import weakref

from .probe import AuditStop, caller_is_user, user_site

_local = threading.local()


def _state():
    if not hasattr(_local, "active"):
        _local.active = set()
        _local.env_depth = 0
        _local.loss_stack = []
        _local.loss_inputs = []  # the TensorDict each running loss was called with (e_policy_update reads it)
        _local.extend_depth = 0
    return _local


def _subclasses(cls) -> list:
    out, todo = [cls], [cls]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in out:
                out.append(sub)
                todo.append(sub)
    return out


def wrap(hub, cls, name: str, before=None, after=None, around=None, guard: str | None = None) -> None:
    """Wrap ``cls.name`` (and overriding subclasses'). ``before(self, args, kwargs)`` and
    ``after(self, args, kwargs, out)`` run on the outermost call of a ``super()`` chain;
    ``around`` is a context-manager factory ``around(self, args, kwargs)`` (outermost).
    ``guard``: methods sharing it count once when one calls the other on the same object."""
    for klass in _subclasses(cls):
        if name not in klass.__dict__ or getattr(klass.__dict__[name], "_audit_wrapped", False):
            continue
        orig = klass.__dict__[name]

        def make(orig):
            @functools.wraps(orig)
            def wrapper(self, *args, **kwargs):
                st = _state()
                key = (id(self), guard or name)
                if key in st.active or not hub.active():
                    return orig(self, *args, **kwargs)
                st.active.add(key)
                try:
                    if before is not None:
                        _guarded(hub, before, self, args, kwargs)
                    if around is not None:
                        with around(self, args, kwargs):
                            out = orig(self, *args, **kwargs)
                    else:
                        out = orig(self, *args, **kwargs)
                    if after is not None:
                        _guarded(hub, after, self, args, kwargs, out)
                    return out
                finally:
                    st.active.discard(key)

            wrapper._audit_wrapped = True
            return wrapper

        setattr(klass, name, make(orig))


def _guarded(hub, fn, *args):
    try:
        fn(*args)
    except AuditStop:
        raise
    except Exception as err:
        hub.probe_error(f"patch:{getattr(fn, '__name__', '?')}", err)


class _EnvCall:
    """Context for an env call: frames count only at the outermost env call of the thread."""

    def __init__(self):
        self.st = _state()

    def __enter__(self):
        self.st.env_depth += 1

    def __exit__(self, *exc):
        self.st.env_depth -= 1


def _numel(td) -> int:
    try:
        return int(td.batch_size.numel()) if len(td.batch_size) else 1
    except Exception:
        return 1


def _class_or_placeholder(hub, module: str, name: str):
    """``module.name``, or, when this torchrl/tensordict moved or dropped it (a newer line
    than the verified one), a placeholder class with no subclasses, so that :func:`wrap`
    patches nothing for it; recorded in ``hub.meta["uninstrumented"]`` for the run row.
    Only the classes a few rows read are taken this way; the core ones (EnvBase,
    LossModule, collectors, replay buffers) still stop the audit with one line."""
    import importlib

    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        hub.meta.setdefault("uninstrumented", {})[f"{name} ({module})"] = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
        return type(f"_Missing{name}", (), {})


def install(hub) -> None:
    """Patch the library for this process (call once, before the target runs)."""
    from tensordict import TensorDictBase
    from torchrl.collectors import BaseCollector
    from torchrl.data import ReplayBuffer, TensorDictReplayBuffer
    from torchrl.envs import EnvBase, TransformedEnv
    from torchrl.modules import tensordict_module as tm
    from torchrl.objectives import LossModule

    LazyStackedTensorDict = _class_or_placeholder(hub, "tensordict", "LazyStackedTensorDict")
    PrioritizedSampler = _class_or_placeholder(hub, "torchrl.data.replay_buffers.samplers", "PrioritizedSampler")
    TargetNetUpdater = _class_or_placeholder(hub, "torchrl.objectives.utils", "TargetNetUpdater")
    ValueEstimatorBase = _class_or_placeholder(hub, "torchrl.objectives.value", "ValueEstimatorBase")

    st = _state

    # --- optimizers: torch's global hooks see every built-in optimizer's step ----------
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(lambda opt, a, k: _opt_pre(hub, opt))
    register_optimizer_step_post_hook(lambda opt, a, k: hub.emit("optimizer_step", opt))
    import torch

    wrap(hub, torch.optim.Optimizer, "zero_grad", after=lambda s, a, k, o: hub.emit("zero_grad", s, None))
    wrap(hub, torch.nn.Module, "zero_grad", after=lambda s, a, k, o: hub.emit("zero_grad", None, s))
    wrap(hub, torch.optim.lr_scheduler.LRScheduler, "step", after=lambda s, a, k, o: hub.emit("scheduler_step", s))

    # --- losses -------------------------------------------------------------------------
    def loss_built(self, a, k):
        hub.mark_built(self)
        hub.emit("loss_built", self, user_site())

    wrap(hub, LossModule, "__init__", after=lambda s, a, k, o: loss_built(s, a, k))
    base_call = LossModule.__call__

    @functools.wraps(base_call)
    def loss_call(self, *args, **kwargs):
        stack, inputs = st().loss_stack, st().loss_inputs
        stack.append(self)
        inputs.append(args[0] if args else kwargs.get("tensordict"))
        try:
            out = base_call(self, *args, **kwargs)
        finally:
            stack.pop()
            inputs.pop()
        if not stack and args:
            hub.emit("loss_forward", self, args[0], out)
        return out

    LossModule.__call__ = loss_call
    from .loss_parts import install_loss_methods

    install_loss_methods(hub, LossModule, _state)

    wrap(hub, TargetNetUpdater, "__init__", after=lambda s, a, k, o: hub.emit("updater_built", s, user_site()))
    wrap(hub, TargetNetUpdater, "step", after=lambda s, a, k, o: hub.emit("updater_step", s))

    # --- value estimators ---------------------------------------------------------------
    est_call = ValueEstimatorBase.__call__

    @functools.wraps(est_call)
    def estimator_call(self, *args, **kwargs):
        if not (args and hub.active()):
            return est_call(self, *args, **kwargs)
        stack = st().loss_stack
        hub.emit("estimator_call", self, args[0], stack[-1] if stack else None)
        out = est_call(self, *args, **kwargs)
        hub.emit("estimator_done", self, args[0], out, stack[-1] if stack else None)
        return out

    ValueEstimatorBase.__call__ = estimator_call


    # --- collectors ---------------------------------------------------------------------
    def collector_built(self, a, k):
        hub.mark_built(self)
        workers = getattr(self, "num_workers", None)
        if isinstance(workers, int) and ("Multi" in type(self).__name__ or "Async" in type(self).__name__):
            hub.meta["workers"].append(f"{type(self).__name__}({workers} workers)")
        hub.emit("collector_built", self, user_site())

    wrap(hub, BaseCollector, "__init__", after=lambda s, a, k, o: collector_built(s, a, k))
    for klass in _subclasses(BaseCollector):
        if "__iter__" in klass.__dict__:
            klass.__iter__ = _wrap_iter(hub, klass.__dict__["__iter__"])

    # --- envs ---------------------------------------------------------------------------
    def env_built(self, a, k):
        hub.mark_built(self)
        if type(self).__name__ == "ParallelEnv":
            hub.meta["workers"].append(f"ParallelEnv({getattr(self, 'num_workers', '?')} workers)")
        hub.emit("env_built", self, user_site(), caller_is_user())

    def env_before_step(self, a, k):
        # Stop only where the user's code asks for data, never inside torchrl's own calls
        # (an env constructor probing its specs, a collector in the middle of a batch).
        if st().env_depth == 0 and caller_is_user():
            hub.checkpoint(collecting=True)

    def env_after_step(self, a, k, out):
        if st().env_depth == 0:
            hub.add_frames(_numel(self), "env")
        hub.emit("env_step", self, out)

    def rollout_before(self, a, k):
        if caller_is_user():
            hub.checkpoint(collecting=True)

    def rollout_after(self, a, k, out):
        if not caller_is_user():  # torchrl's own probing rollouts (spec checks) are not collection
            return
        if out is not None:
            hub.add_frames(_numel(out), "env")
        policy = k.get("policy", a[1] if len(a) > 1 else None)
        hub.emit("env_rollout", self, policy, out)

    wrap(hub, EnvBase, "__init__", after=lambda s, a, k, o: env_built(s, a, k))
    for name in ("step", "step_and_maybe_reset"):
        wrap(hub, EnvBase, name, before=env_before_step, after=env_after_step, around=lambda s, a, k: _EnvCall(), guard="step")
    wrap(hub, EnvBase, "rollout", before=rollout_before, after=rollout_after, around=lambda s, a, k: _EnvCall())
    wrap(hub, EnvBase, "reset", after=lambda s, a, k, out: hub.emit("env_reset", s, out))
    # Every step and reset of a TransformedEnv runs its _step/_reset, also where a batched env
    # drives its sub-envs directly (SerialEnv calls each sub-env's _step, not its step).
    wrap(hub, TransformedEnv, "_step", after=lambda s, a, k, o: hub.emit("transformed_step", s))
    wrap(hub, TransformedEnv, "_reset", after=lambda s, a, k, o: hub.emit("transformed_reset", s))
    wrap(hub, EnvBase, "set_seed", after=lambda s, a, k, o: hub.emit("env_seed", s))
    def appended(self, a, k, out):
        if caller_is_user():
            hub.emit("append_transform", self, out, user_site())

    wrap(hub, EnvBase, "append_transform", after=appended)

    # --- replay buffers -----------------------------------------------------------------
    def rb_built(self, a, k):
        hub.mark_built(self)
        hub.emit("rb_built", self, user_site())

    def extend_around(self, a, k):
        return _Depth("extend_depth")

    wrap(hub, ReplayBuffer, "__init__", after=lambda s, a, k, o: rb_built(s, a, k))
    wrap(hub, ReplayBuffer, "extend", after=lambda s, a, k, o: hub.emit("rb_extend", s, a[0] if a else k.get("data")), around=extend_around)
    wrap(hub, ReplayBuffer, "sample", after=lambda s, a, k, out: hub.emit("rb_sample", s, out))
    for name in ("loads", "load_state_dict"):  # a buffer restored from a checkpoint (its priorities too)
        wrap(hub, ReplayBuffer, name, after=lambda s, a, k, o: hub.emit("rb_restored", s), guard="restore")
    for klass, meth in ((ReplayBuffer, "update_priority"), (TensorDictReplayBuffer, "update_tensordict_priority")):
        wrap(hub, klass, meth, around=_user_priority(hub, meth))
    wrap(hub, PrioritizedSampler, "update_priority",
         after=lambda s, a, k, o: hub.emit("sampler_priority", s, a[1] if len(a) > 1 else k.get("priority"), st().extend_depth > 0,
                                           a[0] if a else k.get("index")))

    # --- exploration modules ------------------------------------------------------------
    for name in ("EGreedyModule", "AdditiveGaussianModule", "OrnsteinUhlenbeckProcessModule"):
        klass = getattr(tm, name, None)
        if klass is not None:
            wrap(hub, klass, "step", after=lambda s, a, k, o: hub.emit("explore_step", s, a[0] if a else k.get("frames", 1)))

    # --- reads of collected data by user code (episode statistics) ------------------------
    for klass in (TensorDictBase, LazyStackedTensorDict):
        _wrap_reads(hub, klass)


def _opt_pre(hub, opt):
    hub.checkpoint(collecting=False)
    hub.meta["optimizer_steps"] += 1
    hub.emit("optimizer_pre_step", opt)


def _user_priority(hub, meth):
    """``around`` for a buffer's priority update: reports a call from user code when it ends,
    with the error it raised (a call that raised updated nothing)."""

    class Around:
        def __init__(self, rb):
            self.rb = rb
            self.site = user_site() if caller_is_user() else None

        def __enter__(self):
            return self

        def __exit__(self, kind, err, tb):
            if self.site is not None and (kind is None or issubclass(kind, Exception)):
                error = None if kind is None else f"{kind.__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
                _guarded(hub, lambda: hub.emit("rb_user_priority", self.rb, meth, self.site, error))
            return False

    return lambda self, a, k: Around(self)


class _Depth:
    def __init__(self, attr):
        self.attr = attr

    def __enter__(self):
        setattr(_state(), self.attr, getattr(_state(), self.attr) + 1)

    def __exit__(self, *exc):
        setattr(_state(), self.attr, getattr(_state(), self.attr) - 1)


def _wrap_iter(hub, orig):
    @functools.wraps(orig)
    def __iter__(self):
        gen = orig(self)
        last_frames = getattr(self, "_frames", 0)
        try:
            while True:
                hub.checkpoint(collecting=True)
                try:
                    batch = next(gen)
                except StopIteration:
                    return
                if hub.active():
                    if batch is not None:
                        hub.add_frames(_numel(batch), "collector")
                    else:  # a replay buffer took the batch: count the collector's own frames
                        frames = getattr(self, "_frames", last_frames)
                        hub.add_frames(max(0, frames - last_frames), "collector")
                        last_frames = frames
                    hub.emit("collector_batch", self, batch)
                yield batch
        finally:
            gen.close()

    __iter__._audit_wrapped = True
    return __iter__


WATCHED: dict[int, weakref.ref] = {}
_READ_KEYS = frozenset({"done", "terminated", "truncated", "reward"})


def watch(td) -> None:
    """Report user-code reads of root done/reward keys on ``td`` (collected data)."""
    try:
        WATCHED[id(td)] = weakref.ref(td)
    except TypeError:
        pass
    if len(WATCHED) > 64:  # keep the most recent batches only
        for key in list(WATCHED)[:-64]:
            WATCHED.pop(key, None)


def _wrap_reads(hub, klass):
    for name in ("__getitem__", "get"):
        orig = klass.__dict__.get(name)
        if orig is None or getattr(orig, "_audit_wrapped", False):
            continue

        def make(orig):
            @functools.wraps(orig)
            def read(self, key, *args, **kwargs):
                if WATCHED and key.__class__ is str and key in _READ_KEYS and not getattr(_local, "reading", False):
                    ref = WATCHED.get(id(self))
                    if ref is not None and ref() is self and caller_is_user():
                        _local.reading = True
                        try:
                            hub.emit("td_read", self, key, user_site())
                        finally:
                            _local.reading = False
                return orig(self, key, *args, **kwargs)

            read._audit_wrapped = True
            return read

        setattr(klass, name, make(orig))


def frames_of(obj) -> int:
    return _numel(obj)

