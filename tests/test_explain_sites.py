"""explain.py --error finds where torchrl or tensordict raise a message (src/torchrl_skill/explain/sites.py,
src/torchrl_skill/explain/lookup.py), and explain's keyword notes follow the live signature
(src/torchrl_skill/explain/notes.py).

The sample of messages is drawn from the installed sources by this file's own walk (a seeded
random draw over every raise statement whose message is a string or f-string literal), never
hand-picked: each drawn message, with its fields filled by values, must lead back to its own
file and line. The three messages of the open item are tested end to end with the real
library: tensordict's stack size check (two sites, reached through ``torch.stack``), numpy's
"Range exceeds valid bounds" under ``PrioritizedSampler.sample`` (a reference quotes it), and
torch's ``split_with_sizes`` under ``TensorDict.split`` (no torchrl/tensordict site: the
traceback's tensordict frame names the call and its argument).
"""

from __future__ import annotations

import ast
import inspect
import random
import re
import traceback
from pathlib import Path

import pytest
import torch

from conftest import BUNDLE, run_main

from torchrl_skill.explain import lookup, notes, sites  # noqa: E402  (conftest puts scripts/ on sys.path)
from torchrl_skill.explain.index import package_dir

SEED = 20261206
SAMPLE = 40


def _drawn_sites() -> list[tuple[str, int, str]]:
    """``(path, line, message)``: a seeded draw over every raise of both packages whose
    first argument is a str or f-string literal with 20+ literal characters; each field of
    an f-string is filled with ``Q7``; the message as printed: ``ExcClass: text``."""
    pool = []
    for top in ("torchrl", "tensordict"):
        base = package_dir(top)
        for file in sorted(base.rglob("*.py")):
            try:
                tree = ast.parse(file.read_text(encoding="utf-8"))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                    continue
                arg = node.exc.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    text = arg.value
                elif isinstance(arg, ast.JoinedStr):
                    text = "".join(v.value if isinstance(v, ast.Constant) else "Q7" for v in arg.values)
                else:
                    continue
                literal = text.replace("Q7", "")
                exc = ast.unparse(node.exc.func).rsplit(".", 1)[-1]
                if len(literal.strip()) >= 20 and "{" not in literal:
                    pool.append((f"{top}/{file.relative_to(base).as_posix()}", node.lineno, f"{exc}: {text}"))
    return random.Random(SEED).sample(pool, SAMPLE)


DRAWN = _drawn_sites()


@pytest.mark.parametrize("path,line,message", DRAWN, ids=[f"{p}:{n}" for p, n, _ in DRAWN])
def test_a_message_drawn_from_the_sources_leads_back_to_its_raise(path, line, message):
    found = sites.find(message)
    assert (path, line) in [(s.path, s.line) for s in found], (message, [(s.path, s.line) for s in found])
    rows = lookup.site_answers(message)
    assert any(f"raised at {path}:{line} " in lines[0] for _, lines in rows) or len(found) > lookup.SHOWN_SITES


def test_the_sample_spans_both_packages():
    tops = {p.split("/")[0] for p, _, _ in DRAWN}
    assert tops == {"torchrl", "tensordict"} and len({p for p, _, _ in DRAWN}) > 15


def test_a_message_raised_nowhere_and_a_reordered_one_find_no_site():
    assert sites.find("this sentence is raised by no library function at all") == []
    _, message = sites.message_of("RuntimeError: out.batch_size and stacked batch size must match, got out.batch_size=[3]")
    assert sites.find(message)  # the twin: the real order is found
    swapped = "stacked batch size must match out.batch_size and, got out.batch_size=[3] and batch_size=[2]"
    assert sites.find(swapped) == []


def _traceback_of(fn) -> str:
    try:
        fn()
    except Exception as err:  # noqa: BLE001  the real error's whole traceback is the input
        return "".join(traceback.format_exception(err))
    raise AssertionError("did not raise")


def test_stack_size_check_names_both_sites_the_guard_and_torch_stack():
    from tensordict import TensorDict

    tds = [TensorDict(a=torch.zeros(2), batch_size=[2]) for _ in range(3)]
    text = _traceback_of(lambda: torch.stack(tds, 0, out=TensorDict(a=torch.zeros(4, 2), batch_size=[4, 2])))
    assert "out.batch_size and stacked batch size must match" in text
    rows = lookup.site_answers(text)
    heads = [lines[0] for _, lines in rows]
    assert heads[0].startswith("raised at tensordict/_torch_func.py:") and "_torch_func._stack " in heads[0]
    assert any(h.startswith("raised at tensordict/_lazy.py:") for h in heads)  # LazyStackedTensorDict.lazy_stack's copy
    first = " ".join(rows[0][1])
    assert "when: if out.batch_size != batch_size" in first and "torch.stack(...) on TensorDicts" in first
    # the frame the traceback names is the line the site gives
    frame = [ln for ln in text.splitlines() if "_torch_func.py" in ln][-1]
    assert heads[0].split(":")[1].split()[0] == re.search(r"line (\d+)", frame).group(1)
    code, report = run_main(BUNDLE / "scripts" / "explain.py", "--error", text.strip().splitlines()[-1], "--json")
    names = [c["name"] for c in report["checks"]]
    assert code == 0 and names.count("derived:raising-site") == 2, report["checks"]


def test_range_exceeds_valid_bounds_is_found_in_the_reference_and_the_call_under_sampler():
    from torchrl.data import LazyTensorStorage, PrioritizedSampler, ReplayBuffer

    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=PrioritizedSampler(8, alpha=0.6, beta=0.4), batch_size=4)
    rb.extend(torch.arange(8.0))
    rb.update_priority(torch.arange(8), -torch.ones(8))  # (p + eps) ** 0.6 of a negative p is NaN
    text = _traceback_of(rb.sample)
    assert text.strip().endswith("OverflowError: Range exceeds valid bounds")
    code, report = run_main(BUNDLE / "scripts" / "explain.py", "--error", "OverflowError: Range exceeds valid bounds", "--json")
    rows = {c["name"]: c["detail"] for c in report["checks"]}
    assert code == 0 and "references/run-time-audit.md#prioritized-replay" in rows["reference:text"], rows
    assert "not an error-index entry" in rows["reference:text"]
    call = dict(lookup.call_answers(text))["derived:library-call"]
    assert call[0].startswith("numpy (") and "np.random.uniform(0.0, p_sum, size=batch_size)" in call[0]
    assert "PrioritizedSampler.sample" in call[0] and any("rb.sample" in ln or "fn()" in ln for ln in call)


def test_a_torch_message_alone_says_what_was_searched_and_its_traceback_names_the_call():
    from tensordict import TensorDict

    td = TensorDict(a=torch.zeros(10, 3), batch_size=[10])
    text = _traceback_of(lambda: td.split([3, 3]))
    last = text.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: split_with_sizes expects split_sizes to sum exactly to 10")
    assert sites.find(sites.message_of(last)[1]) == []  # raised by torch, in no torchrl/tensordict source
    assert "not raised by the installed torchrl" in lookup.not_found_line(last)
    call = dict(lookup.call_answers(text))["derived:library-call"]
    joined = " ".join(call)
    assert call[0].startswith("torch (split) raised it inside the call v.split(split_size, dim) at tensordict/_td.py:")
    assert "TensorDict.split" in call[0] and "split_size, dim: parameter(s) of TensorDict.split" in joined
    # the twin: the same split with sizes that sum to 10 raises nothing
    assert [t.batch_size[0] for t in td.split([3, 7])] == [3, 7]


def test_compiled_extension_strings_are_searched():
    so = next(p for p in package_dir("torchrl").glob("_torchrl*.so"))
    data = so.read_bytes()
    strings = sites.extension_strings()
    others = {s for path, found in strings.items() if not path.startswith("torchrl/") for s in found}
    text = next(s for s in strings[f"torchrl/{so.name}"] if len(s) >= 30 and s not in others and "%" not in s)
    assert text.encode() in data  # read from the file itself, the strings tool's view
    found = sites.find(text)
    assert found and all(s.compiled for s in found) and f"torchrl/{so.name}" in [s.path for s in found]
    assert "compiled extension torchrl/_torchrl" in lookup.site_lines(found[0])[0]
    assert sites.find(text[: len(text) // 2] + " and then words no binary holds") == []


def test_a_private_function_is_reached_from_its_public_callers():
    site = next(s for s in sites.file_sites("tensordict/_torch_func.py") if s.function == "_stack"
                and "stacked batch size" in s.text())
    callers, _ = sites.public_callers(site)
    usages = [u for u, _ in callers]
    assert usages[0].startswith("torch.stack(") and any(u.startswith("TensorDictBase.stack") for u in usages)
    src = (package_dir("tensordict") / "base.py").read_text()
    assert re.search(r"\b_stack\(", src)  # the call the scan reports is in the file


def test_removed_keyword_note_follows_the_live_signature():
    from torchrl.collectors import Collector, MultiSyncCollector
    from torchrl.objectives import ClipPPOLoss

    note = next(n for n in notes.kwarg_lines(Collector) if "reset_when_done" in n)
    assert "removed in" not in note and "reset_when_done=True" in note
    assert inspect.signature(Collector).parameters["reset_when_done"].default is True
    where = re.search(r"\((torchrl/collectors/_single\.py):(\d+)\)", note)
    line = (package_dir("torchrl").parent / where.group(1)).read_text().splitlines()[int(where.group(2)) - 1]
    assert "raise ValueError" in line and "if not reset_when_done" in note
    multi = next(n for n in notes.kwarg_lines(MultiSyncCollector) if "reset_when_done" in n)
    assert "removed in" not in multi and "Cannot split trajectories" in multi
    # the twin: a keyword the live signature lacks keeps the table's "removed in"
    ppo = next(n for n in notes.kwarg_lines(ClipPPOLoss) if "entropy_coef=" in n)
    assert "removed in 0.11.0" in ppo and "entropy_coef" not in inspect.signature(ClipPPOLoss).parameters


def test_a_user_frame_inside_the_raise_is_not_your_line():
    from torchrl_skill.explain import tracebacks as tb

    text = ('Traceback (most recent call last):\n  File "/home/u/train.py", line 6, in <module>\n    rb.sample()\n'
            '  File "/x/site-packages/torchrl/data/replay_buffers/samplers/prioritized.py", line 504, in sample\n'
            '    mass = np.random.uniform(0.0, p_sum, size=batch_size)\n'
            '  File "numpy/random/mtrand.pyx", line 1179, in numpy.random.mtrand.RandomState.uniform\n'
            "OverflowError: Range exceeds valid bounds\n")
    raiser, _, user = tb.raising_frames(tb.frames(text))
    assert raiser.function == "sample" and user.path == "/home/u/train.py"
    assert Path(BUNDLE / "src" / "torchrl_skill" / "explain" / "sites.py").is_file()


def test_python_wording_or_another_exception_class_is_no_site():
    """Found by the suite: 'ZeroDivisionError: division by zero' was given ActionScaling's
    ValueError whose message holds "division by zero", and 'MyEnv' object has no attribute
    'foo' RayTransform.__getattr__'s copy of Python's wording."""
    assert sites.find("ZeroDivisionError: division by zero") == []
    assert sites.find("AttributeError: 'MyEnv' object has no attribute 'foo'") == []
    scaled = sites.find("ValueError: scale must not contain zero entries (would cause division by zero).")
    assert [s.function for s in scaled] == ["ActionScaling.__init__"]  # the twin: its own class and text
    ray = [s for s in sites.file_sites("torchrl/envs/transforms/ray_service.py") if s.function == "RayTransform.__getattr__"]
    assert ray and all(s.python_wording for s in ray)


def test_a_removed_name_the_library_still_has_is_said_from_the_live_object():
    import torchrl.modules as modules
    from torchrl_skill.explain.names import renames_for

    row = next(r for r in renames_for("EGreedyWrapper") if r.get("removed_in"))
    note = next(n for n in notes.notes_for("EGreedyWrapper", modules.EGreedyWrapper) if "EGreedyWrapper ->" in n)
    assert "removed in" not in note and "still importable" in note and "building it raises RuntimeError(" in note
    with pytest.raises(RuntimeError) as err:
        modules.EGreedyWrapper(None)
    assert str(err.value) in note and hasattr(modules, "EGreedyWrapper")
    assert "removed in" in notes.rename_line(row)  # the twin: a name the library lacks keeps the table's wording
    code, report = run_main(BUNDLE / "scripts" / "explain.py", "CompositeSpec", "--json")
    assert code == 1 and "removed in 0.11.0" in report["checks"][0]["detail"]
