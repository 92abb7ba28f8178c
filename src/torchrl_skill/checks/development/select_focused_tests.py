"""Select the focused pytorch/rl tests, pytest commands and CI labels for a set of changed files.

Given a pytorch/rl checkout (--repo) and changed paths (positional, relative to the
checkout) or a git range (--diff main...HEAD), maps each torchrl/ source file to the
test files that cover it (same-name test file, then the area's test folder, then test
files importing the module), prints one CPU pytest command per area (-m "not gpu"),
the labels .github/labeler.yml applies, and the opt-in CI labels (ci/optdeps,
ci/olddeps) to request. Selected tests are also checked for the gpu-marker policy.
With no arguments it runs on a small synthetic checkout built in a temporary folder.
Exits 2 when --repo is not a folder, --diff is given outside a git checkout or names a
range git does not know, or there are no changed paths to map.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = ("python $SKILL_DIR/sub-skills/development-and-testing/scripts/select_focused_tests.py "
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
    """``git -C repo diff --name-only RANGE``. Exits 2 (one line, git's own reason) when git is
    missing, ``repo`` is not a git checkout or git rejects the range."""
    if shutil.which("git") is None:
        sr.cannot_run("--diff needs git, which is not on PATH", "install git, or pass the changed paths instead")

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)

    def reason(proc) -> str:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        return next((ln for ln in lines if ln.startswith(("fatal:", "error:"))), lines[0] if lines else f"exit {proc.returncode}")

    probe = git("rev-parse", "--git-dir")
    if probe.returncode != 0:
        sr.cannot_run(f"--repo {repo} is not a git checkout ({reason(probe)})", "pass the folder of your pytorch/rl clone")
    proc = git("diff", "--name-only", rng)
    if proc.returncode != 0:
        sr.cannot_run(f"git diff --name-only {rng} failed in {repo}: {reason(proc)}", "pass a range git knows, e.g. origin/main...HEAD")
    return [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]


def list_test_files(repo: Path) -> list[str]:
    """Every ``test/**/test_*.py`` of the checkout, repo-relative, sorted."""
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


@dataclass
class Selection:
    """The input of one run: the checkout, its changed paths and its test files."""

    repo: Path
    changed: list[str]
    tests: list[str]
    source: str


def select_inputs(args, tmp: str) -> Selection:
    """Read ``--repo``/``--diff``/paths, or build the synthetic checkout under ``tmp``.
    Bad combinations exit 2 (they are argument errors, not findings)."""
    if not args.repo:
        if args.diff or args.paths:
            sr.cannot_run("changed paths and --diff need --repo PATH", "add --repo ~/rl (your pytorch/rl clone)")
        repo = Path(tmp)
        return Selection(repo, sorted(build_synthetic_checkout(repo)), list_test_files(repo), "synthetic checkout (no --repo given)")
    repo = Path(args.repo).expanduser().resolve()
    if not repo.is_dir():
        sr.cannot_run(f"--repo {args.repo} is not a folder", "pass the folder of your pytorch/rl clone")
    changed = list(args.paths) + (changed_from_git(repo, args.diff) if args.diff else [])
    if not changed:
        sr.cannot_run("no changed paths", "pass paths relative to --repo, or --diff RANGE")
    return Selection(repo, sorted(set(changed)), list_test_files(repo), f"checkout {repo}")


def check_changes(selection) -> str:
    sr.expect(selection.tests, f"no test/test_*.py files under {selection.repo}: is it a pytorch/rl checkout?")
    sr.evidence(len(selection.changed), "changed paths")
    return f"{len(selection.changed)} changed path(s), {len(selection.tests)} test files in {selection.source}"


def check_targets(selection) -> sr.Passed:
    """Map every changed path (:func:`map_path`); the value is ``(targets, unmapped)``."""
    targets: dict[str, list[str]] = {}
    unmapped = []
    for rel in selection.changed:
        hits, why = map_path(rel, selection.repo, selection.tests)
        if not hits and rel.startswith("torchrl/") and rel.endswith(".py"):
            unmapped.append(rel)
        for h in hits:
            targets.setdefault(h, []).append(f"{rel} ({why})")
    sr.evidence(len(selection.changed), "changed paths mapped")
    return sr.Passed(f"{len(selection.changed)} changed path(s) -> {len(targets)} test target(s)"
                     + (f"; {len(unmapped)} torchrl/ file(s) with no test" if unmapped else ""), (targets, unmapped))


def check_labels(selection) -> str:
    auto = labeler_labels(selection.repo, selection.changed)
    sr.evidence(len(selection.changed), "changed paths labelled")
    parts = [f"auto (labeler.yml): {', '.join(auto) or 'none'}"]
    parts += [f"request {lab}: {why}" for lab, why in opt_in_labels(selection.repo, selection.changed)]
    return "; ".join(parts)


def check_markers(selection, mapping) -> str:
    from torchrl_skill.checks.development.check_gpu_markers import check_source

    repo, (targets, _) = selection.repo, mapping
    files = [t for t in targets if t.endswith(".py") and (repo / t).is_file()]
    for folder in [t for t in targets if (repo / t).is_dir()]:
        files += [p.relative_to(repo).as_posix() for p in (repo / folder).rglob("test_*.py")]
    bad = []
    for f in sorted(set(files)):
        v, _ = check_source(f, (repo / f).read_text(encoding="utf-8", errors="replace"))
        bad += [x.text() for x in v]
    sr.expect(not bad, f"{len(bad)} CUDA-gated test(s) lack @pytest.mark.gpu: {bad[0] if bad else ''}")
    sr.evidence(len(set(files)), "selected test files scanned")
    return f"{len(set(files))} selected test file(s) follow the gpu-marker policy"


CHECKS = [
    sr.Check("select:changes", check_changes, proves="the changed paths and the checkout's test files are read"),
    sr.Check("select:targets", check_targets, gives="mapping", proves="every changed path is mapped to its tests or named unmapped"),
    sr.Check("select:labels", check_labels, proves="the labels the changed paths get are read from labeler.yml"),
    sr.Check("select:gpu-markers", check_markers, proves="every selected test file follows the gpu-marker policy"),
]


def pytest_commands(repo: Path, targets: dict[str, list[str]]) -> list[tuple[str, str]]:
    """``[(area, "python -m pytest ... -m \"not gpu\" -q  <- why")]``: one CPU command per test area."""
    groups: dict[str, list[str]] = {}
    for t in sorted(targets):
        area = "/".join(Path(t).parts[:2]) if len(Path(t).parts) > 2 else t
        groups.setdefault(area, []).append(t)
    out = []
    for area, ts in groups.items():
        dirs = [t for t in ts if (repo / t).is_dir()]
        ts = dirs + [t for t in ts if not any(t.startswith(d + "/") for d in dirs) and t not in dirs]
        whys = list(dict.fromkeys(w for t in sorted(groups[area]) for w in targets[t]))
        more = f"; +{len(whys) - 3} more changed file(s)" if len(whys) > 3 else ""
        out.append((area, f"python -m pytest {' '.join(ts)} -m \"not gpu\" -q  <- {'; '.join(whys[:3])}{more}"))
    return out


def report_selection(report, selection, mapping, strict: bool) -> None:
    """One row per pytest command, then one per torchrl/ file with no test (fails with ``strict``)."""
    targets, unmapped = mapping
    for area, command in pytest_commands(selection.repo, targets):
        report.add(f"select:pytest {area}", "pass", command)
    for rel in unmapped:
        msg = (f"no focused test found for {rel}; add one next to its area's tests "
               "(pytorch/rl CLAUDE.md: every new public class needs tests)")
        report.add("select:unmapped", "fail" if strict else "skip", msg if strict else msg + " (pass --strict to fail)")


def run_checks(args, report) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        selection = select_inputs(args, tmp)
        found = sr.run_declared(CHECKS, report, args=args, selection=selection)
        if "mapping" in found:
            report_selection(report, selection, found["mapping"], args.strict)


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
