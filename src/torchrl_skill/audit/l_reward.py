"""llm-reward-variance: do the rewards of the LLM loop vary, over the run and within batches?

For each GRPOLoss/SFTLoss call whose batch holds ``("next", "reward")`` (what ChatEnv
reward transforms and LLMCollector write, shape ``[batch, 1, 1]`` per step) it keeps the
batch's reward mean and standard deviation (each row summed over its steps). Faults:
non-finite rewards; one value for every row of every batch (a constant reward: GRPO's
advantage is 0 everywhere); rewards that varied and then stopped varying in the last
three batches (the policy's samples became identical: entropy collapse).
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from . import l_tools

NAME = "llm-reward-variance"


def install(hub) -> None:
    l_tools.install(hub)
    sec = hub.section(NAME)
    sec.update(calls=0, means=[], stds=[], values=[], nonfinite=0, rows=0)

    def on_batch(info):
        import torch

        sec["calls"] += 1
        td = l_tools.rows_of(info["td"])
        rows = td.get(("next", "reward"), None, as_list=True)
        if rows is None or len(sec["means"]) >= l_tools.LIMIT:
            return
        r = torch.stack([row.float().sum() for row in rows])
        sec["nonfinite"] += int((~r.isfinite()).sum())
        r = r[r.isfinite()]
        sec["rows"] += r.numel()
        sec["means"].append(float(r.mean()) if r.numel() else 0.0)
        sec["stds"].append(float(r.std(unbiased=False)) if r.numel() else 0.0)
        for v in r.unique()[:3].tolist():  # up to 3 distinct values: enough to tell a constant reward
            if len(sec["values"]) < 3 and round(v, 6) not in sec["values"]:
                sec["values"].append(round(v, 6))

    hub.on("llm_batch", on_batch)


def judge(obs: dict) -> str:
    sec = l_tools.seen(obs, NAME)
    means, stds = sec["means"], sec["stds"]
    if not means:
        raise sr.CheckSkipped(f"{sec['calls']} LLM loss calls, none on a batch holding ('next', 'reward')")
    if sec["nonfinite"]:
        raise sr.CheckFailed(f"{sec['nonfinite']} rewards are not finite: the reward function returned nan/inf")
    if len(sec["values"]) == 1 and max(stds) == 0.0:
        raise sr.CheckFailed(
            f"every one of {sec['rows']} rewards over {len(means)} batches is {sec['values'][0]}: a constant reward, so "
            "GRPO's advantage is 0 everywhere and nothing learns; check the reward function on a few responses by hand")
    if len(stds) >= 6 and max(stds[:-3]) > 0 and max(stds[-3:]) == 0.0:
        raise sr.CheckFailed(f"the rewards varied within batches (std up to {max(stds[:-3]):.3g}) and then stopped in the "
                             "last 3 batches: the policy's samples became identical (entropy collapse); raise the "
                             "sampling temperature or the entropy bonus (GRPOLoss(entropy_coeff=...)), lower the learning rate")
    return (f"reward over {len(means)} batches: mean {means[0]:.3g} -> {means[-1]:.3g}, std within batches "
            f"{min(stds):.3g}..{max(stds):.3g}")
