"""Explain any public TorchRL/TensorDict name from the installed library, or look up an error.

NAME is a short name (ClipPPOLoss), a dotted path (torchrl.envs.TransformedEnv), a
member (ReplayBuffer.extend), or a class of your own code (my_transforms.py:AddHundred,
read as its torchrl base class is: what a transform acts on, what a loss trains). For each it prints the import path(s), the signature with
its defaults, the first docstring paragraph, the constructor parameters grouped by
purpose, facts measured on the live object (a loss: tensor_keys, in/out keys, which
networks it trains as its own copies, target parameters, its default value estimator
and gamma/lambda; a transform: whether it acts on step output, reset output, actions;
a collector, storage, buffer, env, module or estimator: what users get wrong), and the
bundle's notes on it (renames, error-index entries) with a link to the reference.
With --error TEXT (or --error-file FILE, - for stdin) it prints the error-index entries
the text confirms, best first: cause, fix, and the command that verifies the fix. A
message torch, tensordict or Python raises for many callers (a shape, dtype, device or
batch-size mismatch) confirms no entry alone: its entries are listed as candidates, each
with the traceback frame that tells it apart; given a whole traceback, the torchrl or
tensordict function that raised (and your line that called it) is explained and ranks
the entries. First, when the message names a torchrl/tensordict object (``'X' object has no attribute
'y'``, ``X.__init__() got an unexpected keyword argument 'k'``, ``cannot import name 'X' from
'torchrl.y'``), X's live attributes or signature closest to y/k and the bundle's rename rows
for them. A name no public module exports (``ContinuousBox``) is found in the submodule that
defines it. When no entry matches, the message is looked up where the installed torchrl or
tensordict raise it (``explain/sites.py``: file:line, the guarding ``if``, the public APIs
that reach it, the entries at that site), or, under a torchrl/tensordict frame of a
traceback, the call that torch/numpy/Python raised inside; then a reference quoting it. Each
says it is derived, not a verified entry.
Only the module holding the name is imported; Ray, vLLM and SGLang are not imported
unless the name lives with them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = (
    "python $SKILL_DIR/scripts/explain.py ClipPPOLoss ReplayBuffer.extend torchrl.envs.TransformedEnv\n"
    "  python $SKILL_DIR/scripts/explain.py --error \"KeyError: Couldn't find the log-prob action_log_prob\"\n"
    "  python $SKILL_DIR/scripts/explain.py --error-file traceback.txt --json"
)
EXIT_CODES = (
    "exit codes:\n"
    "  0    every NAME was explained (a NAME whose module needs an optional dependency\n"
    "       that is not installed is a MISSING row naming it), or the error text confirms\n"
    "       an entry (a distinctive text, or a traceback frame the entry names), is a\n"
    "       traceback through torchrl/tensordict (the function that raised is explained),\n"
    "       names a torchrl/tensordict object explain answers for, or is a message the\n"
    "       installed torchrl/tensordict raise (its raising site) or a bundle reference quotes\n"
    "  1    a NAME is not in the installed library, or nothing answers the error text\n"
    "       (its row names the closest public names or entries), or the text is a generic\n"
    "       message (torch, tensordict or Python raise it for many callers) that no traceback\n"
    "       frame confirms: its candidate causes are SKIP rows, each naming the frame that\n"
    "       tells it apart (pass the whole traceback)\n"
    "  2    cannot run: an empty or malformed NAME, an --error-file that does not exist or\n"
    "       cannot be read, a file.py:ClassName that cannot be imported, or torch/tensordict/\n"
    "       torchrl missing (any torchrl version is explained; one line on stderr)\n"
    "  130  interrupted (Ctrl-C)"
)
DEFAULT_NAMES = ["ClipPPOLoss"]


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.epilog = f"example:\n  {EXAMPLE.strip()}\n\n{EXIT_CODES}"  # explain's own codes: no version range
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"names to explain, or file.py:ClassName for your own class (default: {' '.join(DEFAULT_NAMES)})")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--error", metavar="TEXT", help="error text or a whole traceback: print the matching error-index entries")
    source.add_argument("--error-file", metavar="FILE", help="read the error text from FILE (- for stdin)")
    parser.add_argument("--limit", type=sr.int_at_least(1), default=3, help="most entries shown for an error (default: 3)")
    return parser


# ---------------------------------------------------------------------------- inputs
def error_text(args) -> str | None:
    """The error text asked for, or None in name mode; exits 2 on an unreadable file or empty text."""
    if args.error is None and args.error_file is None:
        return None
    if args.error_file == "-":
        text = sys.stdin.read()
    elif args.error_file is not None:
        path = Path(args.error_file)
        if not path.is_file():
            sr.cannot_run(f"--error-file {path}: no such file", "pass the path of a saved traceback, or - to read stdin")
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError as err:
            sr.cannot_run(f"--error-file {path}: cannot be read ({err.strerror})", "check the path and its permissions")
        if "\x00" in text:
            sr.cannot_run(f"--error-file {path}: a binary file, not a traceback", "save the error text to a .txt file")
    else:
        text = args.error
    if not text.strip():
        sr.cannot_run("the error text is empty", 'pass the message: --error "KeyError: ..." (or --error-file FILE)')
    return text


def checked_names(args) -> list[str]:
    """The NAMEs, each validated (exit 2 on an empty or malformed one)."""
    from torchrl_skill.explain.names import BadName, check_name

    names = args.names or DEFAULT_NAMES
    try:
        return [check_name(n) for n in names]
    except BadName as err:
        sr.cannot_run(f"NAME: {err}", "pass a name such as ClipPPOLoss, torchrl.envs.TransformedEnv or ReplayBuffer.extend")


def probe_stack() -> dict:
    """Versions; exit 2 when torch/tensordict/torchrl are missing or torchrl fails to import.

    Unlike skill_report.require_stack, any torchrl version is accepted: explain reads the
    installed library, so it works outside the verified range and says so."""
    versions = sr.stack_versions()
    pins = " ".join(f"{d}=={v}" for d, v in sr.VERIFIED.items())
    for dist in ("torch", "tensordict", "torchrl"):
        if versions[dist] is None:
            sr.cannot_run(f"{dist} is not installed", f"pip install {pins}")
    os.environ.setdefault("TORCHRL_CONSOLE_STREAM", "stderr")
    try:
        import contextlib

        with contextlib.redirect_stdout(sys.stderr):
            import torchrl  # noqa: F401
    except Exception as err:
        sr.cannot_run(f"import torchrl failed: {sr.first_line(err)}", f"install matching releases: pip install {pins}")
    sr.plain_torchrl_logs()  # the probes build small objects; their INFO lines are noise here
    return versions


def version_note(versions: dict) -> str:
    found, verified = versions.get("torchrl"), sr.VERIFIED["torchrl"]
    if found == verified:
        return f"torchrl {found} (the verified release)"
    return f"torchrl {found}: outside the verified {verified}; every fact below is read from the installed library"


# ---------------------------------------------------------------------------- names
def explain_lines(name: str, versions: dict) -> tuple[bool | None, list[str]]:
    """``(found, lines)`` for one NAME: the full explanation, or why it was not found.
    ``found`` is None for a public name whose module needs an optional dependency that
    is not installed here (the line says which, and how to install it)."""
    from torchrl_skill.explain import facts as fx
    from torchrl_skill.explain.kinds import kind_facts
    from torchrl_skill.explain.llm import llm_facts
    from torchrl_skill.explain.names import Found, NeedsBackend, resolve
    from torchrl_skill.explain.notes import notes_for, rename_line, version_notes

    hit = resolve(name)
    if isinstance(hit, NeedsBackend):
        return (None if not hit.installed else False), [hit.line()]
    if not isinstance(hit, Found):
        lines = [f"{name}: not in torchrl {versions.get('torchrl')} / tensordict {versions.get('tensordict')}"
                 + (f" ({hit.reason})" if hit.reason else "")]
        lines += fx.wrap("closest public names", ", ".join(hit.closest) or "none")
        lines += [ln for row in hit.renames for ln in fx.wrap("renamed or removed", rename_line(row))]
        lines += [ln for note in version_notes(name, versions) for ln in fx.wrap("version", note)]
        return False, lines
    obj, kind = hit.obj, fx.kind_of(hit.obj)
    user = ":" in hit.asked
    label = (hit.asked.rsplit(":", 1)[-1] if user else hit.path.rsplit(".", 1)[-1] if hit.owner is None
             else f"{hit.owner.__name__}.{hit.path.rsplit('.', 1)[-1]}")
    defined = getattr(obj, "__module__", None) or getattr(getattr(obj, "fget", None), "__module__", None)
    lines = [f"{hit.path}  ({kind}; {'your code; ' if user else ''}{version_note(versions)})"]
    if user:
        bases = [k.__module__ + "." + k.__qualname__ for k in getattr(obj, "__mro__", ())[1:]
                 if k.__module__.split(".")[0] in ("torchrl", "tensordict")][:3]
        lines += fx.wrap("subclass of", ", ".join(bases) or "no torchrl/tensordict class")
    else:
        top = label.split(".")[0]
        imports = [f"from {m} import {top}" for m in hit.exported_by]
        lines += fx.wrap("import", "; ".join(imports) or f"import {hit.path.rsplit('.', 1)[0]}")
        if not hit.public:
            lines += fx.wrap("not exported", f"no public module's __all__ lists {top} (torchrl.data, torchrl.envs, ...): "
                             f"import it from the module that defines it, {hit.exported_by[0]}")
    if defined and not user:
        lines += fx.wrap("defined in", defined)
    lines += fx.wrap("signature", fx.signature_text(obj, label))
    for target in fx.forwarded(obj):
        lines += fx.wrap("**kwargs go to", target)
    lines += fx.wrap("doc", fx.first_paragraph(obj))
    for group in fx.parameter_groups(obj):
        lines += fx.wrap("parameters", group)
    methods = fx.own_methods(obj)
    if methods:
        lines += fx.wrap("methods it adds", ", ".join(methods))
    for backend in fx.backends_used(obj):
        lines += fx.wrap("its module uses the optional", backend)
    try:
        facts = kind_facts(obj, kind)
        facts += llm_facts(obj)  # LLM losses/wrappers: which mode writes each key
    except Exception as err:  # a fact that cannot be measured here is said, not crashed on
        facts = [f"facts not measured: {type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"]
    for fact in facts:
        lines += fx.wrap("fact", fact)
    for note in notes_for(hit.asked, obj) + version_notes(hit.asked, versions):
        lines += fx.wrap("note", note)
    return True, lines


def json_detail(lines: list[str]) -> str:
    """The printed lines as one JSON detail: one ``" | "``-separated part per labelled line
    (a wrapped line's continuation, indented by 6, is joined back to it)."""
    parts: list[str] = []
    for ln in lines:
        if ln.startswith("      ") and parts:
            parts[-1] += " " + " ".join(ln.split())
        else:
            parts.append(" ".join(ln.split()))
    return " | ".join(parts)


def check_name(name: str, versions: dict, json_mode: bool):
    """One report row: the explanation printed (text mode) or held in the detail (JSON)."""

    def run():
        found, lines = explain_lines(name, versions)
        detail = json_detail(lines) if json_mode else lines[0]
        if found is None:  # an optional dependency absent: a MISSING row, never "not in torchrl"
            raise sr.BackendMissing(detail)
        if not json_mode:
            print("\n".join(lines))
        if not found:
            raise sr.CheckFailed(detail)
        return detail

    return run


# ---------------------------------------------------------------------------- errors
def error_lines(entry, score: float, how: str) -> list[str]:
    from torchrl_skill.explain import facts as fx

    lines = [f"{entry.title}  [{entry.page}#{entry.anchor}]"]
    lines += fx.wrap("match", f"{how}, score {score:g}")
    for label in ("cause", "fix", "verify", "versions"):
        lines += fx.wrap(label, entry.plain(label))
    return lines


def _row(report: sr.Report, name: str, status: str, lines: list[str]) -> None:
    if not report.json_mode:
        print("\n".join(lines))
    report.add(name, status, json_detail(lines) if report.json_mode else lines[0])


def run_error(text: str, args, report: sr.Report) -> None:
    """Rows for an error text: first the answers derived from the installed library (the
    function that raised, for a traceback through torchrl/tensordict; a torchrl object the
    message names: ``explain/errors.py``), then the index entries the text confirms
    (``explain/tracebacks.py``: a distinctive signature or pattern, or a frame the entry
    names) as PASS rows. A message torch, tensordict or Python raises for many callers
    confirms nothing by itself: its entries are ``candidate:`` SKIP rows, each with the
    frame that tells it apart, and ``error:unconfirmed`` fails (a skip when a derived
    answer was given). With no entry at all, ``error:no-match`` fails (a skip after a
    derived answer) and names the near misses."""
    from torchrl_skill.explain import error_index as ei
    from torchrl_skill.explain.errors import derived, fix_answers
    from torchrl_skill.explain.tracebacks import answer

    answers = derived(text) + fix_answers(text, report.versions or sr.stack_versions())
    for name, lines in answers:
        _row(report, name, "pass", lines)
    hits, trace = answer(text)
    confirmed = [h for h in hits if h.confirmed]
    last = ei.last_error_line(text)
    for hit in confirmed[: args.limit]:
        _row(report, f"error:{hit.entry.id}", "pass", error_lines(hit.entry, hit.score, hit.evidence))
    if confirmed:
        return
    from torchrl_skill.explain.lookup import answers as lookup, not_found_line

    # a generic message's candidates name their frames (below); any other text is looked
    # up where torchrl/tensordict raise it
    found = [] if hits else lookup(text)
    generic = next((g for g in ei.generic_messages() if " ".join(g.text.split()) in " ".join(last.split())), None)
    for name, lines in found:  # where a generic message is raised is no answer: its callers are many
        _row(report, name, "skip" if generic else "pass", lines)
    answers += [] if generic else found
    if hits:
        for hit in hits[: args.limit]:
            lines = error_lines(hit.entry, hit.score, f"candidate, not confirmed: {hit.evidence}")
            _row(report, f"candidate:{hit.entry.id}", "skip", lines)
        source = f" ({generic.raised_by} raises it for many callers)" if generic else ""
        how = ("the traceback passes through none of their frames: the row above names the function that raised"
               if any(f.library for f in trace) else
               "pass the whole traceback (--error-file traceback.txt): the frame that raised tells them apart")
        report.add("error:unconfirmed", "skip" if answers else "fail",
                   f"{last[:160]!r} is a generic message{source}: {len(hits)} candidate cause(s), none confirmed; {how}")
        return
    near = ei.match(text, limit=args.limit)
    close = "; ".join(f"{e.short or e.title} [{e.page}#{e.anchor}]" for _, e, _ in near)
    hint = ("The row above is read from the installed library" if answers else
            f"{not_found_line(last)}. Pass the whole traceback (--error-file): its torchrl/tensordict frame names the call")
    report.add("error:no-match", "skip" if answers else "fail",
               f"no error-index entry matches {last[:160]!r}" + (f"; nearest: {close}" if close else "") + f". {hint}")


# ---------------------------------------------------------------------------- main
def run_checks(args, report: sr.Report) -> None:
    text = error_text(args)
    if text is not None:
        run_error(text, args, report)
        return
    names = checked_names(args)
    versions = report.versions or probe_stack()
    for name in names:
        report.run(f"explain:{name}", check_name(name, versions, report.json_mode))


def main(argv=None) -> int:
    # Not skill_report.standard_main: explain must run on any torchrl version (it reads the
    # installed library) and --error needs no torch at all, so the stack probe is its own.
    args = build_parser().parse_args(argv)
    error_mode = args.error is not None or args.error_file is not None
    if not error_mode:
        checked_names(args)  # a malformed NAME exits 2 before the 5 s torchrl import
    versions = sr.stack_versions() if error_mode else probe_stack()
    report = sr.Report(__file__, json_mode=args.json, versions=versions)
    report.note_stack()
    run_checks(args, report)
    return report.finish()


if __name__ == "__main__":
    from torchrl_skill.explain import names as _names

    _names.HIDE = True  # a fresh interpreter: keep Ray/vLLM/SGLang out (see explain/names.py)
    sr.main_guard(main)
