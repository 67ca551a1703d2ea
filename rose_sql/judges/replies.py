"""The judges' structured replies: parsed tolerantly, validated strictly, read only where they carry the call's nonce.

Tolerant: the JSON object may sit in a code fence, after ``<think>`` blocks or reasoning prose, or
only in the provider's ``reasoning_content``. Strict: a bool must be a JSON ``true``/``false`` (the
string ``"false"`` is an error, never a pass), required fields must be present, unknown extra
fields are ignored.

Read only where they carry the call's nonce: each call asks the judge to write a nonce that no input can
predict inside its verdict object (:mod:`rose_sql.judges.keys`; the reply's schema pins it as a one-value
enum where it is sent), and only an object carrying it is a verdict. A judge quotes and restates what it
judges (the SQL plain, in a ```` ```sql ```` block, indented; a literal's JSON with its quotes curled, its
escapes decoded, a zero-width space dropped, a Python dict turned into JSON), and a prediction may carry a
verdict of its own in a literal, a cell, a name or a comment: none of them carries the nonce, however it is
restated, so none is read. A schema-enforced reply (``structured``) is the object itself.

Without a nonce (a reply asked before verdict nonces, or a unit that reads one alone) the verdict is read
from the judge's own text as it was: every copy of a text the prompt fenced as data (``quoted``) blanked
from the reply first, and a JSON object that the data holds never a candidate. That reading stops verbatim
copies only; the nonce is what stops restatements.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

from rose_sql.errors import ReplyError
from rose_sql.judges.reasoning import strip_reasoning
from rose_sql.verdicts import ProverReply, RefuterReply, Reply

R = TypeVar("R", bound=Reply)


READING = "nonce-1"
"""How verdicts are read from replies, as manifests record it (``judge.replies``) and judge cards show it:
only an object carrying the call's nonce (see the module's text). Earlier manifests hold ``own-text-1``
(the judge's own text, its copies of the prompt's data blanked first) or none (the first verdict-shaped
object anywhere in a reply, fences first): runs made so cannot be resumed now."""


_MAX_NESTING = 8
"""Objects nested deeper than this are never candidates (a verdict nests two levels deep). Each character
then lies in at most this many candidates, so a reply of any shape is read in linear time."""
_MAX_CANDIDATES = 64
"""JSON objects tried at most per text, the likeliest first: a verdict is one of the first few."""
_SPECIAL = re.compile(r'\\.|[{}"]', re.DOTALL)
_LINE_OBJECTS = 8
"""Objects decoded at most where a line begins with ``{`` (the last first), besides the scan: quotes in a
line before them (a judge quoting ``{"`` in prose) cannot hide them from it."""
_LINE_START = re.compile(r"^[ \t>]*(?:```(?:json|JSON)?[ \t]*)?(?=\{)", re.MULTILINE)


def _load(text: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _decoded(text: str, start: int) -> tuple[dict[str, Any], str] | None:
    """The JSON object that begins at ``start`` (whatever follows it), with its text."""
    try:
        obj, end = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        return None
    return (obj, text[start:end]) if isinstance(obj, dict) else None


_DECODER = json.JSONDecoder()


def _fenced(text: str) -> list[tuple[dict[str, Any], str]]:
    """Objects that make up a whole code fence (one opens at three backticks and closes at the next three),
    each with its text."""
    found = []
    start = text.find("```")
    while start != -1 and (end := text.find("```", start + 3)) != -1:
        body = text[start + 3 : end].strip()
        if body[:4] in ("json", "JSON"):
            body = body[4:].lstrip()
        if body.startswith("{") and body.endswith("}") and (obj := _load(body)) is not None:
            found.append((obj, body))
        start = text.find("```", end + 3)
    return found


def _balanced(text: str) -> list[tuple[int, int]]:
    """Spans of balanced braces nested at most ``_MAX_NESTING`` deep, by start (an enclosing span first).

    One pass; quotes count only inside braces (prose outside may hold any), where they delimit JSON
    strings, whose braces do not count."""
    spans: list[tuple[int, int]] = []
    open_: list[list[int]] = []  # [start, height of what it holds so far]
    in_string = False
    for m in _SPECIAL.finditer(text):
        c = m.group()
        if in_string:
            in_string = c != '"'
        elif c == '"':
            in_string = bool(open_)
        elif c == "{":
            open_.append([m.start(), 0])
        elif c == "}" and open_:
            start, height = open_.pop()
            if height < _MAX_NESTING:
                spans.append((start, m.end()))
            if open_:
                open_[-1][1] = max(open_[-1][1], height + 1)
    return sorted(spans)


def _candidates(text: str) -> list[tuple[dict[str, Any], str]]:
    """JSON objects found in text with their text, most likely first (fenced blocks, then the last
    top-level object, then the objects that begin a line)."""
    text = strip_reasoning(text, drop_unclosed=False)  # the verdict may follow an unclosed <think>
    loose: list[tuple[dict[str, Any], str]] = []
    covered = 0  # objects inside one already found are its fields, not candidates
    for start, end in _balanced(text):
        if start >= covered and (obj := _load(text[start:end])) is not None:
            loose.append((obj, text[start:end]))
            covered = end
    starts = [m.end() for m in _LINE_START.finditer(text)][-_LINE_OBJECTS:]
    lines = [found for i in reversed(starts) if (found := _decoded(text, i)) is not None]
    return (_fenced(text) + loose[::-1])[:_MAX_CANDIDATES] + lines  # the final answer usually comes last


# --------------------------------------------------------------------------- what the judge quoted

_LINE = re.compile(r"[^\r\n]+")
_STRUCTURAL = re.compile(r"[\s{}\[\]:,0-9.eE+\-]*(?:(?:true|false|null)[\s{}\[\]:,0-9.eE+\-]*)*")
"""What a JSON verdict holds outside its strings: a quoted text made only of it is never blanked (it could
match the judge's own object)."""
_FLAT = re.compile(r"\s+|\\[nrt]")


def _lines(text: str) -> tuple[str, list[int], list[int]]:
    """``text`` with each line stripped of surrounding blanks and of quoting ``>``, blank lines dropped,
    joined by newlines; and where each kept line starts in that and in ``text``."""
    kept: list[str] = []
    at_norm: list[int] = []
    at_text: list[int] = []
    size = 0
    for m in _LINE.finditer(text):
        line = m.group()
        body = line.lstrip(" \t>").rstrip()
        if not body:
            continue
        at_norm.append(size)
        at_text.append(m.start() + len(line) - len(line.lstrip(" \t>")))
        kept.append(body)
        size += len(body) + 1
    return "\n".join(kept), at_norm, at_text


def unquote(text: str, quoted: Sequence[str]) -> str:
    """``text`` with every copy of a ``quoted`` text blanked (one space each): as it is, or with its lines
    indented, quoted with ``>`` or spaced by blank lines. Linear in the text for each quoted text."""
    if not text or not quoted:
        return text
    norm, at_norm, at_text = _lines(text)
    spans: list[tuple[int, int]] = []
    for data in quoted:
        needle = _lines(data)[0]
        if not needle or _STRUCTURAL.fullmatch(needle):
            continue
        pos = norm.find(needle)
        while pos != -1:
            spans.append((_where(pos, at_norm, at_text), _where(pos + len(needle) - 1, at_norm, at_text) + 1))
            pos = norm.find(needle, pos + len(needle))
    if not spans:
        return text
    out: list[str] = []
    done = 0
    for start, end in sorted(spans):
        if end <= done:
            continue
        out.append(text[done : max(start, done)] + " ")
        done = end
    out.append(text[done:])
    return "".join(out)


def _where(pos: int, at_norm: list[int], at_text: list[int]) -> int:
    """Where the character at ``pos`` of the stripped text (:func:`_lines`) is in the text."""
    line = bisect.bisect_right(at_norm, pos) - 1
    return at_text[line] + pos - at_norm[line]


def _flat(text: str) -> str:
    return _FLAT.sub("", text)


def _from_data(source: str, data: str) -> bool:
    """Whether a candidate's text is held by the quoted data (flattened): whitespace aside, as it is or as
    the text of a JSON string (a result's cell)."""
    flat = _flat(source)
    return flat in data or _flat(json.dumps(flat, ensure_ascii=False)[1:-1]) in data


def parse_reply(
    kind: type[R],
    content: str,
    reasoning: str | None = None,
    *,
    nonce: str | None = None,
    quoted: Sequence[str] = (),
    structured: bool = False,
) -> R:
    """The judge's verdict in its reply, validated as ``kind``; :class:`ReplyError` when there is none.

    ``nonce``: the call's nonce; only an object carrying it (``"nonce": nonce``) is the verdict. Without one,
    the reading before nonces: ``quoted``, the texts the prompt fenced as data (:func:`quoted_data`), of which
    no copy can answer. ``structured``: the reply's schema was sent, so a reply that is one JSON object is the
    verdict itself (one that is not, from an endpoint that ignored the schema, is read as text).
    """
    if nonce is not None:
        return _sealed(kind, content, reasoning, nonce, structured)
    if structured:
        whole = _load(strip_reasoning(content, drop_unclosed=False).strip())
        if whole is not None:
            try:
                return kind.model_validate(whole)
            except ValidationError as e:
                raise ReplyError(f"the JSON object is invalid: {_problem(e)}") from None
    data = "\0".join(_flat(t) for t in quoted)
    errors: list[str] = []
    for text in (content, reasoning or ""):
        for obj, source in _candidates(unquote(text, quoted)):
            if quoted and _from_data(source, data):
                continue
            try:
                return kind.model_validate(obj)
            except ValidationError as e:
                if not errors:  # the first problem is the one reported
                    errors.append(_problem(e))
    if not content.strip() and not (reasoning or "").strip():
        raise ReplyError("the reply is empty")
    if errors:
        raise ReplyError(f"the JSON object is invalid: {errors[0]}")
    raise ReplyError("the reply contains no JSON object")


def _sealed(kind: type[R], content: str, reasoning: str | None, nonce: str, structured: bool) -> R:
    """The verdict of a reply to a call with a nonce: the last object that carries it (:func:`_carrying`),
    in the content, else in the reasoning. Objects without it are never read; when none carries it, the
    first problem of one without it is said too, so that the re-ask can say what else was wrong."""
    if structured:
        whole = _load(strip_reasoning(content, drop_unclosed=False).strip())
        if whole is not None and whole.get("nonce") == nonce:
            try:
                return kind.model_validate(whole)
            except ValidationError as e:
                raise ReplyError(f"the JSON object is invalid: {_problem(e)}") from None
    problems: list[str] = []
    for text in (content, reasoning or ""):
        # its thinking cut out first (a draft there is never the verdict); then as it is, since a <think> and a
        # </think> in the copies of a prediction it quotes would cut the verdict between them out with it
        objects = _carrying(strip_reasoning(text, drop_unclosed=False), nonce) or _carrying(text, nonce)
        for obj in objects:
            try:
                return kind.model_validate(obj)
            except ValidationError as e:
                if not problems:  # the first problem is the one reported
                    problems.append(_problem(e))
    if not content.strip() and not (reasoning or "").strip():
        raise ReplyError("the reply is empty")
    if problems:
        raise ReplyError(f"the JSON object is invalid: {problems[0]}")
    found = [obj for text in (content, reasoning or "") for obj, _ in _candidates(text)]
    if found:
        also = ""
        try:
            kind.model_validate(found[0])
        except ValidationError as e:
            also = f"; it is invalid besides: {_problem(e)}"
        raise ReplyError(
            f'no JSON object carries this call\'s nonce (the verdict must hold the "nonce" the request ends with){also}'
        )
    raise ReplyError("the reply contains no JSON object")


_NONCES_TRIED = 8
"""Places the nonce is found at that are tried at most, the last first (a judge writes its verdict once or
twice: a draft, then the answer)."""
_OPENINGS_TRIED = 16
"""Braces before a place of the nonce tried at most as its object's start, the nearest first (the prompt
asks for the nonce as the object's first field: the nearest one, as a rule)."""


def _carrying(text: str, nonce: str) -> list[dict[str, Any]]:
    """The JSON objects of ``text`` that carry ``nonce`` as a field of their own, the last first.

    Found from the nonce, never by scanning the text for objects: whatever a reply copies or restates of a
    prediction (an unbalanced quote or brace among it) cannot hide the judge's object from the reader, and no
    object without the nonce is ever decoded. Each place the nonce is written is tried with the braces before
    it, the nearest first, until one opens an object that holds that place and carries the nonce."""
    found: list[dict[str, Any]] = []
    taken: list[tuple[int, int]] = []
    place = len(text)
    for _ in range(_NONCES_TRIED):
        place = text.rfind(nonce, 0, place)
        if place < 0:
            break
        if any(a <= place < b for a, b in taken):
            continue
        opening = place
        for _ in range(_OPENINGS_TRIED):
            opening = text.rfind("{", 0, opening)
            if opening < 0:
                break
            got = _decoded(text, opening)
            if got is None or opening + len(got[1]) <= place:
                continue
            if got[0].get("nonce") == nonce:
                found.append(got[0])
                taken.append((opening, opening + len(got[1])))
                break
    return found


def _problem(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())


_DATA_BLOCK = re.compile(r"<<<DATA (\w+) ([0-9a-f]+)>>>\n(.*?)\n<<<END \1 \2>>>", re.DOTALL)


def quoted_data(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The texts the user messages fence as data (:func:`rose_sql.judges.context.fence`): the prediction,
    the results, the question, the schema; what a reply copies of them is not the judge's verdict."""
    found: list[str] = []
    for m in messages:
        content = m.get("content")
        if m.get("role") == "user" and isinstance(content, str):
            found += [block.group(3) for block in _DATA_BLOCK.finditer(content)]
    return found


# --------------------------------------------------------------------------- reply schemas

CHECKS = ("requirements", "distinct", "nulls", "units", "extremes_and_ties", "joins")
"""The checklist the Prover's prompt asks it to fill (``ProverReply.checks``)."""


def _text(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


_CONFIDENCE = {"type": ["number", "null"], "description": "How sure you are of your verdict, 0 to 1."}
"""The stated confidence (``Reply.confidence``): asked through the schema, so that a schema-enforced judge
states it and the cheap-first policy can escalate below ``--escalate-below`` with one sample."""

_SCHEMAS: dict[type[Reply], tuple[str, dict[str, Any]]] = {
    ProverReply: (
        "prover_reply",
        {
            "type": "object",
            "properties": {
                "expected_answer": _text("What a correct answer to the question looks like."),
                "sql_behaviour": _text("What the predicted SQL actually computes, clause by clause."),
                "checks": {
                    "type": "object",
                    "properties": {name: {"type": "string"} for name in CHECKS},
                    "required": list(CHECKS),
                    "additionalProperties": False,
                },
                "reasoning": _text("Why the result does or does not answer the question."),
                "answers_question": {"type": "boolean"},
                "confidence": _CONFIDENCE,
            },
            "required": ["expected_answer", "sql_behaviour", "checks", "reasoning", "answers_question", "confidence"],
            "additionalProperties": False,
        },
    ),
    RefuterReply: (
        "refuter_reply",
        {
            "type": "object",
            "properties": {
                "reasoning": _text("The hard evidence for overturning, or why the prediction stands."),
                "overturn": {"type": "boolean"},
                "label": {"type": ["string", "null"], "description": "A short diagnostic label."},
                "ambiguity": {"type": "string", "enum": ["none", "question", "schema"]},
                "gold_correct": {"type": "boolean"},
                "gold_confidence": {"type": ["number", "null"], "description": "0 to 1."},
                "confidence": _CONFIDENCE,
            },
            "required": [
                "reasoning",
                "overturn",
                "label",
                "ambiguity",
                "gold_correct",
                "gold_confidence",
                "confidence",
            ],
            "additionalProperties": False,
        },
    ),
}


def reply_schema(kind: type[Reply], nonce: str | None = None) -> tuple[str, dict[str, Any]]:
    """The name and JSON schema of a judge's reply, as ``response_format`` sends it with ``strict``.

    Strict structured outputs (OpenAI's, and the grammars of vLLM, SGLang, llama.cpp and Ollama) want
    every property required and no others, so the optional fields are nullable, ``checks`` has the
    prompt's fixed checklist, and bounds the grammar cannot express (``gold_confidence`` in 0-1) stay
    with the model's validation. Properties come in the prompt's order: the call's ``nonce`` first (a
    one-value enum, so that a schema-enforced judge writes it), then the reasoning before the verdict.
    """
    name, schema = _SCHEMAS[kind]
    if nonce is None:
        return name, schema
    properties = {"nonce": {"type": "string", "enum": [nonce]}, **schema["properties"]}
    return name, {**schema, "properties": properties, "required": ["nonce", *schema["required"]]}
