// Gantry's dashboard: the fleet overview at `/` and the pages of its
// workers (`/workers`), queue (`/queue`) and collector (`/collector`), all
// fed by the server-sent events of /api/v1/dashboard/events, and a build's
// page at `/builds/{id}` (fed by the NDJSON stream of
// /api/v1/builds/{id}/events, its logs read by logview.js). No reloads.
"use strict";

// A secured web node: open the dashboard as /#token=TOKEN; the token is
// kept in this tab only (sessionStorage), so links need not carry it.
const token = (() => {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) sessionStorage.setItem("gantry-token", fromHash);
  return fromHash || sessionStorage.getItem("gantry-token");
})();
const authHeaders = token ? { Authorization: "Bearer " + token } : {};

// Who the page acts as: the token's holder, or without a token the
// browser's session (an HttpOnly cookie set at /login), with the CSRF
// token its changes carry and the operations its role may take (the
// node's action map: a button for any other is not shown). A secured node
// that knows no session sends the page to /login.
const session = (async () => {
  // A node too busy to answer at once (a 5xx, or no answer) is asked again
  // a few times before the page goes on without knowing who it is.
  let answer;
  for (let attempt = 1; ; attempt++) {
    answer = await fetch("/api/v1/user", { headers: authHeaders }).catch(() => null);
    if ((answer && answer.status < 500) || attempt === 5) break;
    await new Promise((res) => setTimeout(res, 2000));
  }
  if (!answer) return null;
  if (answer.status === 401 && !token) {
    const next = "/login?next=" + encodeURIComponent(location.pathname);
    if (await readableByAnyone()) {
      // An exposed pipeline's page: read it as the public, no buttons.
      $("signin").href = next;
      $("signin").hidden = false;
    } else {
      location.href = next;
    }
    return null;
  }
  const me = answer.ok ? await answer.json() : null;
  allowed = new Set((me && me.actions) || []);
  if (!token && me && me.user) {
    $("signout").hidden = false;
    $("signout").onclick = async () => {
      await act("DELETE", "/api/v1/sessions/current");
      location.href = "/login";
    };
  }
  return me;
})();

// Whether this page is one anyone may read without signing in: a page of
// an exposed pipeline, or a build of one (the node answers its API route
// without a token).
async function readableByAnyone() {
  const pipeline = /^\/teams\/([^/]+)\/pipelines\/([^/]+)/.exec(location.pathname);
  const build = /^\/builds\/(\d+)\/?$/.exec(location.pathname);
  const probe = pipeline
    ? `/api/v1/teams/${pipeline[1]}/pipelines/${pipeline[2]}`
    : build ? `/api/v1/builds/${build[1]}` : null;
  if (!probe) return false;
  const answer = await fetch(probe).catch(() => null);
  return Boolean(answer && answer.ok);
}

// A live feed (server-sent events at `url`), followed through the shared
// worker (feed-worker.js: one stream per URL for all of this browser's
// Gantry tabs, so a seventh tab does not wait for one of the six
// connections a browser opens to a host), or with an EventSource of its
// own where the browser has no SharedWorker. Answers an object with
// EventSource's handlers (`onopen`, `onerror`, `onmessage`, and listeners
// of `problem`).
function openFeed(url) {
  if (!window.SharedWorker) return new EventSource(url);
  const absolute = new URL(url, location.href).href;
  const problems = [];
  const feed = {
    onopen: null,
    onerror: null,
    onmessage: null,
    addEventListener(type, fn) { if (type === "problem") problems.push(fn); },
  };
  const worker = new SharedWorker("/dashboard/feed-worker.js");
  worker.port.onmessage = (m) => {
    const { url: from, type, data } = m.data;
    if (from !== absolute) return;
    if (type === "open" && feed.onopen) feed.onopen();
    else if (type === "error" && feed.onerror) feed.onerror();
    else if (type === "message" && feed.onmessage) feed.onmessage({ data });
    else if (type === "problem") for (const fn of problems) fn({ data });
  };
  worker.port.start();
  worker.port.postMessage({ op: "follow", url: absolute });
  addEventListener("pagehide", () => worker.port.postMessage({ op: "leave" }));
  return feed;
}

// The operations (operationIds) the viewer may take.
let allowed = new Set();
const can = (operation) => allowed.has(operation);

// A change through the API, as the signed-in person: the token's header,
// or the session's CSRF token (a page of another origin has neither).
async function act(method, path, body) {
  const me = await session;
  const headers = { ...authHeaders, "content-type": "application/json" };
  if (me && me.csrf_token) headers["X-Gantry-CSRF"] = me.csrf_token;
  const answer = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined });
  const text = await answer.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
  return { status: answer.status, body: json };
}
window.gantry = { act };

// Runs an action from `button` (disabled meanwhile) and says its outcome
// in `result` (a live region beside it): `said(answer)` words a success,
// an error is the API's own message. Answers the API's answer.
async function perform(button, result, method, path, body, said) {
  button.disabled = true;
  result.className = "result";
  result.textContent = `${button.textContent.trim()}…`;
  let answer;
  try {
    answer = await act(method, path, body);
  } catch (err) {
    answer = { status: 0, body: { error: `the node did not answer: ${err.message}` } };
  }
  button.disabled = false;
  if (answer.status >= 200 && answer.status < 300) {
    result.classList.add("ok");
    result.innerHTML = said ? said(answer.body) : "done";
  } else {
    result.classList.add("error");
    result.textContent = (answer.body && answer.body.error) || `HTTP ${answer.status}`;
  }
  return answer;
}

// A button for operation `op`, or "" when the viewer may not take it.
// `data` becomes its data-* attributes (what a click handler reads);
// `aria` names it for a screen reader where `label` alone is ambiguous.
function actionButton(op, label, data = {}, extra = "", aria = "") {
  if (!can(op)) return "";
  const attrs = Object.entries({ action: op, ...data })
    .map(([k, v]) => ` data-${k}="${esc(v)}"`).join("");
  const named = aria ? ` aria-label="${esc(aria)}"` : "";
  return `<button type="button" class="action ${extra}"${attrs}${named}>${esc(label)}</button>`;
}

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) =>
  ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const badge = (status) => `<span class="badge s-${esc(status)}">${esc(status)}</span>`;

// The server's clock minus ours, so durations agree with the server's times.
let skew = 0;
const serverNow = () => Date.now() + skew;

function duration(ms) {
  if (ms == null || ms < 0) return "";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, "0")}m`;
}
const ago = (ms) => (ms ? `${duration(serverNow() - ms)} ago` : "");
const clock = (ms) => (ms ? new Date(ms).toLocaleTimeString() : "");
const bytes = (n) => {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
};

// Elements showing a time that moves: `data-since` (ago), or `data-from`
// with an optional `data-to` (a duration), refreshed every second.
function tick() {
  for (const el of document.querySelectorAll("[data-since]")) {
    el.textContent = ago(Number(el.dataset.since));
  }
  for (const el of document.querySelectorAll("[data-from]")) {
    const to = el.dataset.to ? Number(el.dataset.to) : serverNow();
    el.textContent = duration(to - Number(el.dataset.from));
  }
}
setInterval(tick, 1000);

// The header's indicator: `on` (following live), `off` (trying to) or
// `done` (a finished build: nothing more will come).
function setLive(state, text) {
  const el = $("live");
  el.className = "live " + (state === true ? "on" : state === false ? "off" : state);
  el.textContent = text;
}

// ---------------------------------------------------------------- overview

// The live list holds the newest builds; older ones are read a page at a
// time from the paged API (`Link: <...>; rel="next"`), below it.
let olderCursor = null;
async function moreBuilds() {
  const button = $("more-builds");
  if (olderCursor === null) {
    const shown = [...document.querySelectorAll("#builds tr[data-build]")].map((r) => +r.dataset.build);
    if (!shown.length) return;
    olderCursor = Math.min(...shown);
  }
  const r = await fetch(`/api/v1/builds?limit=50&cursor=${olderCursor}`, { headers: authHeaders });
  if (!r.ok) { button.textContent = "older builds: " + (await r.json()).error; return; }
  const page = await r.json();
  $("older-builds").insertAdjacentHTML("beforeend", page.map(buildRow).join(""));
  if (page.length) olderCursor = page[page.length - 1].id;
  button.hidden = !r.headers.get("link");
  tick();
}

// The fleet's pages of their own (the overview's panels, one subject
// each), by path.
const FLEET_PAGES = { "/workers": "workers", "/queue": "queue", "/collector": "collector" };

// The overview (`focus` "overview"), or the page of the workers, the queue
// or the collector: the panels of that subject, fed by the same feed.
function overview(focus) {
  $("overview").hidden = false;
  if (focus !== "overview") {
    $("overview").classList.add("focus");
    for (const panel of document.querySelectorAll("#overview [data-pages]")) {
      panel.hidden = !panel.dataset.pages.split(" ").includes(focus);
    }
    $("crumbs").textContent = `/ ${focus}`;
    document.title = `Gantry · ${focus}`;
    const link = document.querySelector(`#pages a[href="/${focus}"]`);
    if (link) link.setAttribute("aria-current", "page");
  }
  $("more-builds").onclick = moreBuilds;
  const url = "/api/v1/dashboard/events" + (token ? "?token=" + encodeURIComponent(token) : "");
  const feed = openFeed(url);
  feed.onopen = () => setLive(true, "live");
  feed.onerror = () => setLive(false, "reconnecting");
  feed.onmessage = (m) => {
    const { now, fleet } = JSON.parse(m.data);
    skew = now - Date.now();
    setLive(true, "live");
    renderFleet(fleet);
  };
  feed.addEventListener("problem", (m) => setLive(false, JSON.parse(m.data).error));
}

function renderFleet(f) {
  $("viewer").textContent = f.viewer === "admin" ? "" : f.viewer;
  $("web-nodes").innerHTML = f.web_nodes.map(webNode).join("");
  const stores = Object.fromEntries(f.gc.volume_stores.map((s) => [s.worker, s]));
  $("workers-count").textContent = f.workers.length;
  $("workers").innerHTML = f.workers.length
    ? f.workers.map((w) => workerCard(w, stores[w.name])).join("")
    : `<p class="muted">No workers registered.</p>`;
  $("builds-count").textContent = f.builds.length;
  $("builds").innerHTML = f.builds.length
    ? `<tr><th>build</th><th>job</th><th>team</th><th>status</th><th>worker</th><th>started</th><th class="num">duration</th></tr>` +
      f.builds.map(buildRow).join("")
    : `<tr><td class="muted">No builds yet.</td></tr>`;
  $("gc").innerHTML = gcPanel(f.gc);
  queuePanel(f.queue || []);
  pipelinesPanel(f.pipelines || []);
  $("handles").innerHTML = handlesByWorker(f) +
    (f.handles_cut ? `<p class="muted">Showing the first ${f.containers.length} containers and ${f.volumes.length} volumes: <code>gantry containers</code> and <code>gantry volumes</code> list them all.</p>` : "");
  tick();
}

// The steps waiting for a worker, by the kind of worker they need.
function queuePanel(q) {
  $("queue-count").textContent = q.reduce((n, k) => n + k.waiting, 0);
  $("queue").innerHTML = q.length
    ? `<table class="rows"><tr><th>team</th><th>platform</th><th>tags</th><th>resource type</th><th>privileged</th><th class="num">waiting</th><th>oldest waits</th></tr>` +
      q.map((k) => `<tr data-queue="${esc(k.team)}|${esc(k.tags.join(","))}"><td>${esc(k.team)}</td><td>${esc(k.platform)}</td>
        <td>${k.tags.length ? k.tags.map((t) => `<span class="tag">${esc(t)}</span>`).join("") : `<span class="muted">none</span>`}</td>
        <td>${esc(k.resource_type || "")}</td><td>${k.privileged ? "yes" : ""}</td>
        <td class="num">${k.waiting}</td><td data-since="${k.oldest_since}"></td></tr>`).join("") + `</table>`
    : `<p class="muted">No step waits for a worker.</p>`;
}

function webNode(n) {
  const title = (n.this_node ? "this node" : "another node") + (n.alive ? ", alive" : ", late: another node takes its builds over");
  return `<span class="web-node ${n.alive ? "alive" : "late"}" data-web-node="${esc(n.name)}" title="${title}">${esc(n.name)}${n.this_node ? " ◂" : ""}</span>`;
}

function workerCard(w, store) {
  const fill = store ? Math.round(store.fill * 100) : null;
  const bar = store
    ? `<dt>disk</dt><dd>${fill}% of ${bytes(store.total_bytes)}
        <div class="bar ${fill >= 90 ? "full" : fill >= 75 ? "warn" : ""}"><span style="width:${fill}%"></span></div></dd>`
    : "";
  return `<div class="card s-${esc(w.state)}" data-worker="${esc(w.name)}">
    <div class="head"><span class="name">${esc(w.name)}</span><span class="state badge s-${esc(w.state)}">${esc(w.state)}</span></div>
    <dl>
      <dt>platform</dt><dd>${esc(w.platform)} · ${esc(w.backend)} · v${esc(w.gantry_version)}</dd>
      <dt>tags</dt><dd>${w.tags.length ? w.tags.map((t) => `<span class="tag">${esc(t)}</span>`).join("") : `<span class="muted">none</span>`}</dd>
      <dt>team</dt><dd>${w.team ? esc(w.team) : `<span class="muted">all teams</span>`}</dd>
      <dt>load</dt><dd>${w.load.tasks} tasks · ${w.load.containers} containers · ${w.load.volumes} volumes placed</dd>
      <dt>holds</dt><dd>${w.containers} containers · ${w.volumes} volumes</dd>
      <dt>heartbeat</dt><dd data-since="${w.last_heartbeat}">${ago(w.last_heartbeat)}</dd>
      <dt>restarts</dt><dd>${w.restarts}</dd>
      ${bar}
    </dl></div>`;
}

function buildRow(b) {
  const dur = b.finished_at
    ? `<td class="num">${duration(b.duration_ms)}</td>`
    : `<td class="num" data-from="${b.created_at}"></td>`;
  return `<tr data-build="${b.id}">
    <td><a href="/builds/${b.id}">#${b.id}</a></td><td>${esc(b.job)}</td><td>${esc(b.team)}</td>
    <td>${badge(b.status)}</td><td>${esc(b.worker)}</td>
    <td data-since="${b.created_at}"></td>${dur}</tr>`;
}

function gcPanel(gc) {
  const states = Object.keys(gc.containers);
  const rows = states.map((s) =>
    `<tr><td>${badge(s)}</td><td class="num">${gc.containers[s]}</td><td class="num">${gc.volumes[s]}</td></tr>`).join("");
  const rules = gc.rules.map((r) =>
    `<tr><td>${esc(r.rule)}</td><td class="num">${r.runs}</td><td class="num">${r.errors}</td><td class="num">${r.collected}</td></tr>`).join("");
  const sw = gc.sweeps;
  return `<table class="rows"><tr><th>rows by state</th><th class="num">containers</th><th class="num">volumes</th></tr>${rows}
      <tr><td>missing</td><td class="num">${gc.missing_containers}</td><td class="num">${gc.missing_volumes}</td></tr></table>
    <p class="muted">Sweeps: ${sw.reports} reports · ${sw.marked_missing} marked missing · ${sw.deleted} rows deleted ·
      ${sw.unknown_answered} unknown handles · ${sw.destroy_failures} failed destroys</p>
    ${rules ? `<table class="rows"><tr><th>collector rule</th><th class="num">runs</th><th class="num">errors</th><th class="num">collected</th></tr>${rules}</table>` : ""}`;
}

function ownerCell(h) {
  const m = /^build (\d+)(.*)$/.exec(h.owner);
  return m ? `<a href="/builds/${m[1]}">build ${m[1]}</a>${esc(m[2])}` : esc(h.owner);
}

function handlesByWorker(f) {
  const rows = f.containers.map((h) => ["container", h]).concat(f.volumes.map((h) => ["volume", h]));
  if (!rows.length) return `<p class="muted">No containers or volumes.</p>`;
  const byWorker = new Map();
  for (const r of rows) {
    if (!byWorker.has(r[1].worker)) byWorker.set(r[1].worker, []);
    byWorker.get(r[1].worker).push(r);
  }
  return [...byWorker.entries()].sort().map(([worker, list]) =>
    `<div class="worker-handles" data-handles-of="${esc(worker)}"><h3>${esc(worker)} <span class="count">${list.length}</span></h3>
      <table class="rows"><tr><th>kind</th><th>handle</th><th>state</th><th>owner</th><th>team</th></tr>
      ${list.map(([kind, h]) => `<tr><td>${kind}</td><td class="mono">${esc(h.handle)}</td>
        <td>${badge(h.state)}${h.missing ? ` <span class="badge s-failed">missing</span>` : ""}</td>
        <td>${ownerCell(h)}</td><td>${esc(h.team)}</td></tr>`).join("")}
      </table></div>`).join("");
}

// -------------------------------------------------------------- build page

const FINAL = ["succeeded", "failed", "errored", "aborted"];

function jobLabel(plan) {
  if (plan && plan.job) return `${plan.pipeline_name || "main"}/${plan.job}`;
  if (plan && plan.check) return `check ${plan.check}`;
  return "one-off task";
}

async function buildPage(id) {
  $("build").hidden = false;
  $("crumbs").innerHTML = `/ build #${id}`;
  document.title = `Gantry · build #${id}`;
  $("build-title").textContent = `Build #${id}`;
  const r = await fetch(`/api/v1/builds/${id}`, { headers: authHeaders });
  if (!r.ok) {
    const body = await r.json().catch(() => ({}));
    showError(body.error || `HTTP ${r.status}`);
    setLive("done", "not found");
    return;
  }
  const b = await r.json();
  const header = { status: b.status, created_at: b.created_at, finished_at: b.finished_at, worker: b.worker, inputs: null };
  renderHeader(b, header);
  readInputs(b, header);
  followBuild(id, b, header);
}

// The versions a job build was given, once it has them.
async function readInputs(b, header) {
  if (!b.job) return;
  const r = await fetch(`/api/v1/builds/${b.id}/resources`, { headers: authHeaders });
  if (!r.ok) return;
  const got = await r.json();
  header.inputs = got.inputs;
  renderHeader(b, header);
}

// The raw log as a file: a plain link for a signed-in browser (its
// cookie goes with it); with a token, read with the token's header.
async function downloadLog(ev, id) {
  if (!token) return;
  ev.preventDefault();
  const r = await fetch(`/api/v1/builds/${id}/log`, { headers: authHeaders });
  const url = URL.createObjectURL(await r.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = `build-${id}.log`;
  a.click();
  URL.revokeObjectURL(url);
}

function renderHeader(b, h) {
  const st = $("build-status");
  st.className = `badge s-${h.status}`;
  st.textContent = h.status;
  const running = !FINAL.includes(h.status);
  const bar = $("build-actions");
  if (bar.dataset.running !== String(running)) {
    bar.dataset.running = String(running);
    bar.innerHTML = running ? actionButton("abortBuild", "Abort", {}, "danger") : "";
    const button = bar.querySelector("button");
    if (button) {
      button.onclick = () => perform(button, $("build-result"), "PUT", `/api/v1/builds/${b.id}/abort`, null,
        () => "aborting: the build stops at its next step boundary or signal");
    }
  }
  const dur = h.finished_at
    ? `<dd data-from="${h.created_at}" data-to="${h.finished_at}"></dd>`
    : `<dd data-from="${h.created_at}"></dd>`;
  $("build-facts").innerHTML = `
    <div><dt>job</dt><dd id="build-job">${esc(jobLabel(b.plan))}</dd></div>
    <div><dt>team</dt><dd>${esc(b.team)}</dd></div>
    <div><dt>worker</dt><dd>${esc(h.worker) || `<span class="muted">not placed</span>`}</dd></div>
    <div><dt>started</dt><dd>${clock(h.created_at)}</dd></div>
    <div><dt>duration</dt>${dur}</div>
    ${b.created_by ? `<div><dt>triggered by</dt><dd>${esc(b.created_by)}</dd></div>` : ""}
    ${h.inputs && h.inputs.length ? `<div><dt>inputs</dt><dd>${h.inputs.map((i) =>
      `<span class="tag">${esc(i.name)}</span><span class="mono muted">${esc(JSON.stringify(i.version))}</span>`).join(" ")}</dd></div>` : ""}
    <div><dt>log</dt><dd><a id="build-download" href="/api/v1/builds/${b.id}/log" download="build-${b.id}.log">raw log</a></dd></div>`;
  $("build-download").onclick = (ev) => downloadLog(ev, b.id);
  tick();
}

function showError(message) {
  const el = $("build-error");
  el.hidden = false;
  el.textContent = (el.textContent ? el.textContent + "\n" : "") + message;
}

// The step tree of the `plan` event, and what the node events say of it.
class StepTree {
  constructor(root, build) {
    this.root = root;
    this.build = build;
    this.nodes = new Map(); // plan node id -> element
    this.running = new Map(); // step name -> node id of its latest start
    this.views = new Map(); // step name -> its LogView
    this.logsAfter = 0; // the last event whose log line the stream left out
  }

  reset(logsAfter) {
    this.root.innerHTML = `<p class="muted">waiting for the build's plan…</p>`;
    this.nodes.clear();
    this.running.clear();
    this.views.clear();
    this.logsAfter = logsAfter;
  }

  draw(tree) {
    this.root.innerHTML = "";
    this.nodes.clear();
    this.root.appendChild(this.element(tree, null));
  }

  element(node, parentKind) {
    const el = document.createElement("div");
    el.className = `node kind-${node.kind} s-pending`;
    el.dataset.node = node.id;
    el.dataset.status = "pending";
    const head = document.createElement("div");
    head.className = "node-head";
    const role = parentKind === "hooks" ? node.id.split(".").pop() : null;
    let html = `<span class="dot"></span>`;
    if (role && role !== "plan") html += `<span class="role">${esc(role)}</span>`;
    if (node.kind === "step") {
      el.dataset.step = node.step;
      html += `<span class="name">${esc(node.step)}</span>`;
    } else {
      html += `<span class="label">${esc(describe(node))}</span>`;
    }
    html += `<span class="meta"></span><span class="time"></span>`;
    head.innerHTML = html;
    el.appendChild(head);
    if (node.kind === "step") {
      const bar = document.createElement("div");
      bar.className = "log-bar";
      bar.hidden = true;
      el.appendChild(bar);
      const log = document.createElement("pre");
      log.className = "log";
      log.hidden = true;
      // Scrolls on its own: reachable by keyboard, named for a reader.
      log.tabIndex = 0;
      log.setAttribute("aria-label", `log of step ${node.step}`);
      el.appendChild(log);
    }
    if (node.children && node.children.length) {
      const kids = document.createElement("div");
      kids.className = "children";
      for (const c of node.children) kids.appendChild(this.element(c, node.kind));
      el.appendChild(kids);
    }
    this.nodes.set(node.id, el);
    return el;
  }

  setStatus(el, status) {
    el.dataset.status = status;
    for (const c of [...el.classList]) if (c.startsWith("s-")) el.classList.remove(c);
    el.classList.add(`s-${status}`);
  }

  meta(el, text) {
    el.querySelector(":scope > .node-head .meta").textContent = text;
  }

  started(e) {
    const el = this.nodes.get(e.origin.id);
    if (!el) return;
    this.setStatus(el, "running");
    if (e.step) this.running.set(e.step, e.origin.id);
    const time = el.querySelector(":scope > .node-head .time");
    time.dataset.from = e.time;
    delete time.dataset.to;
    if (e.origin.attempts && e.origin.attempts.length) {
      this.meta(el, `attempt ${e.origin.attempts[e.origin.attempts.length - 1]}`);
    }
  }

  finished(e) {
    const el = this.nodes.get(e.origin.id);
    if (!el) return;
    this.setStatus(el, e.outcome);
    const time = el.querySelector(":scope > .node-head .time");
    time.dataset.to = e.time;
    if (!time.dataset.from) time.dataset.from = e.time;
    const said = [];
    if (e.exit_status != null) said.push(`exit ${e.exit_status}`);
    if (e.message) said.push(e.message);
    if (said.length) this.meta(el, said.join(" · "));
  }

  // The node a step's event belongs to: its latest start, else the first
  // node of that name, else a new one (a build whose plan was not told).
  step(name) {
    const id = this.running.get(name);
    if (id && this.nodes.has(id)) return this.nodes.get(id);
    const found = [...this.nodes.values()].find((el) => el.dataset.step === name);
    if (found) return found;
    if (!this.nodes.size) this.root.innerHTML = "";
    const el = this.element({ id: `step:${name}`, kind: "step", step: name }, null);
    this.root.appendChild(el);
    return el;
  }

  // A log line of event `seq`: one at or before `logsAfter` stands for
  // the step's stored log (the stream sends the first of each step, its
  // text left out), read by the step's view from its tail; later ones
  // are followed live. A step's view is drawn under the node it first
  // printed in (a retried step's attempts share it, as its text does).
  log(e, seq) {
    let view = this.views.get(e.step);
    const stored = seq <= this.logsAfter;
    if (!view) {
      const el = this.step(e.step);
      view = new LogView(this.build, e.step, el.querySelector(":scope > pre.log"),
        el.querySelector(":scope > .log-bar"), this.logsAfter, stored);
      this.views.set(e.step, view);
    }
    if (!stored) view.follow(e, seq);
  }

  finish() {
    // Nodes that never started stay pending; say they were skipped.
    for (const el of this.nodes.values()) {
      if (el.dataset.status === "pending") this.setStatus(el, "skipped");
      if (el.dataset.status === "running") this.setStatus(el, "aborted");
    }
  }
}

// The text of a log chunk with its ANSI colour codes (SGR: the 8 colours
// and their bright forms, bold, resets) drawn as spans of classes
// `ansi-N` and `ansi-bold`; other escape sequences are dropped. `state`
// (colour, bold, an escape cut at the chunk's end) carries to the next
// chunk of the same step.
function ansiSpans(data, state) {
  const out = document.createDocumentFragment();
  let text = state.pending + data;
  state.pending = "";
  const cut = /\x1b(\[[0-9;]*)?$/.exec(text);
  if (cut) {
    state.pending = cut[0];
    text = text.slice(0, cut.index);
  }
  const push = (s) => {
    if (!s) return;
    if (state.fg == null && !state.bold) {
      out.appendChild(document.createTextNode(s));
      return;
    }
    const span = document.createElement("span");
    span.className = [state.fg != null ? `ansi-${state.fg}` : "", state.bold ? "ansi-bold" : ""].join(" ").trim();
    span.textContent = s;
    out.appendChild(span);
  };
  const escape = /\x1b\[([0-9;]*)([A-Za-z])|\x1b[^[]/g;
  let last = 0;
  let m;
  while ((m = escape.exec(text))) {
    push(text.slice(last, m.index));
    last = escape.lastIndex;
    if (m[2] !== "m") continue;
    const codes = m[1] === "" ? [0] : m[1].split(";").map(Number);
    for (let i = 0; i < codes.length; i++) {
      const c = codes[i];
      if (c === 0) { state.fg = null; state.bold = false; }
      else if (c === 1) state.bold = true;
      else if (c === 22) state.bold = false;
      else if (c === 39) state.fg = null;
      else if ((c >= 30 && c <= 37) || (c >= 90 && c <= 97)) state.fg = c;
      else if (c === 38 || c === 48) i += codes[i + 1] === 5 ? 2 : codes[i + 1] === 2 ? 4 : 0;
    }
  }
  push(text.slice(last));
  return out;
}

function describe(node) {
  switch (node.kind) {
    case "in_parallel":
      return `in parallel${node.limit ? `, ${node.limit} at once` : ""}${node.fail_fast ? ", fail fast" : ""}`;
    case "attempts": return `attempts ×${node.attempts}`;
    case "timeout": return `timeout ${duration(node.timeout_ms)}`;
    default: return node.kind;
  }
}

async function followBuild(id, b, header) {
  const tree = new StepTree($("steps"), id);
  const outputs = [];
  let final = false;
  while (!final) {
    outputs.length = 0;
    $("build-error").hidden = true;
    $("build-error").textContent = "";
    try {
      // The stored log lines are left out (each step's view reads its
      // tail, a range at a time); later ones come live.
      const r = await fetch(`/api/v1/builds/${id}/events?skip_stored_logs=true`, { headers: { ...authHeaders, Accept: 'application/x-ndjson' } });
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      tree.reset(Math.min(Number(r.headers.get("X-Gantry-Logs-After") || 0), Number.MAX_SAFE_INTEGER));
      setLive(true, "live");
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (!line.trim()) continue;
          const { seq, event } = JSON.parse(line);
          if (apply(event, seq, tree, b, header, outputs)) final = true;
        }
      }
    } catch (err) {
      setLive(false, "reconnecting");
    }
    if (!final) await new Promise((res) => setTimeout(res, 2000));
  }
  tree.finish();
  setLive("done", "finished");
}

// Applies one build event; answers whether it was the build's last.
function apply(e, seq, tree, b, header, outputs) {
  switch (e.type) {
    case "plan": tree.draw(e.tree); break;
    case "node_started": tree.started(e); break;
    case "node_finished": tree.finished(e); break;
    case "log": tree.log(e, seq); break;
    case "waiting": tree.meta(tree.step(e.step), `waiting: ${e.message}`); break;
    case "waiting_for_inputs": {
      const el = $("build-waiting");
      el.hidden = false;
      el.textContent = `waiting for inputs: ${e.message}`;
      break;
    }
    case "selected_worker":
      tree.meta(tree.step(e.step), `on ${e.worker}`);
      header.worker = e.worker;
      renderHeader(b, header);
      break;
    case "streaming": tree.meta(tree.step(e.step), `${e.what}: ${bytes(e.bytes)}`); break;
    case "transfer":
      tree.meta(tree.step(e.step), `${e.name} from ${e.from} (${e.path}, ${bytes(e.bytes)} in ${e.seconds.toFixed(1)}s)`);
      break;
    case "resource":
      tree.meta(tree.step(e.step), `${e.action} ${e.resource} ${JSON.stringify(e.version)}${e.cached ? " (cached)" : ""}`);
      break;
    case "output": {
      outputs.push(e);
      const el = $("build-outputs");
      el.hidden = false;
      el.innerHTML = "outputs: " + outputs.map((o) =>
        `<span class="tag">${esc(o.name)}</span><span class="mono muted">${esc(o.artifact_id)}</span>`).join(" ");
      break;
    }
    case "error": showError(e.message); break;
    case "status":
      if (e.status !== "pending") $("build-waiting").hidden = true;
      header.status = e.status;
      if (FINAL.includes(e.status)) header.finished_at = e.time;
      renderHeader(b, header);
      return FINAL.includes(e.status);
    default: break;
  }
  return false;
}

// ------------------------------------------------------------------ routing

// Once the page knows who it acts as (which buttons to show).
session.catch(() => null).then(() => {
  const route = /^\/builds\/(\d+)\/?$/.exec(location.pathname);
  if (route) buildPage(Number(route[1]));
  else if (!pipelineRoutes()) {
    const focus = FLEET_PAGES[location.pathname.replace(/\/$/, "")] || "overview";
    overview(focus);
  }
});
