"""Screenshots of the HTML report and of ``rose review``'s item page, taken during the docs build.

They are made from the bundled demo every time the site is built (``builder-inited``), into
``docs/_generated/`` (ignored by git), so the pages always show what the current code draws:

1. ``rose demo`` writes the demo database, its 40 items and a judge-free run with evidence;
2. ``rose report`` renders that run as the self-contained HTML page, opened from its file;
3. ``rose review`` loads the run into a state file and is served on a free loopback port, where an
   annotator signs in, opens item 7 (a match that a witness database separates), labels it with the
   keyboard and sees the machine's verdict revealed;
4. headless Chromium, driven by selenium through chromedriver, takes both pictures.

Everything runs through the package's own command line (``python -m rose_sql``), as a user would.
``ROSE_DOCS_SCREENSHOTS`` says what a missing piece means (Chromium, chromedriver, selenium, the ``review``
extra): ``auto`` (the default) takes the pictures when everything is there and otherwise writes placeholder
images with a line that names what is missing and how to install it, so the README's build works right after
the README's install; ``required`` (the test suite, where Chromium is installed) makes a missing piece or a
failure a warning, which ``sphinx-build -W`` turns into a failure; ``off`` writes the placeholders at once.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

SHOTS = ("report.png", "review-item.png")
"""The files the pages embed, under ``docs/_generated/``."""
WINDOW = (1400, 1800)
ITEM = "7"
"""The demo item shown in the review app: the results match, and a witness database separates them."""


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", make_screenshots)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


def make_screenshots(app: Sphinx) -> None:
    out = Path(app.srcdir) / "_generated"
    out.mkdir(exist_ok=True)
    mode = os.environ.get("ROSE_DOCS_SCREENSHOTS", "auto")
    if app.builder.format != "html" or mode == "off":
        _placeholders(out)
        return
    missing = _missing()
    if missing:
        say = logger.warning if mode == "required" else logger.info
        say("screenshots not taken (%s): placeholder images instead", missing)
        _placeholders(out)
        return
    started = time.monotonic()
    try:
        take(out)
    except Exception as error:  # a failure of the pictures is reported, not a crash (a warning where required)
        say = logger.warning if mode == "required" else logger.info
        say("screenshots failed: %s: %s", type(error).__name__, error)
        _placeholders(out)
        return
    logger.info("screenshots: %s in %.1f s", ", ".join(SHOTS), time.monotonic() - started)


def _missing() -> str:
    """What the screenshots need and this machine lacks, in words ('' when nothing)."""
    import importlib.util

    lacking = [
        what
        for what, present in (
            ("chromium", shutil.which("chromium") or shutil.which("chromium-browser")),
            ("chromedriver", shutil.which("chromedriver")),
            ("selenium", importlib.util.find_spec("selenium")),
            ("the review extra", importlib.util.find_spec("starlette") and importlib.util.find_spec("uvicorn")),
        )
        if not present
    ]
    if not lacking:
        return ""
    return ", ".join(lacking) + " missing: pip install -e '.[dev]', apt-get install chromium chromium-driver"


def take(out: Path) -> None:
    """Both screenshots, written to ``out``."""
    with tempfile.TemporaryDirectory(prefix="rose-docs-") as tmp_name:
        tmp = Path(tmp_name)
        demo = tmp / "demo"
        rose("demo", "--out", str(demo))
        run = demo / "runs" / "items"
        report = tmp / "report.html"
        rose("report", str(run), "--out", str(report))
        state = tmp / "review.sqlite"
        rose("review", str(state), "--project", "demo", "--load", str(run), "--db-root", str(demo / "db"), "--no-serve")
        with browser(tmp / "profile") as driver, review_server(state) as base:
            driver.get(report.as_uri())
            driver.execute_script("window.scrollTo(0, 0)")
            driver.save_screenshot(str(out / "report.png"))
            review_item(driver, base, out / "review-item.png")


def rose(*args: str) -> None:
    """Run one ``rose`` command with this Python; its output is shown only when it fails."""
    done = subprocess.run([sys.executable, "-m", "rose_sql", *args], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"rose {args[0]} exited {done.returncode}: {done.stderr[-2000:]}")


@contextmanager
def review_server(state: Path) -> Iterator[str]:
    """``rose review STATE`` served on a free loopback port: its base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "rose_sql", "review", str(state), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    why = server.stderr.read() if server.stderr and server.poll() is not None else "no answer in 60 s"
                    raise RuntimeError(f"rose review did not start: {why}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@contextmanager
def browser(profile: Path) -> Iterator[Any]:
    """Headless Chromium with a fresh profile, driven through chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium") or shutil.which("chromium-browser"))
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--hide-scrollbars",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(shutil.which("chromedriver"))), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def review_item(driver: Any, base: str, shot: Path) -> None:
    """Sign in, open the item, label it by keyboard, and take the page once the machine's verdict shows."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    def wait(until: Any) -> None:
        WebDriverWait(driver, 30, poll_frequency=0.05).until(until)

    def keys(*typed: str) -> None:
        ActionChains(driver).send_keys(*typed).perform()

    driver.get(base + "/")
    wait(lambda d: d.switch_to.active_element.get_attribute("id") == "name")
    keys("ada", Keys.ENTER)
    wait(lambda d: d.find_elements(By.ID, "projects"))
    driver.get(f"{base}/p/demo/item?id={ITEM}")
    wait(lambda d: d.find_elements(By.ID, "witness"))
    keys("1", "r", "the question asks for the winner; the witness needs two winners on one day", Keys.ESCAPE)
    keys(Keys.ENTER)
    wait(lambda d: d.find_element(By.ID, "saved").text.startswith("saved at"))
    wait(lambda d: d.find_elements(By.ID, "machine-revealed"))
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(shot))


def _placeholders(out: Path) -> None:
    """A small grey PNG under each name, so that the pages still build."""
    width, height = 320, 60
    raw = b"".join(b"\x00" + b"\xdd\xdd\xdd" * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    for name in SHOTS:
        (out / name).write_bytes(png)
