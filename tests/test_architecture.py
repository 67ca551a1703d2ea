"""The package's shape, read from its AST: no import circle, one kind of database value, one default per limit.

- Imports: every ``import`` of the package counts (module level, inside functions, under
  ``TYPE_CHECKING``; a package's ``__init__`` is a module like the others): the graph has no circle.
- Databases: :class:`rose_sql.engines.Database` and :class:`~rose_sql.engines.Source` are the only values
  that name them. No annotation outside the engines unions a path with them, no alias names such a union,
  and no code outside the engines asks ``isinstance`` of what kind a database is.
- The engine seam: no module outside ``rose_sql/engines`` imports a database driver (in any form, anywhere
  in it), except the few listed in :data:`DRIVER_EXCEPTIONS` with why, which open connections for other
  purposes than an item's statements; and none branches on an engine kind's name (a comparison, a
  membership test, a dict key or a ``case``): what differs between engines is a capability of
  ``KindInfo`` or a method of the engine.
- Limits: every limit's default is written once, in :mod:`rose_sql.config`; no other module passes a limit
  as a number, or gives a parameter of a limit's name a number as its default.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from rose_sql.engines.kinds import KINDS

PACKAGE = Path(__file__).resolve().parents[1] / "rose_sql"
ENGINES = PACKAGE / "engines"
DRIVERS = frozenset({"sqlite3", "_sqlite3", *(info.driver for info in KINDS.values() if info.driver is not None)})
"""The client libraries of the engines (``KindInfo.driver``) and Python's own ``sqlite3``."""
KIND_NAMES = frozenset({*KINDS, *(scheme for info in KINDS.values() for scheme in info.schemes)})
"""The engines' kinds and their URL schemes (``sqlite``, ``postgresql``, ``postgres``, ``mysql``, ...)."""
DRIVER_EXCEPTIONS = {
    "rose_sql/review/store.py": "the review app's own store of annotators' labels: its file, never an item's database",
    "rose_sql/demo/build.py": "writes the demo's database from the demo's own SQL text, before any item runs",
}
"""The modules outside the engines that import a driver, and why: each opens a connection of its own for
another purpose than running an item's statements."""
KIND_NAME_EXCEPTIONS = {
    ("rose_sql/reward/extract.py", "_SQL_LANGS"): "the languages a completion's code fence may name: text, no engine",
}
"""Containers of kind names outside the engines that are not about engines, and why."""
DATABASE_TYPES = {"Database", "Source", "Remote", "Space", "Copy", "Workspace", "EngineReader", "EngineSpace"}
"""Names of the values that stand for a database (and of the spaces made of one)."""
DATABASE_NAMES = {"db", "db_root", "root", "source", "database"}
"""Variables that hold a database, whose kind no code outside the engines may test."""
LIMITS = {
    "max_steps",
    "gold_max_steps",
    "evidence_max_steps",
    "schema_max_steps",
    "count_past_cap_steps",
    "statement_steps",
    "timeout_s",
    "gold_timeout_s",
    "server_timeout_s",
    "evidence_budget_s",
    "efficiency_budget_s",
    "max_rows",
    "max_result_bytes",
    "max_value_bytes",
    "max_bytes",
    "max_sql_chars",
    "max_chars",
    "engine_memory_bytes",
    "worker_memory_bytes",
    "memory_bytes",
    "cache_cells",
    "evidence_max_candidates",
    "evidence_max_db_bytes",
}
"""The limits (fields of the configuration classes, and the parameters that take them)."""


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


@cache
def _parsed() -> tuple[tuple[str, Path, ast.Module], ...]:
    """Every module of the package, parsed once for all the checks (none changes a tree)."""
    return tuple(
        (name, path, ast.parse(path.read_text(encoding="utf-8"), str(path))) for name, path in sorted(modules().items())
    )


def trees() -> Iterator[tuple[str, Path, ast.Module]]:
    yield from _parsed()


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (every import statement, wherever it stands)."""
    known = modules()

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for name, path, tree in trees():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for t in targets:
                found = resolve(t)
                if found is not None and found != name:
                    edges[name].add(found)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted({*edges, *(w for ws in edges.values() for w in ws)}):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle() -> None:
    edges = import_graph()
    assert "rose_sql.config" in edges["rose_sql.engines.execute"]  # the graph is read (a sanity check)
    found = circles(edges)
    assert not found, "import circles:\n" + "\n".join(
        " <-> ".join(c) + ": " + "; ".join(f"{a} -> {sorted(edges[a] & set(c))}" for a in c) for c in found
    )


def test_the_circle_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}}) == []


def _names(node: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _unions(node: ast.expr) -> Iterator[ast.expr]:
    """The unions written in an annotation (``A | B`` and ``Union[A, B]``), outermost first."""
    for n in ast.walk(node):
        if (isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr)) or (
            isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in ("Union", "Optional")
        ):
            yield n


def _annotations(tree: ast.Module) -> Iterator[tuple[int, ast.expr]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if a is not None and a.annotation is not None:
                    yield node.lineno, a.annotation
            if node.returns is not None:
                yield node.lineno, node.returns
        elif isinstance(node, ast.AnnAssign):
            yield node.lineno, node.annotation
        elif isinstance(node, ast.Assign):  # an alias: X = Path | Source (Python 3.11 has no `type` statement)
            value = node.value
            if isinstance(value, ast.BinOp | ast.Subscript):
                yield node.lineno, value
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "|" in node.value:
            try:  # a string annotation
                yield node.lineno, ast.parse(node.value, mode="eval").body
            except SyntaxError:
                continue


def test_one_kind_of_database_value() -> None:
    found = []
    for _name, path, tree in trees():
        for line, annotation in _annotations(tree):
            for union in _unions(annotation):
                names = _names(union)
                if "Path" in names and names & DATABASE_TYPES:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {ast.unparse(union)}")
        if "Remote" in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}:
            found.append(f"{path.relative_to(PACKAGE.parent)}: the old Remote")
    assert not found, "unions of database kinds:\n" + "\n".join(found)


def test_no_code_outside_the_engines_asks_what_kind_a_database_is() -> None:
    found = []
    for _name, path, tree in trees():
        if path.is_relative_to(ENGINES):
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"):
                continue
            if len(node.args) != 2:
                continue
            subject, kinds = node.args
            subject_names = _names(subject)
            kind_names = _names(kinds)
            if kind_names & DATABASE_TYPES or ("Path" in kind_names and subject_names & DATABASE_NAMES):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "isinstance on a database kind outside rose_sql/engines:\n" + "\n".join(found)


def driver_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Every import of a driver in a module, in any form (``import``, ``from ... import``, an alias,
    ``importlib.import_module`` and ``__import__`` of a written name), wherever it stands."""
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        for name in names:
            if name.partition(".")[0] in DRIVERS:
                yield node.lineno, ast.unparse(node)


def _kind_name(node: ast.AST | None) -> bool:
    """Whether ``node`` is a string that names an engine: a kind or a scheme (any case), or a URL of one."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return False
    text = node.value.lower()
    return text in KIND_NAMES or any(text.startswith(f"{name}:") for name in KIND_NAMES)


def _of_kind_names(node: ast.AST) -> bool:
    """Whether ``node`` is a written tuple, list, set or dict that holds a kind's name."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_kind_name(e) for e in node.elts)
    return isinstance(node, ast.Dict) and any(_kind_name(k) for k in node.keys)


DICT_METHODS = {"get", "pop", "setdefault", "startswith", "endswith", "removeprefix", "partition"}
"""Methods whose argument is a key or a prefix: ``d.get("sqlite")``, ``url.startswith("postgresql://")``."""


def kind_branches(tree: ast.Module) -> Iterator[tuple[int, str, str | None]]:
    """Every branch on an engine kind's name in a module: ``==``, ``!=``, ``is``, ``is not`` with one;
    ``in`` / ``not in`` a written container of them or a name bound to one (the name given, for
    :data:`KIND_NAME_EXCEPTIONS`); a dict literal keyed by one, ``dict(sqlite=...)``, ``x["sqlite"]``,
    ``x.get("sqlite")``, ``x.startswith("postgresql://")``; a ``case "sqlite":``."""
    containers = {
        t.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None and _of_kind_names(node.value)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            lefts = [node.left, *node.comparators[:-1]]
            for op, left, right in zip(node.ops, lefts, node.comparators, strict=True):
                through = right.id if isinstance(right, ast.Name) and right.id in containers else None
                if _compares_a_kind(op, left, right) or through is not None:
                    yield node.lineno, ast.unparse(node), through
        elif isinstance(node, ast.match_case):
            if any(isinstance(p, ast.MatchValue) and _kind_name(p.value) for p in ast.walk(node.pattern)):
                yield node.pattern.lineno, f"case {ast.unparse(node.pattern)}", None
        elif _keys_by_a_kind(node):
            yield getattr(node, "lineno", 0), ast.unparse(node), None


def _compares_a_kind(op: ast.cmpop, left: ast.expr, right: ast.expr) -> bool:
    if isinstance(op, ast.Eq | ast.NotEq | ast.Is | ast.IsNot):
        return _kind_name(left) or _kind_name(right)
    return isinstance(op, ast.In | ast.NotIn) and (_kind_name(left) or _of_kind_names(right))


def _keys_by_a_kind(node: ast.AST) -> bool:
    """A dict literal keyed by a kind's name, ``dict(sqlite=...)``, ``x["sqlite"]``, ``x.get("sqlite")``..."""
    if isinstance(node, ast.Dict):
        return any(_kind_name(k) for k in node.keys)
    if isinstance(node, ast.Subscript):
        return _kind_name(node.slice)
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name) and func.id == "dict":
        return any(kw.arg in KIND_NAMES for kw in node.keywords)
    return isinstance(func, ast.Attribute) and func.attr in DICT_METHODS and any(map(_kind_name, node.args))


def test_no_driver_is_imported_outside_the_engines() -> None:
    """Every statement of an item runs through the engine seam: no module outside ``rose_sql/engines``
    imports a driver, but the exceptions listed, each of which does (none is stale)."""
    found, seen, scanned, inside = [], set(), 0, 0
    for _name, path, tree in trees():
        where = str(path.relative_to(PACKAGE.parent))
        imports = list(driver_imports(tree))
        if path.is_relative_to(ENGINES):
            inside += bool(imports)
            continue
        scanned += 1
        if imports and where in DRIVER_EXCEPTIONS:
            seen.add(where)
            continue
        found += [f"{where}:{line}: {code}" for line, code in imports]
    assert scanned > 100 and inside >= 4  # the check reads the package, and sees the engines' own imports
    assert seen == set(DRIVER_EXCEPTIONS), f"exceptions that import no driver now: {set(DRIVER_EXCEPTIONS) - seen}"
    assert not found, "a driver imported outside rose_sql/engines:\n" + "\n".join(found)


def test_no_branch_on_a_kinds_name_outside_the_engines() -> None:
    """What differs between engines is a capability (``KindInfo``) or a method of the engine, never a test
    of a kind's name outside ``rose_sql/engines``."""
    found, seen, scanned, inside = [], set(), 0, 0
    for _name, path, tree in trees():
        where = str(path.relative_to(PACKAGE.parent))
        branches = list(kind_branches(tree))
        if path.is_relative_to(ENGINES):
            inside += len(branches)
            continue
        scanned += 1
        for line, code, through in branches:
            if (where, through) in KIND_NAME_EXCEPTIONS:
                seen.add((where, through))
            else:
                found.append(f"{where}:{line}: {code}")
    assert scanned > 100 and inside >= 10  # the check reads the package, and sees the engines' own branches
    assert seen == set(KIND_NAME_EXCEPTIONS), f"stale exceptions: {set(KIND_NAME_EXCEPTIONS) - seen}"
    assert not found, "a branch on an engine kind's name outside rose_sql/engines:\n" + "\n".join(found)


PLANTED_IMPORTS = """
import sqlite3
import psycopg.sql as q
from pymysql import connect
from duckdb import sql
import importlib
importlib.import_module("psycopg")
__import__("duckdb")
def f():
    import sqlite3 as lite
"""
PLANTED_BRANCHES = """
a = db.kind == "sqlite"
b = "postgresql" != source.kind
c = kind is "duckdb"
d = db.kind in ("mysql", "duckdb")
e = kind not in {"sqlite"}
f = kind in ["postgresql"]
g = kind in {"mysql": 1}
SERVERS = ("postgresql", "mysql")
h = kind in SERVERS
i = {"sqlite": 1}
j = dict(duckdb=2)
k = TABLE["mariadb"]
l = TABLE.get("postgres")
m = url.startswith("postgresql://")
match kind:
    case "SQLite":
        pass
"""
PLANTED_SAFE = """
DEFAULT_DIALECT = "sqlite"
def f(dialect: str = "sqlite") -> None:
    for name in ("rose_sql", "sqlite"):
        print(name)
    if db.info.python_sqlite3 and kind in SERVERS_FROM_KINDS:
        pass
LANGS = {"sql", "plsql"}
ok = lang in LANGS
"""


def test_the_seam_checks_catch_a_planted_example_of_each_kind() -> None:
    """The two checks above read real code: every form of a driver import and of a branch on a kind's name
    is caught, and code that only mentions a name (a default, a loop, a capability) is not."""
    imports = [line for line, _ in driver_imports(ast.parse(PLANTED_IMPORTS))]
    assert imports == [2, 3, 4, 5, 7, 8, 10]
    branches = [(line, through) for line, _, through in kind_branches(ast.parse(PLANTED_BRANCHES))]
    lines = sorted({line for line, _ in branches})  # a dict literal in a membership test is caught twice
    assert lines == [2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 17], branches
    assert (10, "SERVERS") in branches  # a membership test through a name bound to kind names, named
    assert list(kind_branches(ast.parse(PLANTED_SAFE))) == []
    assert not list(driver_imports(ast.parse("import sqlite_utils\nfrom rose_sql.engines import sqlite")))


def _numeric(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _numeric(node.left) and _numeric(node.right)
    if isinstance(node, ast.UnaryOp):
        return _numeric(node.operand)
    return False


def test_one_default_per_limit() -> None:
    found = []
    for _name, path, tree in trees():
        if path == PACKAGE / "config.py":
            continue
        where = path.relative_to(PACKAGE.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                found += [
                    f"{where}:{node.lineno}: {kw.arg}={ast.unparse(kw.value)}"
                    for kw in node.keywords
                    if kw.arg in LIMITS and _numeric(kw.value)
                ]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                positional = [*a.posonlyargs, *a.args]
                pairs = [
                    *zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=True),
                    *((k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None),
                ]
                found += [
                    f"{where}:{node.lineno}: parameter {arg.arg} = {ast.unparse(d)}"
                    for arg, d in pairs
                    if arg.arg in LIMITS and _numeric(d)
                ]
            elif (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id in LIMITS
                and node.value is not None
                and _numeric(node.value)
            ):
                found.append(f"{where}:{node.lineno}: field {node.target.id} = {ast.unparse(node.value)}")
    assert not found, "limits given a number outside rose_sql/config.py:\n" + "\n".join(found)


def test_the_limit_checks_see_a_retyped_default(tmp_path: Path) -> None:
    """The checks above read real code: a module that retypes a default is caught."""
    tree = ast.parse("def f(x, max_steps=5_000):\n    return g(timeout_s=2.0)\n")
    calls = [kw.arg for n in ast.walk(tree) if isinstance(n, ast.Call) for kw in n.keywords if _numeric(kw.value)]
    defaults = [d for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for d in n.args.defaults if _numeric(d)]
    assert calls == ["timeout_s"] and len(defaults) == 1
    union = ast.parse("def f(db: Path | Source) -> None: ...").body[0]
    assert isinstance(union, ast.FunctionDef) and union.args.args[0].annotation is not None
    assert [_names(u) for u in _unions(union.args.args[0].annotation)] == [{"Path", "Source"}]


AFTER_RUN = ("analysis", "review", "inspect", "summary.py", "accounting.py", "comparison", "cli/analysis.py")
AFTER_RUN += ("cli/agree.py", "cli/calibrate.py")
"""The modules that read finished runs: their figures and agreement results are typed values."""


def test_the_after_run_modules_pass_typed_values_not_dicts_read_by_key() -> None:
    """Figures and agreement results were dicts read by key (60 ``dict[str, Any]`` in these modules); the
    ones left are JSON crossing a boundary (a file read, a page's data, inspect's metadata)."""
    found = {}
    for name in AFTER_RUN:
        path = PACKAGE / name
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if n := f.read_text(encoding="utf-8").count("dict[str, Any]"):
                found[str(f.relative_to(PACKAGE))] = n
    assert sum(found.values()) < 20, found
