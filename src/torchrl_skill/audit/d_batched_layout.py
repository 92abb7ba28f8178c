"""batched-layout: do value estimators and trajectory samplers get real trajectories?

Every call of a value estimator (``GAE``, ``TD0Estimator``, ``TD1Estimator``,
``TDLambdaEstimator``, ``VTrace``), standalone or from inside a loss, is measured along the
estimator's time dim: at how many steps t the state handed on at t (``("next", obs)``) is
not the state at t+1 while no done flag marks an episode end. Data laid out as
trajectories has none; [env, time] data flattened to [env*time] (pytorch/rl#1522) has one
per env boundary, where the estimator bootstraps one env's last step from another env's
first; shuffled minibatches break almost everywhere. The same measure runs on what a
``SliceSampler`` (or ``PrioritizedSliceSampler``) returns: slices that cross trajectories
come from storage extended with interleaved one-step batches (``data.reshape(-1)`` of
[env, 1] collector output, pytorch/rl#3194).

It also tells when ``ClipPPOLoss``/``A2CLoss``/``PPOLoss`` computed advantages itself: it
does so whenever its input lacks ``loss.tensor_keys.advantage`` (torchrl/objectives/ppo.py
0.14.1, on a shallow copy, so each call recomputes), with its own estimator and defaults;
if the script also ran an estimator of its own, the loss ignored that result
(pytorch/rl#2462).

Minimum evidence: MIN_POSITIONS time steps measured (estimator inputs and slices together).
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from .evidence import need

NAME = "batched-layout"
MIN_POSITIONS = 16


def install(hub) -> None:
    from .probe import user_site
    from .tdtools import continuity_breaks

    sec = hub.section(NAME)
    estimators: dict[int, dict] = {}
    samplers: dict[int, dict] = {}
    layouts: set = set()
    rb_sites: dict[int, str] = {}
    loss_sites: dict[int, str] = {}

    def on_estimator(est, td, loss):
        info = estimators.setdefault(id(est), {
            "cls": type(est).__name__, "calls": 0, "in_loss": 0, "loss": None, "breaks": 0, "positions": 0,
            "shapes": [], "gamma": _num(getattr(est, "gamma", None)), "lmbda": _num(getattr(est, "lmbda", None)),
            "advantage_key": str(getattr(getattr(est, "tensor_keys", None), "advantage", "?")),
        })
        info["calls"] += 1
        if loss is None and not info.get("site"):
            info["site"] = user_site()
        if loss is not None:
            info["in_loss"] += 1
            info["loss"] = {"cls": type(loss).__name__, "advantage_key": str(getattr(getattr(loss, "tensor_keys", None), "advantage", "?")),
                            "site": loss_sites.get(id(loss), "?")}
        if info["calls"] > 50 and info["calls"] % 10:
            return  # measured often enough
        shape = list(td.batch_size)
        if shape not in info["shapes"] and len(info["shapes"]) < 4:
            info["shapes"].append(shape)
        net = getattr(est, "value_network", None)
        only = set(getattr(net, "in_keys", []) or []) or None
        b, p = continuity_breaks(td, est._get_time_dim(None, td) if hasattr(est, "_get_time_dim") else td.batch_dims - 1, only)
        info["breaks"] += b
        info["positions"] += p

    def on_sample(rb, out):
        sampler = getattr(rb, "_sampler", None)
        if sampler is None or "Slice" not in type(sampler).__name__ or out is None or not hasattr(out, "batch_size"):
            return
        info = samplers.setdefault(id(rb), {"cls": type(sampler).__name__, "samples": 0, "breaks": 0, "positions": 0, "site": rb_sites.get(id(rb), "?"),
                                            "slice_len": getattr(sampler, "slice_len", None), "num_slices": getattr(sampler, "num_slices", None),
                                            "storage_ndim": getattr(getattr(rb, "_storage", None), "ndim", None)})
        info["samples"] += 1
        if info["samples"] > 20:
            return
        td = out[0] if isinstance(out, tuple) else out
        length = info["slice_len"] or (td.numel() // info["num_slices"] if info["num_slices"] else None)
        if not length or td.batch_dims != 1 or td.numel() % length:
            return
        b, p = continuity_breaks(td.reshape(-1, length), 1)
        info["breaks"] += b
        info["positions"] += p

    def on_batch(col, batch):
        if batch is not None:
            layouts.add(tuple(batch.batch_size))

    def summarise():
        sec["estimators"] = list(estimators.values())
        sec["samplers"] = list(samplers.values())
        sec["collector_shapes"] = [list(s) for s in sorted(layouts)][:4]

    hub.on("rb_built", lambda rb, site: rb_sites.__setitem__(id(rb), site))
    hub.on("loss_built", lambda loss, site: loss_sites.__setitem__(id(loss), site))
    hub.on("estimator_call", on_estimator)
    hub.on("rb_sample", on_sample)
    hub.on("collector_batch", on_batch)
    hub.summariser(summarise)


def _num(x):
    try:
        return round(float(x), 4)
    except (TypeError, ValueError):
        return None


def judge(observed: dict) -> str:
    sec = observed["sections"].get(NAME, {})
    ests, samplers = sec.get("estimators", []), [s for s in sec.get("samplers", []) if s["positions"]]
    if not ests and not samplers:
        raise sr.CheckSkipped("no value estimator call and no slice sampler")
    need(sum(e["positions"] for e in ests) + sum(s["positions"] for s in samplers), MIN_POSITIONS,
         "value estimator calls and slice samples", "time steps measured")
    shapes = sec.get("collector_shapes", [])
    faults, notes = [], []
    standalone = [e for e in ests if e["calls"] > e["in_loss"]]
    for e in ests:
        name = f"{e['cls']}(gamma={e['gamma']}, lmbda={e['lmbda']})"
        rate = e["breaks"] / e["positions"] if e["positions"] else 0.0
        if e["in_loss"] and (standalone and e not in standalone):
            mine = standalone[0]
            faults.append(
                f"{e['loss']['cls']} (built at {e['loss'].get('site', '?')}) computed advantages itself on {e['in_loss']} calls with its own {name}, over the script's own "
                f"{mine['cls']}(gamma={mine['gamma']}, lmbda={mine['lmbda']}) called at {mine.get('site', '?')} that writes {mine['advantage_key']!r}: the batches the loss got lack "
                f"{e['loss']['advantage_key']!r} (loss.tensor_keys.advantage); fix: compute advantages on the batch the loss reads, with the key it reads "
                f"(loss.set_keys(advantage={mine['advantage_key']!r}) or the estimator's set_keys), or configure the loss's own with loss.make_value_estimator(...)")
        elif e["in_loss"] and rate > 0.01:
            faults.append(
                f"{e['loss']['cls']} (built at {e['loss'].get('site', '?')}) computed advantages itself ({name}) on {e['in_loss']} calls whose batches are not trajectories: at "
                f"{e['breaks']} of {e['positions']} steps the next state is not the following step's state and no done marks it (shuffled "
                f"minibatches lack {e['loss']['advantage_key']!r}); fix: run the estimator on the collector's [env, time] batch before sampling minibatches")
        elif rate > 0.0 and e["breaks"]:
            faults.append(
                f"{name} ran at {e.get('site', '?')} on {e['shapes']} data although the collector produced {shapes or 'trajectories'}: at {e['breaks']} of {e['positions']} "
                "steps along its time dim the next state is not the following step's state and no done marks the boundary, so advantages flow "
                "across envs/trajectories (pytorch/rl#1522); fix: call the estimator on the collector's [env, time] batch, before reshape(-1) or rb.extend")
        else:
            where = f" inside {e['loss']['cls']}" if e["in_loss"] else ""
            notes.append(f"{name}{where}: {e['calls']} calls on {e['shapes']}, trajectories intact")
    for s in samplers:
        if s["breaks"]:
            faults.append(
                f"{s['cls']} of the buffer built at {s.get('site', '?')} returned slices that cross trajectories at {s['breaks']} of {s['positions']} steps (storage ndim={s['storage_ndim']}): "
                "the storage holds interleaved envs (one-step batches flattened before extend, pytorch/rl#3194); fix: extend with the collector's "
                "[env, time] batches (frames_per_batch = num_envs * T, T >= slice_len) unflattened into LazyTensorStorage(size, ndim=2)")
        else:
            notes.append(f"{s['cls']}: {s['samples']} samples, slices intact")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    return "; ".join(notes)
