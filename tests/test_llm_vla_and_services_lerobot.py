"""check_lerobot.py and the LeRobot stack (requirements-lerobot.txt).

In the main env (no lerobot): every row MISSING naming requirements-lerobot.txt, exit 0. In the
LeRobot venv ($TORCHRL_SKILL_LEROBOT_VENV, default /work/venvs/lerobot, built by
`bash .ci/run_lerobot`): check_lerobot.py runs for real (about 25 s on 2 busy cores), and its
checks fail broken inputs (rows without an instruction, slices crossing episodes, actions
outside the tokenizer's range) while passing their correct twins. Those tests skip only when
that venv is not built.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import BUNDLE, load_module, rows, run_main

AREA = "llm-vla-and-services"
SCRIPT = BUNDLE / "sub-skills" / AREA / "scripts" / "check_lerobot.py"
VENV = Path(os.environ.get("TORCHRL_SKILL_LEROBOT_VENV", "/work/venvs/lerobot"))
VENV_PY = VENV / "bin" / "python"
needs_venv = pytest.mark.skipif(not VENV_PY.exists(), reason="lerobot venv not built (bash .ci/run_lerobot)")
check_lerobot = load_module(f"{AREA}/check_lerobot")


def _venv(args: list[str], hf_home: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    if hf_home is not None:  # the driver calls the checks directly: their Hugging Face caches go here
        env.update(HF_HOME=str(hf_home), HF_DATASETS_CACHE=str(hf_home / "datasets"))
    return subprocess.run([str(VENV_PY), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=str(BUNDLE))


def test_without_lerobot_every_row_is_missing_and_names_the_requirements_file(run_without):
    proc = run_without(["lerobot"], [str(SCRIPT), "--json"])
    assert proc.returncode == 0, proc.stderr
    got = {c["name"]: (c["status"], c["detail"]) for c in json.loads(proc.stdout)["checks"]}
    assert list(got) == [c.name for c in check_lerobot.CHECKS]
    assert {status for status, _ in got.values()} == {"missing"}
    assert all("requirements-lerobot.txt" in detail for _, detail in got.values())


def test_in_process_missing_rows_exit_0():
    import importlib.util

    if importlib.util.find_spec("lerobot") is not None:
        pytest.skip("lerobot is installed in this env: the MISSING path is covered by the run_without test")
    code, report = run_main(SCRIPT)
    assert code == 0 and {s for s, _ in rows(report).values()} == {"missing"}


@pytest.fixture(scope="module")
def venv_report():
    if not VENV_PY.exists():
        pytest.skip("lerobot venv not built (bash .ci/run_lerobot)")
    proc = _venv([str(SCRIPT), "--json"])
    return proc.returncode, json.loads(proc.stdout), proc.stderr


@needs_venv
def test_in_the_lerobot_venv_every_row_passes_on_counted_evidence(venv_report):
    code, report, stderr = venv_report
    got = {c["name"]: (c["status"], c["detail"]) for c in report["checks"]}
    assert code == 0, (got, stderr[-2000:])
    for check in check_lerobot.CHECKS:
        assert got[check.name][0] == "pass", (check.name, got[check.name])
    assert "2 episodes, 12 frames" in got["lerobot:dataset"][1]
    assert "12 rows" in got["lerobot:torchrl-load"][1]
    assert "72 chunk entries" in got["lerobot:action-chunks"][1]
    assert "lerobot 0.6.1" in got["lerobot:stack"][1]


# Broken inputs and their correct twins, run in the venv: each check is called on a buffer built
# from the real dataset, once with one thing wrong.
DRIVER = r'''
import json, sys, tempfile
sys.path.insert(0, sys.argv[1])
import torch
from torchrl_skill.checks.llm import check_lerobot as cl
from torchrl_skill.report import skill_report as sr
from torchrl.data.datasets import LeRobotExperienceReplay

out = {}
def outcome(fn, *a):
    try:
        result = fn(*a)
        return ["pass", "passed" if isinstance(result, sr.Passed) else result]
    except sr.CheckFailed as err:
        return ["fail", str(err)]
with tempfile.TemporaryDirectory() as scratch:
    ds = cl.check_dataset(scratch).value
    cols = cl.lerobot_columns(ds)
    good = LeRobotExperienceReplay.from_columns(cols, batch_size=cl.SLICE * 2, slice_len=cl.SLICE)
    out["schema_good"] = outcome(cl.check_vla_schema, good)
    no_task = LeRobotExperienceReplay.from_columns({k: v for k, v in cols.items() if k != "task"},
                                                   batch_size=cl.SLICE * 2, slice_len=cl.SLICE)
    out["schema_no_instruction"] = outcome(cl.check_vla_schema, no_task)
    one_episode = dict(cols, episode_index=torch.zeros_like(cols["episode_index"]))  # boundaries lost
    out["chunks_good"] = outcome(cl.check_action_chunks, good)
    out["chunks_one_episode"] = outcome(cl.check_action_chunks, LeRobotExperienceReplay.from_columns(
        one_episode, batch_size=cl.SLICE * 2, slice_len=cl.SLICE))
    wide = dict(cols, action=cols["action"] * 3)  # outside the tokenizers' [-1, 1]: clamped
    out["tokens_good"] = outcome(cl.check_action_tokenizers, good)
    out["tokens_out_of_range"] = outcome(cl.check_action_tokenizers, LeRobotExperienceReplay.from_columns(
        wide, batch_size=cl.SLICE * 2, slice_len=cl.SLICE))
print(json.dumps(out))
'''


@needs_venv
def test_lerobot_checks_fail_broken_inputs_and_pass_their_twins(tmp_path):
    scripts = BUNDLE / "src"
    proc = _venv(["-c", f"import sys; sys.path.insert(0, {str(BUNDLE / 'src')!r})\n" + DRIVER, str(scripts)],
                 hf_home=tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for twin in ("schema_good", "chunks_good", "tokens_good"):
        assert got[twin][0] == "pass", (twin, got[twin])
    assert got["schema_no_instruction"][0] == "fail" and "language_instruction" in got["schema_no_instruction"][1]
    assert got["chunks_one_episode"][0] == "fail" and "crosses an episode boundary" in got["chunks_one_episode"][1]
    assert got["tokens_out_of_range"][0] == "fail" and "round-trip error" in got["tokens_out_of_range"][1]
