"""Check whether the bundle's verified claims apply here: installed stack (and a pytorch/rl checkout) vs references/repo-provenance.md.

Reads the first ```json block of the bundle's references/repo-provenance.md (keys
torch, tensordict, torchrl, pytorch_rl_commit, checked) and compares it with the
installed torch/tensordict/torchrl versions; with --checkout PATH also with that
checkout's version.txt and git HEAD. torchrl/tensordict must match exactly (patch
releases rename nothing, yet the claims were only checked on one); torch must match
on major.minor. Exits 1 when a claim does not apply, 2 when --provenance or --checkout
names a path that does not exist.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/development-and-testing/scripts/check_provenance.py --checkout ~/rl --json"
PROVENANCE = sr.BUNDLE_ROOT / "references" / "repo-provenance.md"
KEYS = ("torch", "tensordict", "torchrl", "pytorch_rl_commit", "checked")


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--checkout", metavar="PATH", help="a pytorch/rl git checkout to compare (version.txt, HEAD)")
    parser.add_argument("--provenance", default=str(PROVENANCE),
                        help="provenance markdown to read (default: the bundle's references/repo-provenance.md)")
    return parser


def read_provenance(path: Path) -> dict:
    """Parse the first ```json block of ``path`` (an existing file); raises ``sr.CheckFailed``
    naming what is wrong with its content."""
    m = re.search(r"```json\s*\n(.*?)\n```", path.read_text(encoding="utf-8"), re.S)
    sr.expect(m is not None, f"{path.name} has no ```json block")
    try:
        data = json.loads(m.group(1))
    except json.JSONDecodeError as err:
        raise sr.CheckFailed(f"{path.name}: first ```json block is not valid JSON: {err}") from None
    missing = [k for k in KEYS if k not in data]
    sr.expect(not missing, f"{path.name}: json block lacks {', '.join(missing)}")
    return data


def _base(v: str) -> str:
    return v.split("+")[0]


def compare_version(dist: str, installed: str | None, claimed: str) -> str:
    """Pass detail, or ``sr.CheckFailed`` when ``installed`` differs from ``claimed``.

    torch: equal major.minor passes (a local tag such as +cu128 is ignored); others: exact.
    """
    sr.expect(installed is not None, f"{dist} is not installed; the bundle was verified on {dist} {claimed}")
    if dist == "torch":
        same = _base(installed).split(".")[:2] == _base(claimed).split(".")[:2]
    else:
        same = _base(installed) == _base(claimed)
    sr.expect(same, f"installed {dist} {installed} but the bundle was verified on {dist} {claimed}: its names "
                    f"and defaults may not apply; fix: pip install {dist}=={claimed} or run "
                    "scan_api_drift.py on your code and trust the installed source over the docs")
    exact = "" if _base(installed) == _base(claimed) else f" (patch differs from {claimed})"
    return f"{dist} {installed} matches the verified {claimed}{exact}"


def _git(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=60)


def checkout_version(checkout: Path, claim: dict) -> str:
    """The checkout's version.txt against the verified torchrl minor release (``sr.CheckFailed`` if not)."""
    vfile = checkout / "version.txt"
    sr.expect(vfile.is_file(), f"{checkout} has no version.txt: not a pytorch/rl checkout?")
    ver = vfile.read_text(encoding="utf-8").strip()
    claimed = claim["torchrl"]
    sr.expect(ver.split(".")[:2] == _base(claimed).split(".")[:2],
              f"checkout version.txt {ver} vs verified torchrl {claimed}; the checkout is a different minor "
              "release: re-verify names with scan_api_drift.py")
    return f"checkout version.txt {ver} vs verified torchrl {claimed}"


def checkout_commit(checkout: Path, claim: dict) -> str:
    """The checkout's HEAD against the verified pytorch/rl commit (``sr.CheckFailed`` if it differs)."""
    head = _git(checkout, "rev-parse", "HEAD")
    if head.returncode != 0:
        why = head.stderr.strip().splitlines()[-1] if head.stderr.strip() else "not a git repo"
        raise sr.CheckFailed(f"git rev-parse HEAD failed in {checkout}: {why}")
    sha = head.stdout.strip()
    want = str(claim["pytorch_rl_commit"])
    if sha.startswith(want) or want.startswith(sha):
        return f"HEAD {sha[:12]} is the verified commit"
    anc = _git(checkout, "merge-base", "--is-ancestor", want, sha)
    if anc.returncode == 0:
        n = _git(checkout, "rev-list", "--count", f"{want}..{sha}").stdout.strip()
        raise sr.CheckFailed(f"HEAD {sha[:12]} is {n} commit(s) after the verified {want[:12]}: claims about main may be "
                             "stale; re-check names with scan_api_drift.py and the installed source")
    if anc.returncode == 1:
        raise sr.CheckFailed(f"HEAD {sha[:12]} does not contain the verified commit {want[:12]} (older or diverged branch)")
    raise sr.CheckFailed(f"verified commit {want[:12]} is unknown to this checkout; run git fetch, then re-run")


# ---------------------------------------------------------------- checks


def check_file(args) -> sr.Passed:
    claim = read_provenance(Path(args.provenance))
    sr.evidence(len(claim), "provenance fields read")
    return sr.Passed(f"verified on torch {claim['torch']}, tensordict {claim['tensordict']}, torchrl {claim['torchrl']}, "
                     f"pytorch/rl {str(claim['pytorch_rl_commit'])[:12]}, checked {claim['checked']}", claim)


def check_dist(dist: str, claim) -> str:
    """The installed ``dist`` against the verified one; on a line older than the claimed one or
    newer than the bundle's verified one, the stack the version matrix ran on that line also
    passes, saying so (src/torchrl_skill/data/stack_lines.json; on
    a line whose release a nightly stands in for, only that nightly: a pre-release and a
    release of one line are not the same stack)."""
    installed = sr.installed_version(dist)
    sr.evidence(installed is not None and dist in claim, "installed distributions compared with the claim")
    try:
        return compare_version(dist, installed, str(claim[dist]))
    except sr.CheckFailed:
        line = sr.line_of(sr.installed_version("torchrl"))
        # the matrix stands in for a full verification on lines below the claimed one and on
        # lines above the bundle's verified one (0.15 on its stand-in), never on the verified line
        older = line and sr._release(line) < sr._release(sr.line_of(str(claim["torchrl"])))
        newer = line and sr._release(line) > sr._release(sr.line_of(sr.VERIFIED["torchrl"]))
        row = sr.stack_lines().get("lines", {}).get(line, {}) if older or newer else {}
        parts = {"torch": 2, "tensordict": 3, "torchrl": 3}  # torch by minor release, as compare_version
        same = all(row.get(d) and sr.installed_version(d) and
                   _base(sr.installed_version(d)).split(".")[:n] == _base(row[d]).split(".")[:n] and
                   ("dev" in sr.installed_version(d)) == ("dev" in row[d]) for d, n in parts.items())
        if not (row.get("matrix") and same):
            raise
        stand_in = f", standing in for its release: {row['stand_in']}" if row.get("stand_in") else ""
        return (f"{dist} {installed}: the stack the version matrix ran on line {line}{stand_in} ({row['matrix']['summary']}); "
                f"the bundle's claims were verified in full on {dist} {claim[dist]}")


def check_checkout_version(args, claim) -> str:
    sr.evidence(1, "checkouts read")
    return checkout_version(Path(args.checkout).expanduser(), claim)


def check_checkout_commit(args, claim) -> str:
    sr.evidence(1, "checkouts read")
    return checkout_commit(Path(args.checkout).expanduser(), claim)


CHECKS = [
    sr.Check("provenance:file", check_file, gives="claim", proves="the provenance file names the verified stack"),
    *[sr.Check(f"provenance:{dist}", functools.partial(check_dist, dist), proves=f"the installed {dist} is the verified one")
      for dist in ("torchrl", "tensordict", "torch")],
    sr.Check("provenance:checkout-version", check_checkout_version, flag="checkout",
             proves="the checkout's version.txt is the verified torchrl"),
    sr.Check("provenance:checkout-commit", check_checkout_commit, flag="checkout",
             proves="the checkout's HEAD is the verified commit"),
]


def run_checks(args, report) -> None:
    if not Path(args.provenance).is_file():
        sr.cannot_run(f"--provenance {args.provenance} is not a file", "pass the repo-provenance.md to read")
    if args.checkout and not Path(args.checkout).expanduser().is_dir():
        sr.cannot_run(f"--checkout {args.checkout} is not a folder", "pass the path of a pytorch/rl clone")
    sr.run_declared(CHECKS, report, args=args)


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
