"""The error index (src/torchrl_skill/data/error_index.json, src/torchrl_skill/explain/error_index.py) holds every
troubleshooting entry, and every entry is true on the verified stack:

- each error entry's trigger (tests/error_triggers/, format in its README) raises the real
  error, the entry's signature or pattern occurs in the real message, and
  ``_error_index.match`` ranks that entry first; an entry that cannot be reproduced here
  says why in ``unreproducible`` (counted and printed);
- each symptom entry's ``proof`` names a test that exists;
- the index is well formed (a malformed entry is rejected), its ``names`` resolve in the
  installed library, and every generated troubleshooting page is current;
- ``match`` finds the right entry in a real traceback: many lines, the error at the
  bottom, pytest's ``E`` prefixes, sizes and keys other than the entry's example; a near
  miss shares a distinctive word with the error, never only "object has no attribute";
- ``explain.py --error`` derives an answer from the live library for a missing attribute
  or a bad keyword of a torchrl/tensordict object (real errors raised here), and none for
  other objects; the double-to-float entry's fix is run.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib.util
import io
import json
import re
import sys
import traceback
import warnings
from pathlib import Path

import pytest
from conftest import BUNDLE, run_python

from torchrl_skill.explain import error_index as ei
from torchrl_skill.explain import index, lookup, sites
from torchrl_skill.explain.tracebacks import answer, frames

TRIGGERS = BUNDLE / "tests" / "error_triggers"
ENTRIES = ei.load()
ERRORS = [e for e in ENTRIES if e.is_error]
SYMPTOMS = [e for e in ENTRIES if not e.is_error]
PROVEN = [e for e in ERRORS if e.proof]

# A process of its own for SUBPROCESS triggers: prints the text as one JSON string.
RUNNER = """
import json, runpy, sys, traceback, warnings
sys.path.insert(0, sys.argv[2])
warnings.simplefilter("ignore")
module = runpy.run_path(sys.argv[1])
try:
    out = module["trigger"]()
    text = out if isinstance(out, str) else None
except BaseException as err:
    text = "".join(traceback.format_exception(err))
print("TRIGGER-TEXT " + json.dumps(text))
"""


def _load_trigger(path: Path):
    if str(TRIGGERS) not in sys.path:
        sys.path.insert(0, str(TRIGGERS))
    spec = importlib.util.spec_from_file_location(f"error_trigger_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _subprocess_kind(path: Path) -> str | None:
    """A trigger's module-level ``SUBPROCESS``: ``True`` -> ``"warm"`` (a process of its own,
    forked from an interpreter that imported torchrl), ``"cold"`` -> a fresh interpreter
    (hidden packages, import-time state), absent -> None (run in this process)."""
    tree = ast.parse(path.read_text())
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "SUBPROCESS" for t in n.targets):
            value = getattr(n.value, "value", None)
            return "warm" if value is True else "cold" if value == "cold" else None
    return None


def trigger_text(path: Path) -> str | None:
    """The real error text a trigger produces: the whole traceback of what it raises (its
    frames confirm an entry whose message is generic: ``explain/tracebacks.py``), or the
    text it returns (a warning, a log line, a worker's output); None when it neither raised
    nor returned."""
    kind = _subprocess_kind(path)
    if kind:
        proc = run_python(["-c", RUNNER, str(path), str(TRIGGERS)], timeout=600, cwd=TRIGGERS, warm=kind == "warm")
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("TRIGGER-TEXT ")), None)
        assert line is not None, f"{path.name} printed no result: {proc.stderr[-2000:]}"
        return json.loads(line[len("TRIGGER-TEXT "):])
    module = _load_trigger(path)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            out = module.trigger()
        except Exception as err:
            return "".join(traceback.format_exception(err))
    return out if isinstance(out, str) else None


def _occurs(entry: ei.ErrorEntry, text: str) -> list[str]:
    flat = " ".join(ei.clean(text).split())
    hits = [s for s in entry.signatures if " ".join(s.split()) in flat]
    return hits + [p.pattern for p in entry._compiled if p.search(flat)]


# ---------------------------------------------------------------------------- proofs
def test_every_error_entry_has_a_trigger_or_a_reason(capsys):
    """Counted and printed: how many error entries are reproduced here and how many say why not."""
    missing = [e.id for e in ERRORS if not e.proof and not e.unreproducible]
    wrong = [f"{e.id}: proof {e.proof!r} is not {e.trigger!r}" for e in ERRORS if e.proof and e.proof != e.trigger]
    absent = [e.proof for e in ERRORS if e.proof and not (BUNDLE / e.proof).is_file()]
    unrepro = [e for e in ERRORS if not e.proof and e.unreproducible]
    with capsys.disabled():
        print(f"\nerror index: {len(ENTRIES)} entries; {len(ERRORS)} error entries: {len(PROVEN)} reproduced by a trigger, "
              f"{len(unrepro)} not reproducible here ({', '.join(e.id for e in unrepro) or 'none'}); {len(SYMPTOMS)} symptom entries")
    assert missing == [], f"error entries with neither a trigger nor an unreproducible reason: {missing}"
    assert wrong == [] and absent == [], wrong + absent


@pytest.mark.slow
@pytest.mark.parametrize("entry", PROVEN, ids=lambda e: e.id)
def test_trigger_raises_the_real_error_and_the_index_ranks_it_first(entry):
    """The real error (its whole traceback) confirms the entry and ranks it first
    (``explain/tracebacks.answer``: a distinctive text, or a frame the entry names)."""
    text = trigger_text(BUNDLE / entry.proof)
    assert text, f"{entry.proof} neither raised nor returned the error text"
    assert _occurs(entry, text), f"no signature or pattern of {entry.id} occurs in the real message: {text[-600:]!r}"
    hits, _ = answer(text)
    assert hits and hits[0].entry.id == entry.id and hits[0].confirmed, (
        f"ranks {[(round(h.score), h.entry.id, h.confirmed) for h in hits[:3]]} for the real error of {entry.id}: {text[-600:]!r}")
    _the_raising_site_names_the_entry(entry, text)


def _the_raising_site_names_the_entry(entry: ei.ErrorEntry, text: str) -> None:
    """When the trigger's error comes from a ``raise`` statement of torchrl/tensordict (the
    installed line at the innermost frame starts with ``raise``) and the entry is about that
    last message (a signature or pattern occurs in it), the source lookup
    (``explain/sites.py``) finds that file and line from the message alone, and lists this
    entry among the index entries at that site (``explain/lookup.entries_at``)."""
    trace = frames(text)
    if not trace or not trace[-1].library:
        return
    last = trace[-1]
    top, _, rest = last.library.partition("/")
    source = (index.package_dir(top) / rest).read_text(encoding="utf-8").splitlines()
    if not source[last.line - 1].lstrip().startswith("raise ") or re.match(r"raise \w+$", source[last.line - 1].strip()):
        return  # Python or torch raised inside the line, or a bare re-raise
    exc, message = sites.message_of(text)
    if not _occurs(entry, f"{exc}: {message}"):
        return  # the entry is about an earlier error of the text (a worker's), not the last raise
    found = sites.find(message)
    at = [s for s in found if (s.path, s.line) == (last.library, last.line)]
    assert at, f"{entry.id}: {last.library}:{last.line} not among {[(s.path, s.line) for s in found][:8]}"
    callers, _ = sites.public_callers(at[0])
    chain = [part for _, how in callers for part in how.split(": ", 1)[-1].split(" -> ")]
    assert entry.id in [e.id for e in lookup.entries_at(at[0], chain)], f"{entry.id} not listed at {last.library}:{last.line}"


def _test_exists(node: str) -> bool:
    path, _, rest = node.partition("::")
    file = BUNDLE / path
    if not (path.startswith("tests/") and file.is_file() and rest):
        return False
    names = [n.split("[")[0] for n in rest.split("::")]
    scope = ast.parse(file.read_text()).body
    for name in names:
        found = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name), None)
        if found is None:
            return False
        scope = found.body if isinstance(found, ast.ClassDef) else []
    return names[-1].startswith("test")


def test_every_symptom_entry_names_a_test_that_exists():
    unproven = [e.id for e in SYMPTOMS if not e.proof and not e.unreproducible]
    dangling = [f"{e.id}: {e.proof}" for e in SYMPTOMS if e.proof and not _test_exists(e.proof)]
    assert dangling == [], f"symptom proofs that name no existing test: {dangling}"
    assert unproven == [], f"symptom entries without a proof test: {unproven}"


def test_proof_checker_rejects_a_missing_test():
    assert _test_exists("tests/test_error_index.py::test_proof_checker_rejects_a_missing_test")
    assert not _test_exists("tests/test_error_index.py::test_no_such_test")
    assert not _test_exists("tests/no_such_file.py::test_x")


# ---------------------------------------------------------------------------- the index
def test_index_is_well_formed():
    """The index validates against its one schema (data/error_index.schema.json) with
    jsonschema; the loader's own checks (ids once, patterns that compile) pass too."""
    import jsonschema

    from torchrl_skill import data

    raw = json.loads(ei.INDEX_PATH.read_text())
    schema = json.loads(data.ERROR_INDEX_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(raw, schema)
    assert raw["schema"] == ei.SCHEMA_ID == schema["$id"]
    entries = [ei._entry(item, f"entry {i}") for i, item in enumerate(raw["entries"])]
    assert len({e.id for e in entries}) == len(entries), "ids used twice"
    # every field the schema allows is a field of ErrorEntry (``page`` is ``page_name`` there)
    fields = {f.name for f in dataclasses.fields(ei.ErrorEntry)} - {"_compiled"}
    assert {"page_name" if k == "page" else k for k in schema["$defs"]["entry"]["properties"]} == fields


@pytest.mark.parametrize("bad, why", [
    ({"id": "x", "area": "root", "title": "t", "cause": "c", "fix": "f", "verify": "v", "versions": "v", "color": "red"}, "'color' was unexpected"),
    ({"id": "x", "area": "nowhere", "title": "t", "cause": "c", "fix": "f", "verify": "v", "versions": "v"}, "area: 'nowhere' is not one of"),
    ({"id": "Not_Kebab", "area": "root", "title": "t", "cause": "c", "fix": "f", "verify": "v", "versions": "v"}, "id: 'Not_Kebab' does not match"),
    ({"id": "x", "area": "root", "title": "t", "cause": "", "fix": "f", "verify": "v", "versions": "v"}, "cause: '' does not match"),
    ({"id": "x", "area": "root", "title": "t", "cause": "c", "fix": "f", "verify": "v", "versions": "v", "patterns": ["("]}, "bad pattern"),
    ({"id": "x", "area": "root", "title": "t", "cause": "c", "fix": "f", "verify": "v", "versions": "v", "page": "../x.md"}, "page: '../x.md' does not match"),
    ({"id": "x", "area": "root", "title": "t", "cause": "c", "fix": "f", "verify": "v", "versions": "v", "also": ["root"]}, "also names the entry's own area"),
    ({"id": "x", "area": "root", "title": "t", "cause": "c", "fix": "f", "verify": "v", "versions": "v",
      "frames": ["discrete.py:entropy"]}, "frames.0: 'discrete.py:entropy' does not match"),
    ({"id": "x", "area": "root", "title": "t", "cause": "c", "verify": "v", "versions": "v"}, "'fix' is a required property"),
    ({"id": "x", "area": "root", "title": "t", "cause": "c", "fix": "f", "verify": "v", "versions": "v",
      "proof": "tests/test_x.py::test_y", "unreproducible": "why"}, "should not be valid under"),
])
def test_malformed_entries_are_rejected(bad, why):
    with pytest.raises(ValueError, match=why):
        ei._entry(bad, "fixture")


def test_entry_names_resolve_in_the_installed_library():
    """``names`` key explain.py's notes: each must be a public name (or member) of torchrl/tensordict."""
    from torchrl_skill.explain.names import Found, resolve

    wrong = [f"{e.id}: {n}" for e in ENTRIES for n in e.names if not isinstance(resolve(n), Found)]
    assert wrong == [], wrong


def test_pages_are_current():
    sys.path.insert(0, str(BUNDLE / "tests"))
    import render_docs

    assert render_docs.stale_pages() == [], "run: python tests/render_docs.py"


def test_render_splits_pages_and_points_across_areas():
    def entry(i, area, **kw):
        return ei.ErrorEntry(f"e{i}", area, f"Title {i}", "c", "f", "v", "torchrl 0.14.1", **kw)

    entries = (entry(1, "root", also=("envs-and-transforms",)), entry(2, "envs-and-transforms"),
               entry(3, "envs-and-transforms", page_name="troubleshooting-more.md"))
    assert ei.pages(entries) == [("root", "troubleshooting.md"), ("envs-and-transforms", "troubleshooting-more.md"),
                                 ("envs-and-transforms", "troubleshooting.md")]
    main = ei.render("envs-and-transforms", entries)
    more = ei.render("envs-and-transforms", entries, page="troubleshooting-more.md")
    assert "### Title 2" in main and "### Title 3" not in main and "### Title 3" in more
    assert "- Title 1: [root](../../../references/troubleshooting.md#title-1)" in main
    assert "Title 1" not in ei.render("root", entries, page="troubleshooting-more.md")
    for block in (main, more):
        assert block.startswith(ei.BEGIN_MARK) and block.endswith(ei.END_MARK)


# ---------------------------------------------------------------------------- matching
TRACEBACK = """\
Traceback (most recent call last):
  File "/home/me/project/train.py", line 88, in <module>
    losses = loss_module(batch)
  File "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", line 1775, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
  File "/opt/venv/lib/python3.12/site-packages/torchrl/objectives/ppo.py", line 1040, in forward
    log_prob = _get_log_prob(tensordict, self.tensor_keys.sample_log_prob)
KeyError: "Couldn't find the log-prob ('agents', 'action_log_prob') in the input data."
"""


def test_match_finds_the_entry_in_a_real_traceback_with_other_keys():
    ranked = ei.match(TRACEBACK)
    assert ranked and "Couldn't find the log-prob" in ranked[0][1].title


def test_match_reads_pytest_output_and_colour_codes():
    pytest_style = "\n".join("E       " + ln for ln in TRACEBACK.splitlines()[-1:])
    coloured = "\x1b[31m" + TRACEBACK.splitlines()[-1] + "\x1b[0m"
    for text in (pytest_style, coloured):
        ranked = ei.match(text)
        assert ranked and "Couldn't find the log-prob" in ranked[0][1].title, text


def test_a_raised_error_outranks_a_warning_printed_before_it():
    first = next(e for e in ERRORS if e.signatures)
    second = next(e for e in ERRORS if e.signatures and e.id != first.id)
    text = (f"/x.py:3: FutureWarning: {first.signatures[0]}\n  warnings.warn(\nTraceback (most recent call last):\n"
            f'  File "/x.py", line 9, in <module>\nRuntimeError: {second.signatures[0]}\n')
    ranked = ei.match(text, entries=(first, second))
    assert [e.id for _, e, _ in ranked] == [second.id, first.id]


def test_unrelated_text_matches_nothing_exactly():
    assert all(score < 50 for score, _, _ in ei.match("ZeroDivisionError: division by zero"))
    assert ei.match("") == []


def test_last_error_line_is_the_final_exception():
    assert ei.last_error_line(TRACEBACK).startswith("KeyError: \"Couldn't find")
    assert ei.last_error_line("just some text\nand more") == "and more"


def test_signatures_are_the_stable_part_of_the_message():
    """No signature carries an example's tensor size: sizes differ in every user's message."""
    sized = [f"{e.id}: {s}" for e in ERRORS for s in e.signatures if re.search(r"torch\.Size\(\[\d", s)]
    assert sized == [], f"move sizes into a pattern: {sized}"


# ---------------------------------------------------------------------------- derived answers
# The misuses below are spelled with getattr/** so that the drift scanner's self-scan
# (test_development_and_testing_drift.py::test_live_rules_report_nothing_on_the_bundles_own_code)
# does not report them: they are meant to raise.
def _raised(fn) -> str:
    try:
        fn()
    except Exception as err:  # the real message, as a traceback's last line shows it
        return f"{type(err).__name__}: {err}"
    raise AssertionError("no error raised")


def _explain_error(text: str):
    from conftest import rows, run_main

    code, report = run_main("scripts/explain", "--error", text)
    return code, report["checks"], rows(report)


def test_a_missing_attribute_names_the_live_attributes_and_no_unrelated_entry():
    from torchrl.data import Bounded

    text = _raised(lambda: getattr(Bounded(-1, 1, shape=(1,)).space, "minimum"))
    assert text == "AttributeError: 'ContinuousBox' object has no attribute 'minimum'"
    assert ei.match(text) == []  # it shares only "object has no attribute" with the GPT-2 entry
    code, checks, by_name = _explain_error(text)
    assert code == 0 and checks[0]["name"] == "derived:no-attribute", checks
    detail = by_name["derived:no-attribute"][1]
    assert "ContinuousBox has no attribute minimum; closest: low" in detail and "high" in detail
    assert by_name["error:no-match"][0] == "skip" and "nearest" not in by_name["error:no-match"][1]
    code, _, by_name = _explain_error(_raised(lambda: getattr(Bounded, "minimum")))
    assert "Bounded has no attribute minimum; closest: low" in by_name["derived:no-attribute"][1]
    assert "keyword of torchrl.data.Bounded" in by_name["derived:no-attribute"][1]


def test_a_module_attribute_names_the_submodule_that_defines_it():
    import torchrl.data

    text = _raised(lambda: torchrl.data.ContinuousBox)
    assert text == "AttributeError: module 'torchrl.data' has no attribute 'ContinuousBox'"
    _, _, by_name = _explain_error(text)
    assert "from torchrl.data.tensor_specs import ContinuousBox" in by_name["derived:no-attribute"][1]
    ranked = ei.match("AttributeError: module 'torchrl.data' has no attribute 'CompositeSpec'")
    assert ranked and ranked[0][1].id == "cannot-import-name-compositespec-from-torchrl"  # a near miss that shares a name


def test_a_bad_keyword_or_missing_argument_prints_the_live_signature():
    from torchrl.data import LazyTensorStorage
    from torchrl.envs import StepCounter

    text = _raised(lambda: StepCounter(**{"max_step": 3}))
    assert text == "TypeError: StepCounter.__init__() got an unexpected keyword argument 'max_step'"
    code, checks, by_name = _explain_error(text)
    detail = by_name["derived:call-signature"][1]
    assert code == 0 and "StepCounter has no keyword max_step; closest: max_steps" in detail
    assert "signature: StepCounter(max_steps=None" in detail
    text = _raised(lambda: LazyTensorStorage())
    assert "missing 1 required positional argument: 'max_size'" in text
    assert "LazyTensorStorage requires max_size" in _explain_error(text)[2]["derived:call-signature"][1]
    # an older Python names only __init__(): the call in the traceback's source line names the class
    trace = ('Traceback (most recent call last):\n  File "/home/u/ddpg.py", line 12, in <module>\n'
             "    rb = ReplayBuffer(storag=LazyTensorStorage(1000), batch_size=32)\n"
             "TypeError: __init__() got an unexpected keyword argument 'storag'\n")
    assert "ReplayBuffer has no keyword storag; closest: storage" in _explain_error(trace)[2]["derived:call-signature"][1]


def test_objects_outside_torchrl_get_no_derived_answer():
    from torchrl_skill.explain import errors as ee

    assert ee.derived("AttributeError: 'NoneType' object has no attribute 'foo'") == []
    assert ee.derived("TypeError: MyEnv.__init__() got an unexpected keyword argument 'k'") == []
    code, _, by_name = _explain_error("AttributeError: 'MyEnv' object has no attribute 'foo'")
    assert code == 1 and by_name["error:no-match"][0] == "fail" and "derived:no-attribute" not in by_name


def test_near_misses_need_a_distinctive_shared_word():
    assert ei.distinctive({"object", "has", "attribute", "attributeerror", "__init__", "torchrl"}) == set()
    assert ei.distinctive({"object", "compositespec"}) == {"compositespec"}


def test_double_to_float_fix_converts_only_float64_entries():
    """The fix of double-to-float-key-not-float64, run: DoubleToFloat() over Pendulum-v1
    (float32 in GymEnv) converts nothing; over a float64 entry it converts that one only."""
    import torch
    from torchrl.data import Composite, Unbounded
    from torchrl.envs import DoubleToFloat, GymEnv, TransformedEnv
    from torchrl.envs.utils import check_env_specs

    if str(TRIGGERS) not in sys.path:  # _tiny lives with the triggers (alone, no trigger loaded it)
        sys.path.insert(0, str(TRIGGERS))
    from _tiny import TinyEnv

    assert GymEnv("Pendulum-v1").observation_spec["observation"].dtype == torch.float32
    named = TransformedEnv(GymEnv("Pendulum-v1"), DoubleToFloat(in_keys=["observation"]))
    assert _raised(lambda: named.observation_spec) == "TypeError: observation_spec.dtype is not torch.float64"
    for env in (TransformedEnv(GymEnv("Pendulum-v1"), DoubleToFloat()), GymEnv("Pendulum-v1")):
        check_env_specs(env)
        assert env.observation_spec["observation"].dtype == torch.float32

    class Mixed(TinyEnv):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(observation=Unbounded(shape=(3,)), wide=Unbounded(shape=(2,), dtype=torch.float64))

    env = TransformedEnv(Mixed(), DoubleToFloat())
    assert env.transform.in_keys == ["wide"] and env.observation_spec["wide"].dtype == torch.float32
