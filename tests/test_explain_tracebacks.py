"""``explain.py --error`` never answers a generic message with one specific cause: a message
torch, tensordict or Python raises for many callers (the index's ``generic`` list) confirms an entry only with a distinctive text or a traceback frame the
entry names (``frames``); alone, it lists the candidates, each with the frame that tells
it apart, and exits 1. Given a whole traceback, the torchrl/tensordict function that
raised is explained and the frames rank the entries.

The case that showed it: ``MaskedCategorical.entropy()`` with a mask of fewer dims than
the logits raises tensordict's ``expand_as_right`` message, which explain answered with
the replay buffer's ``ndim=2`` index write-back (torchrl 0.14.1 / tensordict 0.14.3).
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
import textwrap

import pytest
import torch
from conftest import BUNDLE, rows, run_main, run_python

from torchrl_skill.explain import error_index as ei
from torchrl_skill.explain import index
from torchrl_skill.explain import tracebacks as tb

MASKED, BUFFER = "masked-categorical-entropy-mask-ndim", "tensor-shape-incompatible-dest-shape-got"


def _generic_only(entry: ei.ErrorEntry) -> bool:
    """True when every signature or pattern that matches the entry's own title is a generic text."""
    found = tb._matched_texts(entry, " ".join(entry.title.split()))
    return bool(found) and all(ei.is_generic(m) for m in found)


GENERIC_ENTRIES = [e for e in ei.load() if e.is_error and _generic_only(e)]


def _traceback_of(code: str, tmp_path) -> str:
    """The real traceback of ``code`` run as the user's script ``python train.py`` (forked from a
    warm interpreter: the same traceback, tests/test_zygote.py)."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(code))
    proc = run_python([str(script)], timeout=300, cwd=tmp_path, warm=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr, proc.stderr[-800:]
    return proc.stderr


MASKED_CODE = """
    import torch
    from torchrl.modules import MaskedCategorical

    dist = MaskedCategorical(logits=torch.randn(2, 3, 4, 5), mask=torch.tensor([[True, False, True, False, True]]))
    dist.entropy()
"""
BUFFER_CODE = """
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100, ndim=2))
    rb.extend(TensorDict({"obs": torch.zeros(2, 1)}, batch_size=[2, 1]))
"""


def _explain(text: str):
    code, report = run_main("scripts/explain", "--error", text)
    return code, rows(report)


# ---------------------------------------------------------------------------- the case
def test_masked_categorical_entropy_needs_a_mask_with_the_logits_dims():
    """The entry's cause, on its scope: entropy() raises for a mask with fewer dims than the
    logits ([n], [1, n] against 2-D and 4-D logits) while sample() and log_prob() accept it;
    the nearest case the cause excludes (as many dims, size-1 dims included) works, and so
    does the fix (mask.expand_as(logits))."""
    from torchrl.modules import MaskedCategorical

    for logits_shape, mask_shape, raises in (((4, 5), (5,), True), ((2, 3, 4, 5), (1, 5), True), ((4, 3, 5), (3, 5), True),
                                             ((4, 5), (1, 5), False), ((4, 3, 5), (4, 1, 5), False)):
        logits = torch.randn(*logits_shape)
        mask = torch.ones(*mask_shape, dtype=torch.bool)
        mask[..., 1] = False
        dist = MaskedCategorical(logits=logits, mask=mask)
        assert dist.sample().shape == logits_shape[:-1]
        assert dist.log_prob(torch.zeros(logits_shape[:-1], dtype=torch.long)).shape == logits_shape[:-1]
        if raises:
            with pytest.raises(RuntimeError, match="tensor shape is incompatible with dest shape"):
                dist.entropy()
        else:
            assert dist.entropy().shape == logits_shape[:-1]
        fixed = MaskedCategorical(logits=logits, mask=mask.expand_as(logits))
        assert fixed.entropy().shape == logits_shape[:-1] and torch.isfinite(fixed.entropy()).all()


def test_the_message_alone_lists_both_causes_as_candidates(tmp_path):
    """Once, the last line alone answered PASS with the replay buffer's cause."""
    last = ei.last_error_line(_traceback_of(MASKED_CODE, tmp_path))
    code, by_name = _explain(last)
    assert code == 1 and not any(s == "pass" for s, _ in by_name.values()), by_name
    assert by_name[f"candidate:{MASKED}"][0] == by_name[f"candidate:{BUFFER}"][0] == "skip"
    assert "discrete.py:entropy" in by_name[f"candidate:{MASKED}"][1]
    assert "tensordict.py:_set_index_in_td" in by_name[f"candidate:{BUFFER}"][1]
    status, detail = by_name["error:unconfirmed"]
    assert status == "fail" and "tensordict/utils.py:expand_as_right" in detail and "--error-file" in detail


@pytest.mark.parametrize("code, right, wrong", [(MASKED_CODE, MASKED, BUFFER), (BUFFER_CODE, BUFFER, MASKED)])
def test_a_whole_traceback_confirms_the_cause_by_its_frame(code, right, wrong, tmp_path):
    text = _traceback_of(code, tmp_path)
    status, by_name = _explain(text)
    assert status == 0 and by_name[f"error:{right}"][0] == "pass", by_name
    assert f"error:{wrong}" not in by_name and f"candidate:{wrong}" not in by_name
    frame = by_name["derived:raising-frame"][1]
    assert "raised in tensordict/utils.py:expand_as_right" in frame and "train.py:" in frame
    if right == MASKED:
        assert "torchrl.modules.distributions.discrete.MaskedCategorical.entropy" in frame
        assert "signature: MaskedCategorical.entropy(self)" in frame and "(dist.entropy())" in frame


def test_without_its_frames_the_entry_stays_a_candidate(tmp_path):
    """Negative control: the same traceback, the entry's ``frames`` removed: no confirmation."""
    text = _traceback_of(MASKED_CODE, tmp_path)
    stripped = tuple(dataclasses.replace(e, frames=()) if e.id == MASKED else e for e in ei.load())
    hits, _ = tb.answer(text, stripped)
    assert not any(h.confirmed for h in hits) and {h.entry.id for h in hits} >= {MASKED, BUFFER}


def test_a_traceback_through_user_code_only_lists_candidates(tmp_path):
    """A traceback without a torchrl frame confirms nothing (the old test took it for the buffer)."""
    trace = tmp_path / "traceback.txt"
    trace.write_text(
        "Traceback (most recent call last):\n  File \"/home/u/train.py\", line 9, in <module>\n"
        "    rb.extend(batch)\nRuntimeError: tensor shape is incompatible with dest shape, got: "
        "tensor.shape=torch.Size([8, 2]), dest=torch.Size([8, 1])\n")
    code, report = run_main("scripts/explain", "--error-file", str(trace))
    by_name = rows(report)
    assert code == 1 and by_name[f"candidate:{BUFFER}"][0] == "skip" and "derived:raising-frame" not in by_name


# ---------------------------------------------------------------------------- every generic message
@pytest.mark.parametrize("entry", GENERIC_ENTRIES, ids=lambda e: e.id)
def test_an_entry_matched_only_by_a_generic_text_is_never_a_pass_alone(entry):
    """The entry's own title (the bare message) gives candidates and exit 1, never a PASS."""
    hits, _ = tb.answer(entry.title)
    assert hits and not any(h.confirmed for h in hits), [(h.entry.id, h.evidence) for h in hits]
    assert entry.frames, f"{entry.id}: a generic message needs the frames that confirm it"


def test_every_generic_text_alone_gives_no_pass():
    for generic in ei.generic_messages():
        code, by_name = _explain(f"RuntimeError: {generic.text} (sizes differ)")
        assert code == 1 and not any(s == "pass" for s, _ in by_name.values()), (generic.text, by_name)


def _source(path: str) -> str:
    top, _, rest = path.partition("/")
    return (index.package_dir(top) / rest).read_text(encoding="utf-8")


def _function_source(path: str, function: str) -> str:
    source = _source(path)
    nodes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    return "\n".join(ast.get_source_segment(source, n) or "" for n in nodes)


def _library_sources() -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for top in index.TOPS
                     for p in index.package_dir(top).rglob("*.py"))


@pytest.mark.slow
def test_generic_messages_are_raised_for_many_callers():
    """Each generic text is what the index says: raised inside its function of the installed
    tensordict, which torchrl and tensordict call from 3 or more places (``called_as``); or
    a message of torch's kernels or of Python itself, raised by two unrelated operations."""
    everything = _library_sources()
    import pickle

    def local():
        def inner():
            pass
        return inner

    python = {"'NoneType' object has no attribute": (lambda: None.device, lambda: None.shape),
              "'NoneType' object is not subscriptable": (lambda: None[0], lambda: None["reward"]),
              "Can't pickle local object": (lambda: pickle.dumps(local()), lambda: pickle.dumps(local))}
    torch_ops = {"expected Tensor as element": (lambda: torch.stack([torch.zeros(1), None]), lambda: torch.cat([torch.zeros(1), None]))}
    for generic in ei.generic_messages():
        if generic.raised_by in ("python", "torch"):
            ops = (python if generic.raised_by == "python" else torch_ops)[generic.text]
            for op in ops:
                with pytest.raises(Exception, match=re.escape(generic.text)):
                    op()
            continue
        path, _, function = generic.raised_by.partition(":")
        body = " ".join(_function_source(path, function).split())
        assert generic.text[:40] in body, generic
        name = generic.called_as
        pattern = rf"(?<!def )\b{re.escape(name)}\s*\(" if name[-1].isalnum() else re.escape(name)
        assert len(re.findall(pattern, everything)) >= 3, generic


def test_every_entry_frame_names_an_installed_function():
    wrong = []
    for entry in ei.load():
        for spec in entry.frames:
            path, _, function = spec.rpartition(":")
            top, _, rest = path.partition("/")
            if not (index.package_dir(top) / rest).is_file() or not _function_source(path, function):
                wrong.append(f"{entry.id}: {spec}")
    assert wrong == [], wrong


def test_frames_are_read_from_cpython_and_pytest_tracebacks():
    text = ('Traceback (most recent call last):\n  File "C:\\env\\Lib\\site-packages\\torchrl\\envs\\common.py", line 3812, in rollout\n'
            "    out = torch.stack(tds)\n"
            "/opt/venv/lib/python3.12/site-packages/tensordict/_torch_func.py:759: in _stack\n    raise RuntimeError(\n"
            "E   RuntimeError: The sets of keys in the tensordicts to stack are exclusive.\n")
    found = tb.frames(text)
    assert [(f.library, f.function) for f in found] == [("torchrl/envs/common.py", "rollout"), ("tensordict/_torch_func.py", "_stack")]
    assert found[0].source == "out = torch.stack(tds)" and not any(f.user for f in found)
    hits, _ = tb.answer(text)
    assert hits[0].entry.id == "key-missing-from-reset" and hits[0].confirmed


@pytest.mark.slow
def test_the_cli_reads_a_traceback_from_stdin(tmp_path):
    import subprocess

    text = _traceback_of(MASKED_CODE, tmp_path)
    proc = subprocess.run([sys.executable, str(BUNDLE / "scripts" / "explain.py"), "--error-file", "-"], input=text,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and f"PASS     error:{MASKED}" in proc.stdout, proc.stdout[-1500:] + proc.stderr[-800:]
