// The studio's page behaviour: curation requests (with the CSRF token), confirmation, charts, live progress.
"use strict";
const csrf = () => document.querySelector('meta[name="csrf-token"]').content;
const meta = name => (document.querySelector(`meta[name="${name}"]`) || {}).content || "";

function flash(message, bad) {
  const el = document.getElementById("flash");
  el.textContent = message;
  el.className = bad ? "bad" : "";
  el.hidden = false;
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => { el.hidden = true; }, bad ? 8000 : 3000);
}

async function send(url, body) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf() },
    credentials: "same-origin",
    body: JSON.stringify(body || {}),
  });
  const data = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function askConfirm(text) {
  return new Promise(resolve => {
    const box = document.getElementById("confirm");
    document.getElementById("confirm-text").textContent = text;
    box.hidden = false;
    const done = answer => { box.hidden = true; yes.onclick = no.onclick = null; resolve(answer); };
    const yes = document.getElementById("confirm-yes"), no = document.getElementById("confirm-no");
    yes.onclick = () => done(true);
    no.onclick = () => done(false);
  });
}

function selectedIds(bar) {
  if (bar.dataset.ids) return [bar.dataset.ids];
  return [...document.querySelectorAll("input.pick:checked")].map(b => b.value);
}

async function curate(bar, action) {
  const ids = selectedIds(bar);
  if (!ids.length) { flash("select records first", true); return; }
  const rules = bar.dataset.kind === "rule";
  const body = { action, ids, namespace: meta("crl-namespace") || null };
  if (action === "tag" || action === "untag") {
    const tag = (document.getElementById("bulk-tag").value || "").trim();
    if (!tag) { flash("type a tag first", true); return; }
    body.tags = [tag];
  }
  if (action === "delete") {
    if (!await askConfirm(`Delete ${ids.length} ${rules ? "rule" : "record"}(s) for good? ${ids.slice(0, 3).join(", ")}${ids.length > 3 ? ", …" : ""}`)) return;
    body.confirm = true;
  }
  try {
    const done = await send(rules ? "/api/rules/actions" : "/api/memories/actions", body);
    flash(`${action}: ${done.ids.length} ${rules ? "rule" : "record"}(s)`);
    if (action === "delete" && bar.dataset.ids) { location.href = (rules ? "/rules" : "/memories") + meta("crl-namespace-query"); return; }
    setTimeout(() => location.reload(), 400);
  } catch (e) { flash(e.message, true); }
}

function wireCuration() {
  for (const bar of document.querySelectorAll("#bulk, #record-actions, #rule-actions")) {
    for (const b of bar.querySelectorAll("button[data-action]")) b.addEventListener("click", () => curate(bar, b.dataset.action));
  }
  const all = document.getElementById("select-all");
  const count = () => {
    const n = document.querySelectorAll("input.pick:checked").length;
    const el = document.getElementById("selected-count");
    if (el) el.textContent = `${n} selected`;
  };
  if (all) all.addEventListener("change", () => { for (const b of document.querySelectorAll("input.pick")) b.checked = all.checked; count(); });
  for (const b of document.querySelectorAll("input.pick")) b.addEventListener("change", count);
  const edit = document.getElementById("rule-edit");
  if (edit) edit.addEventListener("submit", async ev => {
    ev.preventDefault();
    try {
      const done = await send(`/api/rules/${encodeURIComponent(edit.dataset.rule)}/edit${meta("crl-namespace-query")}`, { text: document.getElementById("rule-text").value });
      flash("saved: " + done.text);
      setTimeout(() => location.reload(), 400);
    } catch (e) { flash(e.message, true); }
  });
  for (const b of document.querySelectorAll("button[data-promote]")) b.addEventListener("click", async () => {
    try { const p = await send(`/api/adapters/${encodeURIComponent(b.dataset.promote)}/promote`); flash(`promoted ${p.adapter}`); setTimeout(() => location.reload(), 400); }
    catch (e) { flash(e.message, true); }
  });
  for (const b of document.querySelectorAll("button[data-rollback]")) b.addEventListener("click", async () => {
    try { const p = await send("/api/adapters/rollback", { base_model: b.dataset.rollback }); flash(`rolled back ${p.previous}; now ${p.adapter || "base model"}`); setTimeout(() => location.reload(), 400); }
    catch (e) { flash(e.message, true); }
  });
}

function drawIntervals() {
  for (const el of document.querySelectorAll(".interval")) {
    const lo = +el.dataset.lo, hi = +el.dataset.hi, p = +el.dataset.p;
    const band = document.createElement("i");
    band.style.left = `${lo * 100}%`;
    band.style.width = `${(hi - lo) * 100}%`;
    const mark = document.createElement("b");
    mark.style.left = `calc(${p * 100}% - 1px)`;
    el.append(band, mark);
  }
}

function drawRun() {
  const holder = document.getElementById("run-data");
  if (!holder) return;
  const data = JSON.parse(holder.textContent);
  const points = data.curve.map(p => ({ x: p.episodes, y: p.rate, lo: p.ci95[0], hi: p.ci95[1] }));
  const dots = data.curve.map(p => ({ x: p.episodes, y: p.rate, dot: p.success }));
  crlCharts.lineChart(document.getElementById("run-curve"), [
    { name: "success rate", colour: crlCharts.PALETTE[0], points },
    { name: "episodes", colour: "#1d7a46", points: dots },
  ], { xlabel: "finished episodes" });
  if (data.run.status === "running") pollProgress(data.run.run_id, data.run.finished);
}

function pollProgress(runId, finishedAtLoad) {
  const tick = async () => {
    try {
      const r = await fetch(`/api/runs/${encodeURIComponent(runId)}/progress`, { credentials: "same-origin" });
      const p = await r.json();
      document.getElementById("progress").textContent =
        `${p.finished} of ${p.episodes} episodes finished, ${p.successes} solved; ${p.running.length} running, ${p.steps} steps logged`;
      document.getElementById("run-status").textContent = p.status;
      if (p.status !== "running" || p.finished !== finishedAtLoad) { location.reload(); return; }
    } catch (e) { /* the next tick tries again */ }
    setTimeout(tick, 2000);
  };
  setTimeout(tick, 2000);
}

function drawExperiment() {
  const holder = document.getElementById("experiment-data");
  if (!holder) return;
  const data = JSON.parse(holder.textContent);
  const svg = document.getElementById("experiment-curve"), toggles = document.getElementById("arm-toggles");
  const series = Object.entries(data.arms).map(([arm, pts], i) => ({
    name: arm, colour: crlCharts.PALETTE[i % crlCharts.PALETTE.length], hidden: false,
    points: pts.map(p => ({ x: p.train_episodes, y: p.success_rate, lo: p.ci95[0], hi: p.ci95[1] })),
  }));
  const draw = () => crlCharts.lineChart(svg, series, { xlabel: "training episodes" });
  for (const s of series) {
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.arm = s.name;
    const sw = document.createElement("i");
    sw.className = "swatch";
    sw.style.background = s.colour;
    b.append(sw, document.createTextNode(s.name));
    b.addEventListener("click", () => { s.hidden = !s.hidden; b.classList.toggle("off", s.hidden); draw(); });
    toggles.appendChild(b);
  }
  draw();
}

async function drawMap() {
  const holder = document.getElementById("map");
  if (!holder) return;
  const caption = document.getElementById("map-caption");
  try {
    const r = await fetch(holder.dataset.api, { credentials: "same-origin" });
    const data = await r.json();
    if (!r.ok) throw new Error(data.error);
    if (!data.points.length) { caption.textContent = "Nothing to map: no stored records match."; return; }
    crlCharts.scatterMap(document.getElementById("map-svg"), data.points, data.color, document.getElementById("map-legend"), meta("crl-namespace-query"));
    const ev = data.explained.map(v => Math.round(v * 100) + "%").join(" + ");
    caption.textContent = `${data.sampled} of ${data.total} records` + (data.sampled < data.total ? " (a uniform sample)" : "") +
      `, PCA of their stored embeddings (axes explain ${ev} of the variance); click a point to open the memory.`;
    holder.dataset.ready = "1";
  } catch (e) { caption.textContent = "cannot draw the map: " + e.message; }
}

function tidyFilterForms() {
  // empty fields are no filter: leave them out of the URL
  for (const form of document.querySelectorAll("form.filters")) {
    form.addEventListener("submit", () => {
      for (const field of form.querySelectorAll("input, select")) if (field.name && field.value === "") field.disabled = true;
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  tidyFilterForms();
  wireCuration();
  drawIntervals();
  drawRun();
  drawExperiment();
  drawMap();
});
