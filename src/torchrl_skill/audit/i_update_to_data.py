"""info:update-to-data: how many gradient updates the run made per collected frame, and on what.

Information, never a fault. It counts each optimizer's steps (torch.optim step pre-hooks),
every ``ReplayBuffer.sample`` and the size of what it returned, and the loss classes built.
The ratio is the most-stepped optimizer's steps over collected frames: an actor and a critic
optimizer stepped once each per update count as one update (summing them doubled the ratio,
seen in a newcomer trial on the DDPG script of pytorch/rl#1181).

For an off-policy loss with FAR_BELOW times fewer updates per frame than torchrl's own
configs, or sample batches under SMALL_BATCH elements, the row adds that reference point
(REFERENCES). pytorch/rl#1181 (DDPG "worse than Stable-Baselines3") sampled batches of 1
and updated once per 200 frames.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

NAME = "info:update-to-data"
# Reference points from torchrl's own training configs (pytorch/rl at ae9719f, 2026):
# (loss classes, updates per collected frame, sample batch size, where it comes from).
REFERENCES = [
    ({"DDPGLoss", "SACLoss", "TD3Loss", "TD3BCLoss", "REDQLoss", "CrossQLoss", "CQLLoss", "IQLLoss"},
     1.0, 256, "sota-implementations/{ddpg,sac,td3}/config.yaml: utd_ratio 1.0, batch_size 256"),
    ({"DQNLoss", "DistributionalDQNLoss", "DiscreteSACLoss", "DiscreteCQLLoss", "DiscreteIQLLoss"},
     0.1, 128, "sota-implementations/dqn/config_cartpole.yaml: num_updates 100 per 1000 frames, batch_size 128"),
]
FAR_BELOW = 10.0  # the note appears when the run's ratio is this many times below the reference
SMALL_BATCH = 16  # or when sampled batches are smaller than this


def install(hub) -> None:
    from .tdtools import ObjectKeys

    sec = hub.section(NAME)
    key_of = ObjectKeys()
    optimizers: dict[int, dict] = {}
    samples = {"n": 0, "min": None, "max": None}
    losses: list[str] = []

    def on_step(opt):
        entry = optimizers.get(key_of(opt))
        if entry is None:
            tensors = sum(len(g["params"]) for g in opt.param_groups)
            entry = optimizers[key_of(opt)] = {"label": f"{type(opt).__name__} #{len(optimizers) + 1} ({tensors} tensors)", "steps": 0}
        entry["steps"] += 1

    def on_sample(rb, out):
        data = out[0] if isinstance(out, tuple) else out
        size = getattr(data, "batch_size", None)
        size = int(size.numel()) if size is not None else (len(data) if hasattr(data, "__len__") else None)
        if size is None:
            return
        samples["n"] += 1
        samples["min"] = size if samples["min"] is None else min(samples["min"], size)
        samples["max"] = size if samples["max"] is None else max(samples["max"], size)

    def on_loss(loss, site):
        if type(loss).__name__ not in losses:
            losses.append(type(loss).__name__)

    def summarise():
        sec.update(optimizers=list(optimizers.values()), samples=dict(samples), losses=list(losses))

    hub.on("optimizer_pre_step", on_step)
    hub.on("rb_sample", on_sample)
    hub.on("loss_built", on_loss)
    hub.summariser(summarise)


def judge(observed: dict) -> str:
    meta, sec = observed["meta"], observed["sections"].get(NAME, {})
    opts = sec.get("optimizers", [])
    updates = max((o["steps"] for o in opts), default=meta["optimizer_steps"])
    if not meta["frames"] or not updates:
        raise sr.CheckSkipped("no frames collected or no optimizer step")
    ratio = updates / meta["frames"]
    per = "; ".join(f"{o['label']}: {o['steps']}" for o in opts)
    text = f"{ratio:.3g} optimizer steps per frame ({updates} steps / {meta['frames']} frames)"
    if len(opts) > 1:
        text += f", counting the most-stepped of {len(opts)} optimizers ({per})"
    s = sec.get("samples") or {}
    if s.get("n"):
        size = f"{s['min']}" if s["min"] == s["max"] else f"{s['min']}..{s['max']}"
        text += f"; {s['n']} replay-buffer samples of {size} elements each"
    small = bool(s.get("n")) and s["max"] < SMALL_BATCH
    for classes, per_frame, batch, source in REFERENCES:
        used = [name for name in sec.get("losses", []) if name in classes]
        if used and (ratio * FAR_BELOW < per_frame or small):
            text += (f"; low for {', '.join(used)}: torchrl's own configs run an update-to-data ratio of about {per_frame:g} "
                     f"on sampled batches of {batch} ({source}); raise the updates per collected batch or the replay buffer's batch_size")
            break
    return text
