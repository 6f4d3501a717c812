"""MkDocs hook: links from a page to files of the repository outside docs/ (an example, the
chart's values.yaml, the Dockerfile).

Such a link is written as it would be on GitHub, relative to the page
(`[jobs.py](../../examples/frameworks/jobs.py)`), so it also works when the markdown is read in
the repository. The site does not carry those files, so the hook checks that the file exists
(a link to a file that was moved or deleted fails the build) and shows it as the link text
followed by its path in the repository; with `repo_url` set in mkdocs.yml it becomes a link to
the file there.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(((?:\.\./)+[^)#\s]+)(#[^)\s]*)?\)")


def on_page_markdown(markdown: str, *, page: Any, config: Any, **_: Any) -> str:
    docs = Path(config["docs_dir"]).resolve()
    here = posixpath.dirname(page.file.src_uri)
    repo_url = (config.get("repo_url") or "").rstrip("/")

    def replace(match: re.Match[str]) -> str:
        text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        path = (docs / here / target).resolve()
        if path.is_relative_to(docs):
            return match.group(0)  # a page of the site: MkDocs checks it
        if not path.is_relative_to(ROOT) or not path.exists():
            raise PluginError(
                f"{page.file.src_uri}: link to {target}, not a file of the repository"
            )
        relative = path.relative_to(ROOT).as_posix()
        if repo_url:
            return f"[{text}]({repo_url}/blob/main/{relative}{anchor})"
        if text.strip("`") == relative:
            return f"`{relative}`"
        return f"{text} (`{relative}`)"

    return LINK.sub(replace, markdown)
