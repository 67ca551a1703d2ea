"""The package's shape, read from its AST: no import circle, one kind of database value, one default per limit.

- Imports: every ``import`` of the package counts (module level, inside functions, under
  ``TYPE_CHECKING``; a package's ``__init__`` is a module like the others): the graph has no circle.
- Databases: :class:`rose_sql.engines.Database` and :class:`~rose_sql.engines.Source` are the only values
  that name them. No annotation outside the engines unions a path with them, no alias names such a union,
  and no code outside the engines asks ``isinstance`` of what kind a database is.
- Limits: every limit's default is written once, in :mod:`rose_sql.config`; no other module passes a limit
  as a number, or gives a parameter of a limit's name a number as its default.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rose_sql"
ENGINES = PACKAGE / "engines"
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


def trees() -> Iterator[tuple[str, Path, ast.Module]]:
    for name, path in sorted(modules().items()):
        yield name, path, ast.parse(path.read_text(encoding="utf-8"), str(path))


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


AFTER_RUN = ("analysis", "review", "inspect", "summary.py", "accounting.py", "compare", "cli/analysis.py")
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
