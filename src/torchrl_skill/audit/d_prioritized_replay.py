"""prioritized-replay: are the priorities of a prioritized buffer updated, and sane?

For every replay buffer whose sampler is a ``PrioritizedSampler`` (or
``PrioritizedSliceSampler``) it counts ``sample()`` calls, the priority updates the script
makes (``rb.update_priority(index, priority)`` or ``rb.update_tensordict_priority(batch)``)
and the values that reach the sampler; a call that raised updated nothing and is not counted
(its error is kept for the row). Faults: sampled but never updated (every item keeps the
default priority, so sampling is uniform and the importance weights constant); updated with
negative or NaN values (``(priority + eps) ** alpha`` of a negative priority: NaN for a
fractional alpha, negative for alpha 1, positive for alpha 2); most updates give one value
to every sampled index (the batch's mean loss, a scalar, an ``expand``ed tensor), so
priorities say nothing about which item is worth replaying.

Minimum evidence: MIN_SAMPLES ``sample()`` calls.

Facts (torchrl 0.14.1, torchrl/data/replay_buffers/samplers/prioritized.py):
``update_priority`` with a negative value stores NaN without an error for a fractional alpha,
and the next ``sample()`` fails far from the cause with "OverflowError: Range exceeds valid
bounds"; for alpha 1 the stored value is negative and ``sample()`` raises "non-positive p_min",
for alpha 2 it is positive and nothing ever fails (tests/test_audit_facts.py,
tests/test_root_claims.py). Public report: pytorch/rl#1129 (priorities that did not
change what was sampled).
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from .evidence import need

NAME = "prioritized-replay"
MIN_SAMPLES = 8


def install(hub) -> None:
    import torch

    from .probe import user_site

    sec = hub.section(NAME)
    buffers: dict[int, dict] = {}
    by_sampler: dict[int, int] = {}

    def info_for(rb):
        sampler = getattr(rb, "_sampler", None)
        if sampler is None or "Prioritized" not in type(sampler).__name__:
            return None
        by_sampler[id(sampler)] = id(rb)
        return buffers.setdefault(id(rb), {"cls": type(rb).__name__, "sampler": type(sampler).__name__, "samples": 0, "site": sites.get(id(rb), "?"),
                                           "updates": 0, "update_sites": [], "values": 0, "negative": 0, "nan": 0,
                                           "min": None, "max": None, "sampler_updates": 0, "one_value": 0, "raised": 0, "error": None})

    def on_sample(rb, out):
        info = info_for(rb)
        if info is not None:
            info["samples"] += 1

    def on_user_update(rb, method, site, error=None):
        info = info_for(rb)
        if info is None:
            return
        if error is not None:
            info["raised"] += 1
            info["error"] = info["error"] or f"{error} (at {site})"
            return
        info["updates"] += 1
        if site not in info["update_sites"] and len(info["update_sites"]) < 3:
            info["update_sites"].append(site)

    def on_priority(sampler, priority, in_extend, index=None):
        info = buffers.get(by_sampler.get(id(sampler), -1))
        if info is None or in_extend or priority is None:
            return
        p = torch.as_tensor(priority).detach().float().reshape(-1)
        n_index = torch.as_tensor(index).numel() if index is not None else p.numel()
        info["sampler_updates"] += 1
        if n_index >= 2 and p.numel() and bool((p == p[0]).all()):
            info["one_value"] += 1
        info["values"] += p.numel()
        info["negative"] += int((p < 0).sum())
        info["nan"] += int(p.isnan().sum())
        finite = p[p.isfinite()]
        if finite.numel():
            lo, hi = float(finite.min()), float(finite.max())
            info["min"] = lo if info["min"] is None else min(info["min"], lo)
            info["max"] = hi if info["max"] is None else max(info["max"], hi)

    sites: dict[int, str] = {}
    losses: set[str] = set()

    def on_restored(rb):
        info = info_for(rb)
        if info is not None:
            info["restored"] = info.get("restored", 0) + 1
            info["restored_at"] = info.get("restored_at") or user_site()

    def summarise():
        sec["buffers"] = list(buffers.values())
        if buffers and "DQNLoss" in losses and "priority_form" not in sec:
            sec["priority_form"] = dqn_priority_form(hub)

    def on_built(rb, site):
        sites[id(rb)] = site
        info_for(rb)

    hub.on("rb_built", on_built)
    hub.on("rb_sample", on_sample)
    hub.on("rb_user_priority", on_user_update)
    hub.on("sampler_priority", on_priority)
    hub.on("rb_restored", on_restored)
    hub.on("loss_built", lambda loss, site: losses.add(type(loss).__name__))
    hub.summariser(summarise)


def dqn_priority_form(hub=None) -> dict:
    """What DQNLoss writes under its priority key, read from the live library (child side):
    a 2-row batch where Q(s, a) = 0 and the target is a terminal reward of 3, so the entry
    is 3 for an absolute TD error and 9 for a squared one. ``{"key", "shape", "form"}``
    (shape with B for the batch), or ``{"error": ...}``. The probe's own loss is hidden from
    the other rows: ``hub``'s events are dropped while it runs."""
    quiet = hub is not None and "emit" not in vars(hub)
    if quiet:
        hub.emit = hub.mark_built = lambda *a, **k: None
    try:
        import torch
        from tensordict import TensorDict
        from torch import nn
        from torchrl.data import OneHot
        from torchrl.modules import QValueActor
        from torchrl.objectives import DQNLoss

        spec = OneHot(2)
        net = nn.Linear(1, 2, bias=False)
        nn.init.zeros_(net.weight)
        loss = DQNLoss(QValueActor(net, in_keys=["observation"], spec=spec), action_space=spec, delay_value=False)
        flag = torch.ones(2, 1, dtype=torch.bool)
        td = TensorDict({"observation": torch.ones(2, 1), "action": torch.tensor([[1, 0], [1, 0]]),
                         "next": {"observation": torch.ones(2, 1), "reward": torch.full((2, 1), 3.0), "done": flag, "terminated": flag}}, [2])
        with torch.no_grad():
            loss(td)
        key = loss.tensor_keys.priority
        value = td.get(key)
        form = {3.0: "the absolute TD error |Q - target|", 9.0: "the squared TD error (Q - target)^2"}.get(round(float(value.reshape(-1)[0]), 4), f"{float(value.reshape(-1)[0]):g} for a TD error of 3")
        return {"key": str(key), "shape": "[" + ", ".join("B" if i == 0 else str(n) for i, n in enumerate(value.shape)) + "]", "form": form}
    except Exception as err:  # a probe that cannot run leaves the fix text without it
        return {"error": f"{type(err).__name__}: {err}"[:160]}
    finally:
        if quiet:
            del hub.emit, hub.mark_built


def _written(observed: dict) -> str:
    """"DQNLoss writes 'td_error': the squared TD error (Q - target)^2, shape [B, 1] (measured)", or ""."""
    f = observed["sections"].get(NAME, {}).get("priority_form") or {}
    if "key" not in f:
        return ""
    return f" (DQNLoss writes '{f['key']}' into the sampled batch: {f['form']}, shape {f['shape']}, read from torchrl at run time)"


def _g(x) -> str:
    return "?" if x is None else f"{x:.3g}"


def judge(observed: dict) -> str:
    buffers = [b for b in observed["sections"].get(NAME, {}).get("buffers", []) if b["samples"]]
    if not buffers:
        raise sr.CheckSkipped("no prioritized replay buffer was sampled")
    faults, notes = [], []
    if not any(b["negative"] or b["nan"] for b in buffers):  # a negative priority is a fault at once
        need(max(b["samples"] for b in buffers), MIN_SAMPLES, "prioritized replay buffers", "sample() calls")
    for b in buffers:
        name = f"{b['cls']} with {b['sampler']} (built at {b.get('site', '?')})"
        raised = (f"; {b['raised']} update calls raised and updated nothing (the first: {b['error']})" if b.get("raised") else "")
        sites = ", ".join(b["update_sites"]) or "?"
        if b["negative"] or b["nan"]:
            faults.append(f"{name}: {b['negative']} negative and {b['nan']} NaN priorities of {b['values']} given (min {_g(b['min'])}): (priority + eps) ** alpha "
                          "of a negative value is NaN for a fractional alpha (the next sample() then fails with 'OverflowError: Range exceeds valid "
                          "bounds'), negative for alpha 1, positive for alpha 2 (no error: silently wrong priorities); fix: pass td_error.abs() (or clamp_min(0)) as the priority")
        elif not b["updates"] and b.get("restored"):  # the premise (items at the default priority) does not hold
            notes.append(f"{name}: restored at {b['restored_at']} (rb.loads / load_state_dict), so its priorities came from the checkpoint; "
                         f"{b['samples']} samples and no priority update seen in this run: not judged")
            continue
        elif not b["updates"]:
            faults.append(f"{name} was sampled {b['samples']} times and its priorities never updated{raised}: every item keeps the default priority, so "
                          "sampling is uniform and the importance weights constant; fix: after the loss, rb.update_priority(batch['index'], "
                          "td_error.abs()) or, with a TensorDictPrioritizedReplayBuffer, rb.update_tensordict_priority(batch)" + (_written(observed) or " (the loss writes its error under loss.tensor_keys.priority)"))
        elif b.get("one_value", 0) >= max(2, 0.8 * b.get("sampler_updates", 0)):
            faults.append(f"{name}: {b['one_value']} of its {b['sampler_updates']} priority updates (at {sites}) gave one value for every sampled index "
                          "(a batch's mean loss, a scalar, an expanded tensor): priorities then say nothing about which item is worth replaying; "
                          "fix: pass the per-item error, rb.update_priority(batch['index'], td_error.abs()) with td_error of shape [batch] "
                          "(the loss writes it into the sampled batch: loss.tensor_keys.priority), or rb.update_tensordict_priority(batch) "
                          "right after the loss call, without overwriting it")
        else:
            notes.append(f"{name}: {b['samples']} samples, {b['updates']} priority updates (at {sites}; priorities {_g(b['min'])} to {_g(b['max'])}){raised}")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    judged = [n for n in notes if not n.endswith("not judged")]
    if not judged:
        raise sr.CheckSkipped("; ".join(notes))
    return "; ".join(notes)
