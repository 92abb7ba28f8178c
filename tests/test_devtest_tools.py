"""select_focused_tests.py, check_gpu_markers.py and check_provenance.py on synthetic inputs
built in temporary folders: each accepts a correct input and rejects a broken one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEV = Path(__file__).resolve().parent.parent / "sub-skills" / "development-and-testing"
sys.path.insert(0, str(DEV / "scripts"))
FIX = Path(__file__).resolve().parent / "fixtures" / "devtest"

import check_gpu_markers as cgm  # noqa: E402
import check_provenance as cp  # noqa: E402
import select_focused_tests as sft  # noqa: E402

HAS_GIT = shutil.which("git") is not None


def _json(capsys, main, argv):
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------- selector


def test_selector_maps_synthetic_checkout(tmp_path):
    changed = sft.build_synthetic_checkout(tmp_path)
    tests = sft._test_files(tmp_path)
    got = {c: sft.map_path(c, tmp_path, tests)[0] for c in changed}
    assert got["torchrl/objectives/ppo.py"] == ["test/objectives/test_ppo.py"]
    assert got["torchrl/envs/libs/vmas.py"] == ["test/libs/test_vmas.py"]
    assert got["torchrl/envs/transforms/_observation.py"] == ["test/transforms/test_observation_transforms.py"]
    assert got["torchrl/envs/llm/chat.py"] == ["test/llm"]
    assert sft.labeler_labels(tmp_path, changed) == ["Environments/vmas", "Environments", "llm/"]
    assert [lab for lab, _ in sft.opt_in_labels(tmp_path, changed)] == ["ci/optdeps", "ci/olddeps"]
    assert sft.labeler_labels(tmp_path, ["README.md"]) == []


def test_selector_default_run_lists_commands(capsys):
    code, rep = _json(capsys, sft.main, [])
    assert code == 0
    cmds = [c["detail"] for c in rep["checks"] if c["name"].startswith("select:pytest")]
    assert any(d.startswith('python -m pytest test/objectives/test_ppo.py -m "not gpu"') for d in cmds)


def test_selector_strict_fails_on_unmapped_file(tmp_path, capsys):
    sft.build_synthetic_checkout(tmp_path)
    (tmp_path / "torchrl" / "misc").mkdir(parents=True)
    (tmp_path / "torchrl" / "misc" / "orphan.py").write_text("X = 1\n")
    assert sft.main(["--repo", str(tmp_path), "torchrl/misc/orphan.py"]) == 0
    assert sft.main(["--repo", str(tmp_path), "torchrl/misc/orphan.py", "--strict"]) == 1
    assert "no focused test found for torchrl/misc/orphan.py" in capsys.readouterr().out


def test_selector_flags_unmarked_gpu_test_in_selection(tmp_path, capsys):
    sft.build_synthetic_checkout(tmp_path)
    (tmp_path / "test/objectives/test_ppo.py").write_text(
        "import pytest, torch\n@pytest.mark.skipif(not torch.cuda.is_available(), reason='cuda')\ndef test_x():\n    pass\n")
    assert sft.main(["--repo", str(tmp_path), "torchrl/objectives/ppo.py"]) == 1
    assert "lack @pytest.mark.gpu" in capsys.readouterr().out


@pytest.mark.skipif(not HAS_GIT, reason="git not installed")
def test_selector_reads_git_diff(tmp_path, capsys):
    sft.build_synthetic_checkout(tmp_path)
    git = ["git", "-C", str(tmp_path), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    (tmp_path / "torchrl/data/replay_buffers/samplers.py").write_text("class SliceSampler:\n    pass\n")
    subprocess.run([*git, "commit", "-qam", "change"], check=True)
    code, rep = _json(capsys, sft.main, ["--repo", str(tmp_path), "--diff", "HEAD~1..HEAD"])
    assert code == 0
    cmds = [c["detail"] for c in rep["checks"] if c["name"].startswith("select:pytest")]
    assert len(cmds) == 1 and "test/rb/test_samplers.py" in cmds[0]
    assert sft.main(["--repo", str(tmp_path), "--diff", "nosuchref..HEAD"]) == 1


# ---------------------------------------------------------------- gpu markers

BAD = '''
import pytest, torch
_has_triton = False

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_unmarked():
    pass

class TestK:
    @pytest.mark.skipif(not _has_triton, reason="kernel")
    def test_kernel(self):
        pass

@pytest.mark.skipif(True, reason="requires a GPU")
def test_reason_only():
    pass
'''

MODULE_MARKED = '''
import pytest, torch
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.device_count(), reason="x")]

def test_a():
    pass
'''


def test_gpu_markers_reject_unmarked_tests():
    v, gated = cgm.check_source("t.py", BAD)
    assert gated == 3
    assert [x.test for x in v] == ["test_unmarked", "TestK::test_kernel", "test_reason_only"]
    assert "add @pytest.mark.gpu" in v[0].text()


def test_gpu_markers_accept_marked_tests():
    assert cgm.check_source("good.py", cgm.GOOD_EXAMPLE) == ([], 2)
    assert cgm.check_source("mod.py", MODULE_MARKED) == ([], 1)


def test_gpu_markers_cli(tmp_path, capsys):
    (tmp_path / "test_bad.py").write_text(BAD)
    (tmp_path / "test_good.py").write_text(cgm.GOOD_EXAMPLE)
    assert cgm.main([str(tmp_path)]) == 1
    assert cgm.main([str(tmp_path), "--exempt", "test_bad.py"]) == 0
    assert cgm.main([]) == 0
    capsys.readouterr()


# ---------------------------------------------------------------- provenance


def test_provenance_good_and_mismatch(capsys):
    code, rep = _json(capsys, cp.main, ["--provenance", str(FIX / "provenance_good.md")])
    assert code == 0 and {c["name"] for c in rep["checks"] if c["status"] == "pass"} >= {
        "provenance:file", "provenance:torchrl", "provenance:tensordict", "provenance:torch"}
    code, rep = _json(capsys, cp.main, ["--provenance", str(FIX / "provenance_old.md")])
    fails = [c for c in rep["checks"] if c["status"] == "fail"]
    assert code == 1 and [c["name"] for c in fails] == ["provenance:torchrl"]
    assert "verified on torchrl 0.12.0" in fails[0]["detail"]


def test_provenance_rejects_missing_block(tmp_path):
    bad = tmp_path / "p.md"
    bad.write_text("# no json here\n")
    with pytest.raises(cp.sr.CheckFailed, match="no ```json block"):
        cp.read_provenance(bad)
    bad.write_text('```json\n{"torch": "2.14.1"}\n```\n')
    with pytest.raises(cp.sr.CheckFailed, match="lacks tensordict, torchrl, pytorch_rl_commit, checked"):
        cp.read_provenance(bad)


@pytest.mark.skipif(not HAS_GIT, reason="git not installed")
def test_provenance_checkout_commit(tmp_path):
    git = ["git", "-C", str(tmp_path), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "version.txt").write_text("0.14.0\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    first = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    claim = {"torchrl": "0.14.1", "pytorch_rl_commit": first}
    rows = {n: (d, ok) for n, d, ok in cp.compare_checkout(tmp_path, claim, "0.14.1")}
    assert rows["provenance:checkout-version"][1] and rows["provenance:checkout-commit"][1]
    (tmp_path / "version.txt").write_text("0.15.0\n")
    subprocess.run([*git, "commit", "-qam", "b"], check=True)
    rows = {n: (d, ok) for n, d, ok in cp.compare_checkout(tmp_path, claim, "0.14.1")}
    assert not rows["provenance:checkout-version"][1]
    assert not rows["provenance:checkout-commit"][1] and "1 commit(s) after" in rows["provenance:checkout-commit"][0]
