"""The run-time auditor's mutation suites (tests/audit_mutations.py): every detector catches
at least six realistic variants of its fault class, in different API forms and code shapes,
and passes each one's fixed twin; correct runs nearest to a fault pass; runs too short for a
detector's minimum evidence get a SKIP that says so.

Fast: each detector's ``judge`` reads the recorded observations of real audited runs
(tests/fixtures/audit/mutations/recorded.json, written by tests/record_audit_mutations.py).
One entry per detector is re-run live (slow), so a recording that no longer matches what
the auditor sees fails here.
"""

from __future__ import annotations

import audit_mutations as am
import pytest
from torchrl_skill.audit.evidence import Short

RECORDED = am.load_recorded()
RERECORD = "python tests/record_audit_mutations.py --only {}"


@pytest.mark.parametrize("run", am.RUNS, ids=lambda r: r.key)
def test_recorded_variants_get_their_verdict(run):
    assert run.key in RECORDED, f"not recorded: {RERECORD.format(run.key)}"
    recording = RECORDED[run.key]
    assert (recording["argv"], recording["max_frames"]) == (list(run.argv), run.max_frames), f"recorded with other arguments: {RERECORD.format(run.key)}"
    status, detail = am.verdict(run, recording["observed"])
    assert status == run.expect, detail
    for text in run.says:
        assert text in detail, detail


def test_every_detector_has_six_fault_variants_each_with_its_fixed_twin():
    from torchrl_skill.audit import cli as audit_run
    from torchrl_skill.audit import CAUSES

    kinds: dict = {}
    for run in am.RUNS:
        kinds.setdefault(run.detector, {}).setdefault(run.kind, []).append(run)
    # the cause detectors (the effect monitors have their broken/fixed fixtures in test_audit_effects.py,
    # the llm-* rows theirs in test_audit_llm.py)
    detectors = [m.NAME for m in audit_run.MODULES if m.__name__.rpartition(".")[2] in CAUSES and m.NAME != "training"]
    assert set(kinds) == set(detectors)
    for name in detectors:
        broken, fixed = kinds[name].get("broken", []), kinds[name].get("fixed", [])
        assert len(broken) >= 6 and {r.name for r in broken} == {r.name for r in fixed}, name
        assert len({r.shape for r in broken}) == len(broken), f"{name}: two variants of one shape"
        assert {r.detector for r in am.RUNS if r.key in am.LIVE} == set(detectors)


def test_each_detector_skips_short_of_its_minimum_evidence():
    shorts = [r for r in am.RUNS if r.kind == "short"]
    assert len({r.detector for r in shorts}) >= 8
    for run in shorts:
        status, detail = am.verdict(run, RECORDED[run.key]["observed"])
        assert status == "short", (run.key, detail)
        assert detail.endswith("run longer: raise --max-frames (or --seconds)"), detail
        assert "needed to judge" in detail or "init_random_frames" in detail, detail


def test_a_short_skip_is_not_a_plain_skip():
    # the early stop waits for a Short detector, never for one whose component is absent
    from torchrl_skill.audit import d_target_network
    from torchrl_skill.audit.evidence import readiness

    observed = {"meta": {"frames": 0}, "end": {}, "sections": {}}
    assert readiness(d_target_network, observed) is None
    run = next(r for r in am.RUNS if r.key == "target-network/few-steps/short")
    assert readiness(d_target_network, RECORDED[run.key]["observed"]) is False
    run = next(r for r in am.RUNS if r.key == "target-network/soft-never/fixed")
    assert readiness(d_target_network, RECORDED[run.key]["observed"]) is True
    assert issubclass(Short, __import__("torchrl_skill.report.skill_report", fromlist=["x"]).CheckSkipped)


def test_the_readme_table_is_generated_from_the_recordings():
    assert am.readme_table() == am.table(RECORDED), "run: python tests/record_audit_mutations.py --readme"


@pytest.mark.slow
@pytest.mark.parametrize("key", am.LIVE)
def test_a_live_run_gets_the_recorded_verdict(key):
    run = next(r for r in am.RUNS if r.key == key)
    status, detail = am.verdict(run, am.observe(run)["observed"])
    assert status == run.expect, detail
    for text in run.says:
        assert text in detail, detail
    assert am.verdict(run, RECORDED[key]["observed"])[0] == status


def test_a_loss_whose_online_weights_never_moved_is_not_counted_as_a_pass():
    """target-network beside a loss it judged: a second loss whose online weights never moved
    is named 'not verified', and alone it makes the row a skip, never a pass."""
    import copy

    from torchrl_skill.report import skill_report as sr
    from torchrl_skill.audit import d_target_network

    observed = copy.deepcopy(RECORDED["target-network/hard-per-batch/fixed"]["observed"])
    losses = observed["sections"]["target-network"]["losses"]
    still = {**copy.deepcopy(losses[0]), "source_moved": False, "n_changes": 0, "id": -1, "cls": "StillLoss"}
    judged = d_target_network.judge(observed)
    assert "not verified" not in judged
    losses.append(still)
    both = d_target_network.judge(observed)
    assert both.startswith(judged) and "not verified: StillLoss" in both and "was not seen" in both
    losses.pop(0)
    with pytest.raises(sr.CheckSkipped, match="StillLoss.*was not seen"):
        d_target_network.judge(observed)
