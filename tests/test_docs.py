"""The documentation site: it builds strictly, loads nothing from another host, and its generated references
hold every command, option and public name.

The build is the one ``docs/conf.py`` documents (``sphinx-build -W --keep-going -n``): a broken link between
pages, a page missing from the table of contents, a bad reference or a docstring that is not valid markup
fails it. It takes the screenshots too (headless Chromium), so it takes about 40 s; it runs once per session.
"""

from __future__ import annotations

import html as html_module
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import click
import pytest

import rose_sql
from rose_sql.cli import main

pytest.importorskip("sphinx", reason="the docs extra is not installed: pip install -e '.[docs]'")

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HAS_BROWSER = bool((shutil.which("chromium") or shutil.which("chromium-browser")) and shutil.which("chromedriver"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML site, built strictly (without a browser, with placeholder pictures: that is said)."""
    out = tmp_path_factory.mktemp("docs") / "html"
    env = {**__import__("os").environ, "ROSE_DOCS_SCREENSHOTS": "required" if HAS_BROWSER else "off"}
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, f"the strict docs build failed:\n{done.stderr[-6000:]}"
    return out


def test_the_strict_build_makes_every_page(site: Path) -> None:
    pages = {p.stem for p in DOCS.glob("*.md")}
    built = {p.stem for p in site.glob("*.html")}
    assert pages <= built, pages - built
    assert {"getting-started", "cli", "api", "architecture", "benchmarks", "troubleshooting"} <= pages


EXTERNAL_LOAD = re.compile(
    r"""<(?:script|link|img|iframe|source|video|audio|embed)\b[^>]*?\s(?:src|href|srcset)=["']\s*(?:https?:)?//"""
    r"""|url\(\s*["']?\s*(?:https?:)?//|@import\s+(?:url\()?\s*["']?\s*(?:https?:)?//"""
    r"""|\b(?:fetch|importScripts)\(\s*["'](?:https?:)?//""",
    re.IGNORECASE,
)


def test_no_page_loads_anything_from_another_host(site: Path) -> None:
    """No font or script CDN: every stylesheet, script, font and image a page needs is in the build (links
    to other sites, which a reader follows, are allowed)."""
    offenders = []
    for path in site.rglob("*"):
        if path.suffix in {".html", ".css", ".js"}:
            text = path.read_text(encoding="utf-8", errors="replace")
            offenders += [f"{path.relative_to(site)}: {m.group(0)[:120]}" for m in EXTERNAL_LOAD.finditer(text)]
    assert not offenders, offenders
    assert EXTERNAL_LOAD.search('<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=X">')
    assert EXTERNAL_LOAD.search("@font-face { src: url(https://cdn.example/f.woff2) }")
    assert not EXTERNAL_LOAD.search('<a href="https://www.sphinx-doc.org/">Sphinx</a>')


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found = []
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        assert command is not None
        found.append(((*path, name), command))
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
    return found


def test_the_cli_reference_holds_every_command_and_option(site: Path) -> None:
    html = (site / "cli.html").read_text(encoding="utf-8")
    for path, command in _commands(main):
        anchor = "rose-" + "-".join(path)
        assert f'id="{anchor}"' in html, f"`rose {' '.join(path)}` has no section in the CLI reference"
        section = html.split(f'id="{anchor}"', 1)[1]
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                ids = {f'id="cmdoption-{anchor}-{opt.lstrip("-")}"' for opt in param.opts + param.secondary_opts}
                assert any(i in html for i in ids), f"`rose {' '.join(path)} {param.opts[0]}` is not in the reference"
        text = command.help or ""
        examples = [ln.strip() for ln in text.split("Example", 1)[-1].splitlines() if ln.strip().startswith("rose ")]
        if "Example" in text:  # the example that --help shows is on the page too
            shown = html_module.unescape(re.sub(r"<[^>]+>", "", section.split('<section id="rose-', 1)[0]))
            assert examples and examples[0].split("  ")[0] in shown, (path, examples[:1])


def test_the_api_reference_holds_every_public_name(site: Path) -> None:
    html = (site / "api.html").read_text(encoding="utf-8")
    missing = [name for name in rose_sql.__all__ if name != "__version__" and f'id="rose_sql.{name}"' not in html]
    assert not missing, f"not in the API reference: {missing}"


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", head[16:24])
    return width, height


@pytest.mark.skipif(not HAS_BROWSER, reason="Chromium and chromedriver are not installed: the build used placeholders")
def test_the_screenshots_are_taken_in_the_build_and_embedded(site: Path) -> None:
    for name, page in (("report.png", "calibration.html"), ("review-item.png", "calibration.html")):
        shot = site / "_images" / name
        assert shot.exists(), name
        width, _ = _png_size(shot)
        assert width >= 1000 and shot.stat().st_size > 50_000, (name, width)  # a real page, not a placeholder
        assert f"_images/{name}" in (site / page).read_text(encoding="utf-8"), (name, page)
    assert "_images/report.png" in (site / "getting-started.html").read_text(encoding="utf-8")
    tracked = subprocess.run(["git", "ls-files", "docs/_generated"], capture_output=True, text=True, cwd=ROOT).stdout
    assert not tracked.strip(), f"screenshots are generated, never committed: {tracked}"


def test_the_readme_is_a_front_door_whose_links_land_on_pages() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= 180, f"the README has {len(lines)} lines: the details belong on the site"
    first_screen = "\n".join(lines[:20])
    assert "pip install . && rose demo" in first_screen and "pip install -e '.[dev]' && pytest" in first_screen
    linked = re.findall(r"\]\((docs/[^)#\s]+)", readme)
    assert len(linked) >= 10, linked
    for target in linked:
        assert (ROOT / target).is_file(), f"the README links to {target}, which does not exist"
    for forbidden in (r"\bissue \d+", r"/work/", r"admin@"):
        assert not re.search(forbidden, readme), forbidden


def test_no_page_names_an_internal_issue_a_machine_path_or_a_login_that_does_not_exist() -> None:
    """Pages speak to users: no "issue 14" of our own tracker, no folder of the machine the benchmarks ran on,
    and only logins that exist (an administrator's, postgres or root, for rose db copy and rose db reader;
    the reader rose db reader makes, for everything else)."""
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for forbidden in (r"\bissue \d+", r"/work/|/tmp/|/home/", r"\badmin@"):
            found = re.search(forbidden, text)
            assert not found, f"{page.name}: {found.group(0) if found else ''}"
        for login in re.findall(r"(?:postgresql|mysql)://(\w+)@", text):
            assert login in {"postgres", "root", "rose_reader", "user"}, (page.name, login)


@pytest.mark.parametrize("page", ["README.md", "docs/api.md"])
def test_the_python_snippet_prints_what_it_says(shared: Path, page: str) -> None:
    """The snippet of the README and of the API page, run as a script from the repository root beside
    ../shared/data: its output is the comment under it."""
    text = (ROOT / page).read_text(encoding="utf-8")
    snippet = text.split("```python\n", 1)[1].split("```", 1)[0]
    code = "\n".join(line for line in snippet.splitlines() if not line.startswith("# "))
    expected = [line.removeprefix("# ") for line in snippet.splitlines() if line.startswith("# ")]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == expected


def _distribution(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("-", "_")


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_dependencies_and_extras_said_are_pyprojects(page: str) -> None:
    """The front door's sentence names every runtime dependency, and its table every extra, of pyproject.toml."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    text = (ROOT / page).read_text(encoding="utf-8")
    sentence = " ".join(text.split("Runtime dependencies:", 1)[1].split(".", 1)[0].split()).lower()
    said = {w.replace("-", "_") for w in re.findall(r"[a-z_][a-z0-9_-]*", sentence)}
    assert {_distribution(r) for r in project["dependencies"]} <= said, sentence
    first_cells = re.findall(r"^\| (`[a-z]+`(?:, `[a-z]+`)*) \|", text, re.M)
    named = set(re.findall(r"`([a-z]+)`", " ".join(first_cells))) | set(re.findall(r"`([a-z]+)` installs all", text))
    assert set(project["optional-dependencies"]) <= named, set(project["optional-dependencies"]) - named
