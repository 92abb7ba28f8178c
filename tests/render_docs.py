"""Regenerate the generated blocks of the bundle's markdown from their data files.

    python tests/render_docs.py          rewrite every stale block
    python tests/render_docs.py --check  exit 1 naming each stale page (what the tests run)

Blocks: each troubleshooting*.md from src/torchrl_skill/data/error_index.json (src/torchrl_skill/explain/error_index.py; an
area split over several pages by the entries' ``page`` field gets its new page created),
and README.md's script table from each script's --help (tests/doccheck.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BUNDLE = Path(__file__).resolve().parent.parent
README = BUNDLE / "README.md"
sys.path.insert(0, str(BUNDLE / "src"))
sys.path.insert(0, str(BUNDLE / "tests"))
from torchrl_skill.explain import error_index as ei  # noqa: E402
import doccheck  # noqa: E402


def troubleshooting_pages() -> dict[Path, str]:
    """``{page: its generated block}`` for every page that has entries or pointers."""
    return {BUNDLE / ei.page_path(area, name): ei.render(area, page=name) for area, name in ei.pages()}


def new_page(path: Path, block: str) -> str:
    """The text of a page an area's split creates (``page`` field): a heading, when to read
    it, the block. The SKILL.md of the area must link it (the docs tests say so)."""
    area = path.parent.parent.name if path.parent.parent != BUNDLE else "root"
    return (f"# Troubleshooting ({area}, continued)\n\nRead when one of these errors or symptoms appears; "
            f"each heading is the exact text seen on torchrl 0.14.1.\n\n{block}\n")


def replace_block(text: str, block: str) -> str:
    """``text`` with its generated block replaced (ValueError when the marks are absent)."""
    start, end = text.index(ei.BEGIN_MARK), text.index(ei.END_MARK) + len(ei.END_MARK)
    return text[:start] + block + text[end:]


def stale_pages() -> list[Path]:
    """Pages whose generated block differs from the index (or that do not exist yet)."""
    return [page for page, block in troubleshooting_pages().items()
            if not page.is_file() or replace_block(page.read_text(), block) != page.read_text()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report stale pages (exit 1 if any)")
    args = parser.parse_args()
    stale = stale_pages() + ([README] if doccheck.check_script_table(README) else [])
    if args.check:
        for page in stale:
            print(f"stale: {page.relative_to(BUNDLE)}")
        return 1 if stale else 0
    for page, block in troubleshooting_pages().items():
        page.write_text(replace_block(page.read_text(), block) if page.is_file() else new_page(page, block))
    README.write_text(doccheck.replace_script_table(README.read_text(), doccheck.render_script_table()))
    print(f"regenerated {len(stale)} page(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
