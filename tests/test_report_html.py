"""The HTML report: self-contained, charts drawn, item browser working; checked in headless Chromium.

The Chromium part skips (with the reason) when Debian's ``chromium`` is not installed; CI installs it.
It renders the page with the network unreachable, reads the DOM the page's script annotated (chart
boxes, bar counts, resources fetched, rows shown) and checks in a screenshot that every chart's box
holds drawn, coloured pixels.
"""

from __future__ import annotations

import html
import json
import re
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import make_record, write_records

from rose_sql.analysis.html import build_report
from rose_sql.analysis.runs import load_run
from rose_sql.cli import main
from rose_sql.record import Record

CHARTS = ("ex-rose", "gap", "sources", "direction", "calls", "cost")
HOSTILE = '</script><img src="https://tracker.example/pixel.png" onerror="document.title=1"> <b>bold</b>'
WINDOW = (1280, 2000)


def _call(stage: str, cost: float, reply: dict[str, Any]) -> dict[str, Any]:
    return {"stage": stage, "model": "judge-x", "reply": reply, "cached": False, "cost_usd": cost}


def _rec(i: int, ex: int, score: int | None, difficulty: str, **labels: Any) -> Record:
    prover = {"reasoning": f"the query answers question {i}", "answers_question": True, "expected_answer": "a list"}
    refuter = {"reasoning": "no hard evidence", "overturn": score == 0, "ambiguity": "none", "gold_correct": True}
    return make_record(
        {
            "id": i,
            "db_id": "shop",
            "score": score,
            "unscored_reason": None if score is not None else "judge_error",
            "decided_by": "refuter" if score is not None else None,
            "why": "the Refuter decided",
            "question": HOSTILE if i == 3 else f"How many orders did customer {i} place?",
            "pred_sql": "SELECT COUNT(*) FROM orders WHERE customer = 1",
            "gold_sql": "SELECT COUNT(id) FROM orders WHERE customer = 1",
            "difficulty": difficulty,
            "readings": {"bird_ex": ex},
            "labels": labels,
            "judges": [_call("prover", 0.002, prover), _call("refuter", 0.003, refuter)],
            "evidence": {"gold_smells": [{"name": "count_fanout", "detail": "join duplicates"}]}
            if i % 5 == 0
            else None,
        }
    )


def _system(offset: int) -> list[Record]:
    diffs = ("simple", "moderate", "challenging")
    out = []
    for i in range(1, 31):
        ex = int((i + offset) % 3 == 0)
        score = None if i == 30 else int((i + offset) % 4 != 0)
        out.append(_rec(i, ex, score, diffs[i % 3], goldx=i % 4 == 0 or None, ambq=i % 6 == 0 or None))
    return out


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    folders = []
    for name, offset in (("alpha-sql", 0), ("beta-sql", 1)):
        summary = {
            "llm": {"calls_per_item": 2.0, "cost_usd": 0.15},
            "judge": {"model": "judge-x", "matched_refuter": "always"},
        }
        folders.append(write_records(tmp_path / name, _system(offset), summary))
    return folders


def _report(args: list[str]) -> None:
    res = CliRunner().invoke(main, ["report", *args])
    assert res.exit_code == 0, res.output


def test_page_is_self_contained_and_escapes_records(runs: list[Path], tmp_path: Path) -> None:
    _report([str(runs[0])])
    page = (runs[0] / "report.html").read_text(encoding="utf-8")
    island = re.search(r'<script type="application/json" id="rose-data">(.*?)</script>', page, re.DOTALL)
    assert island is not None and page.count("</script>") == 2  # the hostile text cannot close the island
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", page, re.DOTALL)
    markup = re.sub(r"(<script[^>]*>).*?</script>", r"\1</script>", page, flags=re.DOTALL)
    assert not re.search(r"fetch\(|XMLHttpRequest|WebSocket|import\(|\.src\b|https?:", scripts[1])
    assert not re.search(r"""\b(src|href|action|poster|data|srcset)\s*=""", markup, re.IGNORECASE)  # nothing to fetch
    assert not re.search(r"<(link|img|iframe|object|embed|base)\b|@import|url\(|https?:", markup, re.IGNORECASE)
    assert "default-src 'none'" in page  # and the browser is told to fetch nothing even so
    assert "<" not in island.group(1) and "tracker.example" in island.group(1)
    data = json.loads(island.group(1))
    assert data["systems"] == ["alpha-sql"] and len(data["items"]) == 30 and data["items"][2]["q"] == HOSTILE
    for chart in CHARTS:
        figure = re.search(rf'<figure class="chart" id="chart-{chart}".*?</figure>', page, re.DOTALL)
        assert figure is not None and "<svg" in figure.group(0), chart
        assert 'class="bar"' in figure.group(0), chart
    assert "How many orders did customer 1 place?" in page


def test_compare_needs_the_flag(runs: list[Path], tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["report", str(runs[0]), str(runs[1])])
    assert res.exit_code == 2 and "--compare" in res.output
    page = build_report([load_run(r) for r in runs])
    assert "ROSE-SQL comparison" in page and "beta-sql" in page


# --------------------------------------------------------------------------- headless Chromium

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--force-device-scale-factor=1",
    "--hide-scrollbars",
    f"--window-size={WINDOW[0]},{WINDOW[1]}",
    "--virtual-time-budget=5000",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # no name resolves: no network
]


def _chromium(exe: Path, tmp_path: Path, url: str, *mode: str) -> str:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    cmd = [str(exe), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *mode, url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def read_png(path: Path) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, raw rows) of an 8-bit RGB/RGBA, non-interlaced PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and color in (2, 6) and interlace == 0
    bpp, raw = (3 if color == 2 else 4), zlib.decompress(idat)
    stride, out, prev = width * (3 if color == 2 else 4), bytearray(), bytearray(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            a, b = line[x - bpp] if x >= bpp else 0, prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line
        prev = line
    return width, height, bpp, bytes(out)


def _coloured_share(png: tuple[int, int, int, bytes], box: tuple[int, int, int, int]) -> float:
    """Share of pixels in the box that are saturated colour (bars), not white, grey or text black."""
    width, height, bpp, px = png
    x0, y0, w, h = box
    coloured = total = 0
    for y in range(max(0, y0), min(height, y0 + h), 2):
        row = y * width * bpp
        for x in range(max(0, x0), min(width, x0 + w), 2):
            r, g, b = px[row + x * bpp : row + x * bpp + 3]
            total += 1
            coloured += max(r, g, b) - min(r, g, b) > 60
    return coloured / total if total else 0.0


def test_rendered_in_headless_chromium(chromium: Path, runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "compare.html"
    _report([str(runs[0]), str(runs[1]), "--compare", "--out", str(out)])
    url = out.resolve().as_uri()
    dom = _chromium(chromium, tmp_path, url, "--dump-dom")
    body = re.search(r"<body([^>]*)>", dom)
    assert body is not None and 'data-ready="1"' in body.group(1), "the page's script did not run to the end"
    assert 'data-resources="0"' in body.group(1), "the page fetched something"
    assert 'data-rows="60"' in body.group(1)  # every item of both systems is listed
    assert "<img" not in dom and "tracker.example" in dom  # the hostile question stays text
    boxes = {}
    for chart in CHARTS:
        fig = re.search(rf'<figure class="chart" id="chart-{chart}"[^>]*data-box="([\d,-]+)" data-bars="(\d+)"', dom)
        assert fig is not None, f"chart {chart} was not laid out"
        assert int(fig.group(2)) > 0, f"chart {chart} has no bars"
        x, y, w, h = (int(v) for v in fig.group(1).split(","))
        assert w > 300 and h > 150 and y + h <= WINDOW[1], f"chart {chart} box {fig.group(1)}"
        boxes[chart] = (x, y, w, h)
    filtered = _chromium(chromium, tmp_path, url + "#label=goldx&system=1", "--dump-dom")
    assert re.search(r'<body[^>]*data-rows="7"', filtered), "the fragment's filters were not applied"
    clicked = tmp_path / "clicked.html"  # the page with one row clicked open: its detail is built as text
    opener = "<script>document.querySelectorAll('#items-table tr.item')[2].click();</script></body>"
    clicked.write_text(out.read_text(encoding="utf-8").replace("</body>", opener), encoding="utf-8")
    detail = _chromium(chromium, tmp_path, clicked.resolve().as_uri(), "--dump-dom")
    assert '<tr class="detail">' in detail and "judge-x" in detail and "the query answers question 3" in detail
    assert "<img" not in detail and "&lt;/script&gt;&lt;img" in detail
    shot = tmp_path / "report.png"
    _chromium(chromium, tmp_path, url, f"--screenshot={shot}")
    png = read_png(shot)
    assert (png[0], png[1]) == WINDOW
    for chart, box in boxes.items():
        assert _coloured_share(png, box) > 0.01, f"chart {chart} looks blank in the screenshot"
    header = (0, 0, WINDOW[0], 60)
    assert _coloured_share(png, header) < 0.01  # the check does tell drawn from blank regions


# --------------------------------------------------------------------------- legible with many systems

NAMES = ("alpha-sql", "gpt-4o-din-sql-chess-agent", "x", "deepseek-coder-33b", "MMW-sql", "resdsql-3b", "c3")

MEASURE = """<script>(function () {
  function quad(t) {  // the text's box, turned as it is drawn, in the page's pixels
    var b = t.getBBox(), m = t.getScreenCTM();
    return [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]]
      .map(function (p) { return [m.a * p[0] + m.c * p[1] + m.e, m.b * p[0] + m.d * p[1] + m.f]; });
  }
  function apart(p, q) {  // separating axes: two convex boxes are apart when one of their edges splits them
    return [p, q].some(function (poly) {
      return poly.some(function (a, i) {
        var b = poly[(i + 1) % 4], nx = b[1] - a[1], ny = a[0] - b[0];
        var dp = p.map(function (v) { return v[0] * nx + v[1] * ny; });
        var dq = q.map(function (v) { return v[0] * nx + v[1] * ny; });
        return Math.max.apply(null, dp) <= Math.min.apply(null, dq) + 1e-6
          || Math.max.apply(null, dq) <= Math.min.apply(null, dp) + 1e-6;
      });
    });
  }
  var found = [], counts = {};
  document.querySelectorAll("figure.chart").forEach(function (fig) {
    var svg = fig.querySelector("svg"), r = svg.getBoundingClientRect(), c = {};
    var texts = Array.prototype.map.call(svg.querySelectorAll("text"), function (t) {
      c[t.getAttribute("class")] = (c[t.getAttribute("class")] || 0) + 1;
      return {name: t.getAttribute("class") + " " + t.textContent, q: quad(t)};
    });
    counts[fig.id] = c;
    texts.forEach(function (a, i) {
      if (a.q.some(function (v) { return v[0] < r.left - 0.5 || v[0] > r.right + 0.5 || v[1] < r.top - 0.5
          || v[1] > r.bottom + 0.5; })) { found.push(fig.id + ": " + a.name + " leaves the chart"); }
      texts.slice(i + 1).forEach(function (b) {
        if (!apart(a.q, b.q)) { found.push(fig.id + ": " + a.name + " overlaps " + b.name); }
      });
    });
  });
  document.body.setAttribute("data-measured", JSON.stringify({overlaps: found, counts: counts}));
})();</script></body>"""


@pytest.mark.parametrize("n", [2, 3, 9, 20, 25])
def test_chart_labels_never_overlap(chromium: Path, tmp_path: Path, n: int) -> None:
    summary = {"llm": {"calls_per_item": 2.0, "cost_usd": 0.15}, "judge": {"model": "judge-x"}}
    runs = [load_run(write_records(tmp_path / f"{NAMES[i % len(NAMES)]}-{i}", _system(i), summary)) for i in range(n)]
    page = tmp_path / "measured.html"
    page.write_text(build_report(runs).replace("</body>", MEASURE), encoding="utf-8")
    dom = _chromium(chromium, tmp_path, page.resolve().as_uri(), "--dump-dom")
    found = re.search(r'data-measured="([^"]*)"', dom)
    assert found is not None, "the measuring script did not run"
    measured = json.loads(html.unescape(found.group(1)))
    assert measured["overlaps"] == [], "\n".join(measured["overlaps"])
    counts = measured["counts"]
    assert set(counts) == {f"chart-{c}" for c in CHARTS}
    assert all(c["xlabel"] == n for name, c in counts.items() if name != "chart-gap")  # every system named
    if n <= 9:  # the values are written over the bars while they fit
        assert counts["chart-ex-rose"]["value"] == 2 * n and counts["chart-direction"]["value"] == n
