"""rose review in a real browser: Debian's headless Chromium driven by Selenium through Debian's
chromium-driver (CI installs both: see .ci/run). Each browser gets a fresh profile, so two browsers are
two annotators who share nothing but the server.

- 20 items labelled with the keyboard only, then reloaded: every label is still there;
- two annotators on one project, labelling the same item at the same moment: both labels are stored,
  and the overview shows their agreement and their disagreement side by side;
- the machine's verdict reaches the page only after the annotator has labelled;
- a screenshot of the item page, checked for what an expert needs;
- untrusted text in every field of an item runs no script.
"""

from __future__ import annotations

import os
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

pytest.importorskip("starlette", reason="rose review's extra is not installed: pip install -e '.[review]'")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed: pip install -e '.[dev]'")

from review_support import config, demo_records, load_project, thread_server  # noqa: E402
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from rose_sql.review.agreement import current  # noqa: E402
from rose_sql.review.store import Store  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip(
        "Debian's chromium and chromium-driver are not installed (CI installs them: apt-get install -y chromium "
        "chromium-driver)",
        allow_module_level=True,
    )

SCREENSHOT_DIR = os.environ.get("ROSE_REVIEW_SCREENSHOTS")
"""Where to keep the screenshots as well (to look at them), when set."""


@pytest.fixture
def browser(chromium: Path, tmp_path: Path) -> Iterator[Callable[[], WebDriver]]:
    """Opens headless Chromium browsers, each with a fresh profile; all are closed after the test."""
    opened: list[WebDriver] = []

    def open_one() -> WebDriver:
        options = webdriver.ChromeOptions()
        options.binary_location = str(chromium)
        for arg in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--window-size=1400,1700",
            f"--user-data-dir={tmp_path / f'profile-{len(opened)}'}",
        ):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        driver.set_page_load_timeout(60)
        opened.append(driver)
        return driver

    yield open_one
    for d in opened:
        d.quit()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A server on 20 demo items from a run with evidence, and judges on items 1, 4, 7...: (URL, state)."""
    tmp = tmp_path_factory.mktemp("review-browser")
    run, db_root = demo_records(tmp, n=20)
    state = tmp / "state.sqlite"
    load_project(state, "demo", run, db_root)
    load_project(state, "pair", run, db_root)
    with thread_server(config(state)) as base:
        yield base, state


def wait(driver: WebDriver, until: Callable[[WebDriver], object], seconds: float = 20) -> None:
    WebDriverWait(driver, seconds, poll_frequency=0.05).until(until)


def keys(driver: WebDriver, *typed: str) -> None:
    """Type into whatever has the focus, as a person at the keyboard would."""
    ActionChains(driver).send_keys(*typed).perform()


def sign_in(driver: WebDriver, base: str, name: str) -> None:
    driver.get(base + "/")
    wait(driver, lambda d: d.switch_to.active_element.get_attribute("id") == "name")
    keys(driver, name, Keys.ENTER)
    wait(driver, lambda d: d.find_elements(By.ID, "projects"))


def open_project(driver: WebDriver, number: int) -> None:
    keys(driver, str(number))
    wait(driver, lambda d: d.find_elements(By.ID, "item-id"))


def item_id(driver: WebDriver) -> str:
    return str(driver.find_element(By.ID, "item-id").text)


def save(driver: WebDriver) -> None:
    """Enter saves; wait until the server has acknowledged the label."""
    keys(driver, Keys.ENTER)
    wait(driver, lambda d: d.find_element(By.ID, "saved").text.startswith("saved at"))


def next_item(driver: WebDriver) -> None:
    """Enter again: the first item still waiting (a new page)."""
    old = driver.find_element(By.TAG_NAME, "body")
    keys(driver, Keys.ENTER)
    wait(driver, lambda d: old.id != d.find_element(By.TAG_NAME, "body").id)


def test_twenty_items_labelled_by_keyboard_only_persist_across_reloads(
    browser: Callable[[], WebDriver], project: tuple[str, Path]
) -> None:
    base, state = project
    d = browser()
    sign_in(d, base, "kim")
    open_project(d, 1)
    given: dict[str, tuple[bool, bool, str]] = {}
    for i in range(20):
        key = item_id(d)
        correct, goldx, reason = i % 3 != 0, i % 5 == 0, f"reason for {key}" if i % 4 == 0 else ""
        keys(d, "1" if correct else "0")
        if goldx:
            keys(d, "g")
        if reason:
            keys(d, "r", reason, Keys.ESCAPE)
        save(d)
        given[key] = (correct, goldx, reason)
        next_item(d)
    assert len(given) == 20
    assert d.find_elements(By.ID, "all-done"), "after 20 items, nothing is waiting"
    d.refresh()
    wait(d, lambda x: x.find_elements(By.ID, "all-done"))
    stored = {
        lab.key: (lab.verdict.correct, lab.verdict.goldx, lab.verdict.reason)
        for lab in Store(state).labels("demo")
        if lab.annotator == "kim"
    }
    assert stored == given
    for key in ("1", "8", "20"):  # each page, reloaded, shows the label given
        d.get(f"{base}/p/demo/item?{urlencode({'id': key})}")
        d.refresh()
        wait(d, lambda x: x.find_elements(By.ID, "v-correct"))
        correct, goldx, reason = given[key]
        assert d.find_element(By.ID, "v-correct" if correct else "v-incorrect").is_selected()
        assert d.find_element(By.ID, "f-goldx").is_selected() == goldx
        assert d.find_element(By.ID, "reason").get_attribute("value") == reason
        assert d.find_element(By.ID, "saved").text.startswith("saved ")


def test_two_annotators_both_keep_their_labels_and_see_their_agreement(
    browser: Callable[[], WebDriver], project: tuple[str, Path]
) -> None:
    base, state = project
    ann, bob = browser(), browser()
    for d, name in ((ann, "ann"), (bob, "bob")):
        sign_in(d, base, name)
        open_project(d, 2)
    assert item_id(ann) == item_id(bob) == "1"
    # both label item 1 at the same moment, and disagree
    keys(ann, "1", "r", "the tie is harmless", Keys.ESCAPE)
    keys(bob, "0", "r", "it drops the tie", Keys.ESCAPE)
    threads = [threading.Thread(target=save, args=(d,)) for d in (ann, bob)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # the next three items: they agree
    for _ in range(3):
        for d in (ann, bob):
            next_item(d)
        assert item_id(ann) == item_id(bob)
        for d in (ann, bob):
            keys(d, "1")
            save(d)
    on_item = current(Store(state).labels("pair"))
    assert sorted(lab.annotator for lab in on_item["1"]) == ["ann", "bob"]
    assert [len(on_item[k]) for k in ("1", "2", "3", "4")] == [2, 2, 2, 2]
    keys(ann, "o")
    wait(ann, lambda x: x.find_elements(By.ID, "raw-agreement"))
    assert "3 of 4" in ann.find_element(By.ID, "raw-agreement").text
    pairs = ann.find_element(By.ID, "pairs").text
    assert "ann · bob" in pairs and "0.0" in pairs  # kappa 0: bob's one "incorrect" is the disagreement
    disagreements = ann.find_element(By.ID, "disagreements").text
    assert "the tie is harmless" in disagreements and "it drops the tie" in disagreements
    assert "awaiting a third label" in disagreements


def test_the_machines_verdict_is_revealed_only_after_labelling(
    browser: Callable[[], WebDriver], project: tuple[str, Path]
) -> None:
    base, _ = project
    d = browser()
    sign_in(d, base, "lou")
    d.get(f"{base}/p/demo/item?id=4")  # judged (made-up Prover and Refuter)
    wait(d, lambda x: x.find_elements(By.ID, "machine-hidden"))
    assert "The prediction filters on the right year" not in d.page_source
    assert not d.find_elements(By.ID, "machine-revealed")
    keys(d, "0")
    time.sleep(0.3)  # a verdict chosen but not saved reveals nothing
    assert not d.find_elements(By.ID, "machine-revealed")
    save(d)
    wait(d, lambda x: x.find_elements(By.ID, "machine-revealed"))
    machine = d.find_element(By.ID, "machine").text
    assert "machine" in machine and "prover" in machine and "The prediction filters on the right year" in machine
    d.refresh()  # once labelled, the verdict is shown at once
    wait(d, lambda x: x.find_elements(By.ID, "machine-revealed"))


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_a_screenshot_of_the_item_page_shows_what_an_expert_needs(
    browser: Callable[[], WebDriver], project: tuple[str, Path], tmp_path: Path
) -> None:
    base, _ = project
    d = browser()
    sign_in(d, base, "max")
    d.get(f"{base}/p/demo/item?id=7")  # a witness database, and the judges
    wait(d, lambda x: x.find_elements(By.ID, "witness"))
    keys(d, "e", "SELECT name, country FROM riders WHERE country = 'DE'")
    ActionChains(d).key_down(Keys.CONTROL).send_keys(Keys.ENTER).key_up(Keys.CONTROL).perform()
    wait(d, lambda x: x.find_elements(By.ID, "console-result"))
    keys(d, Keys.ESCAPE, "1", "r", "the witness needs two winners on one day", Keys.ESCAPE)
    save(d)
    wait(d, lambda x: x.find_elements(By.ID, "machine-revealed"))
    d.set_window_size(1400, 2400)
    d.execute_script("window.scrollTo(0, 0)")
    shot = tmp_path / "item.png"
    assert d.save_screenshot(str(shot))
    if SCREENSHOT_DIR:
        shutil.copy(shot, Path(SCREENSHOT_DIR) / "review-item.png")
    assert _png_size(shot)[0] >= 1000 and shot.stat().st_size > 50_000
    shown = {
        "question": "Who won the 2024 Spring Classic?",
        "pred-sql": "SELECT",
        "gold-sql": "SELECT",
        "pred-result": "row",
        "gold-result": "row",
        "witness": "Witness database",
        "schema": "examples",
        "console-result": "row",
        "label": "correct",
        "machine-revealed": "prover",
    }
    for element, text in shown.items():
        el = d.find_element(By.ID, element)
        assert el.is_displayed() and text in el.text, element
    highlighted = d.find_elements(By.CSS_SELECTOR, "#pred-sql span.k")
    assert highlighted and highlighted[0].value_of_css_property("color") != "rgba(29, 35, 43, 1)"
    assert d.find_elements(By.CSS_SELECTOR, "#schema .ex")  # example values
    assert d.find_elements(By.CSS_SELECTOR, "#witness .changes li")  # the change, in words


def test_untrusted_text_runs_no_script_in_the_browser(browser: Callable[[], WebDriver], tmp_path: Path) -> None:
    from test_review_http import HOSTILE, _hostile_project

    generic, run = _hostile_project(tmp_path)
    state = tmp_path / "state.sqlite"
    load_project(state, "live", generic, tmp_path / "db")
    load_project(state, "recorded", run, None)
    with thread_server(config(state)) as base:
        d = browser()
        sign_in(d, base, "nia")
        for project_name in ("live", "recorded"):
            d.get(f"{base}/p/{project_name}/item?{urlencode({'id': HOSTILE})}")
            wait(d, lambda x: x.find_elements(By.ID, "question"))
            keys(d, "0", "r", HOSTILE, Keys.ESCAPE)
            save(d)
            d.refresh()
            wait(d, lambda x: x.find_elements(By.ID, "question"))
            assert d.execute_script("return window.__pwned === undefined")
            with pytest.raises(NoAlertPresentException):
                _ = d.switch_to.alert.text
            assert "<script>window.__pwned=1</script>" in d.find_element(By.ID, "question").text
            assert not d.find_elements(By.CSS_SELECTOR, "main img")
        assert "<script>" in d.find_element(By.ID, "machine").text  # the judges' reasoning, as text
        d.get(f"{base}/p/recorded/overview")
        assert d.execute_script("return window.__pwned === undefined")
