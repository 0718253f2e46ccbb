"""MkDocs hooks: pages that show a file of the repository root as it is.

`BENCHMARKS.md` and `CHANGELOG.md` live at the root (where GitHub and the benchmark
harness keep them), outside `docs/`. A page holding `<!-- include: NAME -->` gets that
file's text in its place, its own title dropped (the page has one), and its links made
to work on the site: a plot under `bench/plots/` is copied into the site at the same
path (the including page sits at the site's root, so the link holds), a link into
`docs/` points at the page, and a link to any other repository file becomes the
file's name in code (the site does not carry the repository).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
PLOTS = ("bench/plots",)
IMAGE_SUFFIXES = {".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp"}
INCLUDE = re.compile(r"^<!-- include: ([\w.-]+) -->$", re.MULTILINE)
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def on_files(files: Files, config: Any) -> Files:
    for folder in PLOTS:
        for path in sorted((REPO / folder).glob("*")):
            if path.suffix.lower() in IMAGE_SUFFIXES:
                files.append(File.generated(config, f"{folder}/{path.name}", abs_src_path=str(path)))
    return files


def _link(match: re.Match[str]) -> str:
    bang, text, target = match.groups()
    if re.match(r"^[a-z]+:|^#", target):
        return match.group(0)
    path = target.split("#", 1)[0]
    if any(path.startswith(f"{folder}/") for folder in PLOTS):
        return match.group(0)
    if path.startswith("docs/"):
        return f"{bang}[{text}]({target.removeprefix('docs/')})"
    return f"{text} (`{path}`)" if text and text != path else f"`{path}`"


def include(name: str) -> str:
    text = (REPO / name).read_text(encoding="utf-8")
    lines = text.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return LINK.sub(_link, "\n".join(lines))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return INCLUDE.sub(lambda match: include(match.group(1)), markdown)
