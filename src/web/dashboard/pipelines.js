// Gantry's dashboard, stored pipelines: the list on the overview, a
// pipeline's page (a graph of its jobs and resources, edges drawn from
// `passed` and triggers, each job's newest build), a job's page (its
// builds and their inputs) and a resource's (its versions, last check and
// pin). Each page reads the API again every second: statuses change in
// place, without a reload. Uses app.js's helpers ($, esc, badge, ago...).
"use strict";

const enc = encodeURIComponent;

async function api(path) {
  const r = await fetch(path, { headers: authHeaders });
  if (!r.ok) {
    let message = `${r.status}`;
    try { message = (await r.json()).error; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  return r.json();
}

const pipelineUrl = (team, p) => `/teams/${enc(team)}/pipelines/${enc(p)}`;
const apiPipeline = (team, p) => `/api/v1/teams/${enc(team)}/pipelines/${enc(p)}`;

// Reads `load` every second while the page is open; `draw` shows it.
function every(load, draw) {
  const step = async () => {
    try {
      draw(await load());
      setLive(true, "live");
    } catch (err) {
      setLive(false, "reconnecting: " + err.message);
    }
    setTimeout(step, 1000);
  };
  step();
}

// ------------------------------------------------------------ the overview

// The pipelines of every team the viewer may see, on the overview.
async function pipelinesPanel() {
  const el = $("pipelines");
  try {
    const teams = await api("/api/v1/teams");
    const rows = [];
    for (const t of teams) {
      for (const p of await api(`/api/v1/teams/${enc(t.name)}/pipelines`)) {
        rows.push(`<tr data-pipeline="${esc(t.name)}/${esc(p.name)}">
          <td><a href="${pipelineUrl(t.name, p.name)}">${esc(p.name)}</a></td>
          <td class="muted">${esc(t.name)}</td>
          <td>${p.paused ? badge("paused") : ""}</td>
          <td class="muted">config v${esc(p.config_version)}</td></tr>`);
      }
    }
    el.innerHTML = rows.length ? `<table class="rows">${rows.join("")}</table>`
      : `<p class="muted">none yet: gantry set-pipeline -p NAME -c pipeline.yml</p>`;
  } catch (err) {
    el.innerHTML = `<p class="muted">${esc(err.message)}</p>`;
  }
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
  $("pipeline-status").innerHTML = paused ? badge("paused") : "";
}

function pipelinePage(team, name) {
  $("pipeline").hidden = false;
  $("crumbs").innerHTML = `/ ${esc(team)} / <a href="${pipelineUrl(team, name)}">${esc(name)}</a>`;
  $("pipeline-title").textContent = name;
  every(async () => Promise.all([
    api(apiPipeline(team, name)),
    api(`${apiPipeline(team, name)}/jobs`),
    api(`${apiPipeline(team, name)}/resources`),
  ]), ([p, jobs, resources]) =>
    drawPipeline(team, name, jobs, resources.filter((r) => !r.resource_type), p.paused));
}

// ----------------------------------------------------------------- a job

async function inputsOf(build) {
  const r = await api(`/api/v1/builds/${build.id}/resources`);
  return r.inputs.map((i) => `<span class="tag">${esc(i.name)}</span><span class="mono muted">${esc(JSON.stringify(i.version))}</span>`).join(" ");
}

function jobPage(team, name, job) {
  $("job").hidden = false;
  $("crumbs").innerHTML = `/ ${esc(team)} / <a href="${pipelineUrl(team, name)}">${esc(name)}</a> / ${esc(job)}`;
  $("job-title").textContent = `${name}/${job}`;
  const inputs = {};
  every(async () => Promise.all([
    api(`${apiPipeline(team, name)}/jobs/${enc(job)}`),
    api(`${apiPipeline(team, name)}/jobs/${enc(job)}/builds?limit=50`),
  ]), async ([j, builds]) => {
    const d = j.decision;
    $("job-why").innerHTML = d ? `<p>${esc(d.outcome)}</p>` + Object.entries(d.unsatisfied || {})
      .map(([i, why]) => `<p class="muted">input ${esc(i)}: ${esc(why)}</p>`).join("") : "";
    $("job-status").innerHTML = j.paused ? badge("paused") : "";
    for (const b of builds) {
      if (!inputs[b.id]) inputs[b.id] = await inputsOf(b).catch(() => "");
    }
    $("job-builds").innerHTML = builds.map((b) => `<tr data-build="${b.id}" data-status="${esc(b.status)}">
      <td><a href="/builds/${b.id}">#${esc(b.name ?? b.build_number ?? b.id)}</a></td>
      <td>${badge(b.status)}</td><td>${inputs[b.id] || ""}</td>
      <td class="muted" data-since="${b.created_at}">${ago(b.created_at)}</td></tr>`).join("");
  });
}

// ------------------------------------------------------------ a resource

function resourcePage(team, name, resource) {
  $("resource").hidden = false;
  $("crumbs").innerHTML = `/ ${esc(team)} / <a href="${pipelineUrl(team, name)}">${esc(name)}</a> / ${esc(resource)}`;
  $("resource-title").textContent = resource;
  every(async () => Promise.all([
    api(`${apiPipeline(team, name)}/resources`),
    api(`${apiPipeline(team, name)}/resources/${enc(resource)}/versions?limit=50`),
  ]), ([resources, versions]) => {
    const r = resources.find((x) => x.name === resource && !x.resource_type);
    if (!r) throw new Error(`no resource ${resource}`);
    const c = r.last_check;
    $("resource-check").innerHTML = (c ? `last check ${badge(c.status)} <a href="/builds/${c.id}">build ${c.id}</a> <span class="muted" data-since="${c.created_at}">${ago(c.created_at)}</span>` : "not checked yet")
      + (r.check_error ? `<div class="error-box">${esc(r.check_error)}</div>` : "")
      + (r.pinned ? `<p>pinned to <span class="mono">${esc(JSON.stringify(r.pinned))}</span></p>` : "");
    $("resource-versions").innerHTML = versions.map((v) => `<tr data-version="${esc(JSON.stringify(v.version))}">
      <td class="mono">${esc(JSON.stringify(v.version))}</td><td>${v.disabled ? badge("disabled") : ""}</td></tr>`).join("");
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
