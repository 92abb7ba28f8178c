"""What the LLM rows (l_*.py) share: one event per LLM loss call (child side).

Not a detector (no NAME): the first LLM row to install calls :func:`install` once; once
the target builds an LLM loss it wraps, with ``patches.wrap``,

- ``LLMWrapperBase.forward``: the optimizer-step count at the last call of a generating
  wrapper (``generate=True``), so that a loss call with no optimizer step since then is
  a first step on freshly generated data;
- ``GRPOLoss._log_weight``: the log-weights and the mask GRPOLoss's forward uses
  (torchrl/objectives/llm/grpo.py, 0.14.1), with the length of each row it scored;

and on every ``loss_forward`` of a GRPOLoss (or subclass) or SFTLoss it emits
``llm_batch(info)``: ``info`` holds ``loss``, ``td`` (the batch the user passed),
``out``, ``index`` (call number), ``grpo`` (bool), ``fresh`` (no optimizer step since
the last generation, or since the run began when no generating wrapper was seen),
``log_weight``/``mask`` and ``tokens``/``lengths`` (the rows the loss scored, after
its actor re-rendered them; GRPO only, else None), ``generator`` (the class name of the
last generating wrapper: ``TransformersWrapper``, ``vLLMWrapper``, ...; None when none was
seen). Listeners keep plain JSON.
"""

from __future__ import annotations

LIMIT = 200  # loss calls recorded per row: enough for a trend, small enough for the JSON


def install(hub) -> None:
    """Install the wrappers and the ``llm_batch`` event once per hub.

    Importing torchrl's LLM modules costs seconds, so nothing is imported here: the
    wrappers go in when the target builds its first LLM loss (``loss_built``), which means
    that generation calls made before any LLM loss exists are not seen (the first loss
    call then counts as fresh when no optimizer step was made yet)."""
    import sys

    if getattr(hub, "_llm_rows_installed", False):
        return
    hub._llm_rows_installed = True
    state = {"gen_step": None, "calls": 0, "capture": {}, "wrapped": False}

    def after_forward(wrapper, args, kwargs, out):
        if getattr(wrapper, "generate", False):
            state["gen_step"] = hub.meta["optimizer_steps"]
            state["gen_by"] = type(wrapper).__name__

    def after_log_weight(loss, args, kwargs, out):
        log_weight, _, _, mask = out
        td = args[0] if args else kwargs.get("tensordict")
        rows = td.get(loss.tensor_keys.action, None, as_list=True) if td is not None else None
        state["capture"][id(loss)] = (log_weight.detach(), mask.detach(), [r.reshape(-1) for r in rows] if rows else None)

    def on_built(loss, site):
        if state["wrapped"] or not type(loss).__module__.startswith("torchrl.objectives.llm"):
            return
        state["wrapped"] = True
        from torchrl.modules.llm.policies.common import LLMWrapperBase
        from torchrl.objectives.llm import GRPOLoss

        from .patches import wrap

        wrap(hub, LLMWrapperBase, "forward", after=after_forward)
        wrap(hub, GRPOLoss, "_log_weight", after=after_log_weight)

    def on_forward(loss, td, out):
        llm = sys.modules.get("torchrl.objectives.llm")
        if llm is None or state["calls"] >= LIMIT:
            return
        grpo = isinstance(loss, llm.GRPOLoss)
        if not (grpo or isinstance(loss, llm.SFTLoss)):
            return
        state["calls"] += 1
        steps = hub.meta["optimizer_steps"]
        since = state["gen_step"] if state["gen_step"] is not None else 0
        lw, mask, tokens = state["capture"].pop(id(loss), (None, None, None))
        hub.emit("llm_batch", {"loss": loss, "td": td, "out": out, "index": state["calls"], "grpo": grpo,
                               "fresh": steps == since, "generator": state.get("gen_by"), "log_weight": lw, "mask": mask, "tokens": tokens,
                               "lengths": [t.numel() for t in tokens] if tokens else None})

    hub.on("loss_built", on_built)
    hub.on("loss_forward", on_forward)


def seen(obs: dict, section: str) -> dict:
    """The row's section, or ``CheckSkipped`` when no LLM loss ran (parent side)."""
    from torchrl_skill.report import skill_report as sr

    sec = obs["sections"].get(section, {})
    if not sec.get("calls"):
        raise sr.CheckSkipped("no GRPOLoss or SFTLoss was called: no LLM training loop ran")
    return sec


def rows_of(td):
    """The batch as one row per sequence (a ``[prompts, samples]`` batch flattened)."""
    return td.reshape(-1) if td.ndim > 1 else td
