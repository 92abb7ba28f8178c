"""Record what the auditor sees on every mutation-suite run (tests/audit_mutations.py).

    python tests/record_audit_mutations.py                 every run (about 20 minutes on 2 cores)
    python tests/record_audit_mutations.py --only td3      runs whose key contains "td3"
    python tests/record_audit_mutations.py --missing       runs not recorded yet, or recorded with other arguments
    python tests/record_audit_mutations.py --readme        rewrite the table in tests/README.md from the recordings

Each run is a real audit (src/torchrl_skill/audit/runner.py: the fixture in a child process with
torchrl instrumented, bounded by --max-frames); what its detector's judge reads is merged
into tests/fixtures/audit/mutations/recorded.json, and the verdict is printed beside the
expected one. Re-record after changing what a detector's probe records; the test suite
re-runs one entry per detector live and fails when a recording no longer matches.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "src")]

import audit_mutations as am  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="record the runs whose key contains this text (or one of several, comma-separated)")
    parser.add_argument("--missing", action="store_true", help="record only runs absent from the file or recorded with other arguments")
    parser.add_argument("--readme", action="store_true", help="only rewrite the table in tests/README.md from the recordings")
    args = parser.parse_args()
    keys = {r.key for r in am.RUNS}
    recorded = {k: v for k, v in am.load_recorded().items() if k in keys}  # runs no longer listed are dropped
    if args.readme:
        am.write_readme_table(recorded)
        return 0
    todo = [r for r in am.RUNS if any(part in r.key for part in args.only.split(","))]
    if args.missing:
        todo = [r for r in todo if r.key not in recorded or recorded[r.key]["argv"] != list(r.argv)
                or recorded[r.key]["max_frames"] != r.max_frames]
    bad = 0
    for i, run in enumerate(todo, 1):
        start = time.monotonic()
        recorded[run.key] = am.observe(run)
        am.RECORDED.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(recorded.items())) + "\n}\n")
        status, detail = am.verdict(run, recorded[run.key]["observed"])
        ok = status == run.expect and all(t in detail for t in run.says)
        bad += not ok
        print(f"[{i}/{len(todo)}] {'ok ' if ok else 'BAD'} {run.key}: {status} (expected {run.expect}, {time.monotonic() - start:.0f} s) {detail[:300]}",
              flush=True)
    am.write_readme_table(recorded)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
