"use strict";
// The tasklab dashboard: no build step, no dependencies. The list polls; a task page
// follows one EventSource and remembers (per tab, in sessionStorage) what it showed.

const $ = (sel) => document.querySelector(sel);
const STATES = ["queued", "running", "cancel_requested", "waiting", "succeeded", "failed", "cancelled"];

async function api(path, options = {}) {
  const resp = await fetch(path, { credentials: "same-origin", ...options });
  if (resp.status === 401) { showLogin(); throw new Error("unauthorized"); }
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    const err = new Error((body.error && body.error.message) || resp.statusText);
    err.code = body.error && body.error.code; err.status = resp.status;
    throw err;
  }
  return body;
}

function showLogin() { $("#login").hidden = false; $("#app").hidden = true; }

function setupLogin(start) {
  $("#login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const resp = await fetch("ui/login", { method: "POST", credentials: "same-origin",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token: $("#token").value }) });
    if (resp.ok) { $("#login").hidden = true; $("#app").hidden = false; start(); }
    else { $("#login-error").textContent = "That token was not accepted."; }
  });
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  return s < 60 ? `${s.toFixed(0)}s` : s < 3600 ? `${(s / 60).toFixed(0)}m` : `${(s / 3600).toFixed(1)}h`;
}

function duration(t) {
  if (!t.started_at) return "";
  const end = t.finished_at ? Date.parse(t.finished_at) : Date.now();
  return `${((end - Date.parse(t.started_at)) / 1000).toFixed(2)}s`;
}

// ---- the list page ----------------------------------------------------------------
const list = { cursor: null, next: null, types: {} };

async function refreshList() {
  const counts = await api("tasks/counts");
  $("#counts").replaceChildren(...STATES.map((s) =>
    el("li", { class: `state-${s}` }, `${s} `, el("b", { text: String(counts[s] || 0) }))));
  const params = new URLSearchParams({ limit: "20" });
  const state = $("#state-filter").value;
  if (state) params.set("state", state);
  for (const [field, input] of [["task", "#task-filter"], ["queue", "#queue-filter"]]) {
    const value = $(input).value.trim();
    if (value) params.set(field, value);
  }
  if (list.cursor) params.set("cursor", list.cursor);
  const page = await api(`tasks?${params}`);
  list.next = page.next_cursor;
  $("#next-page").disabled = !page.next_cursor;
  $("#tasks tbody").replaceChildren(...page.items.map((t) => el("tr", {},
    // the id whole, on a line of its own under the name (users copy it)
    el("td", {}, el("a", { href: `ui/tasks/${t.id}`, text: t.task }), el("br"),
      el("code", { class: "task-id", text: t.id })),
    el("td", { class: `state state-${t.state}`, text: t.state }),
    el("td", { text: t.queue }),
    el("td", { class: "num", text: String(t.priority) }),
    el("td", { class: "num", text: `${t.attempt}/${t.max_attempts}` }),
    el("td", { class: "num", text: ago(t.created_at) }),
    el("td", { class: "num", text: duration(t) }))));
}

function fieldFor(name, schema, required) {
  const types = [].concat(schema.type || "string");
  const id = `f-${name}`;
  const wrap = el("div", { "data-field": name });
  wrap.append(el("label", { for: id, text: name + (required ? "" : " (optional)") }));
  let input;
  if (name === "text") {
    input = el("textarea", { id, name });
  } else if (types.includes("integer") || types.includes("number")) {
    input = el("input", { id, name, type: "number", step: types.includes("integer") ? "1" : "any" });
  } else if (types.includes("boolean")) {
    input = el("input", { id, name, type: "checkbox" });
  } else {
    input = el("input", { id, name, type: "text" });
  }
  if (schema.default !== undefined && schema.default !== null) {
    if (input.type === "checkbox") input.checked = !!schema.default; else input.value = schema.default;
  }
  input.dataset.kind = types.includes("integer") ? "integer" : types.includes("number") ? "number"
    : types.includes("boolean") ? "boolean" : types.includes("string") ? "string" : "json";
  wrap.append(input);
  if (name === "text") {
    const fid = "f-file";
    wrap.append(el("label", { for: fid, text: "…or upload a text file" }),
      el("input", { id: fid, type: "file", accept: ".txt,text/plain" }));
  }
  wrap.append(el("p", { class: "field-error", id: `${id}-error`, role: "alert" }));
  return wrap;
}

function renderFields() {
  const type = list.types[$("#task-type").value];
  const props = (type && type.schema.properties) || {};
  const required = (type && type.schema.required) || [];
  $("#fields").replaceChildren(...Object.entries(props).map(([n, s]) =>
    fieldFor(n, s, required.includes(n))));
  const file = $("#f-file");
  if (file) file.addEventListener("change", async () => {
    if (file.files[0]) $("#f-text").value = await file.files[0].text();
  });
}

function collectPayload() {
  const payload = {};
  for (const input of $("#fields").querySelectorAll("input[name], textarea[name]")) {
    const kind = input.dataset.kind;
    if (kind === "boolean") { payload[input.name] = input.checked; continue; }
    if (input.value === "") continue;
    if (kind === "integer" || kind === "number") payload[input.name] = Number(input.value);
    else if (kind === "json") { try { payload[input.name] = JSON.parse(input.value); } catch { payload[input.name] = input.value; } }
    else payload[input.name] = input.value;
  }
  return payload;
}

function showFormError(err) {
  for (const p of document.querySelectorAll(".field-error")) p.textContent = "";
  $("#form-error").textContent = "";
  const message = err.message || String(err);
  const named = Object.keys(collectPayload()).concat(
    [...$("#fields").querySelectorAll("[data-field]")].map((d) => d.dataset.field));
  const field = named.find((n) => message.includes(`'${n}'`));
  const target = field && $(`#f-${field}-error`);
  if (target) target.textContent = message; else $("#form-error").textContent = message;
}

async function submitTask(ev) {
  ev.preventDefault();
  const task = $("#task-type").value;
  const body = JSON.stringify({ task, payload: collectPayload() });
  const bound = document.querySelector("input[name=mode]:checked").value === "bound";
  $("#submit-button").disabled = true;
  try {
    if (bound) {
      sessionStorage.setItem("tasklab:bound", body);
      location.href = "ui/tasks/new?bound=1";
      return;
    }
    const snap = await api("tasks", { method: "POST", body,
      headers: { "content-type": "application/json" } });
    location.href = `ui/tasks/${snap.id}`;
  } catch (err) {
    showFormError(err);
  } finally {
    $("#submit-button").disabled = false;
  }
}

async function startList() {
  $("#app").hidden = false;
  const types = await api("task-types");
  list.types = Object.fromEntries(types.items.map((t) => [t.name, t]));
  $("#task-type").replaceChildren(...types.items.map((t) => el("option", { value: t.name, text: t.name })));
  $("#task-type").value = "wordfreq";
  renderFields();
  $("#task-type").addEventListener("change", renderFields);
  $("#submit-form").addEventListener("submit", submitTask);
  $("#state-filter").addEventListener("change", () => { list.cursor = null; refreshList(); });
  $("#first-page").addEventListener("click", () => { list.cursor = null; refreshList(); });
  $("#next-page").addEventListener("click", () => { list.cursor = list.next; refreshList(); });
  if (typeof enhanceList === "function") enhanceList();
  await refreshList();
  setInterval(() => refreshList().catch(() => {}), 1000);
}

// ---- the task page ----------------------------------------------------------------
const view = { id: null, seq: 0, text: "", progress: null, attempts: [], source: null, ended: false, terminalShown: false };

function storageKey() { return `tasklab:task:${view.id}`; }

function save() {
  sessionStorage.setItem(storageKey(), JSON.stringify(
    { seq: view.seq, text: view.text, progress: view.progress, attempts: view.attempts }));
}

function restore() {
  const saved = JSON.parse(sessionStorage.getItem(storageKey()) || "null");
  if (saved) Object.assign(view, saved);
  $("#output").textContent = view.text;
  renderProgress();
  renderAttempts();
}

function renderProgress() {
  const p = view.progress;
  $("#progress-wrap").hidden = !p;
  if (!p) return;
  $("#progress").max = p.total || 1;
  $("#progress").value = p.done;
  $("#progress-text").textContent = `${p.done.toLocaleString()} of ${p.total.toLocaleString()} bytes`;
}

function renderAttempts() {
  $("#attempts").replaceChildren(...view.attempts.map((a) => el("li", { text:
    a.kind === "waiting" ? `waiting for ${a.data.kind}${a.data.signal ? ` “${a.data.signal}”` : ""} ${a.at ? new Date(a.at).toLocaleTimeString() : ""}`
    : a.kind === "resumed" ? `resumed after the ${a.data.after} ${a.at ? new Date(a.at).toLocaleTimeString() : ""}`
    : `attempt ${a.attempt} began ${a.at ? new Date(a.at).toLocaleTimeString() : ""}` })));
}

function apply(event) {
  if (event.seq <= view.seq) return; // never show anything twice
  view.seq = event.seq;
  if (event.type === "chunk") {
    view.text += event.data.text;
    $("#output").textContent = view.text;
  } else if (event.type === "progress" && event.data && "done" in event.data) {
    view.progress = { done: event.data.done, total: event.data.total };
    renderProgress();
  } else if (event.type === "attempt") {
    view.attempts.push({ attempt: event.data.attempt, at: event.at });
    renderAttempts();
  } else if (event.type === "waiting" || event.type === "resumed") {
    view.attempts.push({ attempt: event.data.attempt, at: event.at, kind: event.type, data: event.data });
    renderAttempts();
  }
  save();
}

const TERMINAL = ["succeeded", "failed", "cancelled"];

function renderSnapshot(t) {
  // Snapshots arrive by two paths (the stream's end, a cancel's answer) in either
  // order; a terminal state once shown is never replaced by an older live one.
  if (view.terminalShown && !TERMINAL.includes(t.state)) return;
  view.terminalShown = TERMINAL.includes(t.state);
  $("#state").textContent = t.state;
  $("#state").className = `state state-${t.state}`;
  $("#attempt").textContent = `attempt ${t.attempt} of ${t.max_attempts}`;
  $("#task-title").textContent = `${t.task} · ${t.id}`;
  document.title = `${t.task} ${t.state} · tasklab`;
  $("#meta").replaceChildren(...["id", "task", "queue", "priority", "run_after", "created_at",
    "started_at", "finished_at", "cancel_reason", "idempotency_key", "concurrency_key",
    "unique_key"].flatMap((k) =>
    [el("dt", { text: k }), el("dd", { text: t[k] == null ? "—" : String(t[k]) })]));
  if (t.state === "cancel_requested") $("#fact-accepted").classList.add("done");
  if (view.terminalShown) {
    $("#fact-stopped").classList.add("done");
    $("#cancel").disabled = true;
  }
}

function renderVerdict(t) {
  const v = $("#verdict");
  if (t.state === "succeeded") {
    v.replaceChildren(el("p", { class: "notice ok" }, "Succeeded. ",
      el("a", { href: `tasks/${t.id}`, text: "The saved result" }), " is stored and can be read again."));
  } else if (t.state === "cancelled") {
    v.replaceChildren(el("p", { class: "notice" },
      `Cancelled (${t.cancel_reason}). Effects already made outside tasklab are not undone; partial output is kept.`));
  } else if (t.state === "failed" && t.error && t.error.code === "outcome_unknown") {
    v.replaceChildren(el("p", { class: "notice bad" },
      "The result is unknown and must be checked: the executor stopped before recording an outcome, so external side effects may or may not have happened."));
  } else if (t.state === "failed") {
    v.replaceChildren(el("p", { class: "notice bad" }, `Failed (${t.error.code}): ${t.error.message}`));
  }
  if (t.state === "succeeded" && t.result && Array.isArray(t.result.top)) renderTopWords(t.result);
  else if (t.state === "succeeded") $("#result").replaceChildren(el("pre", { class: "output", text: JSON.stringify(t.result, null, 2) }));
}

function renderTopWords(result) {
  const max = Math.max(1, ...result.top.map(([, c]) => c));
  const table = el("table", { id: "top-words" },
    el("caption", { class: "muted", text: result.total_words === undefined ? "" : `${result.total_words} words, ${result.distinct_words} distinct` }),
    el("thead", {}, el("tr", {}, el("th", { text: "word" }), el("th", { class: "num", text: "count" }))),
    el("tbody", {}, ...result.top.map(([w, c]) => el("tr", {}, el("td", { text: w }), el("td", { class: "num", text: String(c) })))));
  const chart = el("div", { class: "bars", role: "img", "aria-label": "Top words bar chart" },
    ...result.top.flatMap(([w, c]) => [el("span", { text: w }),
      el("div", { class: "bar", style: `width:${(100 * c / max).toFixed(1)}%` }), el("span", { class: "muted", text: String(c) })]));
  $("#result").replaceChildren(el("h2", { text: "Top words" }), table, el("h2", { text: "Chart" }), chart);
}

function finish(snapshot) {
  view.ended = true;
  if (view.source) { view.source.close(); view.source = null; }
  renderSnapshot(snapshot);
  renderVerdict(snapshot);
  if (view.id) refreshDurable().catch(() => {});
}

function follow() {
  // A fresh page resumes after what it last showed (?after=); reconnects inside the
  // page send Last-Event-ID by themselves.
  const source = new EventSource(`tasks/${view.id}/events?after=${view.seq}`, { withCredentials: true });
  view.source = source;
  for (const type of ["attempt", "chunk", "progress", "waiting", "resumed"]) {
    source.addEventListener(type, (msg) => apply(JSON.parse(msg.data)));
  }
  source.addEventListener("end", (msg) => finish(JSON.parse(msg.data)));
}

async function cancelTask() {
  $("#cancel").disabled = true;
  const out = await api(`tasks/${view.id}/cancel`, { method: "POST" });
  if (out.request_accepted) $("#fact-accepted").classList.add("done");
  else $("#fact-accepted").textContent = "cancel request not accepted (the task had already ended)";
  renderSnapshot(out.task);
}

async function runBound() {
  // EventSource cannot POST: a request-bound task is a fetch with a streamed body.
  const body = sessionStorage.getItem("tasklab:bound");
  sessionStorage.removeItem("tasklab:bound");
  const resp = await fetch("tasks/stream", { method: "POST", body, credentials: "same-origin",
    headers: { "content-type": "application/json" } });
  if (!resp.ok) { $("#verdict").textContent = (await resp.json()).error.message; return; }
  view.id = resp.headers.get("Tasklab-Task-Id");
  history.replaceState(null, "", `ui/tasks/${view.id}`);
  renderSnapshot(await api(`tasks/${view.id}`));
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
      let type = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) type = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trim();
      }
      if (!data) continue;
      if (type === "end") finish(JSON.parse(data)); else apply(JSON.parse(data));
    }
  }
}

// ---- durable functions on the task page --------------------------------------------
async function refreshDurable() {
  const [doc, snap] = await Promise.all([api(`tasks/${view.id}/journal`), api(`tasks/${view.id}`)]);
  const wait = snap.wait;
  $("#wait-now").hidden = !wait;
  if (wait) {
    const what = wait.kind === "signal" ? `the signal “${wait.signal}”`
      : wait.kind === "join" ? `${wait.children.length} child task(s) to end` : "its time";
    $("#wait-now").textContent = `Waiting for ${what}${wait.until ? ` (until ${new Date(wait.until).toLocaleString()})` : ""} — it holds no worker meanwhile.`;
  }
  $("#journal tbody").replaceChildren(...doc.journal.map((e) => el("tr", { "data-kind": e.kind },
    el("td", { text: e.kind }), el("td", { text: e.name }), el("td", { text: e.status }),
    el("td", { class: "muted", text: e.result == null ? "—" : JSON.stringify(e.result) }),
    el("td", { class: "num", text: String(e.attempt) }))));
  $("#signals").replaceChildren(...doc.signals.map((s) =>
    el("li", { "data-signal": s.name, text: `${s.name}: ${JSON.stringify(s.data)} (${new Date(s.at).toLocaleTimeString()})` })));
  $("#parent").replaceChildren(...(snap.parent_id
    ? ["Spawned by ", el("a", { href: `ui/tasks/${snap.parent_id}`, text: snap.parent_id })]
    : ["No parent."]));
  if (typeof renderTimeline === "function") renderTimeline(doc.attempts);
  $("#children").replaceChildren(...doc.children.map((c) => el("li", { "data-child": c.id },
    el("a", { href: `ui/tasks/${c.id}`, text: `${c.task} ${c.id}` }), " ",
    el("span", { class: `state state-${c.state}`, text: c.state }))));
}

async function sendSignal(ev) {
  ev.preventDefault();
  $("#signal-error").textContent = "";
  const name = $("#signal-name").value.trim();
  const raw = $("#signal-data").value.trim();
  try {
    let data = null;
    if (raw) { try { data = JSON.parse(raw); } catch { throw new Error("the data is not JSON"); } }
    if (!name) throw new Error("name the signal");
    await api(`tasks/${view.id}/signals/${encodeURIComponent(name)}`, { method: "POST",
      body: JSON.stringify({ data }), headers: { "content-type": "application/json" } });
    await refreshDurable();
  } catch (err) {
    $("#signal-error").textContent = err.message || String(err);
  }
}

async function startTask() {
  $("#app").hidden = false;
  const id = location.pathname.split("/").pop();
  $("#cancel").addEventListener("click", cancelTask);
  if (id === "new" && sessionStorage.getItem("tasklab:bound")) return runBound();
  view.id = id;
  restore();
  let snap;
  try {
    snap = await api(`tasks/${id}`);
  } catch (err) {
    if (err.status !== 404) throw err;
    $("#state").textContent = "not found";
    $("#cancel").disabled = true;
    $("#verdict").replaceChildren(el("p", { class: "notice bad" },
      `No task ${id} here: the id is wrong, or the task ended long ago and was pruned (tasklab prune, --retain).`));
    return;
  }
  renderSnapshot(snap);
  follow();
  $("#signal-form").addEventListener("submit", sendSignal);
  if (typeof enhanceTask === "function") enhanceTask(snap);
  await refreshDurable();
  setInterval(async () => {
    if (!view.ended) renderSnapshot(await api(`tasks/${view.id}`).catch(() => snap));
    refreshDurable().catch(() => {});
  }, 1000);
}

// ---- the queues page --------------------------------------------------------------
function limitText(v) { return v == null ? "—" : String(v); }

async function refreshQueues() {
  const queues = await api("queues");
  $("#queues tbody").replaceChildren(...queues.items.map((q) => {
    const toggle = el("button", { type: "button", class: "secondary",
      "data-queue": q.name, text: q.paused ? "Resume" : "Pause" });
    toggle.addEventListener("click", async () => {
      toggle.disabled = true;
      await api(`queues/${encodeURIComponent(q.name)}/${q.paused ? "resume" : "pause"}`, { method: "POST" });
      await refreshQueues();
    });
    return el("tr", { "data-queue": q.name },
      el("td", { text: q.name }),
      el("td", { class: "num", text: q.queued.toLocaleString() }),
      el("td", { class: "num", text: q.running.toLocaleString() }),
      el("td", { class: "num", text: limitText(q.concurrency) }),
      el("td", { text: limitText(q.rate) }),
      el("td", { class: "num", text: q.claimed.toLocaleString() }),
      el("td", { class: q.paused ? "state state-cancelled" : "state", text: q.paused ? "paused" : "open" }),
      el("td", {}, toggle));
  }));
}

async function setLimits(ev) {
  ev.preventDefault();
  $("#limits-error").textContent = "";
  const name = $("#limit-queue").value.trim();
  const body = {};
  const conc = $("#limit-concurrency").value.trim();
  const rate = $("#limit-rate").value.trim();
  if (conc) body.concurrency = conc.toLowerCase() === "none" ? null : Number(conc);
  if (rate) body.rate = rate.toLowerCase() === "none" ? null : rate;
  try {
    if (!name) throw new Error("name a queue");
    await api(`queues/${encodeURIComponent(name)}`, { method: "PUT", body: JSON.stringify(body),
      headers: { "content-type": "application/json" } });
    await refreshQueues();
  } catch (err) {
    $("#limits-error").textContent = err.message || String(err);
  }
}

async function startQueues() {
  $("#app").hidden = false;
  $("#limits-form").addEventListener("submit", setLimits);
  await refreshQueues();
  if (typeof enhanceQueues === "function") enhanceQueues();
  setInterval(() => refreshQueues().catch(() => {}), 1000);
}

// console.js (loaded after this file) adds its pages here; both are in by DOMContentLoaded
const PAGES = { task: startTask, queues: startQueues, list: startList };
document.addEventListener("DOMContentLoaded", () => {
  const start = PAGES[document.body.dataset.page] || startList;
  setupLogin(start);
  start().catch((err) => { if (err.message !== "unauthorized") console.error(err); });
});
