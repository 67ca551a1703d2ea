"""Sphinx configuration of ROSE-SQL's documentation site.

Build it strictly, as CI does (``tests/test_docs.py``)::

    sphinx-build -W --keep-going -n -b html docs docs/_build/html

Every page is MyST Markdown; the CLI reference is generated from the click commands (sphinx-click), the API
reference from the docstrings of ``rose_sql.__all__`` (autodoc), and the screenshots are taken during the build
by ``docs/_ext/screenshots.py`` in headless Chromium. Nothing is fetched from the network, at build time (no
intersphinx) or when a page is viewed (furo's own fonts are the system's).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import rose_sql  # noqa: E402

project = "ROSE-SQL"
author = "the ROSE-SQL authors"
copyright = "the ROSE-SQL authors, Apache-2.0"
release = rose_sql.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_click",
    "screenshots",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated/*.md", "README.md"]
templates_path: list[str] = []

# MyST: anchors for headings down to ###, so that pages link to sections as page.md#anchor
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# autodoc: the public surface only, in the order of the source, with types in the signature
autodoc_default_options = {"members": True, "member-order": "bysource", "show-inheritance": False}
autodoc_typehints = "signature"
autodoc_class_signature = "separated"
# Types that live outside the package: there is no intersphinx (it would fetch inventories at build time),
# so references to them are left unlinked instead of being reported as broken.
nitpick_ignore_regex = [
    (r"py:.*", r"(pathlib|collections|collections\.abc|typing|types|datetime|decimal|sqlite3|enum|os|io)\..*"),
    (r"py:.*", r"(pydantic|click|openai|httpx|concurrent|multiprocessing|threading|abc|dataclasses)\..*"),
    (r"py:.*", r"(Path|Any|Iterable|Iterator|Sequence|Mapping|Callable|Literal|Self|TypeAlias)"),
    (r"py:.*", r"(int|float|str|bytes|bool|None|object|dict|list|tuple|set|frozenset|type)(\[.*)?"),
    # The API page documents rose_sql.__all__ only: the docstrings' references into the private modules
    # (rose_sql.record.JudgeCall, rose_sql.config.COLUMN_WORK...) and to module constants stay unlinked.
    (r"py:.*", r"rose_sql\..*"),
    (r"py:.*", r"[A-Z][A-Za-z_]+"),
]

html_theme = "furo"
html_title = f"ROSE-SQL {release}"
html_static_path: list[str] = []
html_theme_options = {"navigation_with_keys": True}
html_show_sourcelink = False
html_copy_source = False

# Options are written with two hyphens: docutils' smart quotes would make "--labels" an en dash.
smartquotes = False


def examples_as_code(app: object, ctx: object, lines: list[str]) -> None:
    """Render each command's example (the ``\\b`` block of its help that starts with "Example") as a shell
    code block, so that it can be copied as it is, trailing backslashes included; sphinx-click would make it a
    line block, which reads backslashes as escapes."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("| ") and lines[i][2:].lstrip().startswith("Example"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i][2:])
                i += 1
            body = [line for line in block[1:] if line.strip()]
            indent = min(len(line) - len(line.lstrip()) for line in body) if body else 0
            out += [block[0].strip(), "", ".. code-block:: shell", ""]
            out += ["   " + line[indent:] for line in block[1:]]
            out.append("")
        else:
            out.append(lines[i])
            i += 1
    lines[:] = out


def setup(app: object) -> None:
    app.connect("sphinx-click-process-description", examples_as_code)  # type: ignore[attr-defined]
