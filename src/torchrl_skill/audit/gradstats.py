"""Gradient and parameter norms per optimizer step, shared by e_non_finite and e_grad_norms (child side).

``install(hub)`` (once per hub) listens to torch's optimizer step hooks (patches.py) and, on
sampled steps (each of the first EVERY_UNTIL steps, then every EVERY-th), emits:

- ``grad_norms(opt, step, names, norms)`` before the step: the L2 norm of each optimized
  tensor's ``.grad`` (tensors without one are left out), one fused ``torch._foreach_norm``
  call, nothing copied;
- ``param_norms(opt, step, names, norms)`` after the step: the same for the tensors.

``step`` is the run's optimizer-step count (``hub.meta["optimizer_steps"]``). A norm is
non-finite exactly when a value of its tensor is (or when the finite values overflow
float32, about 1.8e38: broken just as surely). ``names``: ``"SACLoss.qvalue_network_params.
module.0.weight"`` for a tensor of a loss module the script built (loss.named_parameters()),
else ``"Adam #1 group 0 tensor 3 (64, 4)"``. ``network(name)`` is the loss's network
(``"SACLoss.qvalue_network_params"``) or the optimizer's group.
"""

from __future__ import annotations

EVERY_UNTIL, EVERY = 100, 10


def network(name: str) -> str:
    """The network a tensor name belongs to: its first two dotted parts, or its group."""
    if " tensor " in name:
        return name.split(" tensor ", 1)[0]
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else name


def sampled(step: int) -> bool:
    return step <= EVERY_UNTIL or step % EVERY == 0


def install(hub) -> None:
    shared = hub.__dict__.setdefault("_audit_shared", {})
    if shared.get("gradstats"):
        return
    shared["gradstats"] = True

    import weakref

    import torch

    names: dict[int, str] = {}
    opt_index: dict[int, int] = {}
    losses: list = []

    def on_loss(loss, site):
        losses.append(weakref.ref(loss))

    def label_all():
        for ref in losses:
            loss = ref()
            if loss is not None:
                for n, p in loss.named_parameters():
                    names.setdefault(id(p), f"{type(loss).__name__}.{n}")
        losses.clear()

    def collect(opt, grads: bool):
        if losses:
            label_all()
        k = opt_index.setdefault(id(opt), len(opt_index) + 1)
        tensors, labels = [], []
        for g, group in enumerate(opt.param_groups):
            for i, p in enumerate(group["params"]):
                t = p.grad if grads else p
                # torch._foreach_norm takes floating tensors only: a script may hand its
                # optimizer an integer buffer (a step counter), which has no gradient norm
                if t is None or t.is_sparse or not (t.is_floating_point() or t.is_complex()):
                    continue
                tensors.append(t.detach())
                labels.append(names.get(id(p)) or f"{type(opt).__name__} #{k} group {g} tensor {i} {tuple(p.shape)}")
        return tensors, labels

    def emit(event, opt, grads: bool):
        step = hub.meta["optimizer_steps"]
        if not sampled(step):
            return
        tensors, labels = collect(opt, grads)
        if not tensors:
            return
        with torch.no_grad():
            norms = torch.stack([n.float().cpu() for n in torch._foreach_norm(tensors)]).tolist()
        hub.emit(event, opt, step, labels, norms)

    hub.on("loss_built", on_loss)
    hub.on("optimizer_pre_step", lambda opt: emit("grad_norms", opt, True))
    hub.on("optimizer_step", lambda opt: emit("param_norms", opt, False))
