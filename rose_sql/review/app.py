"""The review web app (Starlette): pages rendered on the server, a little JavaScript of our own.

A local tool, not a public service: annotators sign in with a name and no password (anyone who can
reach the port can label under any name), so the app listens on loopback by default and
:class:`~rose_sql.review.guard.Guard` lets only its own pages drive it. Every piece of untrusted
text (questions, SQL, results, reasons, judges' reasoning) is escaped by the templates.

Labels are JSON posts that return once the label is committed (:meth:`Store.add_label`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from rose_sql.errors import UsageError
from rose_sql.review.agreement import (
    FLAG_NAMES,
    agreement,
    blind,
    changed_verdicts,
    current,
    first_open,
    is_open,
    majority,
    progress,
    status,
    visible,
    withheld,
)
from rose_sql.review.guard import Guard, host_name
from rose_sql.review.page import Pages, machine_view, pygments_css
from rose_sql.review.settings import LOOPBACK, ReviewConfig
from rose_sql.review.store import MAX_REASON, Label, Store, Verdict, check_seconds

COOKIE = "rose_review"
"""The session cookie: a random token naming the signed-in annotator."""
MAX_BODY = 256 * 1024
"""Largest request body read."""
MAX_QUERY_CHARS = 20_000
"""Longest query an annotator may run from the page."""


@dataclass
class Context:
    """What every handler needs: the state, the page builder, the templates."""

    config: ReviewConfig
    store: Store
    pages: Pages
    env: Environment


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("rose_sql.review", "templates"),
        autoescape=select_autoescape(["html"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.globals["FLAG_NAMES"] = FLAG_NAMES
    return env


def item_url(project: str, key: str, view: str = "item") -> str:
    """The URL of an item's page (or of its ``machine``, ``label``, ``query`` endpoints)."""
    return f"/p/{quote(project, safe='')}/{view}?{urlencode({'id': key})}"


def create_app(config: ReviewConfig, store: Store | None = None, port: int | None = None) -> Starlette:
    """The app; ``port`` is the one actually bound (the ``Origin`` check needs it)."""
    store = store or Store(config.state)
    ctx = Context(config, store, Pages(config), _env())
    hosts = {h.lower() for h in (*LOOPBACK, *config.allowed_hosts)}
    if config.host not in ("0.0.0.0", "::", ""):
        hosts.add(host_name(config.host) if not config.host.startswith("[") else config.host.strip("[]"))
    routes = [
        Route("/", _endpoint(ctx, home)),
        Route("/healthz", lambda r: PlainTextResponse("ok")),
        Route("/favicon.ico", lambda r: Response(status_code=204)),
        Route("/signin", _endpoint(ctx, sign_in), methods=["POST"]),
        Route("/signout", _endpoint(ctx, sign_out), methods=["POST"]),
        Route("/static/pygments.css", lambda r: Response(pygments_css(), media_type="text/css")),
        Mount("/static", StaticFiles(packages=[("rose_sql.review", "static")]), name="static"),
        Route("/p/{project}", _endpoint(ctx, _in_project(todo))),
        Route("/p/{project}/todo", _endpoint(ctx, _in_project(todo))),
        Route("/p/{project}/item", _endpoint(ctx, _in_project(item_page))),
        Route("/p/{project}/step", _endpoint(ctx, _in_project(step))),
        Route("/p/{project}/label", _endpoint(ctx, _in_project(post_label, api=True), api=True), methods=["POST"]),
        Route("/p/{project}/machine", _endpoint(ctx, _in_project(machine, api=True), api=True)),
        Route("/p/{project}/query", _endpoint(ctx, _in_project(run_query, api=True), api=True), methods=["POST"]),
        Route("/p/{project}/overview", _endpoint(ctx, _in_project(overview))),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        ctx.pages.close()
        ctx.store.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.ctx = ctx
    app.add_middleware(Guard, hosts=hosts, port=port if port is not None else config.port)
    return app


# --------------------------------------------------------------------------- helpers


Handler = Callable[[Context, Request, bytes], Response]


def _endpoint(ctx: Context, handler: Handler, api: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """An async endpoint that reads a POST's body, then runs the handler on the thread pool: SQLite and
    the sandbox block, and the event loop must not. A body past :data:`MAX_BODY` is a 413 (with a JSON
    error for an API call), read no further."""

    async def endpoint(request: Request) -> Response:
        body = b""
        if request.method == "POST":
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_BODY:
                    message = f"the request is larger than {MAX_BODY // 1024} KiB"
                    return JSONResponse({"error": message}, 413) if api else PlainTextResponse(message, 413)
        return await run_in_threadpool(handler, ctx, request, body)

    return endpoint


def _render(ctx: Context, name: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    return HTMLResponse(ctx.env.get_template(name).render(**values), status_code=status_code)


def _who(ctx: Context, request: Request) -> str | None:
    token = request.cookies.get(COOKIE)
    return ctx.store.annotator(token) if token else None


ProjectHandler = Callable[[Context, Request, bytes, str, str], Response]
"""A handler of a project's page or API: (context, request, body, annotator, project)."""


def _in_project(handler: ProjectHandler, api: bool = False) -> Handler:
    """The handler, called only for a signed-in annotator and an existing project. Otherwise a page
    sends to the sign-in or says "not found"; an API call answers 401 or 404 with a JSON error."""

    def checked(ctx: Context, request: Request, body: bytes) -> Response:
        who = _who(ctx, request)
        if who is None:
            return JSONResponse({"error": "sign in first"}, 401) if api else _sign_in_first(request)
        name = str(request.path_params["project"])
        if ctx.store.project(name) is None:
            message = f"no project named {name!r}"
            return JSONResponse({"error": message}, 404) if api else _not_found(ctx, message)
        return handler(ctx, request, body, who, name)

    return checked


def _not_found(ctx: Context, message: str) -> HTMLResponse:
    return _render(ctx, "message.html", 404, title="Not found", message=message, who=None)


def _sign_in_first(request: Request) -> RedirectResponse:
    return RedirectResponse("/?" + urlencode({"next": request.url.path + "?" + request.url.query}), status_code=303)


@dataclass(frozen=True, slots=True)
class Queue:
    """An annotator's view of a project: the items that are theirs (labelled, or open to them), in order."""

    order: list[str]
    by_item: dict[str, list[Label]]
    mine: list[str]
    todo: list[str]


def served_order(ctx: Context, project: str) -> list[str]:
    """The project's items in the order annotators are served them: those whose database is at hand first
    (the page shows its schema and runs queries on it), then the others, each part in project order. Items
    whose database is missing finish at once in a run, so project order alone served many of them early."""
    rows = ctx.store.databases(project)
    db_root = ctx.store.project(project).db_root  # type: ignore[union-attr]
    at_hand = {db_id: ctx.pages.database(db_root, db_id) is not None for db_id in {d for _, d in rows}}
    return [k for k, d in rows if at_hand[d]] + [k for k, d in rows if not at_hand[d]]


def queue(ctx: Context, project: str, who: str) -> Queue:
    order = served_order(ctx, project)
    by_item = current(ctx.store.labels(project))
    claims = ctx.store.claims(project)
    per = ctx.config.labels_per_item
    todo = [k for k in order if is_open(who, by_item.get(k, []), claims.get(k, set()), per)]
    todo_set = set(todo)
    mine = [k for k in order if k in todo_set or any(lab.annotator == who for lab in by_item.get(k, []))]
    return Queue(order, by_item, mine, todo)


# --------------------------------------------------------------------------- pages


def home(ctx: Context, request: Request, body: bytes) -> Response:
    who = _who(ctx, request)
    if who is None:
        return _render(ctx, "signin.html", who=None, next=request.query_params.get("next", "/"))
    rows = []
    for p in ctx.store.projects():
        q = queue(ctx, p.name, who)
        mine = sum(1 for k in q.order if any(lab.annotator == who for lab in q.by_item.get(k, [])))
        rows.append({"project": p, "items": len(q.order), "mine": mine, "todo": len(q.todo)})
    return _render(ctx, "home.html", who=who, rows=rows)


def sign_in(ctx: Context, request: Request, body: bytes) -> Response:
    form = parse_qs(body[:MAX_BODY].decode("utf-8", "replace"))
    name = (form.get("name") or [""])[0]
    target = (form.get("next") or ["/"])[0]
    if not target.startswith("/") or target.startswith("//"):
        target = "/"
    try:
        token = ctx.store.sign_in(name)
    except UsageError as e:
        return _render(ctx, "signin.html", 400, who=None, next=target, error=str(e))
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
    return response


def sign_out(ctx: Context, request: Request, body: bytes) -> Response:
    token = request.cookies.get(COOKIE)
    if token:
        ctx.store.sign_out(token)
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


def todo(ctx: Context, request: Request, body: bytes, who: str, project: str) -> Response:
    """The first item still open to the annotator, or the overview when none is."""
    order = served_order(ctx, project)
    per = ctx.config.labels_per_item
    key = ctx.store.assign(
        project, who, lambda labels, claims: first_open(order, who, labels, claims, per), ctx.config.claim_minutes
    )
    target = item_url(project, key) if key is not None else f"/p/{quote(project, safe='')}/overview?done=1"
    return RedirectResponse(target, status_code=303)


def step(ctx: Context, request: Request, body: bytes, who: str, project: str) -> Response:
    """The next (``dir=1``) or previous (``dir=-1``) item of the annotator's own, from ``id``."""
    key = request.query_params.get("id", "")
    forward = request.query_params.get("dir", "1") != "-1"
    q = queue(ctx, project, who)
    pos = {k: i for i, k in enumerate(q.order)}
    here = pos.get(key, -1 if forward else len(q.order))
    candidates = [k for k in q.mine if (pos[k] > here if forward else pos[k] < here)]
    if not candidates:
        return RedirectResponse(item_url(project, key) if key in pos else f"/p/{quote(project, safe='')}", 303)
    return RedirectResponse(item_url(project, candidates[0] if forward else candidates[-1]), status_code=303)


def item_page(ctx: Context, request: Request, body: bytes, who: str, project: str) -> Response:
    key = request.query_params.get("id", "")
    it = ctx.store.item(project, key)
    if it is None:
        return _not_found(ctx, f"project {project} has no item {key!r}")
    q = queue(ctx, project, who)
    on_item = q.by_item.get(key, [])
    mine = next((lab for lab in on_item if lab.annotator == who), None)
    if key in q.todo:
        ctx.store.claim(project, key, who, ctx.config.claim_minutes)
    db_root = ctx.store.project(project).db_root  # type: ignore[union-attr]
    view = ctx.pages.item(it, db_root)
    position = q.order.index(key) + 1
    return _render(
        ctx,
        "item.html",
        who=who,
        project=project,
        key=key,
        position=position,
        total=len(q.order),
        done=len(q.mine) - len(q.todo),
        assigned=len(q.mine),
        mine=mine,
        urls={
            "label": item_url(project, key, "label"),
            "machine": item_url(project, key, "machine"),
            "query": item_url(project, key, "query"),
            "next": f"/p/{quote(project, safe='')}/step?{urlencode({'id': key, 'dir': '1'})}",
            "prev": f"/p/{quote(project, safe='')}/step?{urlencode({'id': key, 'dir': '-1'})}",
            "todo": f"/p/{quote(project, safe='')}/todo",
            "overview": f"/p/{quote(project, safe='')}/overview",
        },
        **view,
    )


LABEL_FIELDS = ("correct", "goldx", "ambq", "ambs", "reason", "seconds")
"""What a label's JSON object may hold (``correct`` is required)."""


def read_json(body: bytes, fields: tuple[str, ...]) -> dict[str, object]:
    """A request's JSON object, read strictly, with no field but ``fields``; :class:`UsageError` (a 400)
    naming what is wrong: not UTF-8, not JSON, ``NaN``, ``Infinity`` or a number beyond a float's range,
    nesting deeper than the parser holds, not an object, an unknown field."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"the request is not UTF-8 (byte {e.start})") from None
    try:
        data = json.loads(text, parse_constant=_not_a_number, parse_float=_finite)
    except RecursionError:
        raise UsageError("the request is nested too deeply to be JSON this app reads") from None
    except ValueError as e:  # not JSON, NaN, Infinity, 1e999, an integer of more than 4,300 digits
        raise UsageError(f"the request is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise UsageError(f"the request must be a JSON object with the fields {', '.join(fields)}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        shown = ", ".join(repr(k[:40]) for k in unknown[:5])
        raise UsageError(f"unknown field {shown}: the request may hold {', '.join(fields)}")
    return data


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is beyond the range of a number")
    return value


def _verdict(data: dict[str, object]) -> Verdict:
    correct = data.get("correct")
    if not isinstance(correct, bool):
        raise UsageError("'correct' must be true or false")
    flags = {}
    for name in ("goldx", "ambq", "ambs"):
        value = data.get(name, False)
        if not isinstance(value, bool):
            raise UsageError(f"{name!r} must be true or false")
        flags[name] = value
    reason = data.get("reason", "")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise UsageError(f"'reason' must be text of at most {MAX_REASON} characters")
    return Verdict(correct, reason=reason, **flags)  # the store refuses a reason it cannot hold


def _seconds(value: object) -> float | None:
    """The label's ``seconds``: left out or null (not measured), else a finite number of at least 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError("'seconds' must be a number (or left out)")
    try:
        return check_seconds(float(value))
    except OverflowError:  # an integer beyond a float's range
        raise UsageError("'seconds' must be a finite number of at least 0") from None


def post_label(ctx: Context, request: Request, body: bytes, who: str, project: str) -> Response:
    try:
        key = request.query_params.get("id", "")
        data = read_json(body, LABEL_FIELDS)
        verdict = _verdict(data)
        seconds = _seconds(data.get("seconds"))
        label = ctx.store.add_label(project, key, who, verdict, seconds)
    except UsageError as e:
        return JSONResponse({"error": str(e)}, status_code=400)
    return JSONResponse({"ok": True, "id": label.id, "time": label.created, "annotator": who})


def machine(ctx: Context, request: Request, body: bytes, who: str, project: str) -> Response:
    """The machine's verdict and the other annotators' labels: only for an annotator who labelled the item."""
    key = request.query_params.get("id", "")
    it = ctx.store.item(project, key)
    if it is None:
        return JSONResponse({"error": "no such item"}, 404)
    on_item = current(ctx.store.labels(project)).get(key, [])
    if not any(lab.annotator == who for lab in on_item):
        return JSONResponse({"error": "label the item first: the machine's verdict is shown only after"}, 403)
    return _render(ctx, "machine.html", machine=machine_view(it.record), others=on_item, who=who)


def run_query(ctx: Context, request: Request, body: bytes, who: str, project: str) -> Response:
    """An annotator's own read-only query on the item's database, in the sandbox of ``rose run``."""
    try:
        data = read_json(body, ("sql",))
    except UsageError as e:
        return JSONResponse({"error": str(e)}, 400)
    key = request.query_params.get("id", "")
    it = ctx.store.item(project, key)
    sql = data.get("sql")
    if it is None or not isinstance(sql, str) or not sql.strip() or len(sql) > MAX_QUERY_CHARS:
        return JSONResponse({"error": f"give the item and one query of at most {MAX_QUERY_CHARS} characters"}, 400)
    db = ctx.pages.database(ctx.store.project(project).db_root, it.item.db_id)  # type: ignore[union-attr]
    if db is None:
        return _render(ctx, "result.html", result=None, message="the database is not at hand (start with --db-root)")
    start = time.monotonic()
    result = ctx.pages.run(db, sql)
    return _render(ctx, "result.html", result=result, seconds=time.monotonic() - start, message=None)


def overview(ctx: Context, request: Request, body: bytes, who: str, project: str) -> Response:
    """Progress, agreement and the disagreements side by side. Every figure is computed without the items the
    annotator still owes a label (:func:`~rose_sql.review.agreement.withheld`), which are listed as waiting
    for it, without their labels: none of their labels can be worked out from what this page shows."""
    order = ctx.store.keys(project)
    per = ctx.config.labels_per_item
    every = ctx.store.labels(project)
    owed = withheld(every, order, who, per)
    hidden = set(owed)
    labels = visible(every, hidden)
    shown = [k for k in order if k not in hidden]
    by_item = current(labels)
    counts: dict[str, int] = {}
    for k in shown:
        s = status(by_item.get(k, []), per)
        counts[s] = counts.get(s, 0) + 1
    first = blind(labels)
    agreed = agreement(first, shown)
    disputed = {k for k, _ in agreed.disagreements}
    owed_disputed = {k for k in owed if _first_two_disagree(blind(every).get(k, []))}
    disagreements: list[tuple[str, Any, list[Label], list[Label] | None, bool]] = []
    for k in order:
        if k in owed_disputed:  # listed, blind: the tie-breaker sees neither verdict nor reason until hers
            disagreements.append((k, ctx.store.item(project, k), [], None, True))
        elif k in disputed:
            on_item = by_item[k]  # the labels as they stand now (the disagreement is between blind ones)
            disagreements.append((k, ctx.store.item(project, k), on_item, majority(on_item), False))
    return _render(
        ctx,
        "overview.html",
        who=who,
        project=project,
        items=len(order),
        counts=counts,
        owed=len(owed),
        progress=progress(labels, by_item, shown, per),
        agreement=agreed,
        changed_verdicts=changed_verdicts(by_item, first),
        verdicts=sum(len(on) for on in by_item.values()),
        disagreements=disagreements,
        done=request.query_params.get("done") == "1",
        consensus=sum(1 for k in shown if majority(by_item.get(k, [])) is not None),
        item_url=item_url,
    )


def _first_two_disagree(on_item: list[Label]) -> bool:
    return len(on_item) >= 2 and on_item[0].verdict.correct != on_item[1].verdict.correct
