"""The claims of the root references (references/*.md), each reproduced on the installed stack.

tests/proofs.json names, per reference section, the tests here that prove it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import sys

import pytest
from conftest import BUNDLE
from packaging.requirements import Requirement

REFS = BUNDLE / "references"


def _requirements() -> list[Requirement]:
    return [Requirement(r) for r in importlib.metadata.requires("torchrl")]


def _extra(req: Requirement) -> str | None:
    m = re.search(r'extra == "([^"]+)"', str(req.marker or ""))
    return m.group(1) if m else None


def _extras() -> dict[str, dict[str, Requirement]]:
    """``{extra: {canonical package name: requirement}}`` from torchrl's metadata."""
    out: dict[str, dict[str, Requirement]] = {}
    for req in _requirements():
        if _extra(req):
            out.setdefault(_extra(req), {})[req.name.lower().replace("_", "-")] = req
    return out


def test_requires_python_claim():
    assert importlib.metadata.metadata("torchrl")["Requires-Python"] == ">=3.10"


def test_declared_tensordict_range_claim():
    spec = next(r.specifier for r in _requirements() if r.name == "tensordict" and r.marker is None)
    assert str(spec) in ("<0.15.0,>=0.14.3", ">=0.14.3,<0.15.0")


def test_declared_torch_floor_claim():
    # torchrl declares only a floor for torch: pip will not keep torch on the release the
    # compiled extension was built for.
    spec = next(r.specifier for r in _requirements() if r.name == "torch" and r.marker is None)
    assert str(spec) == ">=2.1.0"


def test_pypi_torch_is_a_cuda_build_that_runs_on_cpu():
    import torch

    assert torch.version.cuda is not None, "requirements.txt installs PyPI's torch, a CUDA build"
    assert (torch.ones(2, device="cpu") * 2).sum().item() == 4.0


def test_extras_that_surprise():
    extras = _extras()
    gym = extras["gym-continuous"]
    assert set(gym) == {"gymnasium", "mujoco"} and str(gym["gymnasium"].specifier) == "<1.0"
    # procgen needs a Python that torchrl 0.14 does not support
    assert "python_version < \"3.10\"" in str(extras["procgen"]["procgen"].marker)
    vla = extras["vla"]
    assert 'python_version >= "3.12"' in str(vla["lerobot"].marker) and "python_version" not in str(vla["torchvision"].marker)
    grpo = extras["grpo"]
    assert {"flash-attn", "bitsandbytes", "xformers", "ray"} <= set(grpo)
    assert grpo["torchrl"].extras == {"llm-vllm"} and "vllm" in extras["llm-vllm"]
    # requests: only offline-data declares it; Ray only grpo; PyAV no extra
    assert [e for e, pkgs in extras.items() if "requests" in pkgs] == ["offline-data"]
    assert [e for e, pkgs in extras.items() if "ray" in pkgs] == ["grpo"]
    assert [e for e, pkgs in extras.items() if "av" in pkgs] == []


@pytest.mark.slow
def test_llm_weight_update_imports_requests(run_without):
    proc = run_without(["requests"], ["-c", "import torchrl.weight_update.llm"])
    assert proc.returncode == 1 and "ModuleNotFoundError: No module named 'requests'" in proc.stderr, proc.stderr[-1500:]


def test_console_scripts_share_one_entry_point():
    scripts = {e.name: e.value for e in importlib.metadata.distribution("torchrl").entry_points if e.group == "console_scripts"}
    assert scripts == {"rlrender": "torchrl.render.cli:main", "torchrl-render": "torchrl.render.cli:main"}


def test_gymenv_runs_cartpole_and_pendulum():
    from torchrl.envs import GymEnv

    for name, action_shape in (("CartPole-v1", [3, 2]), ("Pendulum-v1", [3, 1])):
        env = GymEnv(name)
        td = env.rollout(3)
        assert list(td["action"].shape) == action_shape and ("next", "reward") in td.keys(True)
        env.close()


@pytest.mark.slow
def test_gymenv_without_gymnasium_raises_module_not_found(run_without):
    code = "from torchrl.envs import GymEnv\nGymEnv('CartPole-v1')"
    proc = run_without(["gymnasium", "gym"], ["-c", code])
    want = "ModuleNotFoundError: Supported version of 'torchrl.envs.libs.gym.GymEnv._set_gym_args' has not been found."
    assert proc.returncode == 1 and want in proc.stderr, proc.stderr[-1500:]


def _backend_rows() -> list[tuple[str, str]]:
    """``(backend cell, status cell)`` of the optional-backends table."""
    text = (REFS / "backend-compatibility.md").read_text()
    table = text.split("## Optional backends", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (.+?) \| .+ \| .+ \| (.+?) \|$", table, re.M)
    return [r for r in rows if r[0] not in ("Backend", "---")]


def test_backend_table_matches_what_is_installed():
    rows = _backend_rows()
    assert len(rows) >= 10
    for backend, status in rows:
        pinned = re.findall(r"([A-Za-z_][\w-]*) (\d+\.\d+\.\d+)", backend)
        own = re.search(r"own venv: (requirements-[\w-]+\.txt)", backend)
        if own:  # a stack of its own (vLLM pins torch 2.13): its versions are that file's pins
            pins = {name.lower(): version for name, version in re.findall(
                r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s+;]+)", (BUNDLE / own.group(1)).read_text(), re.M)}
            for dist, version in pinned:
                assert pins.get(dist.lower()) == version, (backend, own.group(1), pins.get(dist.lower()))
            continue
        if status.startswith("not "):  # not run here: its version is what it pins, not what runs
            continue
        for dist, version in pinned:  # "ray 2.60.0": installed at exactly that version
            dist = {"PyAV": "av"}.get(dist, dist)
            assert importlib.metadata.version(dist) == version, (backend, status)
        if status.startswith("not installed"):
            for dist in re.split(r", | \+ ", backend):
                module = {"hydra-core": "hydra"}.get(dist.strip(), dist.strip())
                assert importlib.util.find_spec(module) is None, f"{module} is installed; the table says not"
        if status.startswith("verified"):
            assert pinned, f"{backend}: a verified backend names the version that was run"


def test_provenance_block_matches_pins():
    text = (REFS / "repo-provenance.md").read_text()
    block = json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", (BUNDLE / "requirements.txt").read_text(), re.M))
    for dist in ("torch", "tensordict", "torchrl", "gymnasium"):
        assert block[dist] == pins[dist] == importlib.metadata.version(dist)
    assert block["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
