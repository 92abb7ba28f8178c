"""Check pytorch/rl test files for the gpu-marker policy: CUDA-gated tests must carry pytest.mark.gpu.

pytorch/rl's Linux CI runs CPU jobs with -m 'not gpu' and GPU jobs with -m gpu (its
CLAUDE.md, section "The gpu marker"). A test skipped without CUDA (skipif on
torch.cuda.is_available(), torch.cuda.device_count(), _has_cuda, _has_triton, or a
reason that says CUDA/GPU) but lacking the gpu marker at function, class or module
level (pytestmark) never runs in CI. Parses files with ast; exits 1 on a violation or a
file that does not parse (named; the scan goes on), 2 for a path that does not exist.
With no PATH it checks a bundled synthetic example that follows the policy.
"""

from __future__ import annotations

import ast
import tempfile
from dataclasses import dataclass
from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/development-and-testing/scripts/check_gpu_markers.py test/test_collectors.py test/modules/"
CUDA_CALLS = ("cuda.is_available", "cuda.device_count")
CUDA_FLAGS = ("_has_cuda", "_has_triton")
REASON_WORDS = ("cuda", "gpu")

GOOD_EXAMPLE = '''
import pytest
import torch

_has_cuda = torch.cuda.is_available()
pytestmark_local = None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_only():
    pass


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.device_count() else []))
def test_both_paths(device):
    pass


@pytest.mark.gpu
class TestTriton:
    @pytest.mark.skipif(not _has_cuda, reason="triton kernels")
    def test_kernel(self):
        pass
'''


@dataclass
class Violation:
    """A CUDA-gated test without the gpu marker (``line`` is the def/class line)."""

    path: str
    line: int
    test: str
    gate: str

    def text(self) -> str:
        return (f"{self.path}:{self.line} {self.test} is skipped without CUDA ({self.gate}) but has no "
                "@pytest.mark.gpu; add @pytest.mark.gpu (or pytestmark = pytest.mark.gpu) so the -m gpu CI job runs it")


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("paths", nargs="*", help="test files or folders (default: a bundled synthetic example)")
    parser.add_argument("--exempt", action="append", default=[], metavar="GLOB",
                        help="skip files matching GLOB, e.g. 'test/libs/test_habitat.py' for suites that a dedicated "
                             "GPU workflow runs without -m gpu (repeatable)")
    return parser


def _is_mark(node, name: str) -> bool:
    """``pytest.mark.<name>`` or ``pytest.mark.<name>(...)``."""
    if isinstance(node, ast.Call):
        node = node.func
    return (isinstance(node, ast.Attribute) and node.attr == name
            and isinstance(node.value, ast.Attribute) and node.value.attr == "mark")


def _cuda_gate(node) -> str | None:
    """Describe the CUDA condition of a ``pytest.mark.skipif(...)`` decorator, or None."""
    if not (isinstance(node, ast.Call) and _is_mark(node, "skipif")):
        return None
    cond = ast.unparse(node.args[0]) if node.args else ""
    for kw in node.keywords:
        if kw.arg == "condition":
            cond = ast.unparse(kw.value)
    if any(c in cond for c in CUDA_CALLS) or any(f in cond for f in CUDA_FLAGS):
        return f"skipif({cond})"
    for kw in node.keywords:
        if kw.arg == "reason" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            if any(w in kw.value.value.lower() for w in REASON_WORDS):
                return f"skipif(..., reason={kw.value.value!r})"
    return None


def _marks_of(value) -> list:
    """Marks in a ``pytestmark = ...`` value (single mark or list/tuple)."""
    return list(value.elts) if isinstance(value, (ast.List, ast.Tuple)) else [value]


def check_source(path: str, text: str) -> tuple[list[Violation], int]:
    """Return ``(violations, number of CUDA-gated tests seen)`` for one test module's text.

    Raises ``SyntaxError`` for unparsable text.
    """
    tree = ast.parse(text, filename=path)
    module_gpu, module_gate = False, None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            for m in _marks_of(node.value):
                module_gpu |= _is_mark(m, "gpu")
                module_gate = module_gate or _cuda_gate(m)
    out: list[Violation] = []
    gated = 0

    def walk(body, inherited_gpu: bool, inherited_gate: str | None, prefix: str):
        nonlocal gated
        for node in body:
            if isinstance(node, ast.ClassDef):
                gpu = inherited_gpu or any(_is_mark(d, "gpu") for d in node.decorator_list)
                gate = inherited_gate or next((g for d in node.decorator_list if (g := _cuda_gate(d))), None)
                walk(node.body, gpu, gate, f"{prefix}{node.name}::")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                gpu = inherited_gpu or any(_is_mark(d, "gpu") for d in node.decorator_list)
                gate = next((g for d in node.decorator_list if (g := _cuda_gate(d))), None) or inherited_gate
                if gate:
                    gated += 1
                    if not gpu:
                        out.append(Violation(path, node.lineno, prefix + node.name, gate))

    walk(tree.body, module_gpu, module_gate, "")
    return out, gated


def iter_test_files(paths: list[Path]):
    """Yield ``test_*.py`` / ``*_test.py`` files (a file given explicitly is always yielded)."""
    for p in paths:
        if p.is_file():
            yield p
        else:
            yield from sorted(f for f in p.rglob("*.py") if f.name.startswith("test_") or f.name.endswith("_test.py"))


@dataclass
class MarkerScan:
    """What :func:`scan_markers` found: the violations, CUDA-gated tests seen, files read,
    files exempted and files that do not parse (``(path, reason)``)."""

    violations: list[Violation]
    gated: int
    files: int
    exempt: int
    unparsable: list[tuple[str, str]]


def scan_markers(paths, args) -> sr.Passed:
    """Parse every test file under ``paths`` (minus ``--exempt``); one that does not parse is
    listed, never the end of the scan."""
    out = MarkerScan([], 0, 0, 0, [])
    for f in iter_test_files(paths):
        if any(f.match(g) or f.as_posix().endswith(g) for g in args.exempt):
            out.exempt += 1
            continue
        try:
            v, g = check_source(str(f), f.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, RecursionError, MemoryError, ValueError) as err:
            out.unparsable.append((str(f), sr.first_line(err)))
            continue
        out.violations += v
        out.gated += g
        out.files += 1
    sr.expect(out.files or out.unparsable, f"no test files under {', '.join(map(str, paths))}")
    sr.evidence(out.files, "test files parsed")
    extra = f"; {out.exempt} exempt" if out.exempt else ""
    bad = f"; {len(out.unparsable)} could not be parsed" if out.unparsable else ""
    return sr.Passed(f"parsed {out.files} test file(s){extra}{bad}; {out.gated} CUDA-gated test(s) found", out)


CHECKS = [sr.Check("gpu-markers:parse", scan_markers, gives="scan", proves="every test file under the paths parses")]


def report_scan(report, scan: MarkerScan) -> None:
    """One failing row per unparsable file and per violation, then the policy summary."""
    for path, reason in scan.unparsable:
        report.add("gpu-markers:unparsable", "fail", f"{path}: {reason}; not checked (fix the file, or --exempt it)")
    for v in scan.violations:
        report.add("gpu-markers:missing", "fail", v.text())
    marked = scan.gated - len(scan.violations)
    report.add("gpu-markers:policy", "pass" if not scan.violations else "fail",
               f"{marked}/{scan.gated} CUDA-gated test(s) carry @pytest.mark.gpu",
               proves="every CUDA-gated test carries @pytest.mark.gpu", evidence=scan.gated)


def run_checks(args, report) -> None:
    for p in args.paths:
        if not Path(p).exists():
            sr.cannot_run(f"path {p} does not exist", "pass existing test files or folders")
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(p) for p in args.paths]
        if not paths:  # the bundled example, written where the scan can read it
            paths = [Path(tmp) / "test_synthetic_gpu.py"]
            paths[0].write_text(GOOD_EXAMPLE, encoding="utf-8")
        found = sr.run_declared(CHECKS, report, args=args, paths=paths)
        if "scan" in found:
            report_scan(report, found["scan"])


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
