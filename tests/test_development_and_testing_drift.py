"""scan_api_drift.py and api_changes.json: the scanner finds legacy TorchRL usage, passes modern code,
and the table's rows hold on the installed stack."""

from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path

import pytest

DEV = Path(__file__).resolve().parent.parent / "sub-skills" / "development-and-testing"
sys.path.insert(0, str(DEV / "scripts"))
FIX = Path(__file__).resolve().parent / "fixtures" / "devtest"

import _api_table as at  # noqa: E402
import scan_api_drift as sad  # noqa: E402

VERSION_RE = re.compile(r"^0\.\d+\.\d+$")


@pytest.fixture(scope="module")
def table():
    return at.load_table()


@pytest.fixture(scope="module")
def legacy(table):
    findings, _ = sad.scan_source("legacy_torchrl.py", (FIX / "legacy_torchrl.py").read_text(), table)
    return findings


@pytest.mark.parametrize("old,new", [
    ("torchrl.collectors.SyncDataCollector", "torchrl.collectors.Collector"),
    ("torchrl.collectors.MultiaSyncDataCollector", "torchrl.collectors.MultiAsyncCollector"),
    ("torchrl.data.CompositeSpec", "torchrl.data.Composite"),
    ("torchrl.data.BoundedTensorSpec", "torchrl.data.Bounded"),
    ("torchrl.data.UnboundedContinuousTensorSpec", "torchrl.data.Unbounded"),
    ("torchrl.data.OneHotDiscreteTensorSpec", "torchrl.data.OneHot"),  # via `import torchrl.data as D`
])
def test_legacy_names_reported_with_replacement(legacy, old, new):
    hits = [f for f in legacy if f.kind == "name" and f.old == old]
    assert hits, [f.text() for f in legacy]
    assert hits[0].new == new and hits[0].severity == "error"
    assert "removed" in hits[0].versions and ":%d " % hits[0].line in hits[0].text()


def test_legacy_key_and_kwargs_reported(legacy):
    key = [f for f in legacy if f.kind == "key"]
    assert key and key[0].old == "'sample_log_prob'" and key[0].new == "'action_log_prob'"
    kw = {f.old: f for f in legacy if f.kind == "kwarg"}
    assert kw["ClipPPOLoss(entropy_coef=)"].new == "entropy_coeff=" and kw["ClipPPOLoss(entropy_coef=)"].severity == "error"
    # update_policy_weights_ is found through `collector = SyncDataCollector(...)` -> Collector
    assert kw["update_policy_weights_(policy_weights=)"].severity == "deprecated"


def test_modern_fixture_is_clean(table):
    path = sad.DEFAULT_EXAMPLE  # the bundled 0.14.1 example doubles as the modern fixture
    findings, stats = sad.scan_source(str(path), path.read_text(), table)
    assert findings == [], [f.text() for f in findings]
    assert stats["refs"] >= 10  # it really looked at torchrl names


def test_exit_codes_and_output(capsys):
    assert sad.main([str(FIX / "legacy_torchrl.py")]) == 1
    out = capsys.readouterr().out
    assert "legacy_torchrl.py:5 [name] torchrl.data.CompositeSpec -> torchrl.data.Composite" in out
    assert sad.main([str(sad.DEFAULT_EXAMPLE), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["summary"]["fail"] == 0


def test_explicit_log_prob_key_is_a_note_not_a_failure(table, capsys):
    """log_prob_key="sample_log_prob" on an actor (and set_keys(sample_log_prob=...)) is valid on 0.14.1."""
    path = FIX / "explicit_log_prob_key.py"
    findings, _ = sad.scan_source(str(path), path.read_text(), table)
    assert {(f.kind, f.severity) for f in findings} == {("key-note", "note")}, [f.text() for f in findings]
    assert {f.old for f in findings} == {"log_prob_key='sample_log_prob'", "sample_log_prob='sample_log_prob'"}
    assert sad.main([str(path), "--strict"]) == 0
    assert "[key-note] log_prob_key='sample_log_prob'" in capsys.readouterr().out
    # the fact behind the note: a loss built from that actor adopts its key and runs
    sys.path.insert(0, str(FIX))
    try:
        import explicit_log_prob_key as fx
    finally:
        sys.path.remove(str(FIX))
    loss, out = fx.build()
    assert loss.tensor_keys.sample_log_prob == "sample_log_prob"
    assert all(out[k].isfinite().all() for k in ("loss_objective", "loss_critic", "loss_entropy"))


def test_legacy_key_reads_stay_findings_next_to_an_explicit_actor_key(table):
    src = (
        "from torchrl.modules import ProbabilisticActor\n"
        "a = ProbabilisticActor(None, in_keys=['loc'], log_prob_key='sample_log_prob')\n"
        "def f(td, obj):\n"
        "    obj.update(sample_log_prob='sample_log_prob')\n"  # not set_keys: an ordinary write
        "    return td['sample_log_prob']\n"
    )
    found = sad.scan_source("x.py", src, table)[0]
    keys = [f for f in found if f.kind == "key"]
    assert [f.line for f in keys] == [4, 5] and all(f.severity == "error" for f in keys)
    assert "log_prob_key= on line 2" in keys[0].note
    assert [f.line for f in found if f.kind == "key-note"] == [2]


def test_strict_fails_on_deprecated_only_code(tmp_path, capsys):
    f = tmp_path / "dep.py"
    f.write_text("from torchrl.collectors import VanillaWeightUpdater\n")
    assert sad.main([str(f)]) == 0
    assert sad.main([str(f), "--strict"]) == 1
    assert "torchrl.weight_update.SharedMemWeightSyncScheme" in capsys.readouterr().out


def test_signature_rejection_moved_module_and_opt_in_key(table):
    src = (
        "from torchrl.objectives import DQNLoss\n"
        "from torchrl.data.rlhf import PromptData\n"
        "from torchrl.collectors.collectors import SyncDataCollector\n"
        "from tensordict.nn import set_composite_lp_aggregate\n"
        "set_composite_lp_aggregate(True).set()\n"
        "loss = DQNLoss(None, delay_valu=True)\n"
        "k = 'sample_log_prob'\n"
    )
    found = {(f.kind, f.old): f for f in sad.scan_source("x.py", src, table)[0]}
    assert found[("kwarg", "DQNLoss(delay_valu=)")].new == "delay_value="
    assert found[("name", "torchrl.data.rlhf.PromptData")].new == "torchrl.data.llm.PromptData"
    assert found[("name", "torchrl.collectors.collectors.SyncDataCollector")].new == "torchrl.collectors.Collector"
    assert not any(k == "key" for k, _ in found)  # the file opted back into the legacy key


def test_notebook_cells_are_scanned(tmp_path, table):
    nb = {"cells": [{"cell_type": "code", "source": ["%pip install torchrl\n", "from torchrl.data import CompositeSpec\n"]},
                    {"cell_type": "markdown", "source": "from torchrl.data import BoundedTensorSpec"}]}
    (tmp_path / "n.ipynb").write_text(json.dumps(nb))
    findings, scanned = sad.scan_paths([tmp_path], table)
    assert len(scanned) == 1 and [f.old for f in findings] == ["torchrl.data.CompositeSpec"]


# ---------------------------------------------------------------- the table itself


def test_every_row_has_versions(table):
    for section in ("names", "keys", "kwargs"):
        for row in table[section]:
            assert row.get("changed_in") and VERSION_RE.match(row["changed_in"]), row
            for k in ("deprecated_in", "removed_in"):
                assert row.get(k) is None or VERSION_RE.match(row[k]), row
    for row in table["deprecated"]:
        assert VERSION_RE.match(row["deprecated_in"]), row


def test_name_rows_hold(table):
    for row in table["names"]:
        assert not at.exists(row["old"]), f"{row['old']} still exists"
        assert at.exists(row["new"]), f"{row['new']} does not resolve"


def test_deprecated_rows_hold(table):
    for row in table["deprecated"]:
        assert at.exists(row["old"]) and at.exists(row["new"]), row


def test_kwarg_rows_hold(table):
    for row in table["kwargs"]:
        assert at.exists(row["callable"]), row
        obj = at.resolve(row.get("checked_on", row["callable"]))  # a concrete class for a base-class row
        params = dict(inspect.signature(obj).parameters)
        if inspect.isclass(obj):
            params.update(inspect.signature(obj.__init__).parameters)
        if row["new"]:
            assert row["new"] in params, row
        if row.get("status") not in ("deprecated", "raises"):
            assert row["old"] not in params, row


def test_removed_kwargs_raise_the_documented_error():
    from torchrl.data import Bounded

    with pytest.raises(TypeError, match="'maximum' has been removed. Please use 'high' instead."):
        Bounded(minimum=0.0, maximum=1.0, shape=(1,))


def test_reference_table_matches_json(table):
    md = (DEV / "references" / "api-changes.md").read_text()
    start, end = md.index(at.BEGIN_MARK), md.index(at.END_MARK) + len(at.END_MARK)
    assert md[start:end] == at.render_markdown(table), "regenerate the block with _api_table.render_markdown()"
