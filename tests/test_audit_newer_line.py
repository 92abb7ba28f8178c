"""The auditor on a torchrl line newer than the verified one: an internal it reads that moved
or was dropped skips the rows that need it, with one line, and the others run (never a
blanket refusal). Pieces tested in-process: the class lookup of src/torchrl_skill/audit/patches.py,
the detector installs of src/torchrl_skill/audit/child.py and the row of scripts/audit_run.py."""
from __future__ import annotations

import sys
import types

import pytest
from conftest import BUNDLE, load_module

from torchrl_skill.report import skill_report as sr  # noqa: E402
from torchrl_skill.audit import child, patches  # noqa: E402


class _Hub:
    def __init__(self):
        self.meta = {}


def test_a_moved_class_becomes_a_placeholder_that_wrap_leaves_alone_and_is_named():
    hub = _Hub()
    found = patches._class_or_placeholder(hub, "torchrl.objectives.utils", "TargetNetUpdater")
    from torchrl.objectives.utils import TargetNetUpdater

    assert found is TargetNetUpdater and hub.meta == {}  # the nearest excluded case: present, taken as is
    gone = patches._class_or_placeholder(hub, "torchrl.objectives.utils", "TargetNetUpdaterMovedAway")
    assert gone is not TargetNetUpdater and gone.__subclasses__() == []
    assert list(hub.meta["uninstrumented"]) == ["TargetNetUpdaterMovedAway (torchrl.objectives.utils)"]
    assert hub.meta["uninstrumented"]["TargetNetUpdaterMovedAway (torchrl.objectives.utils)"].startswith("AttributeError")
    patches.wrap(hub, gone, "step", after=lambda *a: None)  # nothing to wrap: no error, nothing set
    assert "step" not in vars(gone)
    patches._class_or_placeholder(hub, "torchrl.no_such_module", "X")
    assert hub.meta["uninstrumented"]["X (torchrl.no_such_module)"].startswith("ModuleNotFoundError")


def test_a_detector_whose_install_raises_is_recorded_and_the_others_still_install():
    hub, ran = _Hub(), []

    def ok_install(h):
        ran.append("ok")

    def moved_install(h):
        raise ImportError("cannot import name 'SoftUpdate' from 'torchrl.objectives.utils'")

    ok = types.SimpleNamespace(NAME="ok-row", install=ok_install)
    moved = types.SimpleNamespace(NAME="moved-row", install=moved_install)
    child.install_detectors(hub, [moved, ok])
    assert ran == ["ok"]
    assert hub.meta["uninstrumented"] == {"moved-row": "ImportError: cannot import name 'SoftUpdate' from 'torchrl.objectives.utils'"}


def test_the_row_of_an_uninstrumented_detector_skips_naming_why():
    audit = load_module("scripts/audit_run")
    module = types.SimpleNamespace(NAME="target-network", __name__="torchrl_skill.audit.d_target_network", __doc__="",
                                   judge=lambda observed: "measured")
    judge = audit.detector_check(module)
    observed = {"meta": {"probe_errors": {}, "uninstrumented": {"target-network": "ImportError: moved"}}}
    with pytest.raises(sr.CheckSkipped, match="not instrumented on this torchrl: ImportError: moved"):
        judge(observed)
    observed["meta"]["uninstrumented"] = {}  # the nearest excluded case: installed, judged as usual
    assert judge(observed) == "measured"
