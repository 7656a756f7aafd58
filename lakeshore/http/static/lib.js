// The dashboard's helpers: HTML escaping and formatting, the API client, tables, an SVG
// line plot. No state but the browser session (token, namespace).

export const TOKEN_KEY = "lakeshore.token";
export const NS_KEY = "lakeshore.namespace";

export const $ = (sel, root = document) => root.querySelector(sel);

// Called when the API refuses the token (the app signs out); set by app.js.
let unauthorized = () => {};
export function onUnauthorized(fn) {
  unauthorized = fn;
}

// ---- helpers --------------------------------------------------------------------------

export function h(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

export function badge(state) {
  return `<span class="badge s-${h(state)}">${h(state)}</span>`;
}

export function age(ts) {
  if (!ts) return "–";
  const s = Math.max(0, (Date.now() - Date.parse(ts)) / 1000);
  return `${duration(s)} ago`;
}

export function duration(s) {
  if (s === null || s === undefined) return "–";
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.round(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${Math.round((s % 3600) / 60)}m`;
}

// A moment as the CLI shows it: date, time and zone, in UTC ("2026-12-06 02:50:43 UTC").
export function clock(ts) {
  if (ts === null || ts === undefined || ts === "") return "–";
  return new Date(ts).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

export function enc(name) {
  return encodeURIComponent(name);
}

export function namespace() {
  return sessionStorage.getItem(NS_KEY) || "default";
}

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code;
  }
}

export async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY)}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = r.headers.get("Content-Type")?.includes("json") ? await r.json() : null;
  if (r.status === 401) {
    unauthorized("the token was refused; sign in again");
    throw new ApiError(r.status, data);
  }
  if (!r.ok) throw new ApiError(r.status, data);
  return { status: r.status, data };
}

export const get = async (path) => (await api("GET", path)).data;
export const nsPath = (ns = namespace()) => `/v1/namespaces/${enc(ns)}`;

// Re-rendering replaces a view's HTML; what a person is typing or has chosen, and the folds
// they opened or closed, must survive.
export function render(el, html) {
  const focused = document.activeElement?.id;
  const kept = {};
  for (const input of el.querySelectorAll("input[id], select[id]")) kept[input.id] = input.value;
  const folds = [...el.querySelectorAll("details[id]")].map((d) => [d.id, d.open]);
  el.innerHTML = html;
  for (const [id, value] of Object.entries(kept)) {
    const input = document.getElementById(id);
    if (input && input.tagName === "INPUT") input.value = value;
  }
  for (const [id, open] of folds) {
    const fold = document.getElementById(id);
    if (fold && fold.tagName === "DETAILS") fold.open = open;
  }
  if (focused) document.getElementById(focused)?.focus();
}

export function table(headers, rows, empty = "nothing yet") {
  const head = headers
    .map((c) => (c.startsWith("#") ? `<th class="num">${h(c.slice(1))}</th>` : `<th>${h(c)}</th>`))
    .join("");
  const body = rows.length
    ? rows.join("")
    : `<tr><td colspan="${headers.length}" class="muted">${h(empty)}</td></tr>`;
  return `<table><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

export function kv(pairs) {
  return `<dl class="kv">${pairs
    .map(([k, v]) => `<dt>${h(k)}</dt><dd data-key="${h(k)}">${v}</dd>`)
    .join("")}</dl>`;
}

// ---- a Python traceback, read from the user's first frame ---------------------------------

const FRAME = /^ {2}File "([^"]*)", line \d+/;
// Lakeshore's own files: any under a folder named lakeshore (the package, installed or a
// checkout). Python's own: its standard library (not site-packages) and frozen modules.
const LAKESHORE_FILE = /[\\/]lakeshore[\\/]/;
const PYTHON_FILE = /^<frozen |[\\/]lib[\\/]python[\d.]*[\\/](?!(site|dist)-packages[\\/])/;

// A frame is its "File" line and the lines indented below it; any other line stands alone.
function entries(text) {
  const out = [];
  for (const line of text.replace(/\n+$/, "").split("\n")) {
    const frame = FRAME.exec(line);
    const last = out[out.length - 1];
    if (frame) out.push({ file: frame[1], lines: [line] });
    else if (last?.file !== undefined && line.startsWith("    ")) last.lines.push(line);
    else out.push({ lines: [line] });
  }
  return out;
}

// A traceback with each run of Lakeshore's frames folded into a closed <details> (``id``-n,
// so that a fold a person opened stays open across re-renders). A run reaches from a
// Lakeshore frame to the last Lakeshore frame after it with only Python's own frames
// between (asyncio.run under an async function), so what is left starts at the user's code.
export function traceback(id, text) {
  const list = entries(text);
  const own = (e) => e.file !== undefined && LAKESHORE_FILE.test(e.file);
  const python = (e) => e.file !== undefined && PYTHON_FILE.test(e.file);
  const lines = (some) => h(some.flatMap((e) => e.lines).join("\n"));
  const parts = [];
  let plain = [];
  const flush = () => {
    if (plain.length) parts.push(`<div>${lines(plain)}</div>`);
    plain = [];
  };
  for (let i = 0; i < list.length; i++) {
    if (!own(list[i])) {
      plain.push(list[i]);
      continue;
    }
    let end = i;
    for (let j = i + 1; j < list.length && (own(list[j]) || python(list[j])); j++) {
      if (own(list[j])) end = j;
    }
    const run = list.slice(i, end + 1);
    flush();
    const label = `${run.length} Lakeshore frame${run.length === 1 ? "" : "s"}`;
    parts.push(
      `<details id="${h(id)}-${parts.length}"><summary>${label}</summary><div>${lines(run)}</div></details>`,
    );
    i = end;
  }
  flush();
  return `<div class="traceback" id="${h(id)}">${parts.join("")}</div>`;
}

// ---- an inline SVG line plot ----------------------------------------------------------

export const COLORS = ["#1f6feb", "#bf8700", "#1a7f37", "#cf222e", "#8250df"];

export function linePlot(id, series, label) {
  const W = 600;
  const H = 200;
  const pad = { l: 40, r: 10, t: 10, b: 22 };
  const points = series.flatMap((s) => s.points);
  const legend = series
    .map((s, i) => `<span><i style="background:${COLORS[i]}"></i>${h(s.name)}</span>`)
    .join("");
  if (points.length < 2) {
    return `<div class="legend">${legend}</div><svg id="${id}" class="plot" viewBox="0 0 ${W} ${H}">
      <text x="${W / 2}" y="${H / 2}" text-anchor="middle">collecting data …</text></svg>`;
  }
  const t0 = Math.min(...points.map((p) => p[0]));
  const t1 = Math.max(...points.map((p) => p[0]), t0 + 1);
  const top = Math.max(1, ...points.map((p) => p[1]));
  const x = (t) => pad.l + ((t - t0) / (t1 - t0)) * (W - pad.l - pad.r);
  const y = (v) => H - pad.b - (v / top) * (H - pad.t - pad.b);
  const lines = series
    .map((s, i) => {
      const d = s.points.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`);
      const most = Math.max(...s.points.map((p) => p[1]));
      return `<path d="${d.join("")}" fill="none" stroke="${COLORS[i]}" stroke-width="2"
        data-series="${h(s.name)}" data-max="${most}"/>`;
    })
    .join("");
  const axis = `<line x1="${pad.l}" y1="${H - pad.b}" x2="${W - pad.r}" y2="${H - pad.b}" stroke="#dde3ea"/>
    <text x="${pad.l - 6}" y="${pad.t + 8}" text-anchor="end">${Number(top.toPrecision(3))}</text>
    <text x="${pad.l - 6}" y="${H - pad.b}" text-anchor="end">0</text>
    <text x="${pad.l}" y="${H - 6}">${h(clock(t0))}</text>
    <text x="${W - pad.r}" y="${H - 6}" text-anchor="end">${h(clock(t1))}</text>
    <text x="${W / 2}" y="${H - 6}" text-anchor="middle">${h(label)}</text>`;
  return `<div class="legend">${legend}</div>
    <svg id="${id}" class="plot" viewBox="0 0 ${W} ${H}">${axis}${lines}</svg>`;
}

