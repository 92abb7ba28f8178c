"""Regenerate the generated blocks of the bundle's markdown from their data files.

    python tests/render_docs.py          rewrite every stale block
    python tests/render_docs.py --check  exit 1 naming each stale page (what the tests run)

Blocks: each troubleshooting.md from scripts/error_index.json (scripts/_error_index.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BUNDLE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BUNDLE / "scripts"))
import _error_index as ei  # noqa: E402


def troubleshooting_pages() -> dict[Path, str]:
    """``{page: its generated block}`` for every area that has entries."""
    areas = {e.area for e in ei.load()}
    return {BUNDLE / ei.ErrorEntry("x", a, "t", "c", "f", "v", "v").page: ei.render(a) for a in ei.AREAS if a in areas}


def replace_block(text: str, block: str) -> str:
    """``text`` with its generated block replaced (ValueError when the marks are absent)."""
    start, end = text.index(ei.BEGIN_MARK), text.index(ei.END_MARK) + len(ei.END_MARK)
    return text[:start] + block + text[end:]


def stale_pages() -> list[Path]:
    return [page for page, block in troubleshooting_pages().items() if replace_block(page.read_text(), block) != page.read_text()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report stale pages (exit 1 if any)")
    args = parser.parse_args()
    stale = stale_pages()
    if args.check:
        for page in stale:
            print(f"stale: {page.relative_to(BUNDLE)}")
        return 1 if stale else 0
    for page, block in troubleshooting_pages().items():
        page.write_text(replace_block(page.read_text(), block))
    print(f"regenerated {len(stale)} page(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
