"""The report's inline style sheet and script (kept here so the page needs no file beside it).

The script reads the records from a JSON island, builds the item browser with ``textContent`` only
(item texts come from model output and are never parsed as HTML), takes preset filters from the
URL's fragment (``#outcome=ex_only&label=goldx``), and, once laid out, notes each chart's box and the
number of fetched resources on the page (used by the rendering test).
"""

CSS = """
:root { --ink:#0f172a; --muted:#64748b; --line:#e2e8f0; --bg:#f8fafc; --card:#ffffff; --accent:#2563eb; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
       color:var(--ink); background:var(--bg); }
header { padding:20px 32px 12px; background:var(--card); border-bottom:1px solid var(--line); }
header h1 { margin:0 0 4px; font-size:22px; }
header p { margin:0; color:var(--muted); }
main { padding:16px 32px 40px; max-width:1260px; }
h2 { font-size:17px; margin:26px 0 10px; }
.cards { display:flex; flex-wrap:wrap; gap:10px; margin-bottom:14px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px 14px; min-width:130px; }
.card .k { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
.card .v { font-size:22px; font-weight:600; }
.card .n { color:var(--muted); font-size:12px; }
.banner { margin:14px 0 0; padding:10px 14px; border:1px solid #f59e0b; border-radius:8px; background:#fef3c7;
          font-weight:600; }
h3 { font-size:15px; margin:18px 0 4px; }
.grid { display:grid; grid-template-columns:repeat(auto-fill,minmax(580px,1fr)); gap:14px; }
figure.chart { margin:0; background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px; }
figure.chart figcaption { font-weight:600; margin:0 0 6px; }
figure.chart figcaption span { display:block; font-weight:400; color:var(--muted); font-size:12px; }
svg.chart-svg { display:block; max-width:100%; height:auto; }
svg .tick, svg .xlabel, svg .legend { font-size:11px; fill:#334155; }
svg .value { font-size:10px; fill:#0f172a; }
svg .empty { font-size:14px; fill:#64748b; }
table { border-collapse:collapse; width:100%; background:var(--card); }
th, td { border-bottom:1px solid var(--line); padding:5px 8px; text-align:left; vertical-align:top; }
th { background:#f1f5f9; font-weight:600; position:sticky; top:0; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
.note { color:var(--muted); font-size:12px; }
.filters { display:flex; flex-wrap:wrap; gap:10px; align-items:center; margin:8px 0 10px; }
.filters label { color:var(--muted); font-size:12px; }
.filters select, .filters input { font:inherit; padding:3px 6px; border:1px solid #cbd5e1; border-radius:5px; }
#items-table tr.item { cursor:pointer; }
#items-table tr.item td:nth-last-child(n+3) { white-space:nowrap; }
#items-table tr.item:hover { background:#eff6ff; }
.badge { display:inline-block; padding:0 6px; border-radius:9px; font-size:11px; margin-right:3px;
         border:1px solid #cbd5e1; white-space:nowrap; }
.o-both_correct { background:#dcfce7; } .o-both_wrong { background:#f1f5f9; } .o-rose_only { background:#d1fae5; }
.o-ex_only { background:#ffedd5; } .o-unscored { background:#fee2e2; } .o-no_ex { background:#e0e7ff; }
.o-awaiting { background:#fef9c3; }
.f-goldx { background:#fee2e2; } .f-ambq { background:#fef3c7; } .f-smell { background:#cffafe; }
tr.detail td { background:#fbfdff; }
tr.detail pre { white-space:pre-wrap; word-break:break-word; margin:2px 0 8px; padding:6px 8px;
                background:#f1f5f9; border-radius:5px; font:12px/1.4 ui-monospace,"DejaVu Sans Mono",monospace; }
tr.detail h4 { margin:8px 0 2px; font-size:12px; color:var(--muted); text-transform:uppercase; }
button { font:inherit; padding:4px 12px; border:1px solid #cbd5e1; border-radius:5px; background:#fff; cursor:pointer; }
"""

JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("rose-data").textContent);
  var items = data.items, systems = data.systems, outcomes = data.outcomes;
  var PAGE = 200, shown = PAGE;
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  var fOutcome = document.getElementById("f-outcome"), fLabel = document.getElementById("f-label");
  var fSystem = document.getElementById("f-system"), fText = document.getElementById("f-text");
  var tbody = document.querySelector("#items-table tbody"), count = document.getElementById("items-count");
  var more = document.getElementById("items-more");
  Object.keys(outcomes).forEach(function (k) {
    var o = el("option", null, outcomes[k]); o.value = k; fOutcome.appendChild(o);
  });
  systems.forEach(function (s, i) { var o = el("option", null, s); o.value = String(i); fSystem.appendChild(o); });
  if (systems.length < 2) { fSystem.parentNode.style.display = "none"; }
  function matches(it) {
    if (fOutcome.value && it.o !== fOutcome.value) { return false; }
    if (fSystem.value && String(it.s) !== fSystem.value) { return false; }
    var l = fLabel.value;
    if (l === "any" && it.f.length === 0) { return false; }
    if (l === "none" && it.f.length > 0) { return false; }
    if (l && l !== "any" && l !== "none" && it.f.indexOf(l) < 0) { return false; }
    var t = fText.value.trim().toLowerCase();
    if (t) {
      var hay = [it.id, it.db, it.q, it.p, it.g, it.why].join(" ").toLowerCase();
      if (hay.indexOf(t) < 0) { return false; }
    }
    return true;
  }
  function block(parent, title, text, pre) {
    if (text === null || text === undefined || text === "") { return; }
    parent.appendChild(el("h4", null, title));
    parent.appendChild(el(pre ? "pre" : "div", null, text));
  }
  function detail(it, cols) {
    var tr = el("tr", "detail"), td = el("td");
    td.colSpan = cols;
    block(td, "Question", it.q, false);
    block(td, "Predicted SQL", it.p, true);
    block(td, "Gold SQL", it.g, true);
    block(td, "Decision", (it.by ? "decided by " + it.by + ": " : "") + (it.why || "") +
          (it.ur ? " [unscored: " + it.ur + "]" : ""), false);
    it.j.forEach(function (j) {
      var lines = [j.verdict.toUpperCase() + (j.reasoning ? " \u2014 " + j.reasoning : "")];
      Object.keys(j.extra).forEach(function (k) { lines.push(k + ": " + j.extra[k]); });
      block(td, (j.stage || "judge") + " (" + (j.model || "?") + ")", lines.join("\n"), true);
    });
    if (it.ev) {
      block(td, "Gold smells", it.ev.smells.join("\n"), true);
      block(td, "Witness database", it.ev.witness, false);
      block(td, "How the results differ", it.ev.diff, false);
    }
    tr.appendChild(td);
    return tr;
  }
  function row(it) {
    var tr = el("tr", "item");
    var cells = [systems.length > 1 ? systems[it.s] : null, it.id, it.db, it.d || ""];
    cells.forEach(function (c, i) { if (i > 0 || systems.length > 1) { tr.appendChild(el("td", null, c)); } });
    tr.appendChild(el("td", "num", it.ex === null ? "undefined" : it.ex));
    var none = it.ur === "awaiting_judge" ? "awaiting judge" : "unscored";
    tr.appendChild(el("td", "num", it.sc === null ? none : it.sc));
    var o = el("td"); o.appendChild(el("span", "badge o-" + it.o, outcomes[it.o])); tr.appendChild(o);
    var f = el("td"); it.f.forEach(function (x) { f.appendChild(el("span", "badge f-" + x, x)); }); tr.appendChild(f);
    tr.appendChild(el("td", null, it.by || it.ur || ""));
    var q = it.q || ""; tr.appendChild(el("td", null, q.length > 110 ? q.slice(0, 109) + "\u2026" : q));
    var open = null;
    tr.addEventListener("click", function () {
      if (open) { open.remove(); open = null; return; }
      open = detail(it, tr.children.length); tr.after(open);
    });
    return tr;
  }
  function render() {
    var hits = items.filter(matches);
    tbody.textContent = "";
    hits.slice(0, shown).forEach(function (it) { tbody.appendChild(row(it)); });
    count.textContent = "showing " + Math.min(shown, hits.length) + " of " + hits.length +
      " matching items (" + items.length + " in all)";
    more.style.display = hits.length > shown ? "" : "none";
    document.body.setAttribute("data-rows", String(tbody.querySelectorAll("tr.item").length));
  }
  [fOutcome, fLabel, fSystem].forEach(function (s) {
    s.addEventListener("change", function () { shown = PAGE; render(); });
  });
  fText.addEventListener("input", function () { shown = PAGE; render(); });
  more.addEventListener("click", function () { shown += PAGE; render(); });
  // a link may preset the filters: report.html#outcome=ex_only&label=goldx&q=text
  var presets = {outcome: fOutcome, label: fLabel, system: fSystem, q: fText};
  location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
    var parts = kv.split("=");
    if (Object.prototype.hasOwnProperty.call(presets, parts[0])) {
      presets[parts[0]].value = decodeURIComponent(parts[1] || "");
    }
  });
  if (systems.length > 1) {
    var head = document.querySelector("#items-table thead tr");
    head.insertBefore(el("th", null, "system"), head.firstChild);
  }
  render();
  function mark() {
    document.querySelectorAll("figure.chart").forEach(function (fig) {
      var svg = fig.querySelector("svg"), r = svg.getBoundingClientRect();
      fig.setAttribute("data-box", [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]
        .map(Math.round).join(","));
      fig.setAttribute("data-bars", String(svg.querySelectorAll("rect.bar").length));
    });
    var fetched = window.performance && performance.getEntriesByType ? performance.getEntriesByType("resource") : [];
    document.body.setAttribute("data-resources", String(fetched.length));
    document.body.setAttribute("data-ready", "1");
  }
  if (document.readyState === "complete") { mark(); } else { window.addEventListener("load", mark); }
})();
"""
