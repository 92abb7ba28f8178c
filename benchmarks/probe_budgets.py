"""The probe ladder's frame budgets and measured pass rates: probe_budgets.json -> references/probe-ladder.md.

    python benchmarks/probe_budgets.py            # rewrite the generated tables
    python benchmarks/probe_budgets.py --check    # exit 1 when they are stale (tests/test_audit_probe_budgets.py)

Two facts, each in one place: the budgets are the ladder's own ``FRAMES`` (and ``FAMILIES``,
``DEFAULT_FRAMES``) in src/torchrl_skill/audit/ladder_rungs.py; the measurements are the ``runs`` of
benchmarks/probe_budgets.json, written by tests/fixtures/audit/probe/measure_budgets.py
(one record per recipe, rung and seed: ``settled_at``, the frames from which every later
judgment passed; ``judged``/``ok``, every judgment of the run). The tables judge each run at
the budget the ladder uses now (:func:`judged_at`: the judgment at the first collection step
at or past it, as the ladder stops there): a run shorter than that budget counts as not
measured. :func:`rule_violations` names each budget below twice the largest settled count
measured for its family and rung.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "probe_budgets.json"
DOC = ROOT / "references" / "probe-ladder.md"
RUNGS = (1, 2, 3, 4, 5)
README = ROOT / "README.md"
# (file, begin marker, end marker, what writes the block between them)
BLOCKS = [
    (DOC, "<!-- BEGIN GENERATED budgets by benchmarks/probe_budgets.py from the ladder's FRAMES: do not edit -->",
     "<!-- END GENERATED budgets -->", lambda data, lr: budgets_table(lr)),
    (DOC, "<!-- BEGIN GENERATED pass rates by benchmarks/probe_budgets.py from benchmarks/probe_budgets.json: do not edit -->",
     "<!-- END GENERATED pass rates -->", lambda data, lr: family_rates(data, lr)),
    (README, "<!-- BEGIN GENERATED probe runs by benchmarks/probe_budgets.py from benchmarks/probe_budgets.json: do not edit -->",
     "<!-- END GENERATED probe runs -->", lambda data, lr: recipe_rates(data, lr)),
]


def ladder_rungs():
    """The auditor's ladder_rungs module (torchrl_skill.audit.ladder_rungs: FRAMES, FAMILIES,
    DEFAULT_FRAMES, frames()); it imports nothing, so this script needs no torch."""
    sys.path.insert(0, str(ROOT / "src"))
    from torchrl_skill.audit import ladder_rungs as lr

    return lr


def load(path: Path = DATA) -> dict:
    return json.loads(path.read_text())


def judged_at(run: dict, budget: int) -> tuple[bool, int | None] | None:
    """``(passed, settled_at)`` of ``run`` as the ladder would judge it at ``budget`` frames,
    or None when the run tells nothing there. With a trace (``judged``/``ok``: every
    collection step judged), the judgment at the first step at or past ``budget`` (where the
    ladder stops) and the settled count up to it; without one, only a run made at ``budget``."""
    if run.get("judged"):
        ends = [i for i, f in enumerate(run["judged"]) if f >= budget]
        if not ends:
            return None
        stop = ends[0]
        return run["ok"][stop] == "1", _settled(run["judged"][:stop + 1], run["ok"][:stop + 1])
    if run["budget"] == budget:
        return bool(run["passed"]), run["settled_at"]
    return None


def _settled(frames: list[int], ok: str) -> int | None:
    first = None
    for f, flag in zip(frames, ok):
        if flag == "1" and first is None:
            first = f
        elif flag != "1":
            first = None
    return first


def at_budget(data: dict, lr) -> list[dict]:
    """One entry per recipe, rung and seed judged at the budget the ladder now gives its
    family: the run's facts plus ``passed_at`` and ``settled_at_budget``. Of several runs of
    one seed, the one made at that budget, else the longest."""
    picked: dict[tuple, dict] = {}
    for run in sorted(data["runs"], key=lambda r: -(r["budget"] or 0)):
        if not run.get("loss"):
            continue
        run = {**run, "family": lr.family(run["loss"])}  # today's family of the loss, not the one at measuring time
        budget = lr.frames(run["family"], run["rung"])
        got = judged_at(run, budget)
        key = (run["recipe"], run["rung"], run["seed"])
        if got is None or (key in picked and run["budget"] != budget):
            continue
        picked[key] = {**run, "passed_at": got[0], "settled_at_budget": got[1], "at": budget}
    return list(picked.values())


def rule_violations(data: dict, lr) -> list[str]:
    """Each budget below twice the largest settled count measured for its family and rung
    (over each seed's longest run: a run longer than the budget shows where a seed that
    fails at the budget settles), and each run that never settled: one sentence each. A
    family and rung listed in the data's ``exceptions`` (with why) is held to less: every
    seed measured passes at the budget."""
    out, longest = [], {}
    for run in data["runs"]:
        key = (run["recipe"], run["rung"], run["seed"])
        if run.get("loss") and (key not in longest or run["frames"] > longest[key]["frames"]):
            longest[key] = {**run, "family": lr.family(run["loss"])}
    excepted = {(e["family"], e["rung"]) for e in data.get("exceptions", [])}
    failing = {(r["family"], r["rung"]) for r in at_budget(data, lr) if not r["passed_at"]}
    for fam, rung in sorted(excepted & failing):
        out.append(f"{fam} rung {rung} is listed in exceptions, but a seed measured fails at its budget {lr.frames(fam, rung)}")
    for run in longest.values():
        budget = lr.frames(run["family"], run["rung"])
        if (run["family"], run["rung"]) in excepted:
            continue
        where = f"{run['recipe']} rung {run['rung']} seed {run['seed']} ({run['frames']} frames)"
        if run["settled_at"] is None:
            out.append(f"{where}: never settled; the {run['family']} budget is {budget}")
        elif 2 * run["settled_at"] > budget:
            out.append(f"{where}: settled at {run['settled_at']}, more than half the {run['family']} budget {budget}")
    return out


def proposed(data: dict, lr) -> dict[str, dict[int, tuple[int, int]]]:
    """``{family: {rung: (smallest budget the rule allows, shortest run measured)}}``: twice
    the largest settled count over each seed's longest run, rounded up to 100 frames; a
    budget above the shortest run leaves some seeds unmeasured at it."""
    longest: dict[tuple, dict] = {}
    for run in data["runs"]:
        key = (run["recipe"], run["rung"], run["seed"])
        if run.get("loss") and (key not in longest or run["frames"] > longest[key]["frames"]):
            longest[key] = run
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for run in longest.values():
        fam = lr.family(run["loss"])
        need = -(-2 * (run["settled_at"] if run["settled_at"] is not None else run["frames"]) // 100) * 100
        old = out.setdefault(fam, {}).get(run["rung"], (0, run["frames"]))
        out[fam][run["rung"]] = (max(old[0], need), min(old[1], run["frames"]))
    return out


def budgets_table(lr) -> str:
    by_family: dict[str, list[str]] = {}
    for loss, fam in lr.FAMILIES.items():
        by_family.setdefault(fam, []).append(f"`{loss}`")
    lines = ["| Family (loss modules) | " + " | ".join(str(k) for k in RUNGS) + " |",
             "| --- | " + " | ".join("---" for _ in RUNGS) + " |"]
    for fam, table in lr.FRAMES.items():
        lines.append(f"| {fam} | " + " | ".join(str(table[k]) for k in RUNGS) + " |")
    names = "; ".join(f"{fam}: {', '.join(by_family.get(fam, []))}" for fam in lr.FRAMES)
    lines += ["", f"Families: {names}; any other loss: {lr.DEFAULT_FRAMES} per rung."]
    return "\n".join(lines)


def _cell(runs: list[dict]) -> str:
    if not runs:
        return "not measured"
    passed = sum(r["passed_at"] for r in runs)
    settled = [r["settled_at_budget"] for r in runs if r["settled_at_budget"] is not None]
    most = f", settled ≤ {max(settled)}" if settled else ""
    return f"{passed}/{len(runs)}{most}"


def family_rates(data: dict, lr) -> str:
    """Per family and rung, over every recipe of the family (by its loss module, FAMILIES):
    runs passing at the budget / runs."""
    runs = at_budget(data, lr)
    lines = ["| Family | " + " | ".join(str(k) for k in RUNGS) + " |", "| --- | " + " | ".join("---" for _ in RUNGS) + " |"]
    excepted = {(e["family"], e["rung"]): e["why"] for e in data.get("exceptions", [])}
    for fam in lr.FRAMES:
        cells = [_cell([r for r in runs if r["family"] == fam and r["rung"] == k]) + (" (*)" if (fam, k) in excepted else "")
                 for k in RUNGS]
        lines.append(f"| {fam} | " + " | ".join(cells) + " |")
    for (fam, rung), why in sorted(excepted.items()):
        lines += ["", f"(*) {fam} rung {rung}: below twice the largest settled count; every seed measured passes at it: {why}"]
    return "\n".join(lines)


def recipe_rates(data: dict, lr) -> str:
    """Per recipe: its loss, the seeds run, and per rung the runs passing at today's budget / runs."""
    runs = at_budget(data, lr)
    recipes = data.get("recipes", {})
    fams = list(lr.FRAMES)
    lines = ["| Recipe | Loss | Seeds | " + " | ".join(str(k) for k in RUNGS) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in RUNGS) + " |"]
    for name in sorted(recipes, key=lambda n: (fams.index(_family(runs, n)) if _family(runs, n) in fams else 99, n)):
        mine = [r for r in runs if r["recipe"] == name]
        if not mine:
            continue
        rec = recipes[name]
        seeds = sorted({r["seed"] for r in mine})
        span = f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else ",".join(map(str, seeds))
        args = f" `{' '.join(rec['args'])}`" if rec.get("args") else ""
        loss = sorted({r["loss"] for r in mine if r["loss"]})
        lines.append(f"| `{rec['target']}`{args} | {', '.join(f'`{x}`' for x in loss)} | {span} | "
                     + " | ".join(_cell([r for r in mine if r["rung"] == k]) for k in RUNGS) + " |")
    stacks = sorted({f"torch {s['torch']}, torchrl {s['torchrl']}" for s in (recipes[n].get("stack") for n in recipes) if s})
    lines += ["", f"Stack: {'; '.join(stacks)}; {len(data['runs'])} runs in `benchmarks/probe_budgets.json`."]
    return "\n".join(lines)


def _family(runs: list[dict], recipe: str) -> str | None:
    return next((r["family"] for r in runs if r["recipe"] == recipe and r["family"]), None)


def render(path: Path, text: str, data: dict, lr) -> str:
    """``text`` (the file at ``path``) with its generated blocks rewritten; raises ValueError
    when a marker is missing."""
    for doc, begin, end, body in BLOCKS:
        if doc != path:
            continue
        if begin not in text or end not in text:
            raise ValueError(f"{path.name} lacks the marker {begin!r} or {end!r}")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{body(data, lr)}\n{end}{tail}"
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a generated block is stale")
    parser.add_argument("--propose", action="store_true", help="print the smallest budgets the rule allows (JSON) and exit")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    lr, data = ladder_rungs(), load()
    if args.propose:
        print(json.dumps({fam: {r: {"rule": b, "shortest_run": n, "now": lr.frames(fam, r)} for r, (b, n) in sorted(v.items())}
                          for fam, v in proposed(data, lr).items()}, indent=1))
        return 0
    stale = []
    for path in dict.fromkeys(doc for doc, *_ in BLOCKS):
        old = path.read_text()
        try:
            new = render(path, old, data, lr)
        except ValueError as err:
            print(f"probe_budgets: {err}", file=sys.stderr)
            return 2
        if new != old:
            stale.append(path)
            if not args.check:
                path.write_text(new)
    for line in rule_violations(data, lr):
        print(f"probe_budgets: rule: {line}", file=sys.stderr)
    if args.check and stale:
        print(f"probe_budgets: stale generated blocks in {', '.join(str(p.relative_to(ROOT)) for p in stale)}: "
              "run python benchmarks/probe_budgets.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
