"""Check whether the bundle's verified claims apply here: installed stack (and a pytorch/rl checkout) vs references/repo-provenance.md.

Reads the first ```json block of the bundle's references/repo-provenance.md (keys
torch, tensordict, torchrl, pytorch_rl_commit, checked) and compares it with the
installed torch/tensordict/torchrl versions; with --checkout PATH also with that
checkout's version.txt and git HEAD. torchrl/tensordict must match exactly (patch
releases rename nothing, yet the claims were only checked on one); torch must match
on major.minor. Exits 1 when a claim does not apply.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import skill_report as sr  # noqa: E402

EXAMPLE = "python sub-skills/development-and-testing/scripts/check_provenance.py --checkout ~/rl --json"
PROVENANCE = sr.BUNDLE_ROOT / "references" / "repo-provenance.md"
KEYS = ("torch", "tensordict", "torchrl", "pytorch_rl_commit", "checked")


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--checkout", metavar="PATH", help="a pytorch/rl git checkout to compare (version.txt, HEAD)")
    parser.add_argument("--provenance", default=str(PROVENANCE),
                        help="provenance markdown to read (default: the bundle's references/repo-provenance.md)")
    return parser


def read_provenance(path: Path) -> dict:
    """Parse the first ```json block of ``path``; raises ``sr.CheckFailed`` naming what is wrong."""
    if not path.is_file():
        raise sr.CheckFailed(f"{path} not found; the bundle ships it at references/repo-provenance.md")
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


def compare_checkout(checkout: Path, claim: dict, installed_torchrl: str | None) -> list[tuple[str, str, bool]]:
    """``[(check name, detail, ok)]`` for a checkout's version.txt and HEAD against the claim."""
    out = []
    vfile = checkout / "version.txt"
    if vfile.is_file():
        ver = vfile.read_text(encoding="utf-8").strip()
        claimed = claim["torchrl"]
        ok = ver.split(".")[:2] == _base(claimed).split(".")[:2]
        out.append(("provenance:checkout-version",
                    f"checkout version.txt {ver} vs verified torchrl {claimed}"
                    + ("" if ok else "; the checkout is a different minor release: re-verify names with scan_api_drift.py"),
                    ok))
    else:
        out.append(("provenance:checkout-version", f"{checkout} has no version.txt: not a pytorch/rl checkout?", False))
    head = _git(checkout, "rev-parse", "HEAD")
    if head.returncode != 0:
        out.append(("provenance:checkout-commit", f"git rev-parse HEAD failed in {checkout}: "
                    f"{head.stderr.strip().splitlines()[-1] if head.stderr.strip() else 'not a git repo'}", False))
        return out
    sha = head.stdout.strip()
    want = str(claim["pytorch_rl_commit"])
    if sha.startswith(want) or want.startswith(sha):
        out.append(("provenance:checkout-commit", f"HEAD {sha[:12]} is the verified commit", True))
        return out
    anc = _git(checkout, "merge-base", "--is-ancestor", want, sha)
    if anc.returncode == 0:
        n = _git(checkout, "rev-list", "--count", f"{want}..{sha}").stdout.strip()
        detail = (f"HEAD {sha[:12]} is {n} commit(s) after the verified {want[:12]}: claims about main may be stale; "
                  "re-check names with scan_api_drift.py and the installed source")
    elif anc.returncode == 1:
        detail = f"HEAD {sha[:12]} does not contain the verified commit {want[:12]} (older or diverged branch)"
    else:
        detail = f"verified commit {want[:12]} is unknown to this checkout; run git fetch, then re-run"
    out.append(("provenance:checkout-commit", detail, False))
    return out


def run_checks(args, report) -> None:
    state: dict = {}

    def load():
        state["claim"] = read_provenance(Path(args.provenance))
        c = state["claim"]
        return (f"verified on torch {c['torch']}, tensordict {c['tensordict']}, torchrl {c['torchrl']}, "
                f"pytorch/rl {str(c['pytorch_rl_commit'])[:12]}, checked {c['checked']}")

    report.run("provenance:file", load)
    if "claim" not in state:
        return
    versions = sr.stack_versions()
    for dist in ("torchrl", "tensordict", "torch"):
        report.run(f"provenance:{dist}", lambda d=dist: compare_version(d, versions.get(d), str(state["claim"][d])))
    if not args.checkout:
        report.add("provenance:checkout", "skip", "not asked for (pass --checkout PATH of a pytorch/rl clone)")
        return
    checkout = Path(args.checkout).expanduser()
    if not checkout.is_dir():
        report.add("provenance:checkout", "fail", f"--checkout {args.checkout} is not a folder")
        return
    for name, detail, ok in compare_checkout(checkout, state["claim"], versions.get("torchrl")):
        report.add(name, "pass" if ok else "fail", detail)




def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)


if __name__ == "__main__":
    sr.main_guard(main)
