"""src/torchrl_skill/stack/probe.py on the stacks users have besides the verified one: how the versions are
found and what a line newer than the verified ones gets.

- detection finds torchrl whatever its distribution is called (``torchrl``,
  ``torchrl-nightly``, an editable checkout's version file, the package's ``__version__``),
  and the distribution installed beside the package wins over one of the same package
  elsewhere on the path (a nightly in a venv over a base holding torchrl); each case is a
  fake package and dist-info folder in a fresh interpreter, so the real stack is untouched;
- a nightly's date version is named as its line's pre-release, dated by ``first_released``;
- no version read of torch/tensordict/torchrl bypasses _stack (an AST scan of the scripts);
- a line newer than every line the matrix ran runs, its first row saying it is not verified
  (a faked 0.16.0, run end to end); below the range, and a tensordict behind torchrl or two
  lines ahead, still exit 2; a tensordict one line ahead runs and is named with its fix.
"""

from __future__ import annotations

import ast
import json
import textwrap

from torchrl_skill.stack import probe as _stack
from torchrl_skill.stack import check_torchrl_env as env_check
import pytest
from torchrl_skill.report import skill_report as sr
from conftest import BUNDLE, load_module, rows, run_main, run_python

PROBE = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    from torchrl_skill.stack import probe as _stack
    found = _stack.detect("torchrl")
    print(json.dumps({"found": found and found._asdict(), "imported": "torchrl" in sys.modules,
                      "requires": _stack.requires("torchrl")}))
""")


def _fake_torchrl(root, *, dist=None, version=None, version_file=None, dunder=None, requires=()):
    """A ``torchrl`` package under ``root`` (a sys.path entry), with a dist-info folder named
    ``dist``-``version`` beside it, a ``version.py`` holding ``version_file`` and/or an
    ``__init__`` setting ``__version__ = dunder``."""
    pkg = root / "torchrl"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"__version__ = {dunder!r}\n" if dunder else "")
    if version_file:
        (pkg / "version.py").write_text(f"__version__ = '{version_file}'\ngit_version = 'abc'\n")
    if dist:
        info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        meta = [f"Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
        (info / "METADATA").write_text("\n".join(meta) + "\n")
        (info / "top_level.txt").write_text("torchrl\n")
    return root


def _probe(tmp_path, root):
    proc = run_python(["-c", PROBE, str(BUNDLE / "src"), str(root)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dist, version, expected", [
    ("torchrl", "0.14.1", "0.14.1"),
    ("torchrl-nightly", "2026.10.27", "0.15.0.dev20261027"),
    ("torchrl", "0.16.0", "0.16.0"),
])
def test_the_distribution_beside_the_package_names_its_version_whatever_it_is_called(tmp_path, dist, version, expected):
    root = _fake_torchrl(tmp_path / "site", dist=dist, version=version, requires=["tensordict-nightly", "hoptorch>=0.1.4"])
    out = _probe(tmp_path, root)
    assert out["found"] == {"version": expected, "raw": version, "dist": dist, "how": "metadata"}
    assert out["requires"] == ["tensordict-nightly", "hoptorch>=0.1.4"]  # that distribution's, not the base's torchrl
    assert not out["imported"]


def test_a_checkout_without_metadata_is_read_from_its_version_file_without_importing(tmp_path):
    out = _probe(tmp_path, _fake_torchrl(tmp_path / "rl", version_file="0.15.0+abc123"))
    assert out["found"] == {"version": "0.15.0+abc123", "raw": "0.15.0+abc123", "dist": None, "how": "version file"}
    assert not out["imported"]


def test_the_last_resort_is_the_packages_own_version(tmp_path):
    out = _probe(tmp_path, _fake_torchrl(tmp_path / "rl", dunder="0.15.1"))
    # the installed torchrl's dist-info (elsewhere on the path) describes another copy: not used
    assert out["found"] == {"version": "0.15.1", "raw": "0.15.1", "dist": None, "how": "__version__"}
    assert out["imported"]


@pytest.mark.parametrize("raw, expected", [
    ("2026.10.27", "0.15.0.dev20261027"),  # after 0.14.0 (2026-09-10), before 0.15.0
    ("2026.11.10", "0.16.0.dev20261110"),  # the day 0.15.0 came out: main is 0.16
    ("2026.1.2", None),  # older than every line the table dates
    ("0.14.1", None),  # a release, not a date
])
def test_a_nightly_is_named_as_the_pre_release_of_the_line_after_the_newest_released(raw, expected):
    table = {"0.11": "2026-01-27", "0.14": "2026-09-10", "0.15": "2026-11-10"}
    assert _stack.nightly_line(raw, table) == expected


def test_no_script_reads_a_stack_version_or_requirement_past_the_stack_probe():
    """importlib.metadata.version/requires/distribution/metadata("torch"|"tensordict"|"torchrl")
    would miss torchrl-nightly and read a shadowed base install: only the stack probe (torchrl_skill/stack/probe.py) may call them."""
    stack = {"torch", "tensordict", "torchrl"}
    offenders = []
    paths = sorted((BUNDLE / "src").rglob("*.py")) + sorted(BUNDLE.glob("scripts/*.py")) + sorted(BUNDLE.glob("sub-skills/*/scripts/*.py"))
    for path in paths:
        if path == BUNDLE / "src" / "torchrl_skill" / "stack" / "probe.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("version", "requires", "distribution", "metadata")
                    and "metadata" in ast.unparse(node.func.value)
                    and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in stack):
                offenders.append(f"{path.relative_to(BUNDLE)}:{node.lineno}")
    assert paths and not offenders, offenders


def _fake(monkeypatch, **versions):
    """Make _stack see these torch/tensordict/torchrl versions (real ones for the rest)."""
    real = _stack.detect

    def detect(module):
        if module in versions:
            return _stack.Found(versions[module], versions[module], module, "metadata")
        return real(module)

    monkeypatch.setattr(_stack, "detect", detect)


def test_a_line_newer_than_any_the_matrix_ran_runs_marked_not_verified(monkeypatch):
    _fake(monkeypatch, torchrl="0.16.0", tensordict="0.16.1")
    versions = sr.require_stack(import_torchrl=False)
    note = _stack.stack_note(versions)
    newest = _stack.newest_run_line()
    assert _stack._release(newest) < (0, 16)
    assert f"line 0.16 is newer than the newest line the version matrix ran ({newest}): NOT VERIFIED" in note
    assert f"[unverified on torchrl 0.16.0]" in note


def test_a_faked_future_line_runs_an_instrument_end_to_end(monkeypatch):
    _fake(monkeypatch, torchrl="0.16.0", tensordict="0.16.1")
    code, report = run_main("scripts/check_torchrl_env")
    assert code in (0, 1), report
    first = report["checks"][0]
    assert first["name"] == "stack:version" and "NOT VERIFIED" in first["detail"]
    assert report["versions"]["torchrl"] == "0.16.0"
    # every core check read the live library and ran
    assert all(r[0] == "pass" for name, r in rows(report).items() if name.startswith("core:")), rows(report)


def test_the_verified_line_gets_no_first_row(monkeypatch):
    versions = sr.require_stack(import_torchrl=False)
    assert _stack.on_verified_stack(versions) and _stack.stack_note(versions) is None


@pytest.mark.parametrize("torchrl, tensordict, pairing", [
    ("0.14.1", "0.14.3", "same"), ("0.14.1", "0.15.3", "ahead"), ("0.15.0.dev20261027", "0.15.3", "same"),
    ("0.14.1", "0.16.0", "mismatched"), ("0.14.1", "0.13.0", "mismatched"), ("0.15.0", "0.14.3", "mismatched"),
])
def test_tensordict_pairing(torchrl, tensordict, pairing):
    assert _stack.td_pairing(torchrl, tensordict) == pairing


def test_below_the_range_still_exits_2(monkeypatch, capsys):
    _fake(monkeypatch, torchrl="0.10.1", tensordict="0.10.0")
    with pytest.raises(sr.CannotRun):
        sr.require_stack(import_torchrl=False)
    assert "torchrl 0.10.1 is outside the range this bundle supports (torchrl>=0.11)" in capsys.readouterr().err


@pytest.mark.parametrize("tensordict", ["0.13.0", "0.16.0"])
def test_tensordict_behind_or_two_lines_ahead_exits_2(monkeypatch, capsys, tensordict):
    _fake(monkeypatch, tensordict=tensordict)
    with pytest.raises(sr.CannotRun):
        sr.require_stack(import_torchrl=False)
    err = capsys.readouterr().err
    assert f"tensordict {tensordict} is not the line of torchrl 0.14.1" in err
    assert "pip install 'tensordict<0.15.0,>=0.14.3'" in err and len(err.strip().splitlines()) == 1


def test_tensordict_one_line_ahead_runs_and_is_named_with_its_fix(monkeypatch):
    # tensordict 0.15.3 beside torchrl 0.14.1: torchrl's metadata forbids it, --no-deps installs it
    _fake(monkeypatch, tensordict="0.15.3")
    versions = sr.require_stack(import_torchrl=False)
    note = _stack.stack_note(versions)
    assert "tensordict 0.15.3 is one line ahead of torchrl 0.14.1" in note
    assert "fix: pip install 'tensordict<0.15.0,>=0.14.3'" in note
    monkeypatch.setattr(sr, "installed_version", lambda dist: {"tensordict": "0.15.3"}.get(dist, "0.14.1"))
    with pytest.raises(sr.CheckFailed, match=r"tensordict 0\.15\.3 is outside torchrl's declared range "
                                             r"tensordict<0\.15\.0,>=0\.14\.3 \(one line ahead of torchrl 0\.14\.1's line\); "
                                             r"fix: pip install 'tensordict<0\.15\.0,>=0\.14\.3'"):
        env_check.check_tensordict_range()
    # its nearest correct twin passes
    monkeypatch.setattr(sr, "installed_version", lambda dist: {"tensordict": "0.14.3"}.get(dist, "0.14.1"))
    assert "satisfies" in env_check.check_tensordict_range()


@pytest.mark.parametrize("torchrl, verdict", [
    ("0.15.0.dev20261027", "pass"),  # the nightly the matrix ran as the 0.15 stand-in
    ("0.15.0", "fail"),  # the release itself: not the stack that ran
])
def test_provenance_passes_the_stand_in_the_matrix_ran_and_not_its_release(monkeypatch, torchrl, verdict):
    check_provenance = load_module("development-and-testing/check_provenance")
    ran = _stack.stack_lines()["lines"]["0.15"]
    if "stand_in" not in ran:
        pytest.skip("the 0.15 line runs on its release now (version_matrix.py --adopt): no stand-in to tell apart")
    stack = {"torch": ran["torch"], "tensordict": ran["tensordict"], "torchrl": torchrl}
    monkeypatch.setattr(sr, "installed_version", lambda dist: stack.get(dist))
    claim = check_provenance.read_provenance(check_provenance.PROVENANCE)
    if verdict == "pass":
        detail = check_provenance.check_dist("torchrl", claim)
        assert "the stack the version matrix ran on line 0.15, standing in for its release: torchrl-nightly" in detail
    else:
        with pytest.raises(sr.CheckFailed, match="but the bundle was verified on"):
            check_provenance.check_dist("torchrl", claim)
