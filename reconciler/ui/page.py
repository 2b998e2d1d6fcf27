"""The status page: one static HTML document; its script reads /api/status every 2 s and draws it.
No framework, no build step, nothing loaded from elsewhere."""

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>reconciler</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
:root{--bg:#f6f7f9;--card:#fff;--ink:#1f2937;--mute:#6b7280;--line:#e5e7eb;--ok:#059669;--warn:#d97706;--bad:#dc2626}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;background:var(--bg);color:var(--ink)}
header{display:flex;gap:16px;align-items:baseline;padding:12px 22px;background:#111827;color:#f9fafb}
header h1{font-size:17px;margin:0}header .meta{color:#9ca3af;font-size:12px}
main{padding:16px 22px;display:grid;gap:16px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 16px}
.card h2{font-size:15px;margin:0 0 8px;display:flex;gap:10px;align-items:center;flex-wrap:wrap}
.card h3{font-size:12px;margin:12px 0 4px;color:var(--mute);text-transform:uppercase;letter-spacing:.04em}
table{border-collapse:collapse;width:100%;font-size:13px}
th{text-align:left;color:var(--mute);font-weight:600;border-bottom:1px solid var(--line);padding:4px 8px}
td{border-bottom:1px solid #f1f2f4;padding:4px 8px;vertical-align:top}
.pill{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;background:#eef2ff;color:#3730a3}
.Ready{background:#d1fae5;color:#065f46}.Progressing,.Starting,.Pending,.Waiting,.Outdated{background:#fef3c7;color:#92400e}
.Degraded,.BackOff,.Failed,.Error,.Invalid{background:#fee2e2;color:#991b1b}.Suspended,.ScaledToZero{background:#e5e7eb;color:#374151}
.reason{color:var(--bad);font-weight:600}.warning{color:var(--warn);font-weight:600}.ManifestMissing{background:#fef3c7;color:#92400e}.msg{color:var(--mute);font-size:12px}
.roles span{margin-right:10px}.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(330px,1fr));gap:8px}
svg.chart{width:100%;height:auto;background:#fcfcfd;border:1px solid var(--line);border-radius:6px}
svg .grid{stroke:#eceef1}svg .ax{font-size:10px;fill:#9ca3af}svg .ct{font-size:12px;font-weight:600;fill:#374151}
svg .lg{font-size:10px;font-weight:600}svg .empty{font-size:12px;fill:#9ca3af}
.empty-section{color:var(--mute);font-style:italic}
#stale{display:none;color:#fca5a5}
</style></head>
<body>
<header><h1>reconciler</h1><span class="meta" id="meta">loading…</span><span class="meta" id="stale">not updating: the reconciler does not answer</span></header>
<main>
<section class="card" id="overview"><h2>Deployments</h2><table id="deployments"><thead><tr>
<th>NAME</th><th>READY</th><th>UP-TO-DATE</th><th>AVAILABLE</th><th>STATUS</th><th>REASON</th><th>RESTARTS</th><th>ENDPOINT</th><th>MODEL</th></tr></thead><tbody></tbody></table></section>
<div id="details"></div>
<section class="card"><h2>Autoscaler decisions</h2><div id="autoscaler" class="empty-section"></div></section>
<section class="card"><h2>Recent events</h2><table id="events"><thead><tr><th>TIME</th><th>KIND</th><th>RECIPE</th><th>MESSAGE</th></tr></thead><tbody></tbody></table></section>
</main>
<script>
"use strict";
const $ = (s, el) => (el || document).querySelector(s);
function esc(v){return String(v ?? "").replace(/[&<>"']/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;","'":"&#39;"}[c]));}
function pill(p){return `<span class="pill ${esc(p)}">${esc(p)}</span>`;}
function ready(roles){return Object.entries(roles||{}).filter(([r]) => r !== "frontend").map(([r,c]) => `<span>${esc(r)} ${c.ready}/${c.desired}</span>`).join("");}
function count(d, k){const n = (d.replicas||{})[k]; return n === undefined || n === null ? "-" : esc(n);}
function avail(d){return d.available === null || d.available === undefined ? "" : `<div class="msg">${d.available ? "Available" : "not Available"}: ${esc(d.availableMessage)} (since ${esc(d.availableSince)})</div>`;}
function ports(p){return Object.entries(p||{}).map(([k,v]) => `${esc(k)}=${esc(v)}`).join(" ");}
function unitRows(d, units){
  return units.map(u => `<tr data-recipe="${esc(d.name)}" data-unit="${esc(u.name)}">
  <td class="mono">${esc(u.name)}</td><td class="phase">${pill(u.phase)}</td><td>${esc(u.nodes.join(","))||"-"}</td>
  <td class="mono">${ports(u.ports)||"-"}</td><td class="life mono">${u.life}${u.steps.length ? " (step " + esc(u.steps.join(",")) + ")" : ""}</td>
  <td class="restarts">${u.restarts}</td><td>${u.reason ? `<span class="reason">${esc(u.reason)}</span><div class="msg">${esc(u.message)}</div>` : "-"}</td></tr>`).join("");
}
const UNIT_HEAD = "<tr><th>UNIT</th><th>PHASE</th><th>NODE</th><th>PORTS</th><th>LIFE</th><th>RESTARTS</th><th>REASON</th></tr>";
function detail(d){
  const p = d.plots || {};
  const bench = d.benchmark ? `<pre class="mono">${esc(JSON.stringify(d.benchmark, null, 2))}</pre>`
    : `<div class="empty-section">no benchmark runs for this deployment (reconcile.benchmark; state/${esc(d.name)}/benchmarks/)</div>`;
  return `<section class="card" data-deployment="${esc(d.name)}"><h2>${esc(d.shown||d.name)} ${pill(d.phase)}
  <span class="roles">${ready(d.roles)}</span>${d.endpoint ? `<span class="mono">${esc(d.endpoint)}</span>` : ""}${d.servedModel ? `<span class="msg">model <span class="mono">${esc(d.servedModel)}</span></span>` : ""}</h2>
  ${d.reason ? `<div><span class="${d.warning ? "warning" : "reason"}">${esc(d.reason)}</span> <span class="msg">${esc(d.reasonMessage)}</span></div>` : ""}
  ${avail(d)}${d.progress ? `<div class="msg">${esc(d.progress)}</div>` : ""}${d.error ? `<div class="reason">${esc(d.error)}</div>` : ""}
  <div class="charts">${p.requests||""}${p.ttft||""}${p.itl||""}${p.workers||""}</div>
  ${startup(d.startup)}<h3>Workers</h3><table class="units">${UNIT_HEAD}${unitRows(d, d.workers)}</table>
  ${d.services.length ? `<h3>Services and frontend</h3><table class="units">${UNIT_HEAD}${unitRows(d, d.services)}</table>` : ""}
  <h3>Benchmark results</h3>${bench}</section>`;
}
function startup(s){
  const rows = Object.entries(s||{}).map(([r, v]) => `<span data-role="${esc(r)}">${esc(r)}: ${esc(v.text)}${v.routedP90 != null ? ` · first request p90 ${esc(Math.round(v.routedP90))}s` : ""}</span>`);
  return rows.length ? `<div class="startup msg">startup (launch to Ready) ${rows.join(" · ")}</div>` : "";
}
function inputs(i){return Object.entries(i||{}).map(([k,v]) => `${esc(k)}=${esc(v)}`).join(" ");}
function drawAutoscaler(a){
  const el = $("#autoscaler");
  if (!a.available) { el.className = "empty-section"; el.textContent = "no deployment is autoscaled (reconcile.autoscale): no decisions to show"; return; }
  el.className = "";
  const roles = Object.entries(a.deployments).flatMap(([n, rs]) => Object.entries(rs).map(([r, v]) => `<tr data-recipe="${esc(n)}" data-role="${esc(r)}">
    <td>${esc(n)}</td><td>${esc(r)}</td><td class="desired">${esc(v.desired)}${(v.spares||[]).length ? `<div class="msg spares">+ warm ${esc(v.spares.map(s => s.name + (s.ready ? "" : " (starting)")).join(", "))}</div>` : ""}</td><td>${esc(v.ready)}</td><td>${esc(v.min)}-${esc(v.max)}</td>
    <td>${esc(v.reason)}<div class="msg mono">${inputs(v.inputs)}</div></td><td class="mono">${esc(v.at)}</td></tr>`)).join("");
  const decs = a.decisions.map(d => `<tr><td class="mono">${esc(d.at)}</td><td>${esc(d.shown||d.recipe)}</td><td>${esc(d.role)}</td>
    <td class="change">${esc(d.from)} &rarr; ${esc(d.to)}</td><td>${esc(d.reason)}<div class="msg mono">${inputs(d.inputs)}</div></td></tr>`).join("");
  el.innerHTML = `<table id="autoscale-roles"><thead><tr><th>DEPLOYMENT</th><th>ROLE</th><th>DESIRED</th><th>READY</th><th>MIN-MAX</th><th>LAST LOOK</th><th>AT</th></tr></thead><tbody>${roles}</tbody></table>
    <h3>Decisions</h3>` + (decs ? `<table id="autoscale-decisions"><thead><tr><th>TIME</th><th>DEPLOYMENT</th><th>ROLE</th><th>COUNT</th><th>WHY</th></tr></thead><tbody>${decs}</tbody></table>`
    : `<div class="empty-section">no count changed yet</div>`);
}
function draw(s){
  $("#meta").textContent = `instance ${s.settings.instance} · ${s.settings.driver} · cluster config ${s.settings.clusterConfigInForce||"none"} · tick ${s.controller.ticks} · ${s.generatedAt}`;
  $("#deployments tbody").innerHTML = s.deployments.map(d => `<tr data-recipe="${esc(d.name)}">
    <td><a href="#${esc(d.name)}">${esc(d.shown||d.name)}</a></td><td class="roles">${ready(d.roles)}</td><td class="uptodate">${count(d, "upToDate")}</td><td class="available">${count(d, "available")}</td><td class="status">${pill(d.phase)}</td>
    <td>${d.reason ? `<span class="${d.warning ? "warning" : "reason"}">${esc(d.reason)}</span>` : "-"}</td>
    <td>${d.workers.concat(d.services).reduce((a,u) => a + u.restarts, 0)}</td><td class="mono">${esc(d.endpoint||"-")}</td>
    <td class="mono model">${esc(d.servedModel||"-")}</td></tr>`).join("")
    || `<tr><td colspan="9" class="empty-section">no deployments: drop a recipe into ${esc(s.settings.manifests)}</td></tr>`;
  $("#details").innerHTML = s.deployments.map(detail).join("");
  drawAutoscaler(s.autoscaler);
  $("#events tbody").innerHTML = s.events.map(e => `<tr><td class="mono">${esc(e.time)}</td><td>${esc(e.kind)}</td><td>${esc(e.recipe||"-")}</td><td>${esc(e.message)}</td></tr>`).join("");
}
async function refresh(){
  try { const r = await fetch("api/status", {cache: "no-store"}); draw(await r.json()); $("#stale").style.display = "none"; }
  catch (e) { $("#stale").style.display = "inline"; }
}
refresh(); setInterval(refresh, 2000);
</script></body></html>
"""
