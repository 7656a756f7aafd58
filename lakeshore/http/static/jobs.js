// The dashboard's job views: the Jobs list and one Job with its attempts and result.

import {
  TOKEN_KEY, api, badge, clock, enc, get, h, kv, namespace, nsPath, render, table, traceback,
} from "./lib.js";

const TERMINAL = new Set(["succeeded", "failed", "cancelled", "dropped"]);
// What the retry route takes: a job that ended without its value.
const RETRIED = new Set(["failed", "cancelled", "dropped"]);
// A failed job's cause (its last attempt timed out or crashed): a filter of its own too.
const CAUSES = ["timed_out", "crashed"];
const JOB_STATES = ["pending", "running", ...TERMINAL, ...CAUSES];

// A job's state badge, with a failed job's cause beside it.
function stateBadge(job) {
  return `${badge(job.state)}${job.cause ? ` ${badge(job.cause)}` : ""}`;
}

// An attempt's outcome: a crash's signal, a timeout's SIGKILL when the grace ran out.
function outcomeBadge(a) {
  const how = a.signal || (a.killed ? "SIGKILL" : "");
  return `${badge(a.outcome)}${how ? ` <span class="muted">${h(how)}</span>` : ""}`;
}

// A daemon as the CLI shows it: its name, or its id once its row is gone (the id on hover).
function daemon(id, name) {
  return id ? `<span title="${h(id)}">${h(name || id)}</span>` : "–";
}

// An error's type and message, on one line.
function errorLine(error) {
  return `<b>${h(error.type)}</b>: ${h(error.message)}`;
}

// The Jobs view's time filter: submitted within the last …; the page is newest first, so
// the jobs of the window are the top of it.
const SUBMITTED_WITHIN = { "5m": 300e3, "1h": 3600e3, "24h": 86400e3, "7d": 7 * 86400e3 };

export async function jobsView(el, params) {
  const queue = params.get("queue") || "";
  const state = params.get("state") || "";
  const within = SUBMITTED_WITHIN[params.get("within")] ? params.get("within") : "";
  const query = new URLSearchParams({ limit: "100" });
  if (queue) query.set("queue", queue);
  if (state) query.set("state", state);
  const [{ jobs }, { queues }] = await Promise.all([
    get(`${nsPath()}/jobs?${query}`),
    get(`${nsPath()}/queues`),
  ]);
  const mine = queues.filter((q) => q.namespace === namespace()).map((q) => q.name);
  const cutoff = within ? Date.now() - SUBMITTED_WITHIN[within] : -Infinity;
  const shown = jobs.filter((j) => Date.parse(j.submitted_at) >= cutoff);
  const rows = shown.map(
    (j) => `<tr data-job="${h(j.id)}"><td><a href="#/job/${enc(j.id)}">${h(j.id)}</a></td>
      <td>${h(j.queue)}</td><td data-col="state">${stateBadge(j)}</td>
      <td><code>${h(j.fn || (j.command || []).join(" "))}</code></td>
      <td class="num">${j.attempt}/${j.max_attempts}</td><td>${daemon(j.worker, j.worker_name)}</td>
      <td>${clock(j.submitted_at)}</td><td>${clock(j.finished_at)}</td>
      <td>${j.state === "pending" ? `${h(j.pending_reason || "")} (#${j.position ?? "?"})` : h(j.error?.type || "")}</td>
    </tr>`,
  );
  const opts = (values, chosen) =>
    [`<option value="">any</option>`]
      .concat(values.map((v) => `<option ${v === chosen ? "selected" : ""}>${h(v)}</option>`))
      .join("");
  return () =>
    render(
      el,
      `<h1>Jobs in ${h(namespace())}</h1>
      <div class="filters">
        <label>queue <select data-filter="queue">${opts(mine, queue)}</select></label>
        <label>state <select data-filter="state">${opts(JOB_STATES, state)}</select></label>
        <label>submitted within <select data-filter="within">${opts(Object.keys(SUBMITTED_WITHIN), within)}</select></label>
        <span class="muted">newest first, at most 100</span>
      </div>
      ${table(["id", "queue", "state", "what", "#attempt", "daemon", "submitted", "finished", "why"], rows, "no jobs match")}`,
    );
}

function timeline(job) {
  const attempts = job.attempts;
  const t = (ts) => (ts ? Date.parse(ts) : Date.now());
  const starts = attempts.filter((a) => a.started_at).map((a) => t(a.started_at));
  const t0 = Math.min(...starts, Date.now());
  const t1 = Math.max(t0 + 1, ...attempts.map((a) => t(a.ended_at)));
  return attempts.map((a) => {
    // A duplicate (a second execution of one epoch) may be the one whose outcome counted.
    const stale = a.outcome === "stale";
    const epoch =
      a.epoch != null && a.epoch !== a.attempt ? ` <span class="muted">epoch ${a.epoch}</span>` : "";
    const left = a.started_at ? ((t(a.started_at) - t0) / (t1 - t0)) * 100 : 0;
    const width = a.started_at ? ((t(a.ended_at) - t(a.started_at)) / (t1 - t0)) * 100 : 0;
    return `<tr data-attempt="${a.attempt}" class="${stale ? "stale" : ""}">
      <td class="num">${a.attempt}${epoch}</td>
      <td>${daemon(a.worker, a.worker_name)}</td>
      <td>${clock(a.started_at)}</td><td>${clock(a.ended_at)}</td>
      <td>${outcomeBadge(a)}${a.duplicate ? ` ${badge("duplicate")}` : ""}</td>
      <td class="wrap">${a.error ? `<span class="error">${errorLine(a.error)}</span>` : ""}</td>
      <td><div class="timeline"><div class="bar ${h(stale ? "stale" : a.outcome)}"
        style="left:${left.toFixed(2)}%;width:${width.toFixed(2)}%"></div></div></td></tr>`;
  });
}

// ---- the live log of the job shown (GET …/logs?follow=true, NDJSON) -------------------------

// Characters of a log the page keeps (the newest).
const LOG_KEEP = 1 << 20;
// The one follow at a time: it outlives the view's re-renders, ends when the view changes.
let follow = null;

function followLog(base, id) {
  if (follow?.id === id) return follow;
  follow?.abort.abort();
  follow = { id, text: "", note: "following…", abort: new AbortController() };
  readLog(follow, base);
  return follow;
}

function paintLog(f) {
  const pre = document.getElementById("job-log");
  if (!pre) {
    // The view changed: stop following.
    if (follow === f) follow = null;
    f.abort.abort();
    return;
  }
  pre.textContent = f.text;
  pre.scrollTop = pre.scrollHeight;
  document.getElementById("job-log-note").textContent = f.note;
}

async function readLog(f, base) {
  let attempt = null;
  let after = 0;
  while (!f.abort.signal.aborted) {
    const q = new URLSearchParams({ follow: "true" });
    // A cut answer resumes after the last chunk read: no gap, no repeat.
    if (attempt) q.set("attempt", attempt), q.set("after", after);
    try {
      const r = await fetch(`${base}/logs?${q}`, {
        headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY)}` },
        signal: f.abort.signal,
      });
      if (!r.ok) {
        f.note = `no log: HTTP ${r.status}`;
        return paintLog(f);
      }
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let pending = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const lines = (pending + value).split("\n");
        pending = lines.pop();
        for (const line of lines.filter((l) => l.trim())) {
          const x = JSON.parse(line);
          if (x.kind === "chunk") {
            f.text = (f.text + x.text).slice(-LOG_KEEP);
            [attempt, after] = [x.attempt, x.seq];
          } else if (x.kind === "attempt") {
            f.text += `\n[attempt ${x.previous} is over; following attempt ${x.attempt}]\n`;
            [attempt, after] = [x.attempt, 0];
          } else if (x.kind === "end") {
            f.note = `the job ended: ${x.state}`;
            return paintLog(f);
          }
        }
        f.note = "following…";
        paintLog(f);
      }
    } catch (e) {
      if (f.abort.signal.aborted) return;
      f.note = `cut (${e.message}); reconnecting`;
      paintLog(f);
    }
    await new Promise((done) => setTimeout(done, 1000));
  }
}

export async function jobView(el, params, [id]) {
  const base = `${nsPath()}/jobs/${enc(id)}`;
  // Every attempt names its daemon (worker_name) while the daemon's row exists.
  const job = await get(base);
  let result = null;
  if (TERMINAL.has(job.state)) {
    const r = await api("GET", `${base}/result`);
    if (r.status === 200) result = r.data;
  }
  let outcome = `<p class="muted">no result yet</p>`;
  if (result) {
    const error = result.error
      ? `<p class="error">${errorLine(result.error)}</p>
         ${result.error.traceback ? traceback("traceback", result.error.traceback) : ""}`
      : "";
    outcome = `${kv([
      ["ok", result.ok ? "yes" : "no"],
      ["value", `<code id="result-value">${h(JSON.stringify(result.value))}</code>`],
      ["exit code", result.exit_code ?? "–"],
    ])}${error}
      ${result.output ? `<h2>Output</h2><pre>${h(result.output)}</pre>` : ""}
      ${result.stderr ? `<h2>Stderr</h2><pre>${h(result.stderr)}</pre>` : ""}`;
  }
  const pending =
    job.state === "pending"
      ? [["pending reason", h(job.pending_reason || "–")], ["position", job.position ?? "–"]]
      : job.stopping
        ? [["stopping", h(job.stopping)]]
        : [];
  const jobLink = (id) => `<a href="#/job/${enc(id)}">${h(id)}</a>`;
  const links = [
    ...(job.retry_of ? [["retry of", jobLink(job.retry_of)]] : []),
    ...((job.retried_by || []).length ? [["retried by", job.retried_by.map(jobLink).join(" ")]] : []),
  ];
  return () => {
    const log = followLog(base, job.id);
    render(
      el,
      `<h1>Job ${h(job.id)} <span id="job-state">${stateBadge(job)}</span></h1>
      <div class="actions">${TERMINAL.has(job.state) ? "" : `<button type="button" class="danger" data-cancel="${h(job.id)}">cancel</button>`}
        ${RETRIED.has(job.state) ? `<button type="button" data-retry="${h(job.id)}">retry</button>` : ""}
        <a href="#/jobs?queue=${enc(job.queue)}">all jobs of ${h(job.queue)}</a></div>
      <div class="grid">
        <div class="card">${kv([
          ["queue", h(job.queue)], ["what", `<code>${h(job.fn || (job.command || []).join(" "))}</code>`],
          ["priority", job.priority],
          // Lost and preempted attempts do not count toward max_attempts.
          ["attempt", `${job.attempt} (${job.counted_attempts} of ${job.max_attempts} counted)`],
          ...(job.isolation ? [["isolation", h(job.isolation)]] : []),
          // The code snapshot it runs in (spec/code.md): its digest, cut as tables cut it.
          ...(job.code ? [["code", `<code title="${h(job.code)}">${h(job.code.slice(0, 19))}</code>`]] : []),
          ...(job.cancelled_by ? [["cancelled by", h(job.cancelled_by)]] : []),
          ["daemon", daemon(job.worker, job.worker_name)], ["submitted", clock(job.submitted_at)],
          ["started", clock(job.started_at)], ["finished", clock(job.finished_at)],
          ["stale completions", job.stale], ...pending, ...links,
        ])}</div>
        <div class="card"><h2>Result</h2>${outcome}</div>
      </div>
      <h2>Attempts</h2>
      ${table(["#", "daemon", "start", "end", "outcome", "error", "timeline"], timeline(job), "not started yet")}
      <h2>Log <span id="job-log-note" class="muted">${h(log.note)}</span></h2>
      <pre id="job-log" class="log">${h(log.text)}</pre>`,
    );
    paintLog(log);
  };
}
