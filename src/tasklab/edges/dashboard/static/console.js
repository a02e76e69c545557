"use strict";
// The operator console's pages and actions, over app.js's helpers ($, api, el, ago):
// the workers and schedules pages, the queues' charts, bulk cancel/retry from the
// filtered list, and the task page's timeline of attempts and Retry button.

// ---- the workers page -------------------------------------------------------------
async function refreshWorkers() {
  const doc = await api("workers");
  $("#workers tbody").replaceChildren(...doc.items.map((w) => el("tr", { "data-worker": w.id, "data-state": w.state },
    el("td", { text: w.id }),
    el("td", { class: `state state-${w.state === "live" ? "running" : w.state === "dead" ? "failed" : "cancelled"}`, text: w.state }),
    el("td", { text: `${w.host} / ${w.pid}` }),
    el("td", { text: w.runner || "—" }),
    el("td", { text: w.queues ? w.queues.join(", ") : "all" }),
    el("td", { class: "num", text: w.slots == null ? "—" : String(w.slots) }),
    el("td", { text: w.started_at ? `${ago(w.started_at)} ago` : "—" }),
    el("td", { text: w.heartbeat_at ? `${ago(w.heartbeat_at)} ago` : "—" }),
    el("td", {}, ...(w.running.length ? w.running.flatMap((t, i) => [i ? ", " : "",
      el("a", { href: `ui/tasks/${t.id}`, text: `${t.task} ${t.id}` })]) : ["—"])))));
}

async function startWorkers() {
  $("#app").hidden = false;
  await refreshWorkers();
  setInterval(() => refreshWorkers().catch(() => {}), 1000);
}

// ---- the schedules page -----------------------------------------------------------
async function refreshSchedules() {
  const schedules = await api("schedules");
  $("#schedules tbody").replaceChildren(...schedules.items.map((s) => el("tr", { "data-schedule": s.name },
    el("td", { text: s.name }), el("td", { text: s.task }),
    el("td", { text: `${s.expression}${s.cron ? ` (${s.timezone})` : ""}` }),
    el("td", { text: s.next_tick ? new Date(s.next_tick).toLocaleString() : "—" }),
    el("td", {}, s.last_task_id ? el("a", { href: `ui/tasks/${s.last_task_id}`, text: s.last_task_id }) : "—"))));
}

async function startSchedules() {
  $("#app").hidden = false;
  await refreshSchedules();
  setInterval(() => refreshSchedules().catch(() => {}), 1000);
}

// ---- the queues page's charts (inline SVG, nothing fetched from elsewhere) ---------
const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  for (const c of children) node.append(c);
  return node;
}

function barChart(label, minutes, values, titles, unit) {
  const w = 360, h = 90, pad = 18, bw = (w - pad) / minutes.length;
  const max = Math.max(1e-9, ...values);
  const bars = values.map((v, i) => svg("rect", { x: pad + i * bw, y: h - 14 - (h - 28) * v / max,
    width: Math.max(1, bw - 1), height: (h - 28) * v / max, class: "bar" },
    svg("title", {}, titles[i])));
  return svg("svg", { viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": label, class: "chart" },
    svg("text", { x: 0, y: 10, class: "chart-label" }, `${label} (max ${max < 10 ? max.toFixed(2) : Math.round(max).toLocaleString()} ${unit})`),
    svg("line", { x1: pad, y1: h - 14, x2: w, y2: h - 14, class: "axis" }),
    svg("text", { x: pad, y: h - 2, class: "chart-label" }, "−60 min"),
    svg("text", { x: w - 24, y: h - 2, class: "chart-label" }, "now"),
    ...bars);
}

async function refreshCharts() {
  const doc = await api("queues/activity?minutes=60");
  const now = Math.floor(Date.now() / 60000);
  const minutes = Array.from({ length: 60 }, (_, i) => now - 59 + i);
  const byQueue = {};
  for (const row of doc.items) (byQueue[row.queue] = byQueue[row.queue] || {})[row.minute] = row;
  const names = Object.keys(byQueue).sort();
  if (!names.length) {
    $("#charts").replaceChildren(el("p", { class: "muted", text: "No claims in the last hour." }));
    return;
  }
  $("#charts").replaceChildren(...names.map((name) => {
    const rows = minutes.map((m) => byQueue[name][m]);
    const rate = rows.map((r) => (r ? r.claims / 60 : 0));
    const wait = rows.map((r) => (r ? r.wait_ms_mean : 0));
    const when = (i) => new Date(minutes[i] * 60000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    const rateTitles = rows.map((r, i) => `${when(i)}: ${r ? r.claims : 0} claims (${rate[i].toFixed(2)}/s)`);
    const waitTitles = rows.map((r, i) => r ? `${when(i)}: mean ${r.wait_ms_mean} ms, longest ${r.wait_ms_max} ms` : `${when(i)}: no claims`);
    const total = rows.reduce((n, r) => n + (r ? r.claims : 0), 0);
    return el("div", { class: "chart-row", "data-chart": name },
      el("h3", { text: `${name} — ${total.toLocaleString()} claims` }),
      barChart("claims/s", minutes, rate, rateTitles, "/s"),
      barChart("enqueue→start, mean ms", minutes, wait, waitTitles, "ms"));
  }));
}

function enhanceQueues() {
  refreshCharts().catch(() => {});
  setInterval(() => refreshCharts().catch(() => {}), 5000);
}

// ---- bulk cancel / retry from the filtered list ------------------------------------
function listFilter() {
  const filter = {};
  const state = $("#state-filter").value;
  if (state) filter.state = state;
  const task = $("#task-filter").value.trim();
  const queue = $("#queue-filter").value.trim();
  if (task) filter.task = task;
  if (queue) filter.queue = queue;
  return filter;
}

async function bulk(verb) {
  const filter = listFilter();
  $("#bulk-result").textContent = "";
  try {
    if (!Object.keys(filter).length) throw new Error("choose a state, a task or a queue first: an empty filter would take every task");
    const path = verb === "cancel" ? "tasks/cancel" : "tasks/retry";
    const post = (body) => api(path, { method: "POST", body: JSON.stringify(body),
      headers: { "content-type": "application/json" } });
    const dry = await post({ filter, dry_run: true });
    if (!dry.matched) { $("#bulk-result").textContent = `No task matches: nothing to ${verb}.`; return; }
    $("#bulk-question").textContent = `${verb === "cancel" ? "Cancel" : "Retry"} ${dry.matched.toLocaleString()} task(s)?`;
    $("#bulk-filter").textContent = `Filter: ${JSON.stringify(filter)}. ${verb === "cancel"
      ? "Queued and waiting ones end cancelled; running ones are asked to stop."
      : "Each ended task gets one new task made of it; the ended ones stay as they are."}`;
    const dialog = $("#bulk-dialog");
    dialog.returnValue = "";
    dialog.showModal();
    const answer = await new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true }));
    if (answer !== "confirm") { $("#bulk-result").textContent = "Nothing was changed."; return; }
    const done = await post({ filter });
    $("#bulk-result").textContent = Object.entries(done).map(([k, v]) => `${v.toLocaleString()} ${k}`).join(", ");
    await refreshList();
  } catch (err) {
    $("#bulk-result").textContent = err.message || String(err);
  }
}

function enhanceList() {
  for (const input of ["#task-filter", "#queue-filter"]) {
    $(input).addEventListener("change", () => { list.cursor = null; refreshList().catch(() => {}); });
  }
  $("#bulk-cancel").addEventListener("click", () => bulk("cancel"));
  $("#bulk-retry").addEventListener("click", () => bulk("retry"));
}

// ---- the task page: timeline of attempts, Retry ------------------------------------
// drawn from the journal app.js's refreshDurable already fetched (one request a tick)
function renderTimeline(attempts) {
  $("#timeline tbody").replaceChildren(...attempts.map((a) => el("tr", { "data-attempt": String(a.attempt) },
    el("td", { class: "num", text: `${a.attempt}${a.resumed ? " (resumed)" : ""}` }),
    el("td", { class: "num", text: a.epoch == null ? "—" : String(a.epoch) }),
    el("td", { text: a.worker || "—" }),
    el("td", { class: "num", text: a.lease == null ? "—" : `${a.lease}s` }),
    el("td", { text: new Date(a.started_at).toLocaleTimeString() }),
    el("td", { class: `state state-${a.outcome === "retried" ? "queued" : a.outcome}`, text: a.outcome || "—" }),
    el("td", { class: "muted", text: a.detail || "" }))));
}

async function retryTask() {
  $("#retry").disabled = true;
  $("#retry-error").textContent = "";
  try {
    const made = await api(`tasks/${view.id}/retry`, { method: "POST" });
    location.href = `ui/tasks/${made.id}`;
  } catch (err) {
    $("#retry-error").textContent = err.message || String(err);
    $("#retry").disabled = false;
  }
}

function enhanceTask(snap) {
  $("#retry").addEventListener("click", retryTask);
  const ended = () => ["succeeded", "failed", "cancelled"].includes($("#state").textContent);
  $("#retry").disabled = !ended();
  setInterval(() => { $("#retry").disabled = !ended(); }, 1000);
  if (snap.retry_of) {
    $("#parent").after(el("p", { class: "muted", id: "retry-of" }, "A retry of ",
      el("a", { href: `ui/tasks/${snap.retry_of}`, text: snap.retry_of })));
  }
}

PAGES.workers = startWorkers;
PAGES.schedules = startSchedules;
