// rose review: the keyboard flow, saving labels and revealing the machine's verdict.
// The page is rendered (and escaped) by the server; this script only posts JSON and inserts the
// server's own HTML fragments.
"use strict";

(function () {
  // the list of projects: 1-9 open the n-th project on the first item waiting for you
  if (!document.body.classList.contains("home-page")) return;
  document.addEventListener("keydown", function (e) {
    if (e.target instanceof HTMLInputElement || e.ctrlKey || e.metaKey || e.altKey) return;
    const links = document.querySelectorAll("a.start");
    const n = Number(e.key);
    if (n >= 1 && n <= links.length) {
      e.preventDefault();
      window.location.assign(links[n - 1].getAttribute("href"));
    }
  });
})();

(function () {
  const body = document.body;
  if (!body.classList.contains("item-page")) return;
  const $ = (id) => document.getElementById(id);
  const url = (name) => body.dataset[name + "Url"];
  const opened = performance.now(); // monotonic: a clock set back never makes the seconds negative
  let saved = body.dataset.labelled === "yes";
  let dirty = false;
  let busy = false;

  function status(text, ok) {
    const el = $("saved");
    el.textContent = text;
    el.className = "status" + (ok ? " saved-ok" : "");
  }

  function choose(correct) {
    $(correct ? "v-correct" : "v-incorrect").checked = true;
    changed();
  }

  function toggle(id) {
    const box = $(id);
    box.checked = !box.checked;
    changed();
  }

  function changed() {
    dirty = true;
    status("not saved yet: Enter saves", false);
  }

  function verdict() {
    if ($("v-correct").checked) return true;
    if ($("v-incorrect").checked) return false;
    return null;
  }

  async function reveal() {
    const target = $("machine-body");
    const response = await fetch(url("machine"), { credentials: "same-origin" });
    if (response.ok) target.innerHTML = await response.text();
  }

  async function save() {
    const correct = verdict();
    if (correct === null) {
      status("choose correct (1) or incorrect (0) first", false);
      return;
    }
    if (busy) return;
    busy = true;
    const label = {
      correct: correct,
      goldx: $("f-goldx").checked,
      ambq: $("f-ambq").checked,
      ambs: $("f-ambs").checked,
      reason: $("reason").value,
      seconds: (performance.now() - opened) / 1000,
    };
    try {
      const response = await fetch(url("label"), {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(label),
      });
      const answer = await response.json();
      if (!response.ok) {
        status("not saved: " + (answer.error || response.status), false);
        return;
      }
      saved = true;
      dirty = false;
      body.dataset.labelled = "yes";
      status("saved at " + answer.time + " (Enter: next unlabelled)", true);
      await reveal();
    } catch (e) {
      status("not saved: " + e, false);
    } finally {
      busy = false;
    }
  }

  async function runQuery() {
    const sql = $("console-sql").value;
    if (!sql.trim()) return;
    const out = $("console-out");
    out.textContent = "running…";
    const response = await fetch(url("query"), {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ sql: sql }),
    });
    if (!response.ok) {
      const answer = await response.json().catch(() => ({}));
      out.textContent = "not run: " + (answer.error || response.status);
      return;
    }
    out.innerHTML = await response.text(); // the server's own escaped HTML
  }

  function go(name) {
    window.location.assign(url(name));
  }

  $("save").addEventListener("click", save);
  $("console-run").addEventListener("click", runQuery);
  for (const id of ["v-correct", "v-incorrect", "f-goldx", "f-ambq", "f-ambs"]) $(id).addEventListener("change", changed);
  $("reason").addEventListener("input", changed);

  document.addEventListener("keydown", function (e) {
    const target = e.target;
    const typing = target instanceof HTMLTextAreaElement || (target instanceof HTMLInputElement && target.type === "text");
    if (typing) {
      if (e.key === "Escape") {
        target.blur();
        e.preventDefault();
      } else if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        if (target.id === "console-sql") runQuery();
        else save();
      }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const keys = {
      "1": () => choose(true),
      c: () => choose(true),
      "0": () => choose(false),
      x: () => choose(false),
      g: () => toggle("f-goldx"),
      q: () => toggle("f-ambq"),
      s: () => toggle("f-ambs"),
      r: () => $("reason").focus(),
      e: () => $("console-sql").focus(),
      n: () => go("next"),
      ArrowRight: () => go("next"),
      p: () => go("prev"),
      ArrowLeft: () => go("prev"),
      u: () => go("todo"),
      o: () => go("overview"),
      "?": () => ($("help").hidden = !$("help").hidden),
      Enter: () => (dirty || !saved ? save() : go("todo")),
    };
    const action = keys[e.key];
    if (action) {
      e.preventDefault();
      action();
    }
  });

  if (saved) reveal();
})();
