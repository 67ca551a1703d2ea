"""What ``rose demo`` prints: one row per item (EX, ROSE-SQL, the expert), then the totals."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from rose_sql.demo.build import DemoItem, DemoPaths
from rose_sql.evidence.findings import Evidence
from rose_sql.record import ComparisonInfo, Record
from rose_sql.summary import Summary

WIDTH = 100
"""The demo's output is at most this wide; narrower on a narrower terminal (80 columns hold it), its prose
wrapped there (printed with ``soft_wrap=False``, as a soft-wrapping console would cut padded lines)."""
QUESTION_CHARS = 27

EXPLAINED = {"same", "extra_columns", "type"}
"""Comparator outcomes that show a difference is one of representation only."""

_NOTE_WORDS = {
    "columns in another order": "column order",
    "numbers equal by value with different types or rounding (e.g. 1 vs 1.0)": "1 vs 1.0",
}
_EXPERT_STYLE = {"correct": "green", "incorrect": "red", "ambiguous": "yellow"}


# --------------------------------------------------------------------------- one item


def outcome(comparison: ComparisonInfo | None) -> str:
    """Our comparator's outcome in a few words: ``same up to column order``, ``values: ..``."""
    if comparison is None:
        return "not compared"
    tolerated = [_NOTE_WORDS[n] for n in comparison.notes if n in _NOTE_WORDS]
    if comparison.reason == "same" and tolerated:
        return "same up to " + " and ".join(tolerated)
    return f"{comparison.reason}: {comparison.detail}"


def evidence_says(evidence: Evidence | None) -> str:
    """The evidence stage in a few words: a witness, the shape of a difference, gold smells."""
    if evidence is None:
        return ""
    bits = []
    if evidence.witness is not None:
        bits.append(f"witness: {evidence.witness.label}")
    shapes = evidence.diff.shape if evidence.diff is not None else []
    bits += [s.split(":")[0] for s in shapes if s not in ("multiplicity", "extra_columns", "type", "order")]
    bits += [f"gold smell: {s.name}" for s in evidence.gold_smells]
    return "; ".join(bits)


def _short_error(error: str | None) -> str:
    return re.sub(r"^\w+(Error|Exception): ", "", error or "")


def rose_says(record: Record) -> Text:
    """What ROSE-SQL's deterministic stage says about an item: a score, or why there is none yet."""
    if record.score is not None:
        if record.pred.status == "timeout":
            why = f"stopped at its step budget ({_short_error(record.pred.error)})"
        else:
            why = f"does not execute: {_short_error(record.pred.error)}"
        return Text.assemble((f"score {record.score}", "bold"), f" · {why}")
    if record.unscored_reason == "awaiting_judge":
        found = evidence_says(record.evidence)
        return Text.assemble(
            ("awaiting judge", "yellow"),
            " · ",
            outcome(record.comparison),
            *((("\n" + found), "cyan"),) if found else (),
        )
    if record.unscored_reason == "gold_error":
        return Text.assemble(("unscored", "bold"), " · the gold does not execute: ", _short_error(record.gold.error))
    return Text.assemble(("unscored", "bold"), f" · {record.unscored_reason}: {record.why}")


def ex_says(record: Record, item: DemoItem) -> Text:
    """BIRD EX's reading (1, 0, or – when it is undefined), red where it disagrees with the expert."""
    ex = record.readings.bird_ex
    if ex is None:
        return Text("–", style="dim")
    return Text(str(ex), style="bold red" if bool(ex) != item.accepted else "")


def _question(item: DemoItem) -> Text:
    return Text.assemble(item.question, "\n", (item.label, "dim italic"))


def item_table(items: Sequence[DemoItem], records: dict[int, Record]) -> Table:
    """One row per item: question, BIRD EX, ROSE-SQL's deterministic stage, the expert."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, expand=True)
    table.add_column("id", justify="right", width=2)
    table.add_column("question / what it shows", width=QUESTION_CHARS, overflow="fold")  # wrapped, never cut
    table.add_column("EX", justify="center", width=2)
    table.add_column("ROSE-SQL, deterministic stage", ratio=1)
    table.add_column("expert", width=9)
    for item in items:
        record = records[item.id]
        table.add_row(
            str(item.id),
            _question(item),
            ex_says(record, item),
            rose_says(record),
            Text(item.expert, style=_EXPERT_STYLE[item.expert]),
        )
    return table


# --------------------------------------------------------------------------- totals


@dataclass(frozen=True, slots=True)
class Tally:
    """The demo's totals: EX against the expert, and what the deterministic stage settled."""

    n: int
    """Items."""
    accepted: int
    """Items whose prediction the expert accepts."""
    ex_defined: int
    """Items with a BIRD EX reading."""
    ex_agree: int
    """Items where BIRD EX agrees with the expert."""
    ex_false_neg: list[DemoItem]
    """Predictions the expert accepts and EX rejects."""
    ex_false_pos: list[DemoItem]
    """Predictions the expert rejects and EX accepts."""
    kappa: float | None
    """Cohen's kappa of EX against the expert."""
    scored: int
    """Items the deterministic stage scored."""
    scored_agree: int
    """Scored items where the score agrees with the expert."""
    unscored: dict[str, int]
    """Unscored items by reason."""
    explained_false_neg: list[DemoItem]
    """EX's false negatives the comparator shows to differ in representation only."""
    flagged_false_pos: list[DemoItem]
    """EX's false positives where the comparator reports a difference."""


def cohen_kappa(pairs: Sequence[tuple[bool, bool]]) -> float | None:
    """Cohen's kappa of two raters' yes/no labels (None when undefined)."""
    if not pairs:
        return None
    n = len(pairs)
    observed = sum(a == b for a, b in pairs) / n
    yes_a = sum(a for a, _ in pairs) / n
    yes_b = sum(b for _, b in pairs) / n
    expected = yes_a * yes_b + (1 - yes_a) * (1 - yes_b)
    return None if expected == 1 else (observed - expected) / (1 - expected)


def tally(items: Sequence[DemoItem], records: dict[int, Record]) -> Tally:
    """Count agreements and what the deterministic stage settled."""
    with_ex = [(it, records[it.id]) for it in items if records[it.id].readings.bird_ex is not None]
    false_neg = [it for it, r in with_ex if it.accepted and not r.readings.bird_ex]
    false_pos = [it for it, r in with_ex if not it.accepted and r.readings.bird_ex]
    scored = [(it, records[it.id]) for it in items if records[it.id].score is not None]

    def reason(it: DemoItem) -> str | None:
        c = records[it.id].comparison
        return None if c is None else c.reason

    return Tally(
        n=len(items),
        accepted=sum(it.accepted for it in items),
        ex_defined=len(with_ex),
        ex_agree=len(with_ex) - len(false_neg) - len(false_pos),
        ex_false_neg=false_neg,
        ex_false_pos=false_pos,
        kappa=cohen_kappa([(bool(r.readings.bird_ex), it.accepted) for it, r in with_ex]),
        scored=len(scored),
        scored_agree=sum(bool(r.score) == it.accepted for it, r in scored),
        unscored=dict(Counter(str(r.unscored_reason) for r in records.values() if r.score is None)),
        explained_false_neg=[it for it in false_neg if reason(it) in EXPLAINED],
        flagged_false_pos=[it for it in false_pos if reason(it) not in (None, "same")],
    )


def _labels(items: Sequence[DemoItem]) -> str:
    counts = Counter(it.label for it in items)
    return ", ".join(label if n == 1 else f"{label} ({n})" for label, n in counts.items()) or "none"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "-"


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _heading(text: str) -> Text:
    return Text(text, style="bold")


def _point(text: str) -> Padding:
    return Padding(Text(text), (0, 0, 0, 2), expand=False)


def _ex_lines(t: Tally, s: Summary) -> list[RenderableType]:
    kappa = "-" if t.kappa is None else f"{t.kappa:.2f}"
    heading = "BIRD EX against the expert (who accepts ambiguous predictions under a reasonable reading)"
    lines: list[RenderableType] = [
        _heading(heading),
        _point(
            f"agrees on {t.ex_agree} of {t.ex_defined} items ({_pct(t.ex_agree, t.ex_defined)}), Cohen's kappa {kappa}"
        ),
        _point(f"rejects {len(t.ex_false_neg)} predictions the expert accepts: {_labels(t.ex_false_neg)}"),
        _point(f"accepts {len(t.ex_false_pos)} predictions the expert rejects: {_labels(t.ex_false_pos)}"),
    ]
    if t.n > t.ex_defined:
        lines.append(_point(f"has no reading on {t.n - t.ex_defined} item whose gold does not execute"))
    lines.append(
        _point(
            f"official readings on this run: BIRD EX {_share(s.bird_ex)}, "
            f"Spider EX {_share(s.spider_ex)}, Soft-F1 {_share(s.soft_f1)}"
        )
    )
    return lines


def _rose_lines(t: Tally, s: Summary) -> list[RenderableType]:
    lines: list[RenderableType] = [
        _heading("ROSE-SQL's deterministic stage (execution and our comparator)"),
        _point(
            f"scores {t.scored} items 0 because the prediction fails or times out; "
            f"the expert agrees on {t.scored_agree} of {t.scored}"
        ),
    ]
    if t.unscored.get("gold_error"):
        lines.append(_point(f"leaves {t.unscored['gold_error']} item unscored (gold_error): its gold does not execute"))
    lines += [
        _point(
            f"shows that {len(t.explained_false_neg)} of EX's {len(t.ex_false_neg)} false rejections differ "
            f"only in representation: {_labels(t.explained_false_neg)}"
        ),
        _point(
            f"flags {len(t.flagged_false_pos)} of EX's {len(t.ex_false_pos)} false acceptances: "
            f"{_labels(t.flagged_false_pos)}; the others return equal results, which takes a judge to see through"
        ),
        _point(f"has scored {s.scored} of {s.n} items so far (coverage {_share(s.coverage)})"),
    ]
    return lines


def _judge_line(t: Tally) -> Text:
    awaiting = t.unscored.get("awaiting_judge", 0)
    return Text.assemble(
        ("No judge is configured", "bold"),
        f": {awaiting} items await a judge (score null, unscored_reason awaiting_judge). "
        "Nothing was judged and nothing is guessed; the ROSE score covers only what execution settles.",
    )


def print_demo(
    console: Console,
    items: Sequence[DemoItem],
    records: dict[int, Record],
    summary: Summary,
    paths: DemoPaths,
    seconds: float,
) -> None:
    """Print the per-item table, the totals and where the files are."""
    width = min(console.width, WIDTH)
    console.print(item_table(items, records), width=width)
    console.print(
        Text("EX in red: it disagrees with the expert. Notes on every item: ", style="dim")
        + Text(str(paths.labels), style="dim"),
        width=width,
        soft_wrap=False,  # wrapped before the path, which goes whole onto the next line where it fits
    )
    t = tally(items, records)
    console.print()
    for line in [*_ex_lines(t, summary), *_rose_lines(t, summary)]:
        console.print(line, width=width, soft_wrap=False)
    console.print()
    console.print(_judge_line(t), width=width, soft_wrap=False)
    console.print()
    where = [
        ("records", paths.run_dir / "records.jsonl"),
        ("summary", paths.run_dir / "summary.json"),
        ("items", paths.items),
        ("database", paths.db),
    ]
    for name, path in where:
        console.print(Text.assemble((f"{name:>9}: ", "bold"), str(path)), width=width, soft_wrap=True)
    console.print(Text(f"Evaluated {len(items)} items in {seconds:.1f} s.", style="dim"), width=width)
