// The Lakeshore dashboard: hash-routed views (views.js) over the token-guarded /v1 API
// (lib.js), re-read every POLL_MS without reloading the page. No build step, no
// dependencies.

import {
  $,
  NS_KEY,
  TOKEN_KEY,
  api,
  clock,
  enc,
  get,
  h,
  namespace,
  nsPath,
  onUnauthorized,
} from "./lib.js";
import { VIEWS } from "./views.js";

const POLL_MS = 1500;
let generation = 0; // bumped on every navigation: a slow answer of an old view is dropped
let timer = null;

// ---- routing, polling, actions ------------------------------------------------------------

function route() {
  const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
  const [view, ...args] = path.split("/").map(decodeURIComponent);
  return { view: VIEWS[view] ? view : "queues", args, params: new URLSearchParams(query || "") };
}

async function tick(gen) {
  const { view, args, params } = route();
  const el = $("#view");
  try {
    const paint = await VIEWS[view](el, params, args);
    if (gen !== generation) return;
    paint();
    $("#error").textContent = "";
    $("#live").textContent = `live · ${clock(Date.now())}`;
  } catch (e) {
    if (gen !== generation) return;
    $("#error").textContent = e.message;
  }
  if (gen === generation && sessionStorage.getItem(TOKEN_KEY)) {
    timer = setTimeout(() => tick(gen), POLL_MS);
  }
}

function navigate() {
  clearTimeout(timer);
  generation += 1;
  const { view } = route();
  const active = view === "queue" ? "queues" : view === "job" ? "jobs" : view;
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.dataset.view === active);
  }
  $("#view").dataset.view = view;
  tick(generation);
}

function refreshNow() {
  navigate();
}

async function act(fn) {
  try {
    await fn();
    $("#error").textContent = "";
  } catch (e) {
    $("#error").textContent = e.message;
  }
  refreshNow();
}

function onClick(event) {
  const b = event.target.closest("button");
  if (!b) return;
  const d = b.dataset;
  if (d.queueAction) {
    const box = b.closest(".actions").dataset;
    act(() => api("POST", `${nsPath(box.ns)}/queues/${enc(box.name)}/${d.queueAction}`));
  } else if (d.cancel) {
    if (confirm(`Cancel job ${d.cancel}?`)) {
      act(() => api("POST", `${nsPath()}/jobs/${enc(d.cancel)}/cancel`));
    }
  } else if (d.retry) {
    act(async () => {
      const { data } = await api("POST", `${nsPath()}/jobs/${enc(d.retry)}/retry`);
      location.hash = `#/job/${enc(data.id)}`;
    });
  } else if (d.stop) {
    if (confirm("Stop this daemon? It finishes its current job, then exits.")) {
      act(() => api("DELETE", `${nsPath()}/workers/${enc(d.stop)}`));
    }
  } else if (d.removeQueue) {
    act(() => api("POST", `${nsPath()}/workers/${enc(d.worker)}/queues`, { remove: [d.removeQueue] }));
  } else if (d.addQueue) {
    const input = document.getElementById(`add-${d.addQueue}`);
    const name = input.value.trim();
    if (!name) return;
    act(async () => {
      await api("POST", `${nsPath()}/workers/${enc(d.addQueue)}/queues`, { add: [name] });
      input.value = "";
    });
  }
}

function onFilter(event) {
  const key = event.target.dataset.filter;
  if (!key) return;
  const { params } = route();
  if (event.target.value) params.set(key, event.target.value);
  else params.delete(key);
  const path = location.hash.replace(/^#\/?/, "").split("?")[0] || "queues";
  location.hash = `#/${path}${params.toString() ? `?${params}` : ""}`;
}

async function loadNamespaces() {
  const { namespaces } = await get("/v1/namespaces");
  const select = $("#ns");
  const current = namespace();
  select.innerHTML = namespaces
    .map((n) => `<option ${n.name === current ? "selected" : ""}>${h(n.name)}</option>`)
    .join("");
  if (!namespaces.some((n) => n.name === current) && namespaces.length) {
    sessionStorage.setItem(NS_KEY, namespaces[0].name);
  }
}

function signOut(message = "") {
  clearTimeout(timer);
  generation += 1;
  sessionStorage.removeItem(TOKEN_KEY);
  $("#top").hidden = true;
  $("#view").hidden = true;
  $("#signin").hidden = false;
  $("#signin-error").textContent = message;
}

async function signedIn() {
  $("#signin").hidden = true;
  $("#top").hidden = false;
  $("#view").hidden = false;
  await loadNamespaces();
  navigate();
}

async function signIn(event) {
  event.preventDefault();
  const token = $("#token").value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  try {
    await get("/v1/namespaces");
  } catch (e) {
    if (e.status !== 401) signOut(e.message);
    return;
  }
  $("#token").value = "";
  await signedIn();
}

function start() {
  onUnauthorized(signOut);
  $("#signin").addEventListener("submit", signIn);
  $("#signout").addEventListener("click", () => signOut());
  $("#ns").addEventListener("change", (e) => {
    sessionStorage.setItem(NS_KEY, e.target.value);
    refreshNow();
  });
  $("#view").addEventListener("click", onClick);
  $("#view").addEventListener("change", onFilter);
  window.addEventListener("hashchange", () => {
    if (sessionStorage.getItem(TOKEN_KEY)) navigate();
  });
  if (sessionStorage.getItem(TOKEN_KEY)) signedIn().catch((e) => signOut(e.message));
  else signOut();
}

start();
