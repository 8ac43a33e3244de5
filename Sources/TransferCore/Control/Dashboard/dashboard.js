// The dashboard: a snapshot from GET /v1/summary and /v1/jobs, then live from
// the event stream (EventSource). The token is asked for once and kept in this
// tab only (sessionStorage), never in a cookie or on disk.
"use strict";

const state = { token: sessionStorage.getItem("transferd-token"), running: new Map(), waiting: new Map(), held: new Map(),
  failed: new Map(), queuePaused: false, source: null, ended: false };
const $ = (id) => document.getElementById(id);

function formatBytes(n) {
  if (n == null) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}
const formatRate = (n) => (n ? formatBytes(n) + "/s" : "–");
function formatSeconds(s) {
  if (s == null) return "–";
  s = Math.round(s);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

// A job's name as a person knows it: its file's name, else the last part of its URL.
const jobName = (job) => ((job.destination || job.url || job.id).replace(/\/+$/, "").split("/").pop() || job.id);

async function api(method, path, payload, type) {
  const headers = { Authorization: "Bearer " + state.token };
  if (payload != null) headers["Content-Type"] = type;
  const response = await fetch(path, { method, headers, body: payload });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) { logout(body.error || "the token was refused"); throw new Error("unauthorized"); }
  if (!response.ok) {
    const error = new Error(body.error || response.statusText);
    error.body = body;
    throw error;
  }
  return body;
}

function logout(reason) {
  sessionStorage.removeItem("transferd-token");
  state.token = null;
  if (state.source) state.source.close();
  $("board").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = reason || "";
}

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function button(label, action) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.dataset.action = label.toLowerCase();
  b.addEventListener("click", async () => {
    b.disabled = true;
    try { await action(); $("message").textContent = ""; }
    catch (error) { $("message").textContent = error.message; b.disabled = false; }
  });
  return b;
}

// Rows are kept by job id and changed in place, never rebuilt: a progress
// event several times a second must not replace the button under the pointer
// between press and release (the click would be lost).
function reconcile(table, jobs, build, update) {
  const body = $(table).tBodies[0];
  const kept = new Map(Array.from(body.rows, (row) => [row.dataset.id, row]));
  let next = body.firstElementChild;
  for (const job of jobs) {
    let row = kept.get(job.id);
    kept.delete(job.id);
    if (!row) {
      row = document.createElement("tr");
      row.dataset.id = job.id;
      build(row, job);
    }
    update(row, job);
    if (row === next) next = row.nextElementSibling;
    else body.insertBefore(row, next);
  }
  for (const row of kept.values()) row.remove();
}

function renderRunning() {
  reconcile("running", state.running.values(), (row, job) => {
    cell(row, "", "name");
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.append(document.createElement("div"), document.createElement("span"));
    row.insertCell().append(bar);
    cell(row, "", "speed");
    cell(row, "", "eta");
    const actions = row.insertCell();
    actions.className = "actions";
    actions.append(button("Pause", () => api("POST", "/v1/jobs/" + encodeURIComponent(job.id) + "/pause")),
      button("Cancel", () => api("POST", "/v1/jobs/" + encodeURIComponent(job.id) + "/cancel")));
  }, (row, job) => {
    const name = row.querySelector(".name");
    name.textContent = job.name || job.id;
    name.title = job.url || "";
    const fraction = job.bytes_total ? Math.min(1, job.bytes_done / job.bytes_total) : null;
    row.querySelector(".bar div").style.width = fraction == null ? "0" : (fraction * 100).toFixed(1) + "%";
    row.querySelector(".bar span").textContent = formatBytes(job.bytes_done) + (job.bytes_total ? " of " + formatBytes(job.bytes_total) : "");
    row.querySelector(".speed").textContent = formatRate(job.speed);
    row.querySelector(".eta").textContent = formatSeconds(job.eta);
  });
  $("running-empty").hidden = state.running.size > 0;
}

function renderHeld() {
  reconcile("held", state.held.values(), (row, job) => {
    cell(row, "", "name");
    cell(row, "", "kept");
    row.insertCell().append(button("Resume", async () => {
      await api("POST", "/v1/jobs/" + encodeURIComponent(job.id) + "/resume");
      state.held.delete(job.id);
      renderHeld();
      countsSoon();
    }));
  }, (row, job) => {
    const name = row.querySelector(".name");
    name.textContent = job.name || job.id;
    name.title = job.url || "";
    row.querySelector(".kept").textContent = formatBytes(job.bytes_done) + (job.bytes_total ? " of " + formatBytes(job.bytes_total) : "");
  });
  $("held-empty").hidden = state.held.size > 0;
}

function renderQueuePaused(paused) {
  if (paused == null) return;
  state.queuePaused = paused;
  const toggle = $("queue-toggle");
  toggle.hidden = false;
  toggle.disabled = false;
  toggle.textContent = paused ? "Resume queue" : "Pause queue";
  toggle.setAttribute("aria-pressed", paused ? "true" : "false");
}

function renderWaiting() {
  reconcile("waiting", state.waiting.values(), (row, job) => {
    cell(row, "", "name");
    cell(row, "", "reason");
    cell(row, "", "next");
  }, (row, job) => {
    const name = row.querySelector(".name");
    name.textContent = job.name || job.id;
    name.title = job.url || "";
    row.querySelector(".reason").textContent = job.reason || "";
    const left = job.at == null ? null : Math.max(0, (job.at - Date.now()) / 1000);
    row.querySelector(".next").textContent = left == null ? "–" : left < 1 ? "now" : "in " + formatSeconds(left);
  });
  $("waiting-empty").hidden = state.waiting.size > 0;
}

function renderFailed() {
  reconcile("failed", state.failed.values(), (row, job) => {
    cell(row, "", "name");
    cell(row, "", "reason");
    row.insertCell().append(button("Retry", async () => {
      await api("POST", "/v1/jobs/" + encodeURIComponent(job.id) + "/retry");
      state.failed.delete(job.id);
      renderFailed();
    }));
  }, (row, job) => {
    const name = row.querySelector(".name");
    name.textContent = job.name || job.id;
    name.title = (job.url || "") + " (" + job.id + ")";
    row.querySelector(".reason").textContent = job.error || "";
  });
  $("failed-empty").hidden = state.failed.size > 0;
}

function renderTotals(jobs, run) {
  if (jobs) for (const name of ["done", "running", "queued", "waiting", "held", "failed", "cancelled"]) $("t-" + name).textContent = jobs[name];
  if (run) {
    $("t-speed").textContent = formatRate(run.speed);
    $("t-eta").textContent = formatSeconds(run.eta);
  }
}

async function allJobs(stateName) {
  const jobs = [];
  let cursor = "";
  do {
    const page = await api("GET", "/v1/jobs?state=" + stateName + "&limit=1000" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
    jobs.push(...page.jobs);
    cursor = page.next;
  } while (cursor && jobs.length < 5000);
  return jobs;
}

async function loadSnapshot() {
  const [summary, running, waiting, held, failed, limit] = await Promise.all([api("GET", "/v1/summary"), allJobs("running"),
    allJobs("waiting"), allJobs("held"), allJobs("failed"), api("GET", "/v1/limit")]);
  state.running = new Map(running.map((job) => [job.id, { id: job.id, name: jobName(job), url: job.url,
    bytes_done: job.bytes_done, bytes_total: job.bytes_total, speed: job.speed, eta: null }]));
  state.waiting = new Map(waiting.map((job) => [job.id, { id: job.id, name: jobName(job), url: job.url, reason: job.last_error,
    at: job.next_attempt_at ? Date.parse(job.next_attempt_at) : null }]));
  state.held = new Map(held.map((job) => [job.id, { id: job.id, name: jobName(job), url: job.url,
    bytes_done: job.bytes_done, bytes_total: job.bytes_total }]));
  state.failed = new Map(failed.map((job) => [job.id, { id: job.id, name: jobName(job), url: job.url, error: job.last_error }]));
  renderTotals(summary.jobs, summary.run);
  renderQueuePaused(summary.queue_paused);
  renderLimit(limit);
  renderRunning();
  renderWaiting();
  renderHeld();
  renderFailed();
  return summary.event_id;
}

async function refreshCounts() {
  if (state.ended) return;  // nothing serves the API once the run is over
  try {
    const summary = await api("GET", "/v1/summary");
    renderTotals(summary.jobs, null);
    renderQueuePaused(summary.queue_paused);
  } catch (_) { /* the next event tries again */ }
}

let countsPending = false;
function countsSoon() {
  if (countsPending) return;
  countsPending = true;
  setTimeout(() => { countsPending = false; refreshCounts(); }, 500);
}

function handle(event) {
  switch (event.event) {
    case "started":
      state.running.set(event.id, { id: event.id, name: event.name, url: event.url, bytes_done: event.bytes_done,
        bytes_total: event.bytes_total, speed: 0, eta: null });
      state.failed.delete(event.id);
      state.waiting.delete(event.id);
      state.held.delete(event.id);
      renderRunning();
      renderWaiting();
      renderHeld();
      renderFailed();
      countsSoon();
      break;
    case "progress":
      for (const update of event.jobs) {
        const job = state.running.get(update.id);
        if (job) Object.assign(job, update);
      }
      renderRunning();
      renderTotals(null, event.totals);
      break;
    case "finished":
      state.running.delete(event.id);
      state.waiting.delete(event.id);
      if (event.state === "failed") state.failed.set(event.id, { id: event.id, name: jobName(event), url: event.url, error: event.error });
      renderRunning();
      renderWaiting();
      renderFailed();
      countsSoon();
      break;
    case "held":
      for (const id of event.ids) {
        const job = state.running.get(id);
        state.held.set(id, job || { id, name: id, bytes_done: 0, bytes_total: null });
        state.running.delete(id);
      }
      renderRunning();
      renderHeld();
      countsSoon();
      break;
    case "retrying": {
      const job = state.running.get(event.id) || state.waiting.get(event.id) || { id: event.id, name: event.id };
      state.running.delete(event.id);
      state.waiting.set(event.id, { id: event.id, name: job.name, url: job.url, reason: event.reason,
        at: Date.now() + (event.delay || 0) * 1000 });
      renderRunning();
      renderWaiting();
      countsSoon();
      break;
    }
    case "summary":
      showEnded(event);
      break;
    case "paused":
      for (const id of event.ids || [event.id]) state.running.delete(id);
      renderRunning();
      countsSoon();
      break;
    case "ingested":
      countsSoon();
      break;
  }
}

// The run is over: the page says how it ended and stops reconnecting (nothing serves the stream now).
function showEnded(summary) {
  state.ended = true;
  if (state.source) state.source.close();
  const parts = [summary.done + " done", summary.failed + " failed", summary.cancelled + " cancelled"];
  if (summary.held_in_queue) parts.push(summary.held_in_queue + " held");
  const how = summary.interrupted ? "The run was stopped (Ctrl-C or a signal); the next run goes on from here"
    : summary.queue_paused ? "The run ended with the queue paused" : "The run has ended";
  const ended = $("ended");
  ended.textContent = how + ": " + parts.join(", ") + ", " + formatBytes(summary.bytes) + " moved. Start a run to see it here.";
  ended.hidden = false;
  $("connection").textContent = "ended";
  $("connection").className = "badge";
  for (const control of document.querySelectorAll("main button, #queue-toggle, #limit, #add-text")) control.disabled = true;
  // Nothing runs now; the queue's other counts are as last read.
  $("t-running").textContent = "0";
  state.waiting.clear();
  renderWaiting();
  renderTotals(null, { speed: 0, eta: null });
  state.running.clear();
  renderRunning();
}

function renderLimit(limit) {
  if (!limit) return;
  $("limit-now").textContent = limit.rate_limit == null ? "none set (each run keeps its own --limit-rate)"
    : "now: " + limit.now + (limit.timetable ? " (timetable " + limit.rate_limit + ")" : "");
  if (document.activeElement !== $("limit")) $("limit").value = limit.rate_limit || "";
}

// Follows the stream from the snapshot's event (nothing between the two is missed).
function connect(after) {
  if (state.source) state.source.close();
  const source = new EventSource("/v1/events?token=" + encodeURIComponent(state.token) +
    (after ? "&last_event_id=" + encodeURIComponent(after) : ""));
  state.source = source;
  source.onopen = () => { $("connection").textContent = "live"; $("connection").className = "badge live"; };
  source.onerror = () => {
    if (state.ended) return;
    $("connection").textContent = "reconnecting";
    $("connection").className = "badge down";
  };
  source.onmessage = (message) => handle(JSON.parse(message.data));
  // Events were missed: start again from a fresh snapshot.
  source.addEventListener("reset", () => loadSnapshot().catch((error) => { $("message").textContent = error.message; }));
}

async function start() {
  $("login").hidden = true;
  $("login-error").textContent = "";
  $("board").hidden = false;
  try {
    connect(await loadSnapshot());
  } catch (error) {
    if (error.message !== "unauthorized") $("message").textContent = error.message;
  }
}

$("queue-toggle").addEventListener("click", async () => {
  const toggle = $("queue-toggle");
  toggle.disabled = true;
  try {
    const answer = await api("POST", state.queuePaused ? "/v1/resume" : "/v1/pause");
    renderQueuePaused(answer.queue_paused);
    $("message").textContent = "";
    if (!answer.queue_paused) loadSnapshot().catch(() => {});
    countsSoon();
  } catch (error) {
    $("message").textContent = error.message;
    toggle.disabled = false;
  }
});

$("limit-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = $("limit").value.trim();
  const submit = $("limit-form").querySelector("button");
  submit.disabled = true;
  try {
    // An empty box drops the rate alone: jobs at once and per-host limits set elsewhere stay.
    renderLimit(await api("POST", "/v1/limit?rate=" + encodeURIComponent(text || "default")));
    $("message").textContent = "";
  } catch (error) {
    $("message").textContent = error.message;
  } finally {
    submit.disabled = state.ended;
  }
});

// Jobs added from the page: a job file's JSON, or a URL list (one per line), checked as
// `transferd validate` checks a file; a mistake shows the same lines (with line and column).
$("add-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = $("add-text").value;
  if (!text.trim()) return;
  const submit = $("add-form").querySelector("button");
  submit.disabled = true;
  $("add-errors").hidden = true;
  try {
    const json = text.trim().startsWith("{");
    const answer = await api("POST", "/v1/jobs", text, json ? "application/json" : "text/plain");
    $("add-result").textContent = answer.added + " job" + (answer.added === 1 ? "" : "s") + " added" +
      (answer.already_known ? ", " + answer.already_known + " already known" : "");
    $("add-text").value = "";
    countsSoon();
  } catch (error) {
    $("add-result").textContent = error.message;
    if (error.body && error.body.text) {
      $("add-errors").textContent = error.body.text;
      $("add-errors").hidden = false;
    }
  } finally {
    submit.disabled = state.ended;
  }
});

// Countdowns of the jobs waiting to retry.
setInterval(() => { if (state.waiting.size > 0) renderWaiting(); }, 1000);

$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  state.token = $("token").value.trim();
  sessionStorage.setItem("transferd-token", state.token);
  $("token").value = "";
  start();
});

if (state.token) start(); else logout();
