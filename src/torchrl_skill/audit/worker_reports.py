"""Parent side of the worker instrumentation (workers.py): read the workers' reports, fold them into the rows.

``collect(folder)`` reads the ``worker-PID.json`` files the worker hubs wrote in the
runner's temporary folder; ``merge(observed, modules)`` folds the worker sections of the
rows that measure what happens only inside a worker (env builds, steps, resets, seeding:
a module's own ``merge_workers(main, workers)``, or ``MERGERS``) into the main process's.
Rows built on collected data are not merged: every batch a worker collects reaches the
main process, which measures it there (merging would count it twice). It also adds the
comparison of first resets of envs built one per collector worker
(identical-workers), and records which started processes reported (``notes`` words it for
the run row).
"""

from __future__ import annotations

import json
from pathlib import Path


def collect(folder: Path) -> list[dict]:
    """The reports the workers left in ``folder`` (unreadable ones are skipped)."""
    out = []
    for path in sorted(Path(folder).glob("worker-*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out


def _join(main, more: list):
    """Generic merge of one section: lists joined, numbers summed, dicts merged key by key."""
    if isinstance(main, dict):
        out = dict(main)
        for m in more:
            for k, v in (m or {}).items():
                out[k] = _join(out[k], [v]) if k in out else v
        return out
    if isinstance(main, list):
        return main + [x for m in more if isinstance(m, list) for x in m]
    if isinstance(main, (int, float)) and not isinstance(main, bool):
        return main + sum(m for m in more if isinstance(m, (int, float)) and not isinstance(m, bool))
    return main


def _merge_transforms(main: dict, workers: list[dict]) -> dict:
    """transforms: the workers' envs joined, their object keys made unique per process."""
    envs = list(main.get("envs", []))
    for i, sec in enumerate(workers, 1):
        for e in sec.get("envs", []):
            envs.append({**e, "base_id": f"w{i}:{e.get('base_id')}"})
    return {**main, "envs": envs}


# detectors whose worker sections are merged: what they measure happens inside the worker
MERGERS = {"transforms": _merge_transforms, "identical-workers": _join, "vector-autoreset": _join, "env-seeding": _join}


def _worker_first_resets(reports: list[dict]) -> list[dict]:
    """identical-workers records for envs built one per worker process in collector workers
    (a ParallelEnv's workers are compared in the main process, on its batched reset)."""
    groups: dict = {}
    for r in reports:
        if r["meta"].get("target", "") and "_run_worker" in str(r["meta"].get("target")):
            continue
        for f in r["sections"].get("_workers", {}).get("first_resets", [])[:1]:
            groups.setdefault(f["cls"], []).append(f)
    return [{"cls": f"{cls} (one per worker process)", "n": len(fs), "unique": len({f["digest"] for f in fs}),
             "seeded": all(f["seeded"] for f in fs), "site": next((f["site"] for f in fs if f.get("site", "?") != "?"), "?"),
             "per_process": True} for cls, fs in groups.items() if len(fs) > 1]


def merge(observed: dict, modules: list) -> None:
    """Fold ``observed["worker_reports"]`` (runner.py) into ``observed`` in place."""
    reports = observed.pop("worker_reports", None) or []
    meta = observed["meta"]
    started = list(meta.get("processes", [])) + [p for r in reports for p in r["meta"].get("processes", [])]
    reported = {r["meta"].get("pid") for r in reports}
    missing = [p for p in started if p["pid"] not in reported]
    sections = observed.setdefault("sections", {})
    for module in modules:
        name = module.NAME
        worker_secs = [r["sections"][name] for r in reports if r.get("sections", {}).get(name)]
        if not worker_secs:
            continue
        fn = getattr(module, "merge_workers", None) or MERGERS.get(name)
        if fn is not None:
            sections[name] = fn(sections.get(name, {}), worker_secs)
    extra = _worker_first_resets(reports)
    if extra:
        sec = sections.setdefault("identical-workers", {})
        sec["resets"] = list(sec.get("resets", [])) + extra
    for r in reports:
        for where, err in r["meta"].get("probe_errors", {}).items():
            meta["probe_errors"].setdefault(where, f"{err} (in worker {r['meta'].get('pid')})")
    meta["worker_processes"] = {
        "started": len(started), "reported": len([p for p in started if p["pid"] in reported]),
        "torchrl": sum(1 for r in reports if r["meta"].get("instrumented")),
        "methods": sorted({p["method"] for p in started}),
        "missing": [f"{p['pid']} ({p['method']}{', ' + p['target'] if p.get('target') else ''})" for p in missing],
    }
    if not missing:
        meta["workers"] = []  # every worker that ran was instrumented: no row saw only the main process


def notes(meta: dict) -> list[str]:
    """The run row's words on worker processes (see audit_run.check_run)."""
    wp = meta.get("worker_processes") or {}
    if not wp.get("started"):
        return []
    text = f"{wp['reported']} of {wp['started']} worker processes instrumented ({', '.join(wp['methods'])}), their events merged into the rows"
    if wp["torchrl"] < wp["reported"]:
        text += f" ({wp['reported'] - wp['torchrl']} never imported torchrl, or its instrumentation failed there: see probe errors)"
    if wp["missing"]:
        text += f"; not instrumented: {', '.join(wp['missing'][:4])}"
    return [text]
