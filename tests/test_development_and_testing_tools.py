"""select_focused_tests.py, check_gpu_markers.py and check_provenance.py on synthetic inputs
built in temporary folders: each accepts a correct input, rejects a broken one, and exits 2
with one line on an argument it cannot use."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import FIXTURES, load_module, rows, run_main
from torchrl_skill.report.skill_report import CheckFailed

check_gpu_markers = load_module("development-and-testing/check_gpu_markers")
check_provenance = load_module("development-and-testing/check_provenance")
select_focused_tests = load_module("development-and-testing/select_focused_tests")

DEVTEST = FIXTURES / "devtest"
HAS_GIT = shutil.which("git") is not None
SELECT = "development-and-testing/select_focused_tests"
MARKERS = "development-and-testing/check_gpu_markers"
PROVENANCE = "development-and-testing/check_provenance"


def git_repo(path):
    """``git`` bound to a fresh repository at ``path`` (identity set per call, nothing global)."""
    cmd = ["git", "-C", str(path), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*cmd, "init", "-q"], check=True)
    return cmd


def cannot_run(capsys, script, *argv):
    """Run in process, expect exit 2; return the one stderr line."""
    code, _ = run_main(script, *argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "Traceback" not in err, err
    return err


# ---------------------------------------------------------------- selector


def test_selector_maps_synthetic_checkout(tmp_path):
    changed = select_focused_tests.build_synthetic_checkout(tmp_path)
    tests = select_focused_tests.list_test_files(tmp_path)
    got = {c: select_focused_tests.map_path(c, tmp_path, tests)[0] for c in changed}
    assert got["torchrl/objectives/ppo.py"] == ["test/objectives/test_ppo.py"]
    assert got["torchrl/envs/libs/vmas.py"] == ["test/libs/test_vmas.py"]
    assert got["torchrl/envs/transforms/_observation.py"] == ["test/transforms/test_observation_transforms.py"]
    assert got["torchrl/envs/llm/chat.py"] == ["test/llm"]
    assert select_focused_tests.labeler_labels(tmp_path, changed) == ["Environments/vmas", "Environments", "llm/"]
    assert [lab for lab, _ in select_focused_tests.opt_in_labels(tmp_path, changed)] == ["ci/optdeps", "ci/olddeps"]
    assert select_focused_tests.labeler_labels(tmp_path, ["README.md"]) == []


def test_selector_default_run_lists_commands():
    code, rep = run_main(SELECT)
    assert code == 0
    cmds = [c["detail"] for c in rep["checks"] if c["name"].startswith("select:pytest")]
    assert any(d.startswith('python -m pytest test/objectives/test_ppo.py -m "not gpu"') for d in cmds)


def test_selector_strict_fails_on_unmapped_file(tmp_path, capsys):
    select_focused_tests.build_synthetic_checkout(tmp_path)
    (tmp_path / "torchrl" / "misc").mkdir(parents=True)
    (tmp_path / "torchrl" / "misc" / "orphan.py").write_text("X = 1\n")
    assert select_focused_tests.main(["--repo", str(tmp_path), "torchrl/misc/orphan.py"]) == 0
    assert select_focused_tests.main(["--repo", str(tmp_path), "torchrl/misc/orphan.py", "--strict"]) == 1
    assert "no focused test found for torchrl/misc/orphan.py" in capsys.readouterr().out


def test_selector_flags_unmarked_gpu_test_in_selection(tmp_path, capsys):
    select_focused_tests.build_synthetic_checkout(tmp_path)
    (tmp_path / "test/objectives/test_ppo.py").write_text(
        "import pytest, torch\n@pytest.mark.skipif(not torch.cuda.is_available(), reason='cuda')\ndef test_x():\n    pass\n")
    assert select_focused_tests.main(["--repo", str(tmp_path), "torchrl/objectives/ppo.py"]) == 1
    assert "lack @pytest.mark.gpu" in capsys.readouterr().out


@pytest.mark.skipif(not HAS_GIT, reason="git not installed")
def test_selector_reads_git_diff(tmp_path, capsys):
    select_focused_tests.build_synthetic_checkout(tmp_path)
    git = git_repo(tmp_path)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    (tmp_path / "torchrl/data/replay_buffers/samplers.py").write_text("class SliceSampler:\n    pass\n")
    subprocess.run([*git, "commit", "-qam", "change"], check=True)
    code, rep = run_main(SELECT, "--repo", str(tmp_path), "--diff", "HEAD~1..HEAD")
    assert code == 0
    cmds = [c["detail"] for c in rep["checks"] if c["name"].startswith("select:pytest")]
    assert len(cmds) == 1 and "test/rb/test_samplers.py" in cmds[0]
    err = cannot_run(capsys, SELECT, "--repo", str(tmp_path), "--diff", "nosuchref..HEAD")
    assert "git diff --name-only nosuchref..HEAD failed" in err and "fatal:" in err


@pytest.mark.skipif(not HAS_GIT, reason="git not installed")
def test_selector_non_git_repo_is_one_line_exit_2(tmp_path, capsys):
    """Was a check failure whose detail was git's usage text (a list repr of its last line)."""
    select_focused_tests.build_synthetic_checkout(tmp_path)
    err = cannot_run(capsys, SELECT, "--repo", str(tmp_path), "--diff", "main...HEAD")
    assert f"--repo {tmp_path} is not a git checkout (fatal: not a git repository" in err
    assert "fix: pass the folder of your pytorch/rl clone" in err


def test_selector_bad_arguments_exit_2(tmp_path, capsys):
    assert "is not a folder" in cannot_run(capsys, SELECT, "--repo", str(tmp_path / "nope"), "x.py")
    assert "no changed paths" in cannot_run(capsys, SELECT, "--repo", str(tmp_path))
    assert "need --repo PATH" in cannot_run(capsys, SELECT, "torchrl/objectives/ppo.py")


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
    v, gated = check_gpu_markers.check_source("t.py", BAD)
    assert gated == 3
    assert [x.test for x in v] == ["test_unmarked", "TestK::test_kernel", "test_reason_only"]
    assert "add @pytest.mark.gpu" in v[0].text()


def test_gpu_markers_accept_marked_tests():
    assert check_gpu_markers.check_source("good.py", check_gpu_markers.GOOD_EXAMPLE) == ([], 2)
    assert check_gpu_markers.check_source("mod.py", MODULE_MARKED) == ([], 1)


def test_gpu_markers_cli(tmp_path):
    (tmp_path / "test_bad.py").write_text(BAD)
    (tmp_path / "test_good.py").write_text(check_gpu_markers.GOOD_EXAMPLE)
    code, rep = run_main(MARKERS, str(tmp_path))
    assert code == 1 and rows(rep)["gpu-markers:policy"][0] == "fail"
    assert sum(c["name"] == "gpu-markers:missing" for c in rep["checks"]) == 3
    assert run_main(MARKERS, str(tmp_path), "--exempt", "test_bad.py")[0] == 0
    code, rep = run_main(MARKERS)
    assert code == 0 and rows(rep)["gpu-markers:policy"] == ("pass", "2/2 CUDA-gated test(s) carry @pytest.mark.gpu")


def test_gpu_markers_unparsable_file_is_named_and_scan_goes_on(tmp_path):
    (tmp_path / "test_deep.py").write_text("x = 1" + "+1" * 100_000 + "\n")
    (tmp_path / "test_bad.py").write_text(BAD)
    code, rep = run_main(MARKERS, str(tmp_path))
    fails = [c for c in rep["checks"] if c["status"] == "fail"]
    assert code == 1 and any(c["name"] == "gpu-markers:unparsable" and "test_deep.py" in c["detail"] for c in fails)
    assert sum(c["name"] == "gpu-markers:missing" for c in fails) == 3  # test_bad.py was still checked


def test_gpu_markers_missing_path_exit_2(tmp_path, capsys):
    assert "does not exist" in cannot_run(capsys, MARKERS, str(tmp_path / "test_nope.py"))


# ---------------------------------------------------------------- provenance


def test_provenance_good_and_mismatch():
    code, rep = run_main(PROVENANCE, "--provenance", str(DEVTEST / "provenance_good.md"))
    assert code == 0 and {c["name"] for c in rep["checks"] if c["status"] == "pass"} >= {
        "provenance:file", "provenance:torchrl", "provenance:tensordict", "provenance:torch"}
    code, rep = run_main(PROVENANCE, "--provenance", str(DEVTEST / "provenance_old.md"))
    fails = [c for c in rep["checks"] if c["status"] == "fail"]
    assert code == 1 and [c["name"] for c in fails] == ["provenance:torchrl"]
    assert "verified on torchrl 0.12.0" in fails[0]["detail"]


@pytest.mark.parametrize("stack, verdict", [
    ({"torch": "2.12.1", "tensordict": "0.13.0", "torchrl": "0.13.3"}, "pass"),   # what the matrix ran on 0.13
    ({"torch": "2.12.1", "tensordict": "0.13.0", "torchrl": "0.13.1"}, "fail"),   # same line, a release it did not run
    ({"torch": "2.13.0", "tensordict": "0.13.0", "torchrl": "0.13.3"}, "fail"),   # its torch swapped for another
])
def test_provenance_on_an_older_line_passes_only_the_stack_the_matrix_ran(monkeypatch, stack, verdict):
    from torchrl_skill.report import skill_report as sr

    ran = sr.stack_lines()["lines"]["0.13"]
    assert {d: ran[d] for d in stack} == {"torch": "2.12.1", "tensordict": "0.13.0", "torchrl": "0.13.3"}
    monkeypatch.setattr(sr, "installed_version", lambda dist: stack.get(dist))
    claim = check_provenance.read_provenance(check_provenance.PROVENANCE)
    if verdict == "pass":
        detail = check_provenance.check_dist("torchrl", claim)
        assert "the stack the version matrix ran on line 0.13" in detail and "verified in full on torchrl 0.14.1" in detail
    else:
        with pytest.raises(CheckFailed, match="but the bundle was verified on"):
            for dist in ("torchrl", "torch"):
                check_provenance.check_dist(dist, claim)


def test_provenance_rejects_missing_block(tmp_path):
    bad = tmp_path / "p.md"
    bad.write_text("# no json here\n")
    with pytest.raises(CheckFailed, match="no ```json block"):
        check_provenance.read_provenance(bad)
    bad.write_text('```json\n{"torch": "2.14.1"}\n```\n')
    with pytest.raises(CheckFailed, match="lacks tensordict, torchrl, pytorch_rl_commit, checked"):
        check_provenance.read_provenance(bad)


def test_provenance_missing_paths_exit_2(tmp_path, capsys):
    assert "is not a file" in cannot_run(capsys, PROVENANCE, "--provenance", str(tmp_path / "p.md"))
    assert "is not a folder" in cannot_run(capsys, PROVENANCE, "--checkout", str(tmp_path / "rl"))


@pytest.mark.skipif(not HAS_GIT, reason="git not installed")
def test_provenance_checkout_commit(tmp_path):
    git = git_repo(tmp_path)
    (tmp_path / "version.txt").write_text("0.14.0\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    first = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    claim = {"torchrl": "0.14.1", "pytorch_rl_commit": first}
    assert "vs verified torchrl 0.14.1" in check_provenance.checkout_version(tmp_path, claim)
    assert "is the verified commit" in check_provenance.checkout_commit(tmp_path, claim)
    (tmp_path / "version.txt").write_text("0.15.0\n")
    subprocess.run([*git, "commit", "-qam", "b"], check=True)
    with pytest.raises(CheckFailed, match="different minor release"):
        check_provenance.checkout_version(tmp_path, claim)
    with pytest.raises(CheckFailed, match="1 commit\\(s\\) after"):
        check_provenance.checkout_commit(tmp_path, claim)


@pytest.mark.slow
def test_unmarked_cuda_test_never_runs_under_either_ci_filter(tmp_path):
    """What the gpu-marker policy prevents, with real pytest: a CUDA-gated test without the
    marker is skipped by the CPU job (-m "not gpu") and deselected by the GPU job (-m gpu)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs CUDA\n")
    (tmp_path / "test_cuda.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.skipif(True, reason='no CUDA here')  # stands for not torch.cuda.is_available()\n"
        "def test_unmarked():\n    pass\n\n"
        "@pytest.mark.gpu\n@pytest.mark.skipif(True, reason='no CUDA here')\ndef test_marked():\n    pass\n")
    from conftest import run_python

    def outcome(marker):
        proc = run_python(["-m", "pytest", "-v", "-p", "no:cacheprovider", "-m", marker, "test_cuda.py"],
                          timeout=300, cwd=tmp_path)
        return proc.stdout

    gpu_job = outcome("gpu")
    assert "1 deselected" in gpu_job and "test_marked SKIPPED" in gpu_job  # only the marked test reaches the GPU job
    assert "::test_unmarked" not in gpu_job
    cpu_job = outcome("not gpu")
    assert "test_unmarked SKIPPED" in cpu_job and "1 deselected" in cpu_job  # ... and the unmarked one never runs
    v, gated = check_gpu_markers.check_source("test_cuda.py", (tmp_path / "test_cuda.py").read_text())
    assert gated == 2 and [x.test for x in v] == ["test_unmarked"]  # the checker flags exactly that one
