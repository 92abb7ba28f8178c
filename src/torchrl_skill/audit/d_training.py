"""training: did the audited run train at all, and when may it stop?

A run in which no optimizer stepped audited nothing about training: the target-network,
optimizer-coverage and exploration rows have nothing to judge, and an "OK" would be a
false proof. This row counts the optimizer steps, the frame of the first one, and every
collector's ``init_random_frames`` (the frames it collects with a random policy before the
script starts training: torchrl's own DDPG/SAC/TD3 configs set 25,000 and more, so a short
audit can end inside them). With no optimizer step the row is a SKIP whose detail says what
was seen and what budget to ask for, and audit_run.py exits 5 (``EXIT_NOTHING_TRAINED``),
as pytest exits 5 when it collected nothing.

Early stop (child side): without ``--max-frames``, the run stops at a collection call once
training has started and every detector that saw its component has its verdict
(``evidence.readiness``: none is short of its minimum evidence, at least one has a verdict).
The check runs at most once a second, on sections the summarisers refresh (no file write),
marked ``live`` (``evidence.live``: a trend near its fault line is not a verdict yet), with
the reports of the worker processes merged in as the parent merges them; while a started
worker process has not reported as instrumented (booting, importing torchrl) the run goes
on, for up to WORKER_BOOT_S. A component first used after that point (an evaluation env
every N frames) is not seen: ``--max-frames N`` runs to N frames.

Facts (torchrl 0.14.1, torchrl/collectors/_single.py): ``Collector(...,
init_random_frames=N)`` keeps ``init_random_frames`` and ``frames_per_batch`` as attributes
and acts with a ``RandomPolicy`` until N frames were collected.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

NAME = "training"
EXIT_NOTHING_TRAINED = 5
BATCHES_PAST_RANDOM = 10  # the budget asked for: init_random_frames plus this many batches
WORKER_BOOT_S = 30.0  # the early stop waits this long for a started worker process to report


class NothingTrained(sr.CheckSkipped):
    """No optimizer stepped in the audited run (audit_run.py exits EXIT_NOTHING_TRAINED)."""


def install(hub) -> None:
    from .probe import user_site
    from .tdtools import ObjectKeys

    sec = hub.section(NAME)
    key_of = ObjectKeys()
    collectors: dict = {}
    first: dict = {"frame": None, "s": None, "site": None}

    def on_collector(col, site):
        collectors[key_of(col)] = {
            "cls": type(col).__name__, "site": site,
            "init_random_frames": int(getattr(col, "init_random_frames", 0) or 0),
            "frames_per_batch": int(getattr(col, "requested_frames_per_batch", getattr(col, "frames_per_batch", 0)) or 0),
        }

    def on_pre_step(opt):
        if first["frame"] is None:
            first.update(frame=hub.meta["frames"], s=round(hub.elapsed(), 3), site=user_site())

    hub.on("collector_built", on_collector)
    hub.on("optimizer_pre_step", on_pre_step)
    hub.summariser(lambda: sec.update(collectors=list(collectors.values()), first_step=dict(first)))
    if hub.max_frames is None and not getattr(hub, "is_worker", False):  # the audited process owns the budget
        _stop_when_every_verdict_is_in(hub)


def _stop_when_every_verdict_is_in(hub, every: float = 1.0) -> None:
    """At most once per ``every`` seconds of collection calls, judge every detector on fresh
    sections (``hub.payload()`` runs the summarisers, no file is written); once training
    started and no detector is short of evidence, stop at the next collection call. Wraps
    this hub's ``checkpoint`` (an instance attribute: patches.py calls it there)."""
    import importlib

    from . import DETECTORS
    from .evidence import readiness

    modules = [importlib.import_module(f"torchrl_skill.audit.{name}") for name in DETECTORS if name != __name__.rpartition(".")[2]]
    state = {"ready": False, "last": 0.0}
    checkpoint = hub.checkpoint

    def judged_ready() -> bool:
        if not hub.meta["optimizer_steps"] or hub.elapsed() - state["last"] < every:
            return False
        state["last"] = hub.elapsed()
        observed = _with_worker_reports(hub, {**hub.payload(), "end": {"how": "running"}, "live": True}, modules)
        if observed is None:  # a worker process has not reported yet: its events are not in
            return False
        verdicts = {m.NAME: readiness(m, observed) for m in modules}
        if False in verdicts.values() or True not in verdicts.values():
            return False
        hub.meta["verdicts_in"] = {"frames": hub.meta["frames"], "s": round(hub.elapsed(), 3),
                                   "rows": sorted(n for n, v in verdicts.items() if v)}
        return True

    def checkpoint_or_stop(collecting: bool):
        if collecting and hub.stop_reason is None and hub.active() and (state["ready"] or judged_ready()):
            state["ready"] = True
            hub.stop_reason = "verdicts"
        return checkpoint(collecting)

    hub.checkpoint = checkpoint_or_stop


def _with_worker_reports(hub, observed: dict, modules: list) -> dict | None:
    """``observed`` with the worker processes' reports merged as the parent merges them
    (worker_reports.py), on a copy; None while a started worker has not reported as
    instrumented yet (it is booting or importing torchrl), unless WORKER_BOOT_S passed since
    its start (a ``forkserver`` worker never reports: the run row names it). Without worker
    processes, ``observed`` itself."""
    import json
    import time

    from . import worker_reports

    folder = getattr(hub, "workers_dir", None)
    reports = worker_reports.collect(folder) if folder and hub.meta.get("processes") else []
    started = list(hub.meta.get("processes", [])) + [p for r in reports for p in r["meta"].get("processes", [])]
    if not started:
        return observed
    ready = {r["meta"].get("pid") for r in reports if r["meta"].get("instrumented")}
    now = time.time()  # wall clock: a worker's own processes were stamped by its hub, whose start differs
    if any(p["pid"] not in ready and now - p.get("t", 0.0) < WORKER_BOOT_S for p in started):
        return None
    observed = json.loads(json.dumps(observed, default=str))
    observed["worker_reports"] = reports
    worker_reports.merge(observed, modules)
    return observed


def _budget(meta: dict, sec: dict) -> str:
    """The budget to ask for: past the largest init_random_frames by BATCHES_PAST_RANDOM batches."""
    cols = sec.get("collectors", [])
    random = max((c["init_random_frames"] for c in cols), default=0)
    batch = max((c["frames_per_batch"] for c in cols), default=0) or 1000
    frames = max(random + BATCHES_PAST_RANDOM * batch, 2 * meta["frames"], 1000)
    text = f"--max-frames {frames}"
    span = (meta.get("last_frame_s") or 0) - (meta.get("first_frame_s") or 0)
    if meta["frames"] and span > 0:
        seconds = 30 * round((frames / (meta["frames"] / span) * 1.5 + (meta.get("first_frame_s") or 0)) / 30 + 1)
        text += f" --seconds {seconds} (at the {meta['frames'] / span:.0f} frames/s seen)"
    return text


def judge(observed: dict) -> str:
    meta, sec = observed["meta"], observed["sections"].get(NAME, {})
    steps, frames = meta["optimizer_steps"], meta["frames"]
    cols = sec.get("collectors", [])
    if steps == 0:
        random = [c for c in cols if c["init_random_frames"] and meta.get("collector_frames", frames) <= c["init_random_frames"]]
        seen = f"no optimizer stepped in {frames} frames ({meta.get('elapsed_s', 0):.1f} s)"
        if random:
            c = random[0]
            why = (f"the run ended inside init_random_frames={c['init_random_frames']} of the {c['cls']} built at {c['site']} "
                   f"(it acts at random until then and the script trains after)")
        elif observed.get("end", {}).get("how") == "finished":
            why = "the target ended without calling optimizer.step()"
        else:
            why = "the script had not started training when the budget ran out (a warm-up, or updates every N batches)"
        raise NothingTrained(f"{seen}: {why}; nothing about training was audited (target-network, optimizer-coverage and "
                             f"exploration judge training); ask for a budget past it: {_budget(meta, sec)}")
    first = sec.get("first_step") or {}
    random = [f"init_random_frames={c['init_random_frames']} of the {c['cls']} at {c['site']}" for c in cols if c["init_random_frames"]]
    start = f"the first at frame {first['frame']} ({first['site']})" if first.get("frame") is not None else "the first seen"
    return f"{steps} optimizer steps over {frames} frames, {start}" + (f", after {', '.join(random)}" if random else "")
