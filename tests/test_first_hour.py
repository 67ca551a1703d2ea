"""What a new user meets in the first hour: a misspelt db_id is named where they look, not only in the records."""

from __future__ import annotations

import importlib.util
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from rose_sql.analysis.html.svg import short_labels
from rose_sql.cli import main
from rose_sql.errors import UsageError
from rose_sql.reward import trl_reward

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "CREATE TABLE shop (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO shop VALUES (1, 'a'), (2, 'b');"


def test_a_run_names_each_missing_database_where_it_was_looked_for(
    make_db: Callable[..., Path], tmp_path: Path
) -> None:
    root = make_db(SCHEMA, db_id="shop").parent.parent
    one = {"db_id": "shop", "gold_sql": "SELECT name FROM shop", "pred_sql": "SELECT name FROM shop"}
    rows = [dict(one, id=i) for i in range(4)]
    rows[1]["db_id"] = rows[2]["db_id"] = "shopp"  # misspelt twice
    rows[3]["db_id"] = "stock"
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = CliRunner().invoke(main, ["run", str(items), "--db", str(root), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    lines = [line for line in res.output.splitlines() if line.startswith("db_missing:")]
    assert lines == [
        f"db_missing: shopp (2 items): not found at {root / 'shopp' / 'shopp.sqlite'}",
        f"db_missing: stock (1 item): not found at {root / 'stock' / 'stock.sqlite'}",
    ]


def test_the_trl_reward_names_the_databases_it_cannot_find(make_db: Callable[..., Path]) -> None:
    root = make_db(SCHEMA, db_id="shop").parent.parent
    reward = trl_reward(db_root=root)
    gold = ["SELECT count(*) FROM shop"] * 2
    with pytest.raises(UsageError, match=r"no item of the batch could be scored.*shopp/shopp\.sqlite \(2 items\)"):
        reward(None, ["SELECT 2", "SELECT 1"], gold_sql=gold, db_id=["shopp", "shopp"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = reward(None, gold, gold_sql=gold, db_id=["shop", "shopp"])
    assert got[0] == 1.0 and got[1] is None  # the item whose database exists is scored as usual
    assert [str(w.message) for w in caught] == [
        f"rose_sql reward: database not found: {root / 'shopp' / 'shopp.sqlite'}; its items are unscored"
    ]


@pytest.fixture
def finished_run(make_db: Callable[..., Path], tmp_path: Path) -> Path:
    root = make_db(SCHEMA, db_id="shop").parent.parent
    one = {
        "db_id": "shop",
        "question": "names?",
        "gold_sql": "SELECT name FROM shop",
        "pred_sql": "SELECT name FROM shop",
    }
    items = tmp_path / "a_system_with_a_rather_long_name.jsonl"
    items.write_text("".join(json.dumps(dict(one, id=i)) + "\n" for i in range(3)))
    res = CliRunner().invoke(main, ["run", str(items), "--db", str(root), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    return tmp_path / "out" / items.stem


def test_tables_in_a_log_fit_its_width_and_nothing_is_cut(finished_run: Path) -> None:
    """Piped into a log, the run table was about 290 columns wide and rose diff's 707: it is now fitted to
    $COLUMNS (else 120), cells wrapped between words, wider only where a word needs the room."""

    def table_lines(columns: str, *extra: str) -> list[str]:
        res = CliRunner(env={"COLUMNS": columns}).invoke(main, ["compare", str(finished_run), *extra])
        assert res.exit_code == 0, res.output
        assert "…" not in res.output and "a_system_with_a_rather_long_name" in res.output  # names whole, no cut
        return [line for line in res.output.splitlines() if line.startswith((" ", "─", "┃", "│", "┏", "┡"))]

    natural = max(map(len, table_lines("", "--tables", "wide")))
    fitted = max(map(len, table_lines("")))
    narrow = max(map(len, table_lines("60")))
    assert natural > 160 and fitted < natural and narrow <= fitted
    assert narrow < 150  # the longest words, not the longest cells, set the floor


def test_tables_as_tsv_and_markdown(finished_run: Path) -> None:
    tsv = CliRunner().invoke(main, ["compare", str(finished_run), "--tables", "tsv"]).output.splitlines()
    header, row = tsv[0].split("\t"), tsv[1].split("\t")
    assert header[0] == "system" and "BIRD EX" in header and len(row) == len(header)
    assert row[0] == "a_system_with_a_rather_long_name" and row[header.index("BIRD EX")] == "100.00 (3)"
    md = CliRunner(env={"ROSE_TABLES": "markdown"}).invoke(main, ["compare", str(finished_run)]).output
    lines = md.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("| system |"))
    assert set(lines[top + 1].replace("|", "").split()) <= {"---", "---:"}
    assert lines[top + 2].startswith("| a_system_with_a_rather_long_name |")


def _screenshots_extension() -> Any:
    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "docs" / "_ext" / "screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("mode", "fails"), [(None, False), ("required", True)])
def test_the_docs_build_after_the_readmes_install_lacks_only_the_pictures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str | None, fails: bool
) -> None:
    """`sphinx-build -W` failed right after the README's install ('screenshots not taken (chromedriver
    missing)'): without Chromium the pictures are placeholders and the build says what is missing, unless
    told the pictures are required (as tests/test_docs.py is where Chromium is installed)."""
    pytest.importorskip("sphinx", reason="the docs extra is not installed")
    ext = _screenshots_extension()
    monkeypatch.setattr(ext, "_missing", lambda: "chromium, chromedriver missing: apt-get install ...")
    if mode is None:
        monkeypatch.delenv("ROSE_DOCS_SCREENSHOTS", raising=False)
    else:
        monkeypatch.setenv("ROSE_DOCS_SCREENSHOTS", mode)
    said: dict[str, list[str]] = {"warning": [], "info": []}
    monkeypatch.setattr(ext.logger, "warning", lambda msg, *a: said["warning"].append(msg % a))
    monkeypatch.setattr(ext.logger, "info", lambda msg, *a: said["info"].append(msg % a))
    app = SimpleNamespace(srcdir=str(tmp_path), builder=SimpleNamespace(format="html"))
    ext.make_screenshots(app)
    assert bool(said["warning"]) is fails and bool(said["info"]) is not fails
    assert "chromium, chromedriver missing" in (said["warning"] + said["info"])[0]
    assert {p.name for p in (tmp_path / "_generated").iterdir()} == set(ext.SHOTS)  # placeholders, PNG
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in (tmp_path / "_generated").iterdir())


def test_a_minus_b_follows_the_order_given_in_compare_report_and_diff(
    make_db: Callable[..., Path], tmp_path: Path
) -> None:
    """rose compare ranked its rows and took A - B in the ranked order, rose report in the order given: the
    same two runs gave +0.51 in one and -0.51 in the other."""
    root = make_db(SCHEMA, db_id="shop").parent.parent
    gold = "SELECT name FROM shop"
    for name, wrong in (("weak", 2), ("strong", 0)):
        rows = [
            {"id": i, "db_id": "shop", "gold_sql": gold, "pred_sql": gold if i >= wrong else "SELECT 1"}
            for i in range(4)
        ]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    args = ["run", str(tmp_path / "weak.jsonl"), str(tmp_path / "strong.jsonl"), "--db", str(root), "--out", str(out)]
    assert CliRunner().invoke(main, args).exit_code == 0
    weak, strong = out / "weak", out / "strong"
    for first, second, sign in ((weak, strong, -1), (strong, weak, +1)):
        res = CliRunner().invoke(main, ["compare", str(first), str(second), "--json", str(tmp_path / "c.json")])
        assert res.exit_code == 0, res.output
        pairs = json.loads((tmp_path / "c.json").read_text())["pairs"]
        assert [(p["a"], p["b"]) for p in pairs] == [(first.name, second.name)]  # as given, not ranked
        ex = next(t for t in pairs[0]["tests"] if t["reading"] == "bird_ex")
        assert ex["difference"] == sign * 50.0
        page = tmp_path / "r.html"
        assert (
            CliRunner().invoke(main, ["report", str(first), str(second), "--compare", "--out", str(page)]).exit_code
            == 0
        )
        paired = page.read_text().split('id="paired"')[1]
        assert f'<tr><td>{first.name}</td><td class="num">{second.name}</td>' in paired
        assert f"{sign * 50.0:+.2f}" in paired


def test_chart_labels_tell_systems_apart(make_db: Callable[..., Path], tmp_path: Path) -> None:
    """Two systems named predict_mini_dev_gpt-4_sqlite and predict_mini_dev_gpt-35-turbo_sqlite both got the
    chart label predict_mini_dev_… (the whole name only in a tooltip)."""
    assert short_labels(["predict_mini_dev_gpt-4_sqlite", "predict_mini_dev_gpt-35-turbo_sqlite"]) == [
        "gpt-4",
        "gpt-35-turbo",
    ]
    assert short_labels(["dail-sql-gpt4", "dail-sql-gpt4-sc"]) == ["dail-sql-gpt4", "dail-sql-gpt4-sc"]  # fit
    long = ["a_very_long_system_name_number_one", "another_very_long_system_name_two"]
    assert all(len(s) <= 18 for s in short_labels(long)) and len(set(short_labels(long))) == 2
    root = make_db(SCHEMA, db_id="shop").parent.parent
    names = ["predict_mini_dev_gpt-4_sqlite", "predict_mini_dev_gpt-35-turbo_sqlite"]
    for name in names:
        row = {"id": 1, "db_id": "shop", "gold_sql": "SELECT 1", "pred_sql": "SELECT 1"}
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(row) + "\n")
    out = tmp_path / "out"
    run = ["run", *(str(tmp_path / f"{n}.jsonl") for n in names), "--db", str(root), "--out", str(out)]
    assert CliRunner().invoke(main, run).exit_code == 0
    page = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["report", *(str(out / n) for n in names), "--compare", "--out", str(page)])
    assert res.exit_code == 0, res.output
    html = page.read_text()
    assert 'class="xlabel">gpt-4</text>' in html and 'class="xlabel">gpt-35-turbo</text>' in html
    assert "predict_mini_dev_…" not in html
