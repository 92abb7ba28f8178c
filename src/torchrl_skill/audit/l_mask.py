"""llm-mask-coverage: does GRPO's mask cover exactly the responses?

For each GRPOLoss call it lays the mask the loss used (``GRPOLoss._log_weight``) over each
row's own tokens (left padding cut) and compares it with where the response sits: the
generation's ``("tokens", "prompt")``/``("tokens", "response")`` when the batch kept them,
else the last assistant message of ``("history", "full")`` rendered with the actor's chat
template (src/torchrl_skill/checks/llm/llm_parts.py). Faults: prompt tokens trained (masking_strategy
"generic"), padding trained, response tokens left out, tokens after the response trained
(template end-of-turn tokens the model never generated), rows with an empty mask.
SFTLoss calls are counted, not compared.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from . import l_tools

NAME = "llm-mask-coverage"


def install(hub) -> None:
    l_tools.install(hub)
    sec = hub.section(NAME)
    sec.update(calls=0, compared=0, rows=0, tokens=0, faults=[], unknown=0, eos_left=0)

    def on_batch(info):
        from torchrl_skill.checks.llm import llm_parts as parts

        sec["calls"] += 1
        if not info["grpo"] or info["mask"] is None or info["lengths"] is None:
            return
        loss, mask, lengths = info["loss"], info["mask"], info["lengths"]
        td = l_tools.rows_of(info["td"])
        actor = loss.actor_network
        tokens = info["tokens"]  # what the loss scored (its actor may re-render the history)
        try:
            spans = parts.response_spans(td, tokens, actor.tokenizer, actor)
        except sr.CheckFailed as err:
            if len(sec["faults"]) < 3:
                sec["faults"].append(f"call {info['index']}: {err}")
            return
        except Exception:
            sec["unknown"] += 1
            return
        sec["compared"] += 1
        width = mask.shape[-1]
        for i, (n, row) in enumerate(zip(lengths, spans)):
            got = {int(t) for t in mask[i, width - n:].nonzero().flatten()}
            pads = int(mask[i, : width - n].sum())
            want = {t for s in row for t in s.positions}
            eos = {s.start + s.length - 1 for s in row if s.eos}
            first = min(s.start for s in row)
            prompt = sum(1 for t in got if t < first)
            missing = len(want - got - eos)
            extra = len(got - want) - prompt
            sec["rows"] += 1
            sec["tokens"] += len(want & got)
            sec["eos_left"] += len(eos - got)
            if (prompt or missing or extra or pads or not got) and len(sec["faults"]) < 3:
                sec["faults"].append(f"call {info['index']} row {i}: {prompt} prompt tokens, {pads} padding positions and "
                                     f"{extra} tokens after the response in the mask, {missing} response tokens missing"
                                     f"{', an empty mask' if not got else ''} ({row[0].source})")

    hub.on("llm_batch", on_batch)


def judge(obs: dict) -> str:
    sec = l_tools.seen(obs, NAME)
    if sec["faults"]:
        raise sr.CheckFailed(
            f"GRPOLoss trains on other tokens than the responses: {'; '.join(sec['faults'])}; fix: "
            "GRPOLoss(actor, masking_strategy='rlhf') (assistant tokens of ('history', 'full')), or 'sft' with the "
            "generation's ('tokens', 'prompt') kept in the batch")
    if not sec["compared"]:
        raise sr.CheckSkipped(f"{sec['calls']} LLM loss calls, none a GRPO call whose responses could be located "
                              f"({sec['unknown']} without prompt/response tokens or an assistant turn)")
    note = f"; the generated end-of-turn token is outside the mask in {sec['eos_left']} rows" if sec["eos_left"] else ""
    return (f"{sec['compared']} GRPO calls: the mask covers exactly the {sec['tokens']} response tokens of {sec['rows']} rows, "
            f"no prompt token, no padding{note}")
