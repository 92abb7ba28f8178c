"""Select the focused pytorch/rl tests, pytest commands and CI labels for a set of changed files.

Given a pytorch/rl checkout (--repo) and changed paths (positional, relative to the
checkout) or a git range (--diff main...HEAD), maps each torchrl/ source file to the
test files that cover it (same-name test file, then the area's test folder, then test
files importing the module), prints one CPU pytest command per area (-m "not gpu"),
the labels .github/labeler.yml applies, and the opt-in CI labels (ci/optdeps,
ci/olddeps) to request. Selected tests are also checked for the gpu-marker policy.
With no arguments it runs on a small synthetic checkout built in a temporary folder.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import skill_report as sr  # noqa: E402

EXAMPLE = ("python sub-skills/development-and-testing/scripts/select_focused_tests.py "
           "--repo ~/rl --diff origin/main...HEAD")

# torchrl source prefix -> test folder (or file) that covers it, most specific first.
AREA_MAP = (
    ("torchrl/envs/libs/", "test/libs"),
    ("torchrl/envs/transforms/", "test/transforms"),
    ("torchrl/data/replay_buffers/", "test/rb"),
    ("torchrl/data/tensor_specs.py", "test/test_specs.py"),
    ("torchrl/data/datasets/", "test/libs/test_datasets.py"),
    ("torchrl/objectives/value/", "test/objectives/test_values.py"),
    ("torchrl/objectives/", "test/objectives"),
    ("torchrl/modules/", "test/modules"),
    ("torchrl/collectors/", "test/test_collectors.py"),
    ("torchrl/weight_update/", "test/test_collectors.py"),
    ("torchrl/trainers/algorithms/configs/", "test/test_configs.py"),
    ("torchrl/trainers/", "test/test_trainer.py"),
    ("torchrl/record/loggers/", "test/test_loggers.py"),
    ("torchrl/envs/", "test/envs"),
    ("torchrl/services/", "test/services"),
)
LLM_RE = re.compile(r"(^|/)llm(/|$)")
OPTDEPS_PREFIXES = ("torchrl/envs/libs/", "torchrl/data/datasets/", "torchrl/record/loggers/")

SYNTH_FILES = {
    "torchrl/objectives/ppo.py": "class ClipPPOLoss: ...\n",
    "torchrl/envs/libs/vmas.py": "import importlib.util\n_has_vmas = importlib.util.find_spec('vmas') is not None\n",
    "torchrl/envs/transforms/_observation.py": "class CatFrames: ...\n",
    "torchrl/data/replay_buffers/samplers.py": "class SliceSampler: ...\n",
    "torchrl/envs/llm/chat.py": "class ChatEnv: ...\n",
    "test/objectives/test_ppo.py": "import torchrl.objectives.ppo\ndef test_ppo():\n    pass\n",
    "test/objectives/test_sac.py": "def test_sac():\n    pass\n",
    "test/libs/test_vmas.py": "def test_vmas():\n    pass\n",
    "test/transforms/test_observation_transforms.py": "def test_catframes():\n    pass\n",
    "test/rb/test_samplers.py": "def test_slice():\n    pass\n",
    "test/llm/test_llm_envs.py": "def test_chat():\n    pass\n",
    ".github/labeler.yml": (
        '"Environments/vmas":\n  - changed-files:\n    - any-glob-to-any-file: [\'torchrl/envs/libs/vmas.py\']\n'
        '"Environments":\n  - changed-files:\n    - any-glob-to-any-file:\n      - \'torchrl/envs/libs/**\'\n'
        '"llm/":\n  - changed-files:\n    - any-glob-to-any-file:\n      - \'torchrl/envs/llm/**\'\n'
    ),
    ".github/workflows/test-linux.yml": "# gated by labels 'ci/optdeps' and 'ci/olddeps'\n",
}
SYNTH_CHANGED = ["torchrl/objectives/ppo.py", "torchrl/envs/libs/vmas.py",
                 "torchrl/envs/transforms/_observation.py", "torchrl/data/replay_buffers/samplers.py",
                 "torchrl/envs/llm/chat.py"]


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("paths", nargs="*", help="changed paths, relative to --repo")
    parser.add_argument("--repo", help="pytorch/rl checkout (default: a synthetic checkout made in a temp folder)")
    parser.add_argument("--diff", metavar="RANGE", help="take changed paths from `git diff --name-only RANGE`")
    parser.add_argument("--strict", action="store_true", help="fail when a changed torchrl/ file maps to no test")
    return parser


def build_synthetic_checkout(root: Path) -> list[str]:
    """Write a tiny pytorch/rl-shaped tree under ``root``; return the changed paths to use."""
    for rel, text in SYNTH_FILES.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text, encoding="utf-8")
    return list(SYNTH_CHANGED)


def changed_from_git(repo: Path, rng: str) -> list[str]:
    """``git -C repo diff --name-only RANGE``; raises ``RuntimeError`` with git's message."""
    proc = subprocess.run(["git", "-C", str(repo), "diff", "--name-only", rng],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"git diff --name-only {rng} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]


def _test_files(repo: Path) -> list[str]:
    test_dir = repo / "test"
    if not test_dir.is_dir():
        return []
    return sorted(p.relative_to(repo).as_posix() for p in test_dir.rglob("test_*.py"))


def _norm(s: str) -> str:
    return s.lstrip("_").replace("_", "")


def map_path(rel: str, repo: Path, tests: list[str]) -> tuple[list[str], str]:
    """Test targets (files or folders, repo-relative) covering ``rel`` and why.

    Order: a changed test file itself; a conftest/common helper -> its folder; a same-name
    ``test_<stem>.py``; LLM paths -> test/llm; an area test file whose name contains the
    module stem; the area's test folder/file from :data:`AREA_MAP`; test files that
    import the module path. Returns ``([], reason)`` when nothing matches.
    """
    p = Path(rel)
    if rel.startswith("test/"):
        if p.name.startswith("test_") and p.suffix == ".py":
            return [rel], "changed test file"
        if p.suffix == ".py":
            return [p.parent.as_posix()], f"test helper {p.name} -> its folder"
        return [], "test asset"
    if not (rel.startswith("torchrl/") and p.suffix == ".py"):
        return [], "not a torchrl/ Python source"
    stem = p.stem
    same = [t for t in tests if Path(t).name == f"test_{stem.lstrip('_')}.py"]
    if same and stem not in ("__init__", "utils", "common"):
        return same, f"same-name test file for {p.name}"
    if LLM_RE.search(rel):
        llm = [t for t in tests if t.startswith("test/llm/")]
        hits = [t for t in llm if _norm(stem) and _norm(stem) in _norm(Path(t).stem)]
        if hits:
            return hits, f"LLM module {p.name} -> test/llm name match"
        if (repo / "test/llm").is_dir():
            return ["test/llm"], "LLM module -> test/llm"
    for prefix, target in AREA_MAP:
        if rel.startswith(prefix) or rel == prefix:
            area = [t for t in tests if t.startswith(target + "/")] if (repo / target).is_dir() else []
            hits = [t for t in area if _norm(stem) and stem != "__init__" and _norm(stem) in _norm(Path(t).stem)]
            if hits:
                return hits, f"{p.name} -> name match in {target}/"
            if (repo / target).exists():
                return [target], f"area {prefix} -> {target}"
    dotted = rel[:-3].replace("/", ".").removesuffix(".__init__")
    importers = [t for t in tests if dotted in (repo / t).read_text(encoding="utf-8", errors="replace")]
    if importers:
        return importers[:5], f"test files mentioning {dotted}"
    return [], f"no test file matches {rel}"


def _glob_re(glob: str) -> re.Pattern:
    out, i = "", 0
    while i < len(glob):
        if glob.startswith("**", i):
            out, i = out + ".*", i + 2
        elif glob[i] == "*":
            out, i = out + "[^/]*", i + 1
        else:
            out, i = out + re.escape(glob[i]), i + 1
    return re.compile(out + "$")


def labeler_labels(repo: Path, changed: list[str]) -> list[str]:
    """Labels ``.github/labeler.yml`` (actions/labeler v5 format) applies to ``changed``."""
    cfg = repo / ".github" / "labeler.yml"
    if not cfg.is_file():
        return []
    import yaml

    data = yaml.safe_load(cfg.read_text(encoding="utf-8")) or {}
    labels = []
    for label, rules in data.items():
        globs = []
        for rule in rules or []:
            for entry in (rule or {}).get("changed-files", []) or []:
                for key in ("any-glob-to-any-file", "any-glob-to-all-files"):
                    val = entry.get(key) if isinstance(entry, dict) else None
                    globs += [val] if isinstance(val, str) else (val or [])
        if any(_glob_re(g).match(c) for g in globs for c in changed):
            labels.append(str(label))
    return labels


def opt_in_labels(repo: Path, changed: list[str]) -> list[tuple[str, str]]:
    """``[(label, why)]`` for the PR-gated suites, when the checkout's workflows use them."""
    wf = repo / ".github" / "workflows"
    text = "".join(f.read_text(encoding="utf-8", errors="replace") for f in wf.glob("*.yml")) if wf.is_dir() else ""
    out = []
    if "ci/optdeps" in text:
        why = [c for c in changed if c.startswith(OPTDEPS_PREFIXES) or LLM_RE.search(c)
               or (c.startswith("torchrl/") and c.endswith(".py") and (repo / c).is_file()
                   and "find_spec(" in (repo / c).read_text(encoding="utf-8", errors="replace"))]
        if why:
            out.append(("ci/optdeps", f"optional-dependency code changed: {', '.join(why[:4])}"))
    if "ci/olddeps" in text:
        out.append(("ci/olddeps", "request it if the change uses a torch API newer than the oldest supported torch"))
    return out


def run_checks(args, report) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        state: dict = {}

        def setup():
            if args.repo:
                repo = Path(args.repo).expanduser().resolve()
                sr.expect(repo.is_dir(), f"--repo {args.repo} is not a folder")
                changed = list(args.paths)
                if args.diff:
                    changed += changed_from_git(repo, args.diff)
                sr.expect(changed, "no changed paths: pass paths relative to --repo or --diff RANGE")
                src = f"checkout {repo}"
            else:
                sr.expect(not args.diff and not args.paths, "changed paths and --diff need --repo PATH")
                repo = Path(tmp)
                changed = build_synthetic_checkout(repo)
                src = "synthetic checkout (no --repo given)"
            state.update(repo=repo, changed=sorted(set(changed)), tests=_test_files(repo))
            sr.expect(state["tests"], f"no test/test_*.py files under {repo}: is it a pytorch/rl checkout?")
            return f"{len(state['changed'])} changed path(s), {len(state['tests'])} test files in {src}"

        report.run("select:changes", setup)
        if "repo" not in state:
            return
        repo, tests = state["repo"], state["tests"]
        targets: dict[str, list[str]] = {}
        unmapped = []
        for rel in state["changed"]:
            hits, why = map_path(rel, repo, tests)
            if not hits and rel.startswith("torchrl/") and rel.endswith(".py"):
                unmapped.append(rel)
            for h in hits:
                targets.setdefault(h, []).append(f"{rel} ({why})")
        # One command per top-level test area.
        groups: dict[str, list[str]] = {}
        for t in sorted(targets):
            area = "/".join(Path(t).parts[:2]) if len(Path(t).parts) > 2 else t
            groups.setdefault(area, []).append(t)
        for area, ts in groups.items():
            dirs = [t for t in ts if (repo / t).is_dir()]
            ts = dirs + [t for t in ts if not any(t.startswith(d + "/") for d in dirs) and t not in dirs]
            cmd = f"python -m pytest {' '.join(ts)} -m \"not gpu\" -q"
            allw = list(dict.fromkeys(w for t in sorted(groups[area]) for w in targets[t]))
            whys = "; ".join(allw[:3]) + (f"; +{len(allw) - 3} more changed file(s)" if len(allw) > 3 else "")
            report.run(f"select:pytest {area}", lambda cmd=cmd, whys=whys: f"{cmd}  <- {whys}")
        for rel in unmapped:
            msg = (f"no focused test found for {rel}; add one next to its area's tests "
                   "(pytorch/rl CLAUDE.md: every new public class needs tests)")
            report.run("select:unmapped", (lambda m=msg: (_ for _ in ()).throw(sr.CheckFailed(m))) if args.strict
                       else (lambda m=msg: (_ for _ in ()).throw(sr.CheckSkipped(m + " (pass --strict to fail)"))))

        def labels():
            auto = labeler_labels(repo, state["changed"])
            opt = opt_in_labels(repo, state["changed"])
            parts = [f"auto (labeler.yml): {', '.join(auto) or 'none'}"]
            parts += [f"request {lab}: {why}" for lab, why in opt]
            return "; ".join(parts)

        report.run("select:labels", labels)

        def markers():
            from check_gpu_markers import check_source

            files = [t for t in targets if t.endswith(".py") and (repo / t).is_file()]
            for folder in [t for t in targets if (repo / t).is_dir()]:
                files += [p.relative_to(repo).as_posix() for p in (repo / folder).rglob("test_*.py")]
            bad = []
            for f in sorted(set(files)):
                v, _ = check_source(f, (repo / f).read_text(encoding="utf-8", errors="replace"))
                bad += [x.text() for x in v]
            sr.expect(not bad, f"{len(bad)} CUDA-gated test(s) lack @pytest.mark.gpu: {bad[0] if bad else ''}")
            return f"{len(set(files))} selected test file(s) follow the gpu-marker policy"

        report.run("select:gpu-markers", markers)


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)


if __name__ == "__main__":
    sr.main_guard(main)
