// Gantry's dashboard, stored pipelines: the list on the overview, a
// pipeline's page (a graph of its jobs and resources, edges drawn from
// `passed` and triggers, each job's newest build), a job's page (its
// builds and their inputs, older ones a page at a time) and a resource's
// (its versions with their metadata and builds, last check and pin). Each
// page follows its live feed (`GET .../pipelines/P/feed`, one stream per
// page URL for all of the browser's tabs through app.js's openFeed, whose
// snapshots the node takes once a second per page however many follow
// it): statuses change in place, without a reload. Each offers the
// actions the viewer's role may take (pause, archive, trigger, re-run,
// abort, check, pin, disable), each saying its outcome in place. Uses
// app.js's helpers ($, esc, badge, ago, can, actionButton, perform,
// openFeed...).
"use strict";

const enc = encodeURIComponent;

const pipelineUrl = (team, p) => `/teams/${enc(team)}/pipelines/${enc(p)}`;
const apiPipeline = (team, p) => `/api/v1/teams/${enc(team)}/pipelines/${enc(p)}`;

// Sets `el`'s content only when it changed, so a refresh every second
// keeps the focus and a click on what it holds.
function setHtml(el, html) {
  if (el.gantryHtml === html) return;
  el.gantryHtml = html;
  el.innerHTML = html;
  tick();
}

// How each action's success is said.
const SAID = {
  triggerJob: (b) => `started <a href="/builds/${b.id}">build #${esc(b.name ?? b.id)}</a>${b.waiting ? ` (waiting: ${esc(b.waiting)})` : ""}`,
  rerunJobBuild: (b) => `re-running as <a href="/builds/${b.id}">build #${esc(b.name ?? b.id)}</a>`,
  abortBuild: () => "aborting",
  pauseJob: () => "job paused: no new builds start",
  unpauseJob: () => "job unpaused",
  pausePipeline: () => "pipeline paused: no new builds start",
  unpausePipeline: () => "pipeline unpaused",
  archivePipeline: () => "archived: paused, its jobs not triggered until it is set again",
  checkResource: (b) => `checking: <a href="/builds/${b.id}">build ${b.id}</a>`,
  pinResourceVersion: () => "pinned: jobs take only this version",
  unpinResource: () => "unpinned",
  disableResourceVersion: () => "version disabled: never an input again",
  enableResourceVersion: () => "version enabled",
};

// Runs the action of any button in `container` clicked (its data-path,
// data-body, data-method: PUT unless it says), saying the outcome in
// `result`. A button with data-confirm asks for a second click first.
function wireActions(container, result) {
  container.addEventListener("click", async (ev) => {
    const button = ev.target.closest("button.action");
    if (!button || !container.contains(button)) return;
    const d = button.dataset;
    if (d.confirm && !d.armed) {
      d.armed = button.textContent;
      button.textContent = d.confirm;
      return;
    }
    const body = d.body ? JSON.parse(d.body) : null;
    if (d.armed) { button.textContent = d.armed; delete d.armed; }
    const answer = await perform(button, result, d.method || "PUT", d.path, body, SAID[d.action]);
    // A pin takes the comment typed beside it (Concourse's pin_comment).
    const comment = d.action === "pinResourceVersion" && $("pin-comment") && $("pin-comment").value.trim();
    if (comment && answer.status >= 200 && answer.status < 300) {
      await perform(button, result, "PUT", d.comment, { pin_comment: comment },
        () => "pinned: jobs take only this version; the comment is saved");
    }
  });
}

// Follows the live feed of a page of pipeline `name` (`query`: none, a
// job, or a resource); `draw` shows each snapshot the node sends.
function follow(team, name, query, draw) {
  const params = new URLSearchParams(query);
  if (token) params.set("token", token);
  const feed = openFeed(`${apiPipeline(team, name)}/feed?${params}`);
  feed.onopen = () => setLive(true, "live");
  feed.onerror = () => setLive(false, "reconnecting");
  feed.onmessage = async (m) => {
    const { now, page } = JSON.parse(m.data);
    skew = now - Date.now();
    try {
      await draw(page);
      setLive(true, "live");
    } catch (err) {
      setLive(false, err.message);
    }
  };
  feed.addEventListener("problem", (m) => setLive(false, JSON.parse(m.data).error));
}

// ------------------------------------------------------------ the overview

// The pipelines of every team the viewer may see, on the overview (from
// the fleet's feed: no request of its own).
function pipelinesPanel(list) {
  const rows = list.map((p) => `<tr data-pipeline="${esc(p.team)}/${esc(p.name)}">
          <td><a href="${pipelineUrl(p.team, p.name)}">${esc(p.name)}</a></td>
          <td class="muted">${esc(p.team)}</td>
          <td>${p.archived ? badge("archived") : p.paused ? badge("paused") : ""}${p.status ? badge(p.status) : ""}${p.running ? badge("started") : ""}</td>
          <td class="muted">config v${esc(p.config_version)}</td></tr>`);
  setHtml($("pipelines"), rows.length ? `<table class="rows">${rows.join("")}</table>`
    : `<p class="muted">none yet: gantry set-pipeline -p NAME -c pipeline.yml</p>`);
}

// ----------------------------------------------------------- the pipeline

// Columns: resources first, then each job one column right of the jobs
// its inputs must have passed.
function layout(jobs, resources) {
  const col = {};
  const byName = Object.fromEntries(jobs.map((j) => [j.name, j]));
  const colOf = (name, seen = new Set()) => {
    if (col[name] != null) return col[name];
    if (seen.has(name)) return 1;
    seen.add(name);
    const ups = byName[name].inputs.flatMap((i) => i.passed).filter((p) => byName[p]);
    col[name] = 1 + Math.max(0, ...ups.map((u) => colOf(u, seen)));
    return col[name];
  };
  jobs.forEach((j) => colOf(j.name));
  const columns = [resources.map((r) => ({ kind: "resource", name: r.name, item: r }))];
  for (const j of jobs) {
    (columns[col[j.name]] ||= []).push({ kind: "job", name: j.name, item: j });
  }
  return columns.map((c) => c || []);
}

function drawPipeline(team, name, jobs, resources, paused) {
  const W = 170, H = 44, GX = 90, GY = 26, PAD = 16;
  const columns = layout(jobs, resources);
  const at = {};
  columns.forEach((c, x) => c.forEach((n, y) => {
    at[`${n.kind}:${n.name}`] = { x: PAD + x * (W + GX), y: PAD + y * (H + GY) };
  }));
  const width = PAD * 2 + columns.length * (W + GX);
  const height = PAD * 2 + Math.max(1, ...columns.map((c) => c.length)) * (H + GY);
  const edges = [];
  const edge = (from, to, trigger, title) => {
    const a = at[from], b = at[to];
    if (!a || !b) return;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    const mx = (x1 + x2) / 2;
    edges.push(`<path class="edge${trigger ? " trigger" : ""}" d="M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}"><title>${esc(title)}</title></path>`);
  };
  for (const j of jobs) {
    for (const i of j.inputs) {
      if (i.passed.length) {
        for (const p of i.passed) edge(`job:${p}`, `job:${j.name}`, i.trigger, `${i.resource} passed ${p}`);
      } else {
        edge(`resource:${i.resource}`, `job:${j.name}`, i.trigger, i.resource);
      }
    }
  }
  const boxes = [];
  for (const [key, p] of Object.entries(at)) {
    const [kind, n] = key.split(/:(.*)/s);
    if (kind === "job") {
      const j = jobs.find((x) => x.name === n);
      const b = j.latest_build;
      const status = j.paused ? "paused" : b ? b.status : "none";
      boxes.push(`<a href="${pipelineUrl(team, name)}/jobs/${enc(n)}">
        <g class="box job s-${esc(status)}" data-job="${esc(n)}" data-status="${esc(status)}">
        <rect x="${p.x}" y="${p.y}" width="${W}" height="${H}" rx="4"></rect>
        <text x="${p.x + 10}" y="${p.y + 18}">${esc(n)}</text>
        <text class="sub" x="${p.x + 10}" y="${p.y + 35}">${b ? `#${esc(b.name ?? b.build_number ?? b.id)} ${esc(b.status)}` : "no build yet"}</text>
        </g></a>`);
    } else {
      const r = resources.find((x) => x.name === n);
      const err = r.check_error ? " check-error" : "";
      boxes.push(`<a href="${pipelineUrl(team, name)}/resources/${enc(n)}">
        <g class="box resource${err}" data-resource="${esc(n)}">
        <rect x="${p.x}" y="${p.y}" width="${W}" height="${H}" rx="22"></rect>
        <text x="${p.x + 14}" y="${p.y + 18}">${esc(n)}</text>
        <text class="sub" x="${p.x + 14}" y="${p.y + 35}">${esc(r.type_)}${r.pinned ? " · pinned" : ""}${r.check_error ? " · check failed" : ""}</text>
        </g></a>`);
    }
  }
  $("pipeline-graph").innerHTML = `<svg width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">${edges.join("")}${boxes.join("")}</svg>`;
}

function pipelineActions(team, name, p) {
  const base = apiPipeline(team, name);
  $("pipeline-status").innerHTML = (p.archived ? badge("archived") : "") + (p.paused ? badge("paused") : "");
  setHtml($("pipeline-actions"), p.archived ? "" :
    (p.paused
      ? actionButton("unpausePipeline", "Unpause pipeline", { path: `${base}/unpause` })
      : actionButton("pausePipeline", "Pause pipeline", { path: `${base}/pause` }))
    + actionButton("archivePipeline", "Archive…", { path: `${base}/archive`, confirm: "Archive: click again" }, "danger"));
}

function pipelinePage(team, name) {
  $("pipeline").hidden = false;
  $("crumbs").innerHTML = `/ ${esc(team)} / <a href="${pipelineUrl(team, name)}">${esc(name)}</a>`;
  $("pipeline-title").textContent = name;
  document.title = `Gantry · ${name}`;
  wireActions($("pipeline-actions"), $("pipeline-result"));
  follow(team, name, {}, ({ pipeline, jobs, resources }) => {
    drawPipeline(team, name, jobs, resources.filter((r) => !r.resource_type), pipeline.paused);
    pipelineActions(team, name, pipeline);
  });
}

// ----------------------------------------------------------------- a job

const inputsOf = (versions) => (versions || []).map((i) =>
  `<span class="tag">${esc(i.name)}</span><span class="mono muted">${esc(JSON.stringify(i.version))}</span>`).join(" ");

// A row of a job's builds: its inputs, who triggered it, its duration,
// and its re-run (finished) or abort (running).
function jobBuildRow(b, inputs, base) {
  const number = b.build_number ?? b.id;
  const acts = FINAL.includes(b.status)
    ? actionButton("rerunJobBuild", "Re-run", { path: `${base}/builds/${enc(number)}`, method: "POST" }, "", `Re-run build ${b.name ?? number}`)
    : actionButton("abortBuild", "Abort", { path: `/api/v1/builds/${b.id}/abort` }, "danger", `Abort build ${b.name ?? number}`);
  const dur = b.finished_at
    ? `<td class="num" data-from="${b.created_at}" data-to="${b.finished_at}"></td>`
    : `<td class="num" data-from="${b.created_at}"></td>`;
  return `<tr data-build="${b.id}" data-status="${esc(b.status)}">
      <td><a href="/builds/${b.id}">#${esc(b.name ?? number)}</a></td>
      <td>${badge(b.status)}</td><td>${inputsOf(inputs)}</td>
      <td class="muted">${esc(b.created_by || "")}</td>
      <td class="muted" data-since="${b.created_at}"></td>${dur}
      <td class="row-actions">${acts}</td></tr>`;
}

// The job's builds older than the live list's newest 50, a page of 50 at
// a time from the paged API (its `gantry-next-cursor`), with their inputs.
async function olderJobBuilds(base) {
  const button = $("job-more");
  let cursor = button.dataset.cursor;
  if (!cursor) {
    const shown = [...document.querySelectorAll("#job-builds tr[data-build]")].map((r) => +r.dataset.build);
    if (!shown.length) return;
    cursor = String(Math.min(...shown));
  }
  button.disabled = true;
  try {
    const r = await fetch(`${base}/builds?limit=50&cursor=${enc(cursor)}`, { headers: authHeaders });
    if (!r.ok) throw new Error((await r.json().catch(() => ({}))).error || `HTTP ${r.status}`);
    const page = await r.json();
    const inputs = await Promise.all(page.map((b) =>
      fetch(`/api/v1/builds/${b.id}/resources`, { headers: authHeaders })
        .then((a) => (a.ok ? a.json() : null)).then((got) => got && got.inputs).catch(() => null)));
    $("job-older").insertAdjacentHTML("beforeend", page.map((b, i) => jobBuildRow(b, inputs[i], base)).join(""));
    const next = r.headers.get("gantry-next-cursor");
    button.dataset.cursor = next || "";
    button.hidden = !next;
    tick();
  } catch (err) {
    $("job-result").className = "result error";
    $("job-result").textContent = `older builds: ${err.message}`;
  }
  button.disabled = false;
}

function jobPage(team, name, job) {
  $("job").hidden = false;
  $("crumbs").innerHTML = `/ ${esc(team)} / <a href="${pipelineUrl(team, name)}">${esc(name)}</a> / ${esc(job)}`;
  $("job-title").textContent = `${name}/${job}`;
  document.title = `Gantry · ${name}/${job}`;
  const base = `${apiPipeline(team, name)}/jobs/${enc(job)}`;
  wireActions($("job-actions"), $("job-result"));
  wireActions($("job-builds"), $("job-result"));
  wireActions($("job-older"), $("job-result"));
  $("job-more").onclick = () => olderJobBuilds(base);
  follow(team, name, { job }, ({ job: j, builds, inputs }) => {
    const d = j.decision;
    setHtml($("job-why"), d ? `<p>${esc(d.outcome)}</p>` + Object.entries(d.unsatisfied || {})
      .map(([i, why]) => `<p class="muted">input ${esc(i)}: ${esc(why)}</p>`).join("") : "");
    $("job-status").innerHTML = j.paused ? badge("paused") : "";
    setHtml($("job-actions"), actionButton("triggerJob", "Trigger build", { path: `${base}/builds`, method: "POST" })
      + (j.paused
        ? actionButton("unpauseJob", "Unpause job", { path: `${base}/unpause` })
        : actionButton("pauseJob", "Pause job", { path: `${base}/pause` })));
    const head = `<tr><th>build</th><th>status</th><th>inputs</th><th>by</th><th>started</th><th class="num">duration</th><th><span class="muted">actions</span></th></tr>`;
    setHtml($("job-builds"), builds.length
      ? head + builds.map((b) => jobBuildRow(b, inputs[b.id], base)).join("")
      : `<tr><td class="muted">No builds yet.</td></tr>`);
    // The live list holds the newest 50: older ones are a click away.
    if (builds.length >= 50 && !$("job-more").dataset.cursor && !$("job-older").rows.length) $("job-more").hidden = false;
  });
}

// ------------------------------------------------------------ a resource

function resourcePage(team, name, resource) {
  $("resource").hidden = false;
  $("crumbs").innerHTML = `/ ${esc(team)} / <a href="${pipelineUrl(team, name)}">${esc(name)}</a> / ${esc(resource)}`;
  $("resource-title").textContent = resource;
  document.title = `Gantry · ${name}/${resource}`;
  const base = `${apiPipeline(team, name)}/resources/${enc(resource)}`;
  // The comment a pin gets: typed once, kept across refreshes.
  if (can("setPinCommentOnResource")) {
    $("resource-actions").insertAdjacentHTML("afterend",
      `<p><label class="inline" for="pin-comment">Pin comment <input type="text" id="pin-comment" maxlength="4096" placeholder="why this version"></label></p>`);
  }
  const bar = document.createElement("div");
  bar.className = "actions";
  $("resource-actions").appendChild(bar);
  wireActions(bar, $("resource-result"));
  wireActions($("resource-versions"), $("resource-result"));
  follow(team, name, { resource }, ({ resource: r, versions }) => {
    const c = r.last_check;
    const pinned = r.pinned ? JSON.stringify(r.pinned) : null;
    setHtml($("resource-check"), (c ? `last check ${badge(c.status)} <a href="/builds/${c.id}">build ${c.id}</a> <span class="muted" data-since="${c.created_at}"></span>` : "not checked yet")
      + (r.check_error ? `<div class="error-box">${esc(r.check_error)}</div>` : "")
      + (pinned ? `<p id="resource-pin">pinned to <span class="mono">${esc(pinned)}</span>${r.pin_comment ? ` · <span class="muted">${esc(r.pin_comment)}</span>` : ""}</p>` : ""));
    setHtml(bar, actionButton("checkResource", "Check now", { path: `${base}/check`, method: "POST" })
      + (pinned ? actionButton("unpinResource", "Unpin", { path: `${base}/unpin` }) : ""));
    const head = `<tr><th>version</th><th>state</th><th>builds</th><th><span class="muted">actions</span></th></tr>`;
    setHtml($("resource-versions"), versions.length ? head + versions.map((v) => {
      const text = JSON.stringify(v.version);
      const at = `${base}/versions/${v.id}`;
      const acts = (text === pinned ? "" : actionButton("pinResourceVersion", "Pin", { path: `${at}/pin`, comment: `${base}/pin_comment` }, "", `Pin version ${text}`))
        + (v.enabled
          ? actionButton("disableResourceVersion", "Disable", { path: `${at}/disable` }, "", `Disable version ${text}`)
          : actionButton("enableResourceVersion", "Enable", { path: `${at}/enable` }, "", `Enable version ${text}`));
      const meta = (v.metadata || []).map((m) =>
        `<span class="meta-pair"><span class="muted">${esc(m.name)}</span> ${esc(m.value)}</span>`).join(" ");
      return `<tr data-version="${esc(text)}">
      <td><span class="mono">${esc(text)}</span>${meta ? `<div class="version-meta">${meta}</div>` : ""}</td>
      <td>${text === pinned ? badge("pinned") : ""}${v.enabled ? "" : badge("disabled")}</td>
      <td class="version-builds">${(v.builds || []).map((b) =>
        `<a href="/builds/${b.id}" title="${b.direction === "output" ? "made by" : "used by"} ${esc(b.job)} #${esc(b.name)}">${esc(b.job)} #${esc(b.name)}${b.direction === "output" ? " ↑" : ""}</a>`).join(" ")}</td>
      <td class="row-actions">${acts}</td></tr>`;
    }).join("") : `<tr><td class="muted">No versions yet.</td></tr>`);
  });
}

// ---------------------------------------------------------------- routing

// Answers whether the path was a pipeline's page (then it is shown).
function pipelineRoutes() {
  const m = /^\/teams\/([^/]+)\/pipelines\/([^/]+)(?:\/(jobs|resources)\/([^/]+))?\/?$/.exec(location.pathname);
  if (!m) return false;
  const [team, name, kind, item] = [m[1], m[2], m[3], m[4]].map((s) => s && decodeURIComponent(s));
  if (kind === "jobs") jobPage(team, name, item);
  else if (kind === "resources") resourcePage(team, name, item);
  else pipelinePage(team, name);
  return true;
}
