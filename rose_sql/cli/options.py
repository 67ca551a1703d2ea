"""Command-line options: those of the config fields, made from each field's declaration
(:class:`rose_sql.config.Option`), and those several commands share, each defined here once.

A field declares its flags, help and range where its value lives; :func:`field_options` makes the click
options of a dataclass's declared fields (type from the field's annotation, default from the field), and
:func:`values_of` takes a command's parameters back to the dataclass's fields by name. So a new option of
``rose run`` is one field of :class:`~rose_sql.config.Config`, :class:`~rose_sql.config.JudgeConfig`,
:class:`~rose_sql.config.Subset` or :class:`~rose_sql.cli.run.Job`.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import click

from rose_sql.config import FIELD_DEFAULT, Option
from rose_sql.errors import UsageError

PATH = click.Path(path_type=Path)
POSITIVE = click.FloatRange(min=0, min_open=True)


def declared(cls: type) -> list[tuple[Field[Any], Option]]:
    """The fields of ``cls`` that declare a command-line option, with their declarations, in field order."""
    return [(f, f.metadata["option"]) for f in fields(cls) if f.metadata.get("option") is not None]


def param_name(spec: Option) -> str:
    """The parameter's name, as click makes it: a bare name among the flags, else the longest flag's."""
    bare = [d for d in spec.flags if d.isidentifier()]
    if bare:
        return bare[0]
    longest = max((d.split("/")[0] for d in spec.flags), key=len)
    return longest.lstrip("-").replace("-", "_").lower()


def field_options(cls: type) -> dict[str, click.Option]:
    """The click options of ``cls``'s declared fields, by parameter name."""
    hints = get_type_hints(cls)
    return {param_name(spec): _click_option(f, spec, hints[f.name]) for f, spec in declared(cls)}


def run_options(*classes: type) -> dict[str, click.Option]:
    """The options of several dataclasses' declared fields, by parameter name (a name declared twice is refused)."""
    out: dict[str, click.Option] = {}
    for cls in classes:
        for name, opt in field_options(cls).items():
            if name in out:
                raise ValueError(f"option {name} is declared twice (the second time on {cls.__name__})")
            out[name] = opt
    return out


def values_of(cls: type, params: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of ``cls`` from a command's parameters (by the fields' parameter names): every
    declared field whose value was given or has its default on the command line; a field the command line
    leaves unset (its :attr:`~rose_sql.config.Option.unset`) is left out, so it keeps the field's default."""
    out: dict[str, Any] = {}
    for f, spec in declared(cls):
        value = params[param_name(spec)]
        if spec.unset is FIELD_DEFAULT or value != spec.unset:
            out[f.name] = value
    return out


def ordered(options: Mapping[str, click.Parameter], order: Sequence[str]) -> list[click.Parameter]:
    """The options in ``order`` (how ``--help`` lists them), then any other, in declaration order: a new
    field's option shows at the end until it is given a place."""
    unknown = set(order) - set(options)
    if unknown:
        raise ValueError(f"no option declared for {sorted(unknown)}")
    return [options[n] for n in order] + [o for n, o in options.items() if n not in order]


def _click_option(f: Field[Any], spec: Option, hint: Any) -> click.Option:
    base = _without_none(hint)
    default = spec.unset if spec.unset is not FIELD_DEFAULT else _default(f)
    flag = base is bool
    kw: dict[str, Any] = {"help": spec.help, "required": spec.required}
    if spec.unset is not FIELD_DEFAULT or (default is not None and default is not False):
        kw["default"] = default  # else click's own: not given
    if flag and "/" not in spec.flags[0]:
        kw["is_flag"] = True
    elif not flag:
        kw["type"] = _click_type(base, spec)
        if default is not None and default != () and not spec.multiple:
            kw["show_default"] = True
    if spec.metavar is not None:
        kw["metavar"] = spec.metavar
    if spec.multiple:
        kw.update(multiple=True)
        kw.pop("default", None)
    if spec.flag_value is not None:
        kw.update(is_flag=False, flag_value=spec.flag_value)
    if spec.check is not None:
        kw["callback"] = _checker(spec)
    return click.Option(list(spec.flags), **kw)


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _without_none(hint: Any) -> Any:
    if get_origin(hint) in (Union, types.UnionType):
        rest = [a for a in get_args(hint) if a is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint


def _click_type(base: Any, spec: Option) -> click.ParamType[Any] | None:
    if spec.choices is not None:
        return click.Choice(spec.choices)
    if get_origin(base) is Literal:
        return click.Choice(get_args(base))
    bounded = spec.min is not None or spec.max is not None
    if base is int:
        lo, hi = (None if b is None else int(b) for b in (spec.min, spec.max))
        return click.IntRange(min=lo, max=hi) if bounded else click.INT
    if base is float:
        return click.FloatRange(min=spec.min, max=spec.max, min_open=spec.min_open) if bounded else click.FLOAT
    if base is Path:
        return PATH
    return None  # text: a model name, a URL, a comma-separated list the command reads itself


def _checker(spec: Option) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """The callback that checks the text given with the declaration's ``check`` (imported when given)."""
    assert spec.check is not None
    module, name = spec.check.split(":")

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if spec.multiple and not value:
            return {}  # the checker's module is imported only when the option is given
        if value is None:
            return None
        fn = getattr(importlib.import_module(module), name)
        try:
            return dict(fn(v) for v in value) if spec.multiple else fn(value)
        except UsageError as e:
            raise click.BadParameter(str(e), ctx, param) from None

    return check


DB_HELP = (
    "Folder holding <db_id>/<db_id>.sqlite, or a URL: postgresql://..., mysql://... (MySQL, MariaDB), "
    "duckdb:///file-or-folder; {db_id} in a URL names one database per db_id, else all share it."
)
"""``rose run --db``'s help (another command's ``--db`` says what it does with the databases)."""


def db_option(help: str = DB_HELP) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--db`` (``--db-root``): the databases a command reads, a folder of SQLite files or an engine's URL."""
    return click.option("--db", "--db-root", "db_root", required=True, help=help)


def out_option(help: str, *, required: bool = True, **kw: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--out``: where a command writes (a folder or a file, as its help says)."""
    return click.option("--out", required=required, type=PATH, help=help, **kw)


def json_file_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--json FILE``: a table also written as JSON."""
    return click.option("--json", "json_out", type=PATH, help=help)


def json_flag(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--json``: the result printed as JSON instead of a table."""
    return click.option("--json", "as_json", is_flag=True, help=help)
