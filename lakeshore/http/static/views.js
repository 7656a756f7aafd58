// The dashboard's views: each one reads the API and answers a function that renders it.

import {
  age,
  badge,
  clock,
  duration,
  enc,
  get,
  h,
  kv,
  linePlot,
  namespace,
  nsPath,
  render,
  table,
} from "./lib.js";
import { jobView, jobsView } from "./jobs.js";

// Client-side samples of each queue's stats, plotted when the history route is missing.
const SAMPLES = new Map();
const MAX_SAMPLES = 400;
const QUEUE_STATES = ["active", "draining", "archived", "paused"];
// Stats are one request per queue: past this many rows the table shows the rows only.
const MAX_STATS = 200;
let historyMissing = false;

async function queuesView(el, params) {
  const [{ queues }, { namespaces }] = await Promise.all([
    get(`${nsPath()}/queues`),
    get("/v1/namespaces"),
  ]);
  const state = params.get("state") || "";
  const ns = params.get("ns") || "";
  const shown = queues.filter((q) => (!state || q.state === state) && (!ns || q.namespace === ns));
  const stats = await Promise.all(
    shown.slice(0, MAX_STATS).map((q) =>
      get(`${nsPath(q.namespace)}/queues/${enc(q.name)}/stats`).catch(() => null),
    ),
  );
  const rows = shown.map((q, i) => {
    const s = stats[i] || {};
    const e = q.elasticity;
    const elastic = `${h(e.kind)} ${e.min}–${e.max}${e.pool ? ` pool ${h(e.pool)}` : ""}`;
    const link = `#/queue/${enc(q.namespace)}/${enc(q.name)}`;
    return `<tr data-queue="${h(q.namespace)}/${h(q.name)}">
      <td>${h(q.namespace)}</td><td><a href="${link}">${h(q.name)}</a></td><td>${h(q.kind)}</td>
      <td data-col="state">${badge(q.state)}</td><td>${elastic}</td>
      <td class="num" data-col="pending">${s.pending ?? "–"}</td>
      <td class="num" data-col="running">${s.running ?? "–"}</td>
      <td class="num" data-col="daemons">${s.daemon_count ?? "–"}</td>
      <td class="num">${duration(s.oldest_pending_age_s)}</td>
      <td class="num">${s.utilization === undefined ? "–" : `${Math.round(s.utilization * 100)}%`}</td>
    </tr>`;
  });
  const opts = (values, chosen, all) =>
    [`<option value="">${all}</option>`]
      .concat(values.map((v) => `<option ${v === chosen ? "selected" : ""}>${h(v)}</option>`))
      .join("");
  return () =>
    render(
      el,
      `<h1>Queues</h1>
      <div class="filters">
        <label>state <select data-filter="state">${opts(QUEUE_STATES, state, "any")}</select></label>
        <label>namespace <select data-filter="ns">${opts(namespaces.map((n) => n.name), ns, "all")}</select></label>
        <span class="muted">${shown.length} of ${queues.length} queues in the org</span>
      </div>
      ${table(
        ["namespace", "name", "kind", "state", "elasticity", "#pending", "#running", "#daemons",
          "#oldest pending", "#utilization"],
        rows,
        "no queues match",
      )}`,
    );
}

function sample(key, stats) {
  const list = SAMPLES.get(key) || [];
  list.push([Date.now(), stats.pending, stats.running]);
  if (list.length > MAX_SAMPLES) list.shift();
  SAMPLES.set(key, list);
  return list;
}

async function history(ns, name) {
  if (historyMissing) return null;
  try {
    return await get(`${nsPath(ns)}/queues/${enc(name)}/history?since=1h&every=1m`);
  } catch (e) {
    if (e.status === 404 && e.code !== "queue_not_found") historyMissing = true;
    if (e.status === 404 || e.status === 405) return null;
    throw e;
  }
}

// Pending and running per minute from the history's rows, anchored on the current counts:
// going back in time, each minute undoes how much it moved them (its submits, retries,
// starts, drops and cancels, counted by the server). Pending is the minute's peak: its level
// at the start plus how far it rose within the minute, so a burst that came and went between
// two minutes' ends still shows.
function backlog(points, stats) {
  let pending = stats.pending;
  let running = stats.running;
  const out = [];
  for (let i = points.length - 1; i >= 0; i--) {
    const p = points[i];
    const end = pending;
    pending -= p.pending_change || 0;
    const peak = Math.max(end, pending + (p.pending_rise || 0));
    out.unshift([Date.parse(p.ts), Math.max(0, peak), Math.max(0, running)]);
    running -= p.running_change || 0;
  }
  return out;
}

function diff(detail) {
  if (!detail) return "";
  if (detail.before && detail.after) {
    const keys = new Set([...Object.keys(detail.before), ...Object.keys(detail.after)]);
    const changed = [...keys].filter(
      (k) => JSON.stringify(detail.before[k]) !== JSON.stringify(detail.after[k]),
    );
    return changed
      .filter((k) => k !== "updated_at")
      .map(
        (k) =>
          `<div><code>${h(k)}</code>: ${h(JSON.stringify(detail.before[k]))} → ${h(
            JSON.stringify(detail.after[k]),
          )}</div>`,
      )
      .join("");
  }
  const entries = (obj) =>
    Object.entries(obj)
      .filter(([, v]) => v !== null && v !== "" && JSON.stringify(v) !== "{}")
      .map(([k, v]) => `<div><code>${h(k)}</code>: ${h(typeof v === "string" ? v : JSON.stringify(v))}</div>`)
      .join("");
  // A creation carries only the new row: show its fields, not one long line of JSON.
  if (detail.after && Object.keys(detail).length === 1) return entries(detail.after);
  return entries(detail);
}

async function queueView(el, params, [ns, name]) {
  const base = `${nsPath(ns)}/queues/${enc(name)}`;
  const [q, stats, { events }, controller, hist] = await Promise.all([
    get(base),
    get(`${base}/stats`),
    get(`${base}/events?verbose=true&limit=30`),
    get(`${nsPath(ns)}/controller`).catch(() => null),
    history(ns, name),
  ]);
  const samples = sample(`${ns}/${name}`, stats);
  let plot;
  let throughput = "";
  if (hist && hist.points && hist.points.length) {
    const b = backlog(hist.points, stats);
    plot = linePlot(
      "backlog-plot",
      [
        { name: "pending", points: b.map((p) => [p[0], p[1]]) },
        { name: "running", points: b.map((p) => [p[0], p[2]]) },
      ],
      "last hour, per minute (history; pending at its peak)",
    );
    const per = (k) => hist.points.map((p) => [Date.parse(p.ts), p[k] || 0]);
    throughput = `
      <div class="card"><h2>Throughput per minute</h2>
      ${linePlot("throughput-plot", [
        { name: "submitted", points: per("submitted") },
        { name: "succeeded", points: per("succeeded") },
        { name: "failed", points: per("failed") },
      ], "jobs per minute")}</div>
      <div class="card"><h2>Wait and run time per minute</h2>
      ${linePlot("wait-plot", [
        { name: "wait p50 (s)", points: per("wait_p50_s") },
        { name: "wait p95 (s)", points: per("wait_p95_s") },
        { name: "run p50 (s)", points: per("run_p50_s") },
      ], "seconds")}</div>`;
  } else {
    plot = linePlot(
      "backlog-plot",
      [
        { name: "pending", points: samples.map((p) => [p[0], p[1]]) },
        { name: "running", points: samples.map((p) => [p[0], p[2]]) },
      ],
      "since this page opened (live samples)",
    );
  }
  const members = q.members.map(
    (m) => `<tr data-member="${h(m.name)}"><td>${h(m.name)}</td><td>${badge(m.status)}</td>
      <td>${m.queues.map(h).join(", ") || "default"}</td>
      <td>${m.current ? `<a href="#/job/${enc(m.current)}">${h(m.current)}</a>` : "–"}</td>
      <td>${age(m.last_heartbeat)}</td></tr>`,
  );
  const decisions = events.filter((e) => e.type === "scale.decision" || e.type === "steal_granted");
  const units = (controller?.units || []).filter(
    (u) => (u.scope === "queue" && u.name === name) || (u.pool && u.pool === q.elasticity.pool),
  );
  const unitRows = units.map(
    (u) => `<tr><td>${h(u.scope)} ${h(u.name)}</td><td>${h(u.policy)}</td>
      <td class="num">${u.desired}</td><td class="num">${u.actual}</td>
      <td class="num">${u.launching}</td><td>${h(u.reason)}${u.error ? ` <span class="error">${h(u.error)}</span>` : ""}</td>
      <td>${clock(controller.tick_at)}</td></tr>`,
  );
  const decisionRows = decisions.map(
    (e) => `<tr><td>${clock(e.ts)}</td><td>${h(e.detail?.decision || e.type)}</td>
      <td>${h(e.detail?.reason)}</td><td><pre>${h(JSON.stringify(e.detail?.inputs ?? {}, null, 1))}</pre></td></tr>`,
  );
  const eventRows = events.map(
    (e) => `<tr><td class="nowrap">${clock(e.ts)}</td><td class="nowrap">${h(e.type)}</td>
      <td class="nowrap">${h(e.actor ?? "")}</td>
      <td class="wrap">${diff(e.detail)}</td></tr>`,
  );
  const button = (verb, show) =>
    show ? `<button type="button" data-queue-action="${verb}">${verb}</button>` : "";
  return () =>
    render(
      el,
      `<h1>Queue ${h(ns)}/${h(name)} <span id="queue-state">${badge(q.state)}</span></h1>
      <p class="muted">${h(q.description)}</p>
      <div class="actions" data-ns="${h(ns)}" data-name="${h(name)}">
        ${button("drain", q.state === "active")}
        ${button("archive", q.state !== "archived" && name !== "default")}
        ${button("unarchive", q.state !== "active")}
      </div>
      <div class="grid3">
        <div class="card span2"><h2>Pending and running</h2>${plot}</div>
        <div class="card"><h2>Stats</h2>${kv([
          ["pending", stats.pending], ["running", stats.running], ["depth", stats.depth],
          ["max depth", stats.max_depth ?? "unbounded"], ["daemons", stats.daemon_count],
          ["busy", stats.busy], ["utilization", `${Math.round(stats.utilization * 100)}%`],
          ["oldest pending", duration(stats.oldest_pending_age_s)],
          ["submitted", stats.submitted], ["succeeded", stats.succeeded], ["failed", stats.failed],
          ["waiting submits", stats.waiting_submits],
        ])}</div>
        ${throughput}
        <div class="card"><h2>Elasticity</h2><pre id="elasticity">${h(JSON.stringify(q.elasticity, null, 2))}</pre></div>
      </div>
      <h2>Members</h2>
      ${table(["name", "status", "queues", "current", "last heartbeat"], members, "no daemons pull from this queue")}
      <h2>Controller</h2>
      ${table(["unit", "policy", "#desired", "#actual", "#launching", "reason", "tick"], unitRows, "the controller has no unit for this queue")}
      <h2>Controller decisions</h2>
      ${table(["when", "decision", "reason", "inputs"], decisionRows, "no decisions recorded")}
      <h2>Recent events</h2>
      ${table(["when", "event", "by", "detail"], eventRows, "no events")}`,
    );
}

// "2/8 NVIDIA H100 80GB HBM3": GPUs in use of the daemon's, and their type; each GPU in the
// cell's title (index, name, free or in use).
function gpusCell(w) {
  const r = w.resources;
  if (!r || !r.total.gpus || !r.total.gpus.length) return "–";
  const total = r.total.gpus;
  const free = new Set((r.free.gpus || []).map((g) => g.index));
  const names = [...new Set(total.map((g) => g.name).filter(Boolean))];
  const title = total.map((g) => `${g.index}: ${g.name || "declared"} ${free.has(g.index) ? "free" : "in use"}`);
  return `<span title="${h(title.join("\n"))}">${total.length - free.size}/${total.length}${names.length ? " " + h(names.join("/")) : ""}</span>`;
}

async function daemonsView(el) {
  const { workers } = await get(`${nsPath()}/workers`);
  const rows = workers.map((w) => {
    const chips = (w.queues.length ? w.queues : []).map(
      (q) => `<span class="chip">${h(q)}<button type="button" title="remove ${h(q)}"
        data-remove-queue="${h(q)}" data-worker="${h(w.id)}">×</button></span>`,
    );
    const gone = w.status === "stopped";
    return `<tr data-worker="${h(w.name)}"><td>${h(w.name)}</td><td>${h(w.provider)}</td>
      <td data-col="status">${badge(w.status)}</td>
      <td data-col="queues">${chips.join("") || `<span class="muted">default</span>`}
        ${gone ? "" : `<input id="add-${h(w.id)}" size="10" placeholder="queue" aria-label="add a queue to ${h(w.name)}">
        <button type="button" data-add-queue="${h(w.id)}">add</button>`}</td>
      <td data-col="gpus">${gpusCell(w)}</td>
      <td>${age(w.last_heartbeat)}</td>
      <td>${w.current ? `<a href="#/job/${enc(w.current)}">${h(w.current)}</a>` : "–"}</td>
      <td>${gone || w.status === "retiring" ? "" : `<button type="button" class="danger" data-stop="${h(w.id)}">stop</button>`}</td></tr>`;
  });
  return () =>
    render(
      el,
      `<h1>Daemons in ${h(namespace())}</h1>
      ${table(["name", "provider", "status", "queues", "gpus", "last heartbeat", "current", ""], rows, "no daemons")}`,
    );
}

async function controllerView(el) {
  const c = await get(`${nsPath()}/controller`);
  const units = c.units.map(
    (u) => `<tr data-unit="${h(u.scope)}/${h(u.name)}"><td>${h(u.scope)}</td><td>${h(u.name)}</td>
      <td>${h(u.pool || "–")}</td><td>${h(u.policy)}</td>
      <td class="num">${u.desired}</td><td class="num">${u.actual}</td>
      <td class="num">${u.launching}</td><td class="num">${u.total}</td><td class="num">${u.max}</td>
      <td>${h(u.reason)}${u.error ? `<div class="error">${h(u.error)}</div>` : ""}</td></tr>`,
  );
  const leases = c.leases.map(
    (l) => `<tr><td>${h(l.worker)}</td><td>${h(l.queue)}</td><td>${clock(l.until)}</td></tr>`,
  );
  return () =>
    render(
      el,
      `<h1>Controller of ${h(c.namespace)}</h1>
      <p class="muted">tick ${c.ticks}, last at ${clock(c.tick_at)} (${age(c.tick_at)})</p>
      ${table(["scope", "name", "pool", "policy", "#desired", "#actual", "#launching", "#total", "#max", "rule that fired"], units, "no elastic queues or pools")}
      <h2>Steal leases</h2>
      ${table(["daemon", "lent to queue", "until"], leases, "none")}`,
    );
}

export const VIEWS = {
  queues: queuesView,
  queue: queueView,
  jobs: jobsView,
  job: jobView,
  daemons: daemonsView,
  controller: controllerView,
};

