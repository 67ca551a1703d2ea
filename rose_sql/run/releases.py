"""Which BIRD release a run's databases are, and a warning when its items come from another one.

BIRD ships its eleven dev databases twice: in ``dev.zip`` (dev_20240627) and in ``minidev.zip`` (mini-dev).
Six files are the same byte for byte; five are not (california_schools, european_football_2, formula_1,
thrombosis_prediction, toxicology): same name, same size, same tables, other rows. A mini-dev item run on
dev's toxicology executes and scores like any other, and its readings may still differ from the official
mini-dev ones: nothing in the run would say so. So a run tells which benchmark its items come from (its
gold file's SHA-256, or the db_ids of its questions in order: :data:`BENCHMARKS`) and which release each
SQLite database is (its SHA-256: :data:`DATABASES`), and warns when they differ, naming both.

Hashing reads a file whole, and BIRD's go past 1 GB: only a database whose db_id and size are those of an
entry is hashed, once per run. Any other database (a user's own, a server's) costs nothing and is never
named; a file of a known size whose digest is in no entry is not BIRD's either, and nothing is said.

Every digest and size below was computed here from a file, or is cited from a public source
(repository@commit:path); none is guessed.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rose_sql.items.load import Item, Loaded
from rose_sql.provenance import Manifest

DEV = "BIRD dev_20240627"
"""``dev.zip`` (sha256 cdd6d19faeb45a23970b98d3ef6c40a87987c95459c2cf12076897a60cf5a630), its member
``dev_20240627/dev_databases.zip``."""
MINIDEV = "BIRD mini-dev"
"""``minidev.zip`` (sha256 cc48ba16838204e4e214512030cb572eeb5f7bcdd999bae4b9b6ff12ec13b92f), its folder
``minidev/MINIDEV/dev_databases``."""


@dataclass(frozen=True, slots=True)
class Known:
    """A database file that BIRD releases ship."""

    db_id: str
    bytes: int
    """Its size: a file of another size is not it, and is not hashed."""
    sha256: str
    releases: tuple[str, ...]
    """The releases that ship this very file."""


_BOTH = (DEV, MINIDEV)

# Sources. "here": hashed from /work/shared/data/bird (copies of dev_20240627's files, see its README).
# Elsewhere: the attestql project, which downloaded dev.zip and minidev.zip and digested all 22 files; its
# paths below are under plans/reports (P). The digests, and which files differ:
#   ivermin1123/attestql@a227ae4802dad429f5c95b34bb255ff171fa2d8d:P/bird-dev-sqlite-260907/inputs.json
#   ivermin1123/attestql@4d21d93d9aea830ade16b95d2dba76b99d05c3e9:P/research-260907-two-database-copies/verify_inputs.py
# Sizes: its audit summaries record each file's "size=" and digest, at the commit named on each entry:
#   [d] ivermin1123/attestql@<commit>:P/bird-dev-sqlite-260907/tool/old/<db_id>/summary.json (dev.zip's file)
#   [m] ivermin1123/attestql@<commit>:P/research-260907-two-database-copies/tool/minidev/<db_id>/summary.json
#       (minidev.zip's file; a file in both releases has one digest, and so one size)
# Gold files: hashed here, and [r], where the project pins what it downloads (dev.json, mini-dev's files):
#   [r] ivermin1123/attestql@fda577b852e86376eae6de4eb0fc5b8e0c1b2cbc:P/research-260907-two-database-copies/reproduce.sh
DATABASES: tuple[Known, ...] = (
    # [d] a227ae4802dad429f5c95b34bb255ff171fa2d8d, [m] ed2ab01cfacd403ae74d7901c75a6fe053eb75bc
    Known("california_schools", 11116544, "986817d793479801ed55133e55aa27e335422c0cd3866b54a3d6317b7c5f09c1", (DEV,)),
    Known(
        "california_schools", 11116544, "c0903eec662e63068fd1d14403d3d6c1d473287fc10c4356333ea58f878db983", (MINIDEV,)
    ),
    # [d] 45a20d1162c342261c9d4bb44ca11cb8f23fe8b1 (one file in both releases)
    Known("card_games", 261820416, "c98bdb57fe7474da798b407785544b9af0daaad5d61fd21e2a73309493bc1227", _BOTH),
    # [d] 45a20d1162c342261c9d4bb44ca11cb8f23fe8b1 (one file in both releases)
    Known("codebase_community", 481419264, "92101be6d2a9f6adceea59d38f6d1c556087f9eea1432432a21268cb1348036d", _BOTH),
    # [d] 1f1feb606bca05037efe4f7d8833c627cf753687 (one file in both releases)
    Known(
        "debit_card_specializing", 34635776, "b3d149ad05746dbbe5116e229e17e18f09c39db43cf117d9ef3441753608b691", _BOTH
    ),
    # [d] a227ae4802dad429f5c95b34bb255ff171fa2d8d, [m] fda577b852e86376eae6de4eb0fc5b8e0c1b2cbc
    Known("european_football_2", 597754880, "e4d361dbeec6591a4b315877c0c481da05c8ff5a3d389b34d6e17b6f15bee4e0", (DEV,)),
    Known(
        "european_football_2", 597754880, "f72f5c9b990371417288a67b27a02e601ef904d45525c2c9f7931fb01001c536", (MINIDEV,)
    ),
    # [d] a227ae4802dad429f5c95b34bb255ff171fa2d8d (one file in both releases)
    Known("financial", 71294976, "d15d89cdb068a202b6f2b99342af44dffc1d52545b39ceaf62efdc0ba570101e", _BOTH),
    # [d] d625f91c28101ed4f1abd0f35ad38b2d78adf695, [m] 3a3556be3b0c2e05ea641c0f5081a6a70210bc78
    Known("formula_1", 22360064, "17185981cd747f6cdc374cb02a6096db3130e6ec2ddc582fe1686a28fb4c4c8a", (DEV,)),
    Known("formula_1", 22360064, "79770caf966707e35516fa566e24b40ae515c74ec1ec4631235245645b87b24d", (MINIDEV,)),
    # here; [d] d625f91c28101ed4f1abd0f35ad38b2d78adf695 (one file in both releases)
    Known("student_club", 2641920, "eb89bcfe97eefa386a27904ec5aa15159811a7eac894ec659a36e48fa9f76b77", _BOTH),
    # here; [d] d625f91c28101ed4f1abd0f35ad38b2d78adf695 (one file in both releases)
    Known("superhero", 237568, "75e94a2c3236ee3bb2c01fb97a1c4b4c1c269bcefd4eab1d04be323d2d0825b1", _BOTH),
    # [d] a227ae4802dad429f5c95b34bb255ff171fa2d8d, [m] 0c41dbec7b992b40322c47596aa31fc68c19610e
    Known("thrombosis_prediction", 7327744, "e7e16d74b4731b4b8d33fdbe8c29cd5622620788ce8d1f335631f65fc7cf1db9", (DEV,)),
    Known(
        "thrombosis_prediction", 7327744, "87583183c3dc472fba04de702965560a9d7c0a548836613f242317e0eeb83f00", (MINIDEV,)
    ),
    # here; [d] 1f1feb606bca05037efe4f7d8833c627cf753687, [m] fda577b852e86376eae6de4eb0fc5b8e0c1b2cbc
    Known("toxicology", 2678784, "f5fa7f21af1ad878ff8fef1b0582b8cb2d7ed63dbac65ff16d2ba05667650c5b", (DEV,)),
    Known("toxicology", 2678784, "35ef27ae6bdfda530e125ed369666ac0abb8bc8c0bcc0ad09407f547ecb61a93", (MINIDEV,)),
)
"""The database files of the known BIRD releases."""


@dataclass(frozen=True, slots=True)
class Benchmark:
    """A benchmark's questions, and the release whose databases they are asked of."""

    name: str
    release: str
    """The release whose databases the official readings were made on."""
    gold: frozenset[str]
    """SHA-256 of its gold files."""
    db_ids: str
    """SHA-256 of its questions' db_ids in order, one a line (:func:`db_ids_digest`): a full copy of its
    questions is known by what it holds, whatever its bytes (reformatted, SQL corrected, another dialect)."""


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "BIRD dev",
        DEV,
        gold=frozenset(
            {
                # dev.json (dev.zip's member dev_20240627/dev.json): here, and pinned in [r]
                "630272f2b1c44d8cef2c3b246f623355cf0bbc1e832c81061df895530dfc2f06",
            }
        ),
        db_ids="3c2984e5301306bf9b82a460f95ef4327074506538c8d04b8921d549518cfcf1",  # dev.json's 1534, here
    ),
    Benchmark(
        "BIRD mini-dev",
        MINIDEV,
        gold=frozenset(
            {
                # minidev.zip's MINIDEV/ files, as /work/shared/data/bird has them: here (the first pinned in [r])
                "4ba5fa8de55856222f484d380d2ba872b380bf79d825de70478e2120cb0fc43b",  # mini_dev_sqlite.json
                "6fb891aa8e1d948499de3295a24dd18d783d7ac04971908cbe2533436901af81",  # mini_dev_sqlite_gold.sql
                "d2731292f20b8d8569cd956dd747ffe1df13cd625076263e38ae9ebcef50b1ab",  # mini_dev_postgresql.json
                "8922d94a9ffcd0c4602f0e74290305bb5fced19a2208daef825d8e43c6f0d759",  # mini_dev_postgresql_gold.sql
                "89e0faf6b0925976ce7fc4e87bad7e870571dbc5d1582d24d99b01159ccd821b",  # mini_dev_mysql.json
                "2cc15f02a4ee34d54f71b0fc7a54f2e3d6eb0b481584f2976600ce6327e0e4fb",  # mini_dev_mysql_gold.sql
                # Hugging Face birdsql/bird_mini_dev@f65faf4, data/mini_dev_sqlite-00000-of-00001.json: pinned in [r]
                "88ceb0710163cae46a256ecea8f0a8c98286599530b60587fda5c3cfe57d45d2",
            }
        ),
        db_ids="62902846634301ffa475e3f6154a8ac6ebc0158e7f0d7fa72a0c5614a05dc5e3",  # the 500 of each file above, here
    ),
)
"""The benchmarks whose items are known, by gold file or by content."""


def db_ids_digest(db_ids: Sequence[str]) -> str:
    """SHA-256 of db_ids in order, one a line: what a benchmark's questions are known by without its file."""
    return hashlib.sha256("\n".join(db_ids).encode()).hexdigest()


def benchmark_of(
    gold_sha256: str | None, items: Sequence[Item], benchmarks: Sequence[Benchmark] = BENCHMARKS
) -> Benchmark | None:
    """The benchmark the items come from: their gold file's, by its SHA-256; else the one whose questions'
    db_ids, in order, are theirs (a file that carries its own gold, or a copy of a gold file re-saved).
    None when neither is known: a user's own questions, or a part of a benchmark without its gold file."""
    by_file = next((b for b in benchmarks if gold_sha256 in b.gold), None)
    if by_file is not None:
        return by_file
    digest = db_ids_digest([it.db_id for it in items])
    return next((b for b in benchmarks if b.db_ids == digest), None)


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def known_database(
    db_id: str, path: Path, size: int, digests: dict[tuple[str, int], str], table: Sequence[Known] = DATABASES
) -> Known | None:
    """The entry of the table that the file ``path`` (of ``size`` bytes, serving ``db_id``) is, or None.

    Only a file whose db_id and size are an entry's is read, and at most once per ``digests`` (which keeps
    each digest made, by path and size: one run hashes a database once, however many files it evaluates)."""
    candidates = [k for k in table if k.db_id == db_id and k.bytes == size]
    if not candidates:
        return None
    key = (str(path), size)
    if key not in digests:
        digests[key] = _sha256(path)
    return next((k for k in candidates if k.sha256 == digests[key]), None)


def mismatches(
    loaded: Loaded,
    manifest: Manifest,
    digests: dict[tuple[str, int], str],
    *,
    table: Sequence[Known] = DATABASES,
    benchmarks: Sequence[Benchmark] = BENCHMARKS,
) -> list[str]:
    """A warning for each known database of another release than the one the items' benchmark is read on.

    For SQLite files only (the manifest's databases, found and sized): a server's data has no file to
    hash. Nothing is said of a benchmark or a database the tables do not know."""
    bench = benchmark_of(manifest.gold.sha256 if manifest.gold else None, loaded.items, benchmarks)
    if bench is None:
        return []
    counts = Counter(it.db_id for it in loaded.items)
    label = Path(manifest.gold.path).name if manifest.gold else loaded.path.name
    out = []
    for d in manifest.databases:
        if not d.found or d.bytes is None or d.db_id not in counts:
            continue
        found = known_database(d.db_id, Path(d.path), d.bytes, digests, table)
        if found is None or bench.release in found.releases:
            continue
        own = next((k for k in table if k.db_id == d.db_id and bench.release in k.releases), None)
        theirs = f"another {d.db_id}.sqlite" + (f" (sha256 {own.sha256[:8]}...)" if own else "")
        out.append(
            f"{counts[d.db_id]} items of {bench.name} ({label}) ran on {d.db_id}.sqlite of "
            f"{' and '.join(found.releases)} (sha256 {found.sha256[:8]}...): {bench.release} ships {theirs}, "
            f"so their readings may differ from the official {bench.name} ones"
        )
    return out
