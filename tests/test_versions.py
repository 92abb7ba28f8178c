"""src/torchrl_skill/stack/versions.py and its generated data: what the bundle says about a torchrl release
other than the installed one, and that the data behind it is true.

- explain.py's version notes: on an older release, what a name is called or where it lives
  in the newest line, and the upstream fixes to it that release lacks, each with its
  boundary (the release that has the fix, or still has the old name, gets no note);
- ``--error``: fixes that changed or removed a message, shown to a release lacking them only;
- src/torchrl_skill/data/upstream_index.json holds facts only and agrees with the installed library; its
  builder (benchmarks/build_fix_index.py) finds a fix in a small git history it is given;
- ``check_rows`` holds on the verified stack and rejects a row that is wrong there;
- benchmarks/stamp_versions.py reads since/until from the versions text and its stamp is
  mechanical (re-running it changes nothing; only its own lines differ);
- what an older line does differently is told by its effect: a traceback frame in the
  module a later release split still confirms its entry; 0.11/0.12's float policy version
  skips the bundle's own collector check and fails a user's.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys

import pytest
from conftest import BUNDLE, load_module, run_main, rows
from torchrl_skill import data

from torchrl_skill.stack import versions as _versions
from torchrl_skill.explain import errors as explain_errors, notes as explain_notes

sys.path.insert(0, str(BUNDLE / "benchmarks"))
import build_fix_index  # noqa: E402
import stamp_versions  # noqa: E402

INDEX = json.loads(data.UPSTREAM_INDEX.read_text())
OLD = {"python": "3.11.7", "torch": "2.11.0", "tensordict": "0.12.4", "torchrl": "0.12.0"}


def _release_before(version: str) -> str:
    """A release of the index just before ``version`` (its predecessor in ``releases``)."""
    releases = INDEX["releases"]
    return releases[releases.index(version) - 1]


# ---------------------------------------------------------------------------- explain NAME
def test_an_old_collector_name_says_what_it_is_called_in_the_newest_line():
    notes = explain_notes.version_notes("SyncDataCollector", OLD)
    assert any(n.startswith("in torchrl 0.14: torchrl.collectors.Collector") and "removed in 0.13.0" in n for n in notes), notes
    # the newest line itself gets no such note, nor a release that no longer has the name
    assert not any("in torchrl 0.14" in n for n in explain_notes.version_notes("SyncDataCollector", {**OLD, "torchrl": "0.14.1"}))
    assert not any("in torchrl 0.14" in n for n in explain_notes.version_notes("SyncDataCollector", {**OLD, "torchrl": "0.13.3"}))


def test_a_name_added_later_says_the_release_that_added_it():
    notes = explain_notes.version_notes("MultiAgentGAE", OLD)
    assert notes and notes[0].startswith("added in torchrl 0.13: the installed 0.12.0 lacks it")
    assert "from torchrl.objectives.value import MultiAgentGAE" in notes[0]
    assert not any("added in" in n for n in explain_notes.version_notes("MultiAgentGAE", {**OLD, "torchrl": "0.13.3"}))


@pytest.mark.parametrize("fix", [f for f in INDEX["fixes"] if f["first"] and f["first"] != INDEX["releases"][0]
                                 and any(n[:1].isupper() for n in f["names"])][:6], ids=lambda f: f"pr{f['pr']}")
def test_fixes_are_listed_to_the_release_before_the_fix_and_not_to_the_one_that_has_it(fix):
    name = next(n for n in fix["names"] if n[:1].isupper())
    before, first = _release_before(fix["first"]), fix["first"]
    assert fix["pr"] in [f["pr"] for f in _versions.fixes_for(name, before)]
    assert fix["pr"] not in [f["pr"] for f in _versions.fixes_for(name, first)]
    note = explain_notes.version_notes(name, {**OLD, "torchrl": before})[-1]
    assert f"pytorch/rl#{fix['pr']} ({first})" in note and f"torchrl {before} lacks" in note


def test_explain_on_the_verified_stack_adds_no_version_note_to_a_name_without_missing_fixes():
    code, report = run_main("scripts/explain", "StepCounter")
    status, detail = rows(report)["explain:StepCounter"]
    assert code == 0 and status == "pass" and "version:" not in detail
    assert not any(c["name"] == "stack:version" for c in report["checks"])  # the verified stack: no first row


# ---------------------------------------------------------------------------- explain --error
def _removed_message_fix():
    return next(f for f in INDEX["fixes"] if f["removed"] and f["first"])


def test_an_error_whose_message_a_fix_removed_names_the_fix_to_a_release_lacking_it():
    fix = _removed_message_fix()
    text = "ValueError: " + fix["removed"][0].replace("{}", "3")
    before = _release_before(fix["first"])
    answers = explain_errors.fix_answers(text, {**OLD, "torchrl": before})
    assert [name for name, _ in answers] == [f"upstream:fix-{fix['pr']}"]
    assert f"first in torchrl {fix['first']}; torchrl {before} lacks it" in answers[0][1][0]
    assert explain_errors.fix_answers(text, {**OLD, "torchrl": fix["first"]}) == []
    assert explain_errors.fix_answers("ValueError: something else entirely went wrong here", {**OLD, "torchrl": before}) == []


# ---------------------------------------------------------------------------- the index itself
def test_the_index_records_facts_only():
    assert INDEX["schema"] == "torchrl-skill.upstream-index/1" and re.fullmatch(r"[0-9a-f]{40}", INDEX["built_from"]["commit"])
    assert data.UPSTREAM_INDEX.stat().st_size < 400_000
    ident = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
    for fix in INDEX["fixes"]:
        assert set(fix) == {"pr", "commit", "first", "modules", "names", "removed", "added"}, fix
        assert fix["first"] is None or fix["first"] in INDEX["releases"]
        assert all(ident.fullmatch(n) for n in fix["names"] + fix["modules"]), fix


def test_the_newest_lines_exports_resolve_in_the_installed_library():
    newest = _versions.newest_line()
    core = ("torchrl.collectors", "torchrl.data", "torchrl.envs", "torchrl.modules", "torchrl.objectives")
    pairs = [(pkg, name) for name, where in INDEX["exports"].items() for pkg, lines in where.items()
             if newest in lines and pkg in core]
    assert len(pairs) > 300
    missing = [f"{p}.{n}" for p, n in pairs if not hasattr(importlib.import_module(p), n)]
    assert missing == []


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def test_the_builder_finds_a_fix_its_release_its_names_and_messages(tmp_path):
    repo = tmp_path / "rl"
    (repo / "torchrl").mkdir(parents=True)
    _git(tmp_path, "init", "-q", str(repo))
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    src = repo / "torchrl" / "buffers.py"
    src.write_text("class Buffer:\n    def extend(self, data):\n        raise ValueError(f'cannot extend with {data} items here')\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "init (#1)")
    _git(repo, "tag", "v0.11.0")
    src.write_text("class Buffer:\n    def extend(self, data):\n        raise ValueError(f'data of {data} does not fit this buffer')\n")
    _git(repo, "commit", "-qam", "[BugFix] Buffer.extend message (#7)")
    (repo / "torchrl" / "other.py").write_text("def helper():\n    return 1\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "[Feature] not a fix (#8)")
    _git(repo, "tag", "v0.12.0")
    data = build_fix_index.build(repo, "0.11.0", {})
    assert [f["pr"] for f in data["fixes"]] == [7]
    fix = data["fixes"][0]
    assert fix["first"] == "0.12.0" and fix["names"] == ["Buffer", "Buffer.extend"] and fix["modules"] == ["torchrl.buffers"]
    assert fix["removed"] == ["cannot extend with {} items here"] and fix["added"] == ["data of {} does not fit this buffer"]
    assert data["exports"] == {} and data["releases"] == ["0.11.0", "0.12.0"]


def test_private_names_are_cut_and_private_modules_dropped():
    tree = ast.parse("class Pub:\n    def _priv(self):\n        x = 1\n\ndef _helper():\n    y = 2\n")
    assert build_fix_index.enclosing_names(tree, {3}) == {"Pub"} and build_fix_index.enclosing_names(tree, {6}) == set()
    assert build_fix_index.public_module("torchrl/collectors/_single.py") is None
    assert build_fix_index.public_module("torchrl/data/__init__.py") == "torchrl.data"


# ---------------------------------------------------------------------------- rows and proofs
def test_every_api_changes_row_holds_on_the_verified_stack():
    results = _versions.check_rows()
    assert [k for k, v in results.items() if v.startswith("failed")] == []
    assert sum(v == "passed" for v in results.values()) >= 50


def test_a_row_wrong_for_the_installed_release_fails(monkeypatch):
    wrong = {"names": [{"old": "torchrl.collectors.Collector", "new": "torchrl.collectors.MultiSyncCollector",
                        "changed_in": "0.11.0", "removed_in": "0.13.0"}], "deprecated": [], "kwargs": [], "keys": []}
    monkeypatch.setattr(_versions, "api_changes", lambda: wrong)
    assert _versions.check_rows()["names:torchrl.collectors.Collector"] == "failed: old: expected absent, found present"
    # the same row judged for a release before its removal holds
    assert _versions.check_rows("0.12.0")["names:torchrl.collectors.Collector"] == "passed"


def test_proof_nodes_name_tests_that_exist():
    nodes = _versions.proof_nodes()
    assert len(nodes) > 150
    for node in nodes:
        assert (BUNDLE / node.split("::")[0]).is_file(), node


# ---------------------------------------------------------------------------- the stamp
@pytest.mark.parametrize("text, expected", [
    ("torchrl 0.11.0 and later; 0.14.1 (verified).", ("0.11.0", None)),
    ("torchrl/tensordict 0.9 and later; 0.14.1 (verified).", ("0.9.0", None)),
    ("torchrl 0.11.0 to 0.14.1 (verified: still works, warns).", ("0.11.0", None)),
    ("fixed in 0.11.0, 0.12.0 and 0.14; verified on 0.14.1.", (None, "0.14.0")),
    ("torchrl 0.14.1 (verified); pytorch/rl#3711 fixed in 0.13.0.", (None, None)),
    ("torchrl 0.14.1 (verified).", (None, None)),
])
def test_since_and_until_are_read_from_the_versions_text(text, expected):
    assert stamp_versions.since_until(text) == expected


def test_the_stamp_is_mechanical_and_idempotent(tmp_path, monkeypatch):
    index, table = tmp_path / "error_index.json", tmp_path / "api_changes.json"
    unstamped = [ln for ln in stamp_versions.INDEX.read_text().splitlines(keepends=True) if not re.match(r'\s*"since": ', ln)]
    index.write_text("".join(unstamped))
    shutil.copy(stamp_versions.TABLE, table)
    monkeypatch.setattr(stamp_versions, "INDEX", index)
    monkeypatch.setattr(stamp_versions, "TABLE", table)
    matrix = {"lines": {"0.13": {"stack": {"torchrl": "0.13.3"}, "groups": {"proofs": {"passed_items": [
        "tests/test_error_index.py::test_trigger_raises_the_real_error_and_the_index_ranks_it_first[cannot-import-name-syncdatacollector-from-torchrl]"]}}}}}
    before = stamp_versions.INDEX.read_text().splitlines()
    stamp_versions.stamp_index(matrix)
    once = index.read_text()
    stamp_versions.stamp_index(matrix)
    assert index.read_text() == once
    entries = {e["id"]: e for e in json.loads(once)["entries"]}
    assert entries["cannot-import-name-syncdatacollector-from-torchrl"]["verified_on"] == ["0.13.3", "0.14.1"]
    assert entries["cannot-import-name-syncdatacollector-from-torchrl"]["since"] == "0.13.0"
    assert entries["missing-main-guard"]["verified_on"] == ["0.14.1"]
    unrepro = [e for e in entries.values() if e.get("unreproducible") and not e.get("proof")]
    assert unrepro and all("verified_on" not in e for e in unrepro)
    added = [ln for ln in once.splitlines() if ln not in before]
    assert added and all(re.match(r'\s*"since": ', ln) for ln in added)


def test_a_release_newer_than_the_data_gets_no_version_note():
    newer = {**OLD, "torchrl": "0.15.0"}
    assert explain_notes.version_notes("StepCounter", newer) == [] and explain_notes.version_notes("SyncDataCollector", newer) == []
    fix = _removed_message_fix()
    assert explain_errors.fix_answers("ValueError: " + fix["removed"][0].replace("{}", "3"), newer) == []


# ---------------------------------------------------------------------------- a check an older line cannot run
@pytest.mark.parametrize("err, what", [
    (ModuleNotFoundError("No module named 'torchrl.render'", name="torchrl.render"), "torchrl.render"),
    (ImportError("cannot import name 'ProcessLogger' from 'torchrl.record.loggers' (x.py)"), "torchrl.record.loggers.ProcessLogger"),
    (AttributeError("'CSVLogger' object has no attribute 'start'"), "CSVLogger.start"),
])
def test_what_an_older_line_lacks_is_named_with_the_line_that_added_it(err, what):
    said = _versions.missing_feature(err, "0.13.3")
    assert said == (f"not run: torchrl 0.13.3 has no {what} (added in torchrl 0.14); to run this check: "
                    f"pip install torchrl=={_versions.newest_release()} with its tensordict and torch")
    assert _versions.missing_feature(err, "0.14.1") is None  # on the newest line it is a fault


@pytest.mark.parametrize("err", [
    AttributeError("'CSVLogger' object has no attribute 'strat'"),  # a typo: no line has it
    ModuleNotFoundError("No module named 'torchrl.nowhere'", name="torchrl.nowhere"),
    ImportError("cannot import name 'Collector' from 'torchrl.collectors'"),  # every supported line has it
    KeyError("action"),
])
def test_a_fault_that_is_not_an_older_release_stays_a_fault(err):
    assert _versions.missing_feature(err, "0.13.3") is None


def test_report_skips_a_check_the_older_line_cannot_run_and_fails_it_on_the_newest(monkeypatch):
    from torchrl_skill.report import skill_report as sr

    # a check of the bundle's own: its code is compiled as if it lived in scripts/
    space: dict = {}
    exec(compile("def uses_render():\n    raise ModuleNotFoundError(\"No module named 'torchrl.render'\", name='torchrl.render')\n",
                 str(BUNDLE / "scripts" / "a_bundle_check.py"), "exec"), space)
    uses_render = space["uses_render"]

    real = _versions.installed_version  # the one version read (src/torchrl_skill/stack/probe.py), whatever torchrl's distribution
    for installed, status in (("0.13.3", "skip"), ("0.14.1", "fail")):
        monkeypatch.setattr(_versions, "installed_version", lambda d, v=installed: v if d == "torchrl" else real(d))
        report = sr.Report("x.py", json_mode=True)
        report.run("render", uses_render)
        assert report.result("render").status == status, report.result("render")


@pytest.mark.parametrize("err, what, since", [
    (TypeError("Keys ['auto_register_policy_transforms'] are unknown to Collector."), "Collector(auto_register_policy_transforms=)", "0.13"),
    (TypeError("SliceSampler.__init__() got an unexpected keyword argument 'pad_output'"), "SliceSampler(pad_output=)", "0.13"),
])
def test_a_keyword_an_older_line_lacks_is_named_with_its_line(err, what, since):
    said = _versions.missing_feature(err, "0.11.1")
    assert said is not None and said.startswith(f"not run: torchrl 0.11.1 has no {what} (added in torchrl {since})")
    assert _versions.missing_feature(err, since + ".0") is None  # the line that has it: a real fault
    typo = TypeError(str(err).replace("pad_output", "pad_outptu").replace("auto_register", "auto_regsiter"))
    assert _versions.missing_feature(typo, "0.11.1") is None


def test_a_users_call_the_older_line_rejects_stays_a_failure(monkeypatch, tmp_path):
    """The skip is for the bundle's own checks only: when user code made the call (a target's
    file, here one outside the bundle), the release lacking it is the user's fault to fix."""
    from torchrl_skill.report import skill_report as sr

    user = tmp_path / "user_env.py"
    user.write_text("def make():\n    raise ModuleNotFoundError(\"No module named 'torchrl.render'\", name='torchrl.render')\n")
    spec = importlib.util.spec_from_file_location("user_env", user)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    real = _versions.installed_version
    monkeypatch.setattr(_versions, "installed_version", lambda d: "0.13.3" if d == "torchrl" else real(d))
    report = sr.Report("x.py", json_mode=True)
    report.run("user", module.make)
    assert report.result("user").status == "fail" and "torchrl.render" in report.result("user").detail


# ---------------------------------------------------------------------------- older-line faults
# torchrl 0.11.1's own traceback (the version matrix's line 0.11), the site-packages prefix cut
OLD_BUFFER_TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/train.py", line 6, in <module>\n    rb.extend(td)\n'
    '  File "/venv/lib/python3.11/site-packages/torchrl/data/replay_buffers/replay_buffers.py", line 1640, in extend\n'
    "    self._set_index_in_td(tensordicts, index)\n"
    '  File "/venv/lib/python3.11/site-packages/torchrl/data/replay_buffers/replay_buffers.py", line 1671, in _set_index_in_td\n'
    '    tensordict.set("index", expand_as_right(index, tensordict))\n'
    '  File "/venv/lib/python3.11/site-packages/tensordict/utils.py", line 468, in expand_as_right\n    raise RuntimeError(\n'
    "RuntimeError: tensor shape is incompatible with dest shape, got: tensor.shape=torch.Size([2, 2]), dest=torch.Size([2, 1])\n")


def test_a_frame_in_the_module_a_later_release_split_confirms_its_entry():
    """0.11-0.13 define _set_index_in_td in replay_buffers.py, 0.14 in the package of that
    name: the older frame confirms the entry; the same function in another module does not."""
    from torchrl_skill.explain import tracebacks as tb

    hits, _ = tb.answer(OLD_BUFFER_TRACE)
    assert hits[0].entry.id == "tensor-shape-incompatible-dest-shape-got" and hits[0].confirmed
    elsewhere = OLD_BUFFER_TRACE.replace("replay_buffers/replay_buffers.py", "replay_buffers/storages.py")
    assert not any(h.confirmed for h in tb.answer(elsewhere)[0])


class _FloatVersionCollector:
    """Raises what Collector(track_policy_version=True) raises on torchrl 0.11/0.12 (measured)."""

    def __iter__(self):
        raise TypeError("torch.cat(): input types can't be cast to the desired output type Long")


def test_an_older_float_policy_version_skips_the_bundles_collector_and_fails_a_users(monkeypatch):
    from torchrl_skill.report import skill_report as sr
    from conftest import load_module

    cc = load_module("llm-vla-and-services/check_component_contracts")
    with pytest.raises(TypeError):  # 0.14.1 writes an int64 version: the error is not explained away
        list(cc._batches(_FloatVersionCollector(), own=True))
    assert cc._float_policy_version() is False
    monkeypatch.setattr(cc, "_float_policy_version", lambda: True)  # what 0.11.1 and 0.12.0 measure
    with pytest.raises(sr.CheckSkipped, match=r"pytorch/rl#3755, fixed in torchrl 0\.13\.0"):
        list(cc._batches(_FloatVersionCollector(), own=True))
    with pytest.raises(sr.CheckFailed, match=r"track_policy_version=False"):
        list(cc._batches(_FloatVersionCollector(), own=False))


# ---------------------------------------------------------------------------- live deprecations
def _marked(module: str, doc: str):
    def fn():
        pass

    fn.__module__, fn.__doc__ = module, doc
    return fn


def test_a_deprecated_directive_marks_the_callable_and_an_args_entry_does_not():
    """The drift scanner reads a deprecation from the installed library's own docstring (the
    ``.. deprecated:: 0.15`` of tensordict 0.15.3's TensorDictModule.device), so a newer line
    is covered without a table row; an indented directive under Args marks one parameter only."""
    _live_api = load_module("development-and-testing/_live_api")

    top = _marked("tensordict.nn.common", "The device.\n\n.. deprecated:: 0.15\n    This property will be removed\n    in 0.17.\n\nMore.")
    assert _live_api.deprecation(top) == ("0.15", "This property will be removed in 0.17.")
    assert _live_api.deprecation(property(top)) == ("0.15", "This property will be removed in 0.17.")
    arg = _marked("tensordict.base", "Load.\n\nArgs:\n    safe (bool): old.\n\n        .. deprecated:: 0.15\n            gone.\n")
    assert _live_api.deprecation(arg) is None
    assert _live_api.deprecation(_marked("mypkg.mod", top.__doc__)) is None  # only torchrl/tensordict are read


def test_the_scanner_reports_a_live_deprecation_by_name(tmp_path):
    """On the verified stack torchrl 0.14.1 marks OptimizerHook with a ``.. deprecated::``
    directive (torchrl/trainers/trainers.py) and no table row names it: the live read finds
    it by name; its nearest twin, a class with no directive, is clean."""
    import torchrl.trainers

    _live_api = load_module("development-and-testing/_live_api")

    assert _live_api.deprecation(torchrl.trainers.OptimizerHook) is not None
    assert _live_api.deprecation(torchrl.trainers.Trainer) is None
    user = tmp_path / "train.py"
    user.write_text("from torchrl.trainers import OptimizerHook, Trainer\nhook = OptimizerHook\n")
    code, report = run_main("development-and-testing/scan_api_drift", str(user))
    found = [c["detail"] for c in report["checks"] if c["name"] == "drift:deprecated"]
    assert code == 0 and any("torchrl.trainers.OptimizerHook" in d and "(its docstring)" in d for d in found), found
    assert not any("Trainer " in d or d.endswith("Trainer") for d in found)
    code, report = run_main("development-and-testing/scan_api_drift", "--strict", str(user))
    assert code == 1


def test_moving_the_verified_stack_rewrites_every_pin_and_refuses_a_nightly(tmp_path):
    """version_matrix.py --adopt X --as-verified: requirements.txt, _stack.VERIFIED and every
    SKILL.md's metadata move together (the docs tests compare them with the installed stack);
    a line still on its nightly stand-in is refused."""
    import version_matrix

    import _matrix_envs as envs

    rels = ["requirements.txt", "src/torchrl_skill/stack/probe.py", "SKILL.md", *[p.relative_to(BUNDLE).as_posix()
                                                                  for p in BUNDLE.glob("sub-skills/*/SKILL.md")]]
    for rel in rels:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(BUNDLE / rel, tmp_path / rel)
    with pytest.raises(RuntimeError, match="nightly stand-in"):
        version_matrix.move_verified(envs.Line("0.15", "2026.10.27", "0.15.3", "2.14.1", torchrl_dist="torchrl-nightly"), tmp_path)
    changed = version_matrix.move_verified(envs.Line("0.15", "0.15.0", "0.15.3", "2.14.1"), tmp_path)
    assert sorted(changed) == sorted(rels)
    req = (tmp_path / "requirements.txt").read_text()
    assert "\ntorchrl==0.15.0\n" in req and "\ntensordict==0.15.3\n" in req and "\ntorch==2.14.1\n" in req
    assert 'VERIFIED = {"torch": "2.14.1", "tensordict": "0.15.3", "torchrl": "0.15.0"}' in (tmp_path / "src/torchrl_skill/stack/probe.py").read_text()
    for rel in rels[2:]:
        text = (tmp_path / rel).read_text()
        assert '  torchrl-version: "0.15.0"' in text and '  tensordict-version: "0.15.3"' in text, rel
