"""llm-zero-advantage-groups: how many GRPO groups carry no learning signal?

For each GRPOLoss call it reads the advantage of every row and groups rows by prompt (the
generation's ``("tokens", "prompt")``, else the messages before the last of
``("history", "full")``; src/torchrl_skill/checks/llm/llm_parts.py). A group whose advantages are all 0 (its
rewards were all equal: MCAdvantage's (r - mean) / std is 0) contributes no gradient: its
generation and scoring were spent for nothing. The run fails when no group of any batch
had a signal (nothing can learn); otherwise the row says what share of the groups were
flat (DAPO's dynamic sampling, ``MCAdvantage(keep_return_bounds=...)``, drops them).
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from . import l_tools

NAME = "llm-zero-advantage-groups"


def install(hub) -> None:
    l_tools.install(hub)
    sec = hub.section(NAME)
    sec.update(calls=0, batches=0, groups=0, flat=0, rows=0, flat_rows=0, sizes=[], unread=0)

    def on_batch(info):
        from torchrl_skill.checks.llm import llm_parts as parts

        sec["calls"] += 1
        if not info["grpo"]:
            return
        td = l_tools.rows_of(info["td"])
        values = td.get(info["loss"].tensor_keys.advantage, None, as_list=True)
        try:
            keys = parts.prompt_keys(td)
        except sr.CheckFailed:
            keys = None
        if values is None or keys is None:
            sec["unread"] += 1
            return
        adv = [float(v.abs().max()) if v.numel() else 0.0 for v in values]
        sec["batches"] += 1
        for group in parts.groups_of(keys):
            sec["groups"] += 1
            sec["rows"] += len(group)
            if len(sec["sizes"]) < 8 and len(group) not in sec["sizes"]:
                sec["sizes"].append(len(group))
            if all(adv[i] == 0.0 for i in group):
                sec["flat"] += 1
                sec["flat_rows"] += len(group)

    hub.on("llm_batch", on_batch)


def judge(obs: dict) -> str:
    sec = l_tools.seen(obs, NAME)
    if not sec["batches"]:
        raise sr.CheckSkipped(f"{sec['calls']} LLM loss calls, none a GRPO batch with an advantage and prompts to group by")
    share = f"{sec['flat']} of {sec['groups']} groups ({sec['flat_rows']} of {sec['rows']} rows)"
    if sec["flat"] == sec["groups"]:
        raise sr.CheckFailed(
            f"every group had all-equal rewards, so every advantage was 0: {share} over {sec['batches']} batches, "
            "no learning signal at all; the reward does not separate the samples of a prompt (a constant or "
            "saturated reward, a reward key the env never writes); fix the reward, or sample more per prompt")
    sizes = ", ".join(map(str, sec["sizes"]))
    return f"{share} had all-equal rewards (zero advantage: no signal from them) over {sec['batches']} batches; group sizes {sizes}"
