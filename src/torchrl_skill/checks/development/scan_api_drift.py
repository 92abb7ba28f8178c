"""Scan Python files for TorchRL API drift: names, keys, keywords and overrides the installed torchrl rejects.

Parses each file with the standard `ast` module (nothing of yours is executed or
imported; only the torchrl/tensordict modules your code names) and reports, as
FILE:LINE [kind] old -> new (versions): every torchrl/tensordict name imported or used
that the installed version lacks (with its replacement from api_changes.json, where it
lives now, or the closest names), a class attribute that does not exist, every keyword
of a call that the installed callable does not accept (its signature, with **kwargs
followed into the functions it forwards to; the accepted names and the closest match
are printed), each key of a dict that a torchrl callable hands to a class it builds
(ProbabilisticActor(distribution_class=TanhDelta, distribution_kwargs={"min": ...}) ends in
TanhDelta(min=...)) judged against that class, a spec.space.minimum/.maximum read (renamed
low/high in 0.2.0), an override in your subclass of a torchrl class that cannot take the
calls torchrl makes (e.g. an EnvBase subclass with def close(self), while torchrl calls
close(raise_if_closed=...)), every read/write of the legacy "sample_log_prob" string
key, and deprecated names (failures only with --strict). The legacy key passed as an
explicit setting - log_prob_key="sample_log_prob" to an actor, or
loss.set_keys(sample_log_prob="sample_log_prob") - is valid on 0.14.1 (a PPO loss built
from that actor adopts the key) and is printed as a passing [key-note], never a failure.
Folders are scanned recursively (*.py, *.ipynb); a file that cannot be parsed is
reported by name and the scan goes on. Exits 1 when it finds drift. With no PATH it
scans a bundled example written against torchrl 0.14.1 (expected clean).

With --to LINE (e.g. --to 0.14) it also plans the upgrade from the installed release line:
the install command of the stack the version matrix ran on LINE, every name, import or
keyword of your files that LINE removed or no longer exports (FILE:LINE old -> new, a
failure) or deprecated (a skip; a failure with --strict), and the upstream bug fixes
(pytorch/rl PR numbers) that LINE brings to the names your files use.
"""

from __future__ import annotations

from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402
from torchrl_skill.checks.development import api_table as at  # noqa: E402
from torchrl_skill.checks.development.drift_scan import Finding, iter_sources, scan_paths, scan_source  # noqa: E402,F401  (public API)

EXAMPLE = ("python $SKILL_DIR/sub-skills/development-and-testing/scripts/scan_api_drift.py my_project/ train.py --strict\n"
           "  python $SKILL_DIR/sub-skills/development-and-testing/scripts/scan_api_drift.py my_project/ --to 0.14")
DEFAULT_EXAMPLE = sr.BUNDLE_ROOT / "sub-skills" / "development-and-testing" / "assets" / "modern_example.py"
def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("paths", nargs="*", help="files or folders to scan (default: the bundled modern example)")
    parser.add_argument("--strict", action="store_true", help="also fail on deprecated names/keywords that still work")
    parser.add_argument("--table", default=str(at.TABLE_PATH), help="api_changes.json to use (default: the bundled one)")
    parser.add_argument("--to", metavar="LINE", help="plan the upgrade to this torchrl release line (e.g. 0.14)")
    return parser


# --------------------------------------------------------------------------- checks


def load_table(args) -> sr.Passed:
    """The rename table (api_changes.json), counted by section."""
    table = at.load_table(args.table)
    sr.evidence(sum(len(table[k]) for k in ("names", "keys", "kwargs", "deprecated")), "table rows")
    return sr.Passed(f"{len(table['names'])} renamed/removed names, {len(table['keys'])} keys, "
                     f"{len(table['kwargs'])} keywords, {len(table['deprecated'])} deprecated names "
                     f"from {Path(args.table).name}", table)


def scan_files(paths, table) -> sr.Passed:
    """Every file under ``paths`` scanned; the findings are the value."""
    findings, scanned = scan_paths(paths, table)
    sr.expect(scanned, f"no .py or .ipynb files under {', '.join(map(str, paths))}")
    sr.evidence(len(scanned), "files scanned")
    bad = sum(f.kind == "unparsable" for f in findings)
    skipped = f"; {bad} could not be parsed (listed below)" if bad else ""
    return sr.Passed(f"scanned {len(scanned)} file(s) with ast against the table and the installed library{skipped}",
                     (findings, scanned))


def migration_plan(args, paths) -> sr.Passed:
    """The upgrade from the installed line to ``--to``: install command, steps, fixes gained."""
    from torchrl_skill.checks.development import migration as mg

    installed = sr.installed_version("torchrl")
    uses, _ = mg.uses_in(paths)
    steps = mg.plan(uses, installed, args.to)
    sr.evidence(len(uses), "uses of torchrl names read against the tables")
    fixes = mg.fixes_for_uses(uses, installed, args.to)
    stack = sr.stack_lines().get("lines", {}).get(args.to)  # the stack the version matrix ran on that line
    install = (stack.get("install") or f"pip install torch=={stack['torch']} tensordict=={stack['tensordict']} torchrl=={stack['torchrl']}"
               if stack else f"pip install 'torchrl>={args.to},<{next_line(args.to)}'")
    breaks = sum(s.breaks for s in steps)
    gained = sum(len(v) for v in fixes.values())
    from torchrl_skill.stack import versions as _versions

    known = _versions.newest_line()  # the tables (api_changes.json, upstream_index.json) stop here
    beyond = (f"; the tables stop at line {known}: what {args.to} removes, renames or deprecates is read live by this "
              f"scan run inside a {args.to} environment (absent names, rejected keywords, '.. deprecated::' docstrings)"
              if _versions.after(args.to, known) else "")
    stand_in = (stack or {}).get("stand_in")
    install += f" (standing in for the release: {stand_in})" if stand_in else ""
    return sr.Passed(f"torchrl {installed} -> {args.to}: {install}; {breaks} change(s) your code needs there, "
                     f"{len(steps) - breaks} deprecation(s); {gained} upstream fix(es) to {len(fixes)} name(s) it uses{beyond}",
                     (steps, fixes))


CHECKS = [
    sr.Check("drift:table", load_table, gives="table", proves="the rename table loads"),
    sr.Check("drift:scan", scan_files, gives="scan", proves="every file under the paths is scanned against the table"),
    sr.Check("migrate:plan", migration_plan, gives="migration", flag="to",
             proves="every torchrl name the code uses is read against the tables up to --to"),
]


def next_line(line: str) -> str:
    major, minor = line.split(".")[:2]
    return f"{major}.{int(minor) + 1}"


def target_line(args) -> str | None:
    """``--to`` as a release line, checked: a supported line, not older than the installed one (else exit 2)."""
    if args.to is None:
        return None
    from torchrl_skill.stack import versions as _versions

    oldest = sr.SUPPORTED["torchrl"][0]
    newest = max(_versions.newest_line(), sr.newest_run_line(), key=sr._release)  # a line the matrix ran counts
    line = sr.line_of(args.to) if args.to[:1].isdigit() else None
    installed = sr.installed_version("torchrl")
    if line is None or _versions.after(oldest, line) or _versions.after(line, newest):
        sr.cannot_run(f"--to {args.to}: not a supported torchrl release line", f"pass a line from {oldest} to {newest}, e.g. --to {newest}")
    if _versions.after(sr.line_of(installed), line):
        sr.cannot_run(f"--to {args.to}: older than the installed torchrl {installed}", f"pass --to {sr.line_of(installed)} or a newer line")
    return line


def report_migration(report, migration, strict: bool) -> None:
    """One row per step (a change the target needs fails; a deprecation skips unless ``strict``), then the fixes."""
    steps, fixes = migration
    for step in steps:
        status = "fail" if step.breaks or strict else "skip"
        report.add("migrate:name" if step.breaks else "migrate:deprecated", status,
                   step.text() + ("" if step.breaks or strict else " (works there, warns; pass --strict to fail)"))
    for name, found in sorted(fixes.items()):
        shown = ", ".join(f"pytorch/rl#{f['pr']} ({f['first']})" for f in found[:8])
        more = f" and {len(found) - 8} more" if len(found) > 8 else ""
        report.add("migrate:fixes", "pass", f"{name}: {shown}{more} (src/torchrl_skill/data/upstream_index.json)")


def report_findings(report, scan, strict: bool) -> None:
    """One row per finding (errors fail; deprecations fail only with ``strict``; key-notes
    pass), then the clean-file count."""
    findings, scanned = scan
    for f in findings:
        if f.kind == "key-note":  # a valid explicit key setting: informational, passes even with --strict
            report.add("drift:key-note", "pass", f.text())
        elif f.severity == "error" or (strict and f.kind != "unverified"):
            report.add(f"drift:{f.kind}", "fail", f.text())
        else:
            report.add(f"drift:{f.kind}", "skip", f.text() + ("" if f.kind == "unverified" else " (pass --strict to fail)"))
    bad = {f.path for f in findings if f.severity == "error"}
    clean = [p for p in scanned if p not in bad]
    names = f": {', '.join(Path(c).name for c in clean[:5])}" if clean else ""
    report.add("drift:clean-files", "pass", f"{len(clean)}/{len(scanned)} file(s) use no removed name, legacy key, "
               f"rejected keyword or incompatible override{names}",
               proves="the files use no removed name, legacy key, rejected keyword or incompatible override", evidence=len(clean))


def run_checks(args, report) -> None:
    paths = [Path(p) for p in args.paths] or [DEFAULT_EXAMPLE]
    for p in [*paths, Path(args.table)]:
        if not p.exists():
            sr.cannot_run(f"path {p} does not exist", "pass existing .py/.ipynb files or folders")
    args.to = target_line(args)
    found = sr.run_declared(CHECKS, report, args=args, paths=paths)
    if "scan" in found:
        report_findings(report, found["scan"], args.strict)
    if "migration" in found:
        report_migration(report, found["migration"], args.strict)


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
