"""runtime/import_hook.py and runtime/threads.py: the one import hook the auditor's child and
workers instrument torchrl with, and the one thread-count pin of the LLM checks."""

from __future__ import annotations

import contextlib
import sys

from torchrl_skill.runtime.import_hook import when_imported
from torchrl_skill.runtime.threads import torch_threads


def test_the_hook_runs_after_the_first_import_inside_around_and_once(tmp_path, monkeypatch):
    (tmp_path / "hooked_pkg").mkdir()
    (tmp_path / "hooked_pkg" / "__init__.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    events = []

    @contextlib.contextmanager
    def around():
        events.append("enter")
        yield
        events.append("exit")

    when_imported("hooked_pkg", lambda: events.append(("called", sys.modules["hooked_pkg"].VALUE)), around=around)
    assert events == []  # nothing until the import
    try:
        import hooked_pkg  # noqa: F401
        assert events == ["enter", ("called", 7), "exit"]  # after the module ran, inside around()
        del sys.modules["hooked_pkg"]
        import hooked_pkg  # noqa: F401,F811 - a second import: the finder removed itself
        assert events == ["enter", ("called", 7), "exit"]
    finally:
        sys.modules.pop("hooked_pkg", None)
    # a package imported already: at once
    when_imported("json", lambda: events.append("json"))
    assert events[-1] == "json"


def test_the_thread_pin_restores_the_count_even_after_an_error():
    import torch

    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    try:
        with torch_threads(target):
            assert torch.get_num_threads() == target
            raise RuntimeError("inside")
    except RuntimeError:
        pass
    assert torch.get_num_threads() == before
