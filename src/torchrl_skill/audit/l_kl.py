"""llm-kl-to-reference: does the KL to the reference stay bounded, and move at all?

For each GRPOLoss/SFTLoss call that computed a KL to a reference (``kl_to_ref_coeff``
set: the output's ``kl_to_ref``) it keeps the value and the optimizer-step count. Faults:
a non-finite KL; a KL still climbing at the end (the last third of the calls averages more
than 4x the first third plus 0.05 nats, each third above the one before, or any value above
10 nats): the coefficient is too small for the learning rate, and the policy walks away
from the reference; a KL of exactly 0 at every call after optimizer steps: the reference
is the policy itself (shared weights), so the penalty never acts.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from . import l_tools

NAME = "llm-kl-to-reference"
CEILING = 10.0  # nats: far beyond any KL a post-training run keeps on purpose


def install(hub) -> None:
    l_tools.install(hub)
    sec = hub.section(NAME)
    sec.update(calls=0, values=[], steps=[])

    def on_batch(info):
        sec["calls"] += 1
        kl = getattr(info["out"], "kl_to_ref", None)
        if kl is not None and len(sec["values"]) < l_tools.LIMIT:
            sec["values"].append(float(kl))
            sec["steps"].append(hub.meta["optimizer_steps"])

    hub.on("llm_batch", on_batch)


def judge(obs: dict) -> str:
    import math

    sec = l_tools.seen(obs, NAME)
    values, steps = sec["values"], sec["steps"]
    if not values:
        raise sr.CheckSkipped(f"{sec['calls']} LLM loss calls, none with a KL to a reference (no kl_to_ref_coeff)")
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    if bad:
        raise sr.CheckFailed(f"the KL to the reference is not finite at calls {bad[:5]}: log-probs of -inf/nan on the "
                             "reference's or the policy's side; check both with check_llm_wiring.py")
    after = [v for v, s in zip(values, steps) if s > 0]
    if after and len(after) >= 2 and all(v == 0.0 for v in after):
        raise sr.CheckFailed(f"the KL to the reference is exactly 0 at all {len(after)} calls after optimizer steps: the "
                             "reference moves with the policy (it shares its weights); fix: build the reference from its "
                             "own frozen copy of the initial weights")
    third = max(1, len(values) // 3)
    m1, m2, m3 = (sum(part) / len(part) for part in (values[:third], values[third:-third] or values[:third], values[-third:]))
    rising = len(values) >= 6 and m1 < m2 < m3 and m3 > 4 * m1 + 0.05
    if rising or max(values) > CEILING:
        raise sr.CheckFailed(
            f"the KL to the reference grew from {m1:.3g} to {m3:.3g} nats over {len(values)} calls (max {max(values):.3g}) "
            "and was still rising: the policy walks away from the reference; raise kl_to_ref_coeff or lower the learning rate")
    return f"KL to the reference over {len(values)} calls: {m1:.2e} -> {m3:.2e} nats (max {max(values):.2e}), bounded"
