"""episode-stats: does the script read episode ends or rewards from the root of collected data?

Collected data (collector batches, ``env.rollout`` outputs) is watched: when user code reads
``data["done"]``, ``"terminated"``, ``"truncated"`` or ``"reward"`` at the root, it compares
that entry with the one under ``("next", ...)``. The root holds the state *before* each step
(its done flags are those of the previous step, False after every reset); the step's own
done flags and reward are under ``"next"``. Fault: a root read whose value differs from the
``"next"`` one (e.g. root done true on 0 frames where ``("next", "done")`` is true on 5), so
episode counts, lengths or returns logged from it are wrong.

Facts (torchrl 0.14.1): a ``Collector`` batch has ``done``/``terminated``/``truncated`` at the
root and under ``"next"``, and ``reward`` only under ``"next"`` (tests/test_audit_facts.py).
Public reports: pytorch/rl#937 (reset handling and the root done), pytorch/rl#1932 (no
"reward" at the root).

Minimum evidence: MIN_BATCHES batches of collected data handed to the script (a script that
logs every few batches reads there).
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from .evidence import need

NAME = "episode-stats"
MIN_BATCHES = 3


def install(hub) -> None:
    from . import patches

    sec = hub.section(NAME)
    reads: dict = {}

    def on_read(td, key, site):
        info = reads.get((key, site))
        if info is None:
            if len(reads) >= 20:
                return
            info = reads[(key, site)] = {"key": key, "site": site, "count": 0, "differs": False, "root": 0.0, "next": 0.0,
                                         "frames": 0, "last": None}
        info["count"] += 1
        if info["last"] == id(td):  # the same batch read again
            return
        info["last"] = id(td)
        root, nxt = td.get(key, None), td.get(("next", key), None)
        if root is None or nxt is None or root.shape != nxt.shape:
            return
        info["differs"] = info["differs"] or not bool((root == nxt).all())
        info["root"] = round(info["root"] + float(root.float().sum()), 3)
        info["next"] = round(info["next"] + float(nxt.float().sum()), 3)
        info["frames"] += td.numel()

    def watch(td):
        if td is not None:
            sec["watched"] = sec.get("watched", 0) + 1
            patches.watch(td)

    hub.on("collector_batch", lambda col, batch: watch(batch))
    hub.on("env_rollout", lambda env, policy, td: watch(td))
    hub.on("td_read", on_read)
    hub.summariser(lambda: sec.__setitem__("reads", [{k: v for k, v in r.items() if k != "last"} for r in reads.values()]))


def judge(observed: dict) -> str:
    reads = observed["sections"].get(NAME, {}).get("reads", [])
    bad = [r for r in reads if r["differs"]]
    if bad:
        raise sr.CheckFailed(" | ".join(
            f"{r['site']} reads data[{r['key']!r}] of collected data ({r['count']} times): over those {r['frames']} frames it sums to "
            f"{r['root']:g} while data['next', {r['key']!r}] sums to {r['next']:g}; the root holds the state before each step (done is false "
            f"after every reset), the step's own value is under 'next'; fix: at {r['site']} replace data[{r['key']!r}] with data['next', {r['key']!r}] "
            "(episode ends and rewards are under 'next')" for r in bad))
    if reads:
        return "root reads that match ('next', ...): " + ", ".join(f"{r['key']} at {r['site']}" for r in reads)
    watched = observed["sections"].get(NAME, {}).get("watched", 0)
    if not watched:
        raise sr.CheckSkipped("no collected data reached the script (no collector batch, no env.rollout)")
    need(watched, MIN_BATCHES, "collected data", "batches handed to the script")
    return "no root read of done/terminated/truncated/reward on collected data"
