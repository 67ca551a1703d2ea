"""The BIRD releases: which release a database is, which benchmark the items are, and the warning between.

BIRD mini-dev ships an edited toxicology (same size, other rows) beside dev_20240627's: the shared data
holds dev's, so its 40 mini-dev toxicology items run on the wrong release, and a run must say so (and
only then: not on dev's own items, not on the files both releases share, not on a user's database).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from rose_sql.config import Config
from rose_sql.engines import Source
from rose_sql.items.load import Item, Loaded, load_gold, load_items
from rose_sql.provenance import build
from rose_sql.run import releases
from rose_sql.run.releases import BENCHMARKS, DATABASES, DEV, MINIDEV, Benchmark, Known, db_ids_digest
from rose_sql.run.runner import SystemRun, plan

MINIDEV_PREDS = "preds/bird-minidev-official/predict_mini_dev_gpt-4_sqlite.json"
WRONG = (
    "40 items of BIRD mini-dev (mini_dev_sqlite.json) ran on toxicology.sqlite of BIRD dev_20240627 "
    "(sha256 f5fa7f21...): BIRD mini-dev ships another toxicology.sqlite (sha256 35ef27ae...), so their "
    "readings may differ from the official BIRD mini-dev ones"
)


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file the check hashes, in order (the real digest is still made)."""
    calls: list[Path] = []
    real = releases._sha256

    def counting(path: Path) -> str:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(releases, "_sha256", counting)
    return calls


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _plan(loaded: list[Loaded], gold: Path | None, db_root: Path, out: Path) -> list[SystemRun]:
    return plan(loaded, out, db_root=Source.folder(db_root), config=Config(workers=1), gold=gold, command=["test"])


def _only(loaded: Loaded, *db_ids: str) -> Loaded:
    return replace(loaded, items=[it for it in loaded.items if it.db_id in db_ids])


def _release_warnings(system: SystemRun) -> list[str]:
    return [w for w in system.loaded.warnings if "ran on" in w]


# --------------------------------------------------------------------------- the table, on small files


def test_a_file_is_the_entry_of_its_db_id_size_and_digest(tmp_path: Path, hashed: list[Path]) -> None:
    one, two, other = (tmp_path / n for n in ("one", "two", "other"))
    one.write_bytes(b"a" * 100)
    two.write_bytes(b"b" * 100)
    other.write_bytes(b"c" * 100)
    table = (Known("t", 100, _sha(one), ("R1",)), Known("t", 100, _sha(two), ("R1", "R2")))
    digests: dict[tuple[str, int], str] = {}
    assert releases.known_database("t", one, 100, digests, table) == table[0]
    assert releases.known_database("t", two, 100, digests, table) == table[1]
    assert releases.known_database("t", other, 100, digests, table) is None  # the size of one, not its content
    assert releases.known_database("t", one, 100, digests, table) == table[0]  # asked again: not read again
    assert hashed == [one, two, other]
    assert releases.known_database("u", one, 100, digests, table) is None  # another db_id: never read
    assert releases.known_database("t", one, 99, digests, table) is None  # another size: never read
    assert hashed == [one, two, other]


def _items(db_ids: list[str]) -> list[Item]:
    return [Item(id=i, db_id=d, pred_sql="SELECT 1", gold_sql="SELECT 1") for i, d in enumerate(db_ids)]


def test_a_benchmark_is_known_by_its_gold_file_or_by_its_questions(tmp_path: Path) -> None:
    gold = tmp_path / "gold.sql"
    gold.write_text("SELECT 1\tt\nSELECT 1\tu\n")
    bench = Benchmark("B", "R1", frozenset({_sha(gold)}), db_ids_digest(["t", "u", "t"]))
    assert releases.benchmark_of(_sha(gold), _items(["t"]), [bench]) == bench  # a part of it, with its gold
    assert releases.benchmark_of(None, _items(["t", "u", "t"]), [bench]) == bench  # all of it, without
    assert releases.benchmark_of("0" * 64, _items(["t", "u", "t"]), [bench]) == bench  # a gold re-saved
    assert releases.benchmark_of(None, _items(["t", "u"]), [bench]) is None
    assert releases.benchmark_of(None, _items(["u", "t", "t"]), [bench]) is None  # the order counts


def test_a_benchmark_on_another_release_is_warned_about_naming_both(
    tmp_path: Path, make_db: Callable[..., Path]
) -> None:
    """The whole check on a constructed table: a file of release R1, items of a benchmark read on R2."""
    db = make_db("CREATE TABLE a (x INT); INSERT INTO a VALUES (1);", db_id="t")
    edited = tmp_path / "edited.sqlite"
    edited.write_bytes(db.read_bytes()[:-1] + b"\x01")
    gold = tmp_path / "gold.sql"
    gold.write_text("SELECT x FROM a\tt\n" * 3)
    loaded = load_items(_spider_preds(tmp_path, 3), gold)
    manifest = build(loaded, gold, Source.folder(db.parent.parent), Config(workers=1), command=["test"])
    size = db.stat().st_size
    table = (Known("t", size, _sha(db), ("R1",)), Known("t", size, _sha(edited), ("R2",)))
    on_r2 = Benchmark("B", "R2", frozenset({_sha(gold)}), "")
    found = releases.mismatches(loaded, manifest, {}, table=table, benchmarks=[on_r2])
    assert found == [
        f"3 items of B (gold.sql) ran on t.sqlite of R1 (sha256 {_sha(db)[:8]}...): R2 ships another t.sqlite "
        f"(sha256 {_sha(edited)[:8]}...), so their readings may differ from the official B ones"
    ]
    on_r1 = replace(on_r2, release="R1")
    assert releases.mismatches(loaded, manifest, {}, table=table, benchmarks=[on_r1]) == []
    unknown = (Known("t", size, _sha(edited), ("R2",)),)  # a file of a known size, and not BIRD's
    assert releases.mismatches(loaded, manifest, {}, table=unknown, benchmarks=[on_r2]) == []


def _spider_preds(tmp_path: Path, n: int) -> Path:
    preds = tmp_path / "preds.txt"
    preds.write_text("SELECT x FROM a\n" * n)
    return preds


def test_the_table_names_each_file_once_and_releases_it_knows() -> None:
    assert len({k.sha256 for k in DATABASES}) == len(DATABASES)
    assert {r for k in DATABASES for r in k.releases} == {DEV, MINIDEV}
    for db_id in {k.db_id for k in DATABASES}:  # every dev database, in each release exactly once
        entries = [k for k in DATABASES if k.db_id == db_id]
        assert sorted(r for k in entries for r in k.releases) == sorted([DEV, MINIDEV]), db_id
    assert {b.release for b in BENCHMARKS} <= {DEV, MINIDEV}


# --------------------------------------------------------------------------- the real files


def test_the_shared_files_are_what_the_table_says(shared: Path) -> None:
    """The entries marked "here" were hashed from these files: if one changed, this says so."""
    bird = shared / "bird"
    for db_id in ("superhero", "student_club", "toxicology"):
        path = bird / db_id / f"{db_id}.sqlite"
        (entry,) = [k for k in DATABASES if k.sha256 == _sha(path)]
        assert (entry.db_id, entry.bytes) == (db_id, path.stat().st_size)
        assert DEV in entry.releases
        assert (MINIDEV in entry.releases) == (db_id != "toxicology")
    dev, minidev = BENCHMARKS
    assert _sha(bird / "dev.json") in dev.gold
    assert db_ids_digest([g.db_id for g in load_gold(bird / "dev.json").golds]) == dev.db_ids
    for name in ("sqlite", "postgresql", "mysql"):
        for gold in (bird / f"mini_dev_{name}.json", bird / f"mini_dev_{name}_gold.sql"):
            assert _sha(gold) in minidev.gold, gold
            assert db_ids_digest([g.db_id for g in load_gold(gold).golds]) == minidev.db_ids, gold


def test_a_mini_dev_run_on_devs_toxicology_warns_naming_both_releases(shared: Path, tmp_path: Path) -> None:
    """A real run of mini-dev's 40 toxicology items (the official GPT-4 predictions): the warning is
    printed and reaches summary.json."""
    gold = shared / "bird" / "mini_dev_sqlite.json"
    golds = json.loads(gold.read_text())
    official = json.loads((shared / MINIDEV_PREDS).read_text())
    preds = tmp_path / "toxicology.json"  # BIRD's format, keyed by position in the gold file
    preds.write_text(json.dumps({k: v for k, v in official.items() if golds[int(k)]["db_id"] == "toxicology"}))
    out = tmp_path / "out"
    args = [str(preds), "--gold", str(gold), "--db-root", str(shared / "bird"), "--out", str(out), "--workers", "1"]
    done = subprocess.run([sys.executable, "-m", "rose_sql", "run", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert WRONG in " ".join(done.stderr.split())  # the terminal wraps long lines
    summary = json.loads((out / "toxicology" / "summary.json").read_text())
    assert (summary["n"], summary["no_prediction"]) == (500, 460)  # the other questions: counted, not dropped
    assert WRONG in summary["warnings"]


def test_once_per_database_for_every_file_of_a_run(shared: Path, tmp_path: Path, hashed: list[Path]) -> None:
    gold = shared / "bird" / "mini_dev_sqlite.json"
    copy = tmp_path / "second.json"
    copy.write_bytes((shared / MINIDEV_PREDS).read_bytes())
    first, second = load_items(shared / MINIDEV_PREDS, gold), load_items(copy, gold)
    systems = _plan([first, second], gold, shared / "bird", tmp_path / "out")
    assert [_release_warnings(s) for s in systems] == [[WRONG], [WRONG]]
    assert sorted(p.name for p in hashed) == ["student_club.sqlite", "superhero.sqlite", "toxicology.sqlite"]


def test_a_dev_run_on_the_same_files_says_nothing(shared: Path, tmp_path: Path, hashed: list[Path]) -> None:
    gold = shared / "bird" / "dev.json"
    loaded = load_items(shared / "preds/bird-dev-official-format/ta-sql.json", gold)
    (system,) = _plan([loaded], gold, shared / "bird", tmp_path / "out")
    assert _release_warnings(system) == []
    assert "toxicology.sqlite" in {p.name for p in hashed}  # checked, and found to be dev's own


def test_mini_dev_items_on_the_files_both_releases_ship_say_nothing(
    shared: Path, tmp_path: Path, hashed: list[Path]
) -> None:
    gold = shared / "bird" / "mini_dev_sqlite.json"
    loaded = _only(load_items(shared / MINIDEV_PREDS, gold), "superhero", "student_club")
    (system,) = _plan([loaded], gold, shared / "bird", tmp_path / "out")
    assert _release_warnings(system) == []
    assert sorted(p.name for p in hashed) == ["student_club.sqlite", "superhero.sqlite"]


def test_mini_dev_items_known_by_their_questions_without_a_gold_file(shared: Path, tmp_path: Path) -> None:
    """An SQLExam file of all 500 mini-dev questions carries its own gold: its db_ids tell what it is."""
    loaded = load_items(shared / "preds/bird-minidev/gpt-4-result.json")
    (system,) = _plan([loaded], None, shared / "bird", tmp_path / "out")
    assert _release_warnings(system) == [WRONG.replace("mini_dev_sqlite.json", "gpt-4-result.json")]


def test_a_database_that_is_not_birds_says_nothing_and_is_not_hashed(
    shared: Path, tmp_path: Path, hashed: list[Path], make_db: Callable[..., Path]
) -> None:
    gold = shared / "bird" / "mini_dev_sqlite.json"
    loaded = _only(load_items(shared / MINIDEV_PREDS, gold), "toxicology")
    mine = make_db("CREATE TABLE atom (atom_id TEXT);", db_id="toxicology")
    (system,) = _plan([loaded], gold, mine.parent.parent, tmp_path / "out")
    assert _release_warnings(system) == []
    assert hashed == []


def test_the_size_filter_keeps_a_large_database_from_being_hashed(
    shared: Path, tmp_path: Path, hashed: list[Path]
) -> None:
    """A 2 GB file where mini-dev's toxicology is looked for is never read whole; a file of toxicology's
    very size is read once, and being no release's, is not named either."""
    gold = shared / "bird" / "mini_dev_sqlite.json"
    loaded = _only(load_items(shared / MINIDEV_PREDS, gold), "toxicology")
    path = tmp_path / "dbs" / "toxicology" / "toxicology.sqlite"
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        f.truncate(2 * 2**30)  # sparse: takes no room
    (system,) = _plan([loaded], gold, tmp_path / "dbs", tmp_path / "out")
    assert _release_warnings(system) == [] and hashed == []
    with path.open("r+b") as f:
        f.truncate(2678784)  # toxicology's size (of both releases), other bytes
    (system,) = _plan([loaded], gold, tmp_path / "dbs", tmp_path / "out2")
    assert _release_warnings(system) == [] and hashed == [path.resolve()]
