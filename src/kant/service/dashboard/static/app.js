// The kant dashboard: one page, plain ES module, no build step. It reads the /v1 API with the token
// the user logs in with (kept in sessionStorage), and /v1/dashboard/* for the cluster map, tenants
// and time series; a fetch-based server-sent-event reader (EventSource cannot send a bearer token)
// brings new samples and state changes. Simulation results are opened from a file, in the browser.

const $ = (sel, root = document) => root.querySelector(sel);
const view = $("#view");
const S = {
  token: sessionStorage.getItem("kant-token"),
  who: null,
  colorBy: "tenant",
  leafOrder: "name",
  map: null,
  samples: [],       // time-series samples, by id, oldest first
  seq: 0,
  version: null,     // the loop's state version the stream last said
  stateAt: null,     // when the stream last said it changed (performance.now())
  charts: [],
  stream: null,
  route: "",
  renders: 0,
  results: null,     // the opened result.json / comparison.json
  queueSort: { col: "pos", dir: "asc" },
  queueText: "",
  queueReason: "",
  tenantSort: { col: "used", dir: "desc" },
};

// --- formatting ----------------------------------------------------------------------------------
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const num = (x, d = 1) => (x == null ? "n/a" : Number(x).toFixed(d));
const int = (x) => (x == null ? "n/a" : Number(x).toLocaleString("en-US"));
// the shared rules (format.js, also inlined in the simulate and compare reports): durations as the CLI
// writes them, clock readings, the colour-blind-safe palette
const { dur, clockText, pct, PALETTE, TIME_INCRS } = window.kantFormat;
// tenants' colours: PALETTE; a tenant keeps its colour while the page is open (given in order of first
// sight, names sorted within a batch); past the palette, colours repeat striped
const tenantSeen = new Map();
function meetTenants(names) {
  for (const n of [...names].filter((x) => x !== "others" && !tenantSeen.has(x)).sort()) tenantSeen.set(n, tenantSeen.size);
}
function tenantColor(name) {
  if (name === "others") return "var(--others)";
  meetTenants([name]);
  const i = tenantSeen.get(name);
  const c = PALETTE[i % PALETTE.length];
  return i < PALETTE.length ? c : `repeating-linear-gradient(135deg, ${c} 0 3px, #fff 3px 4px)`;
}
const kindColor = (kind) => (kind === "inference" ? "var(--inference)" : "var(--training)");
// (for the browser tests: the formatters, and the charts drawn)
window.kant = { dur, clockText, tenantColor, PALETTE, charts: () => S.charts.map((c) => c.u) };

// --- the API ------------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}
async function api(path, init = {}) {
  const r = await fetch(path, { ...init, headers: { Authorization: `Bearer ${S.token}`, ...(init.headers || {}) } });
  if (!r.ok) {
    let msg = r.statusText;
    try { msg = (await r.json()).message || msg; } catch { /* not JSON */ }
    throw new ApiError(r.status, `${r.status}: ${msg}`);
  }
  return r.json();
}

// --- login ----------------------------------------------------------------------------------------
async function login(token) {
  S.token = token;
  try {
    S.who = await api("/v1/dashboard/whoami");
  } catch (e) {
    S.token = null;
    S.who = null;
    sessionStorage.removeItem("kant-token");
    throw e;
  }
  sessionStorage.setItem("kant-token", token);
  $("#who").textContent = S.who.role === "admin" ? "admin" : `tenant ${S.who.tenant}`;
  $("#nav").hidden = false;
  $("#logout").hidden = false;
  $("#login").hidden = true;
  const cl = await api("/v1/cluster");
  S.policy = cl.policy;
  S.clockKind = cl.clock;
  // every tenant's colour from the whole list, sorted: the same on every page (a tenant: itself)
  meetTenants(S.who.role === "admin" ? (await api("/v1/dashboard/tenants")).tenants.map((t) => t.tenant) : [S.who.tenant]);
  await loadSeries();
  openStream();
  tickClock();
}
// the header's "now": the service clock (GET /v1/clock), read every 2 s
async function tickClock() {
  clearTimeout(S.clockTimer);
  if (!S.token) return;
  try {
    const c = await api("/v1/clock");
    S.clockKind = c.kind;
    S.now = c.now;
    const el = $("#now");
    el.textContent = `${clockText(c.now, c.kind)}${c.kind === "wall" ? "" : ` · ${c.kind} clock`}`;
    el.dataset.value = String(c.now);
  } catch { /* shown again at the next tick */ }
  S.clockTimer = setTimeout(tickClock, 2000);
}
function logout() {
  sessionStorage.removeItem("kant-token");
  location.hash = "#/cluster";
  location.reload();
}
$("#login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("#login-error").textContent = "";
  try {
    await login($("#token").value.trim());
    await render();
  } catch (e) {
    $("#login-error").textContent = e.status === 401 ? "This token is not valid (unknown, expired or revoked)." : String(e.message || e);
  }
});
$("#logout").addEventListener("click", logout);

// --- live updates: server-sent events over fetch ---------------------------------------------------
function addSamples(samples) {
  for (const s of samples) {
    const last = S.samples[S.samples.length - 1];
    if (last && last.id === s.id) S.samples[S.samples.length - 1] = s;
    else S.samples.push(s);
  }
  if (S.samples.length > 3600) S.samples.splice(0, S.samples.length - 3600);
}
async function loadSeries() {
  const out = await api(`/v1/dashboard/series?after=${S.seq}`);
  addSamples(out.samples);
  S.seq = out.seq;
}
let refreshTimer = null;
let lastRefresh = 0;
function onState() {
  // the cluster changed: read the live views again, at once, then at most once a second
  if (refreshTimer) return;
  const wait = Math.max(0, lastRefresh + 1000 - Date.now());
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    lastRefresh = Date.now();
    if (["cluster", "queue", "tenants", "services"].includes(routeName())) render(true);
  }, wait);
}
async function openStream() {
  if (S.stream) return;
  const ctrl = new AbortController();
  S.stream = ctrl;
  while (S.stream === ctrl && S.token) {
    try {
      const r = await fetch(`/v1/dashboard/stream?after=${S.seq}`, { headers: { Authorization: `Bearer ${S.token}` }, signal: ctrl.signal });
      if (!r.ok) throw new ApiError(r.status, r.statusText);
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const chunk = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let event = "message", data = "";
          for (const line of chunk.split("\n")) {
            if (line.startsWith("event:")) event = line.slice(6).trim();
            else if (line.startsWith("data:")) data += line.slice(5).trim();
          }
          if (!data) continue;
          const msg = JSON.parse(data);
          if (event === "samples") {
            addSamples(msg.samples);
            S.seq = msg.seq;
            if (routeName() === "charts") drawCharts();
          } else if (event === "state") {
            // (the first answer of a stream is the version now: the page just read that state)
            if (S.version != null && msg.version !== S.version) { S.stateAt = performance.now(); onState(); }
            S.version = msg.version;
          }
        }
      }
    } catch (e) {
      if (ctrl.signal.aborted) return;
    }
    await new Promise((res) => setTimeout(res, 2000));
  }
}

// --- routing --------------------------------------------------------------------------------------
function parseRoute() {
  const h = location.hash.replace(/^#\/?/, "") || "cluster";
  const [path, qs] = h.split("?");
  return { parts: path.split("/").map(decodeURIComponent), query: new URLSearchParams(qs || "") };
}
const routeName = () => parseRoute().parts[0];

let rendering = 0;
async function render(refresh = false) {
  const { parts, query } = parseRoute();
  const name = parts[0];
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.view === name);
  $("#error").textContent = "";
  if (name !== "results" && !S.token) {
    $("#login").hidden = false;
    view.innerHTML = "";
    return;
  }
  const ticket = ++rendering;
  try {
    let html;
    if (name === "cluster") html = await clusterView(parts[2] && parts[1] === "leaf" ? parts[2] : null);
    else if (name === "queue") html = await queueView(query);
    else if (name === "tenants") html = await tenantsView();
    else if (name === "services") html = await servicesView();
    else if (name === "charts") html = chartsView();
    else if (name === "job") html = await jobView(parts[1]);
    else if (name === "results") html = resultsView();
    else html = `<p>No page ${esc(name)}. <a href="#/cluster">Cluster</a></p>`;
    if (ticket !== rendering) return;  // a newer render started meanwhile
    const y = window.scrollY;
    // (a refresh keeps the field being typed in: its focus and caret)
    const focus = document.activeElement && document.activeElement.id && view.contains(document.activeElement)
      ? [document.activeElement.id, document.activeElement.selectionStart] : null;
    hideTip();  // (the cell it pointed at is gone)
    for (const c of S.charts) c.ro?.disconnect();
    view.innerHTML = html;
    if (refresh) window.scrollTo(0, y);
    if (focus) {
      const el = document.getElementById(focus[0]);
      if (el) { el.focus(); if (focus[1] != null && el.setSelectionRange) el.setSelectionRange(focus[1], focus[1]); }
    }
    after(name);
    S.renders += 1;
    view.dataset.ready = name;
    view.dataset.renders = String(S.renders);
    if (refresh && S.stateAt != null) view.dataset.updateMs = String(Math.round(performance.now() - S.stateAt));
  } catch (e) {
    if (ticket !== rendering) return;
    if (e.status === 401) { logout(); return; }
    view.innerHTML = "";
    $("#error").textContent = String(e.message || e);
    view.dataset.ready = `error:${name}`;
  }
}
function after(name) {
  if (name === "charts") drawCharts();
  if (name === "results") bindResults();
  if (name === "cluster") bindMap();
  if (name === "queue") bindQueue();
  if (name === "tenants") bindTenants();
  if (name === "services") refreshServices();
}
window.addEventListener("hashchange", () => { hideTip(); render(); });

// --- cluster: headline and map -----------------------------------------------------------------
function kpi(id, label, text, value) {
  return `<div class="kpi"><div class="v" data-testid="kpi-${id}" data-value="${value ?? ""}">${esc(text)}</div><div class="k">${esc(label)}</div></div>`;
}
// how each use of a node is drawn: the swatches show what the map draws (a full node: its cells in its
// tenants' colours; partly used: a dashed outline; cordoned, draining or drained: hatched; down: dark)
const USE_SWATCH = {
  full: `background:linear-gradient(90deg, ${PALETTE[0]} 0 33%, ${PALETTE[1]} 33% 66%, ${PALETTE[2]} 66%)`,
  partial: "background:linear-gradient(90deg, var(--c0) 0 50%, var(--free) 50%);outline:2px dashed var(--fg);outline-offset:1px;margin:0 .6em 0 .3em",
  empty: "background:var(--free)",
  cordoned: "background:var(--hatch)",
  down: "background:var(--down)",
};
function countsLine(c) {
  const item = (k, label) => `<span><span class="sw" style="${USE_SWATCH[k]}"></span>${label} <b data-testid="nodes-${k}">${c[k]}</b></span>`;
  return `<div class="legend">${item("full", "full")}${item("partial", "partly used")}${item("empty", "empty")}${item("cordoned", "cordoned, draining")}${item("down", "down")}</div>`;
}
async function clusterView(leaf) {
  const params = new URLSearchParams();
  if (leaf) params.set("leaf", leaf);
  const maxNodes = new URLSearchParams(location.search).get("max_nodes");
  if (maxNodes) params.set("max_nodes", maxNodes);
  // one snapshot: the headline comes with the map, from the same turn of the loop (GET /v1/dashboard/map)
  const [map, clock] = await Promise.all([api(`/v1/dashboard/map?${params}`), api("/v1/clock")]);
  S.map = map;
  S.clockKind = clock.kind;
  const h = map.headline;
  meetTenants(map.leaves.flatMap((l) => Object.keys(l.tenants)));
  const kpis = [
    kpi("gar", "GAR: allocated / all GPUs", pct(h.gar), h.gar),
    kpi("sor", "SOR", pct(h.sor), h.sor),
    kpi("gfr-nodes", "GFR: partly used nodes", pct(h.gfr_nodes), h.gfr_nodes),
    kpi("gfr-gpus", "GFR: free GPUs stranded", h.gfr_gpus == null ? "none free" : pct(h.gfr_gpus), h.gfr_gpus),
    kpi("allocated", `GPUs allocated of ${int(h.total_gpus)}`, int(h.allocated_gpus), h.allocated_gpus),
    kpi("queue", "jobs waiting", int(h.queue_len), h.queue_len),
    kpi("running", "jobs running", int(h.running_jobs), h.running_jobs),
  ].join("");
  const head = `<h1>Cluster <span class="muted">policy ${esc(S.policy || "")}</span></h1>
    <div class="kpis">${kpis}</div>
    <div class="toolbar">
      <label>Colour by <select id="color-by"><option value="tenant">tenant</option><option value="kind">job kind</option></select></label>
      ${countsLine(map.counts)}
      <span class="muted" data-testid="map-held" data-value="${map.used_gpus}">${int(map.nodes)} nodes, ${int(map.used_gpus)} of ${int(map.gpus)} GPUs held</span>
    </div>
    <div id="map-legend" class="legend"></div>`;
  return head + `<div id="map">${mapBody(map)}</div>`;
}
function mapBody(map) {
  if (map.leaf) {
    return `<p><a href="#/cluster">&larr; all leaves</a></p><h2>Leaf ${esc(map.leaf)}</h2>${nodesHtml(map.node_rows)}`;
  }
  if (map.detail) return nodesHtml(map.node_rows);
  return leavesHtml(map.leaves);
}
const OFF_STATES = { cordoned: "cordoned", draining: "draining", drained: "drained", down: "down" };
function nodeCells(n) {
  const cells = [];
  const off = n.state in OFF_STATES;
  const cls = n.state === "down" ? "down" : off ? "cordoned" : "";
  for (const j of n.jobs) {
    const color = S.colorBy === "kind" ? kindColor(j.kind) : tenantColor(j.tenant);
    const tip = `${j.id == null ? `${j.tenant}: ${j.gpus} GPU` : `job ${j.id} · ${j.tenant} · ${j.kind} · ${j.gpus} GPU`} on ${n.name}${off ? ` (${n.state})` : ""}`;
    for (let k = 0; k < j.gpus; k++) {
      cells.push(`<span class="cell${j.id != null ? " job" : ""}" style="background:${color}" data-tip="${esc(tip)}"${j.id != null ? ` data-job="${j.id}"` : ""} data-tenant="${esc(j.tenant)}"></span>`);
    }
  }
  for (let k = cells.length; k < n.gpus; k++) cells.push(`<span class="cell ${cls}" data-tip="${esc(n.name)}: free${off ? ` (${n.state})` : ""}"></span>`);
  return cells.join("");
}
function nodesHtml(nodes) {
  const bySpine = new Map();
  for (const n of nodes) {
    if (!bySpine.has(n.spine)) bySpine.set(n.spine, new Map());
    const leaves = bySpine.get(n.spine);
    if (!leaves.has(n.leaf)) leaves.set(n.leaf, []);
    leaves.get(n.leaf).push(n);
  }
  let out = "";
  for (const [spine, leaves] of bySpine) {
    out += `<div class="spine"><div class="title">${esc(spine)}</div>`;
    for (const [leaf, ns] of leaves) {
      out += `<div class="leaf" data-leaf="${esc(leaf)}"><div class="title">${esc(leaf)}</div>`;
      for (const n of ns) {
        const partial = n.state === "up" && n.used_gpus > 0 && n.used_gpus < n.gpus;
        const off = n.state in OFF_STATES;
        // (a node that takes no new work is marked whether or not jobs still run on it)
        out += `<div class="node${partial ? " partial" : ""}${off ? ` off ${n.state}` : ""}" data-node="${esc(n.name)}" data-used="${n.used_gpus}" data-state="${esc(n.state)}"><span class="name" title="${esc(n.name)} · ${esc(n.gpu_type)} · ${n.used_gpus}/${n.gpus} GPUs · ${esc(n.state)}">${esc(n.name)}</span><span class="cells">${nodeCells(n)}</span>${off ? `<span class="badge" data-testid="node-state">${esc(n.state)}</span>` : ""}</div>`;
      }
      out += "</div>";
    }
    out += "</div>";
  }
  return out || "<p>No nodes.</p>";
}
function barHtml(parts, total) {
  return `<span class="bar">${parts.filter(([, v]) => v > 0).map(([style, v, tip]) => `<span style="width:${(100 * v) / total}%;${style.includes(":") ? style : `background:${style}`}" title="${esc(tip)}"></span>`).join("")}</span>`;
}
const LEAF_ORDER = {
  name: null,
  partial: (a, b) => b.counts.partial - a.counts.partial,
  free: (a, b) => (b.gpus - b.used_gpus) - (a.gpus - a.used_gpus),
};
function leavesHtml(leaves) {
  const order = LEAF_ORDER[S.leafOrder];
  const sorted = order ? [...leaves].sort(order) : leaves;
  const rows = sorted.map((l) => {
    const c = l.counts;
    const nodesBar = barHtml([[USE_SWATCH.full, c.full, `${c.full} full`], ["background:linear-gradient(90deg, var(--c0) 0 50%, var(--free) 50%)", c.partial, `${c.partial} partly used`],
      [USE_SWATCH.empty, c.empty, `${c.empty} empty`], [USE_SWATCH.cordoned, c.cordoned, `${c.cordoned} cordoned`], [USE_SWATCH.down, c.down, `${c.down} down`]], l.nodes);
    const holders = S.colorBy === "kind" ? Object.entries(l.kinds).map(([k, g]) => [kindColor(k), g, `${k}: ${g} GPUs`])
      : Object.entries(l.tenants).sort().map(([t, g]) => [tenantColor(t), g, `${t}: ${g} GPUs`]);
    return `<tr data-leaf="${esc(l.leaf)}"><td>${esc(l.leaf)}</td><td>${esc(l.spine)}</td><td class="num">${l.nodes}</td>
      <td class="num" data-testid="leaf-used">${l.used_gpus} / ${l.gpus}</td><td class="num" data-testid="leaf-partial">${c.partial}</td>
      <td>${nodesBar}</td><td>${barHtml(holders, l.gpus)}</td></tr>`;
  }).join("");
  const opt = (v, label) => `<option value="${v}"${S.leafOrder === v ? " selected" : ""}>${label}</option>`;
  return `<p class="muted">${leaves.length} leaves; click one for its nodes. Sort by
    <select id="leaf-order">${opt("name", "name")}${opt("partial", "most partly used nodes")}${opt("free", "most free GPUs")}</select></p>
    <div class="scroll"><table class="leaves"><thead><tr><th>leaf</th><th>spine</th><th class="num">nodes</th><th class="num">GPUs held</th><th class="num">partly used</th><th>nodes: full · partly used · empty · cordoned · down</th><th>GPUs by ${S.colorBy === "kind" ? "job kind" : "tenant"}</th></tr></thead><tbody>${rows}</tbody></table></div>`;
}
// the legend: each tenant (or job kind) with its GPUs and its share of the cluster's GPUs, most first
function mapLegend(map) {
  const seen = new Map();
  const add = (t, g) => seen.set(t, (seen.get(t) || 0) + g);
  const share = (g) => `${((100 * g) / map.gpus).toFixed(1)}%`;
  const item = (style, name, g) => `<span data-legend="${esc(name)}"><span class="sw" style="${style}"></span>${esc(name)} <b>${g}</b> <span class="muted">${share(g)}</span></span>`;
  if (S.colorBy === "kind") {
    for (const l of map.leaves) for (const [k, g] of Object.entries(l.kinds)) add(k, g);
    return [...seen].map(([k, g]) => item(`background:${kindColor(k)}`, k, g)).join("");
  }
  for (const l of map.leaves) for (const [t, g] of Object.entries(l.tenants)) add(t, g);
  return [...seen].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([t, g]) => item(`background:${tenantColor(t)}`, t, g)).join("")
    + item("background:var(--free)", "free", map.gpus - map.used_gpus);
}
let tip = null;
function hideTip() { if (tip) tip.hidden = true; }
function bindMap() {
  const sel = $("#color-by");
  sel.value = S.colorBy;
  sel.addEventListener("change", () => {
    S.colorBy = sel.value;
    $("#map").innerHTML = mapBody(S.map);
    $("#map-legend").innerHTML = mapLegend(S.map);
  });
  $("#map-legend").innerHTML = mapLegend(S.map);
  const map = $("#map");
  map.addEventListener("change", (ev) => {
    if (ev.target.id !== "leaf-order") return;
    S.leafOrder = ev.target.value;
    map.innerHTML = mapBody(S.map);
  });
  map.addEventListener("click", (ev) => {
    hideTip();  // (and render() hides it too: the page it pointed into is replaced)
    const cell = ev.target.closest("[data-job]");
    if (cell) { location.hash = `#/job/${cell.dataset.job}`; return; }
    const row = ev.target.closest("tr[data-leaf]");
    if (row) location.hash = `#/cluster/leaf/${encodeURIComponent(row.dataset.leaf)}`;
  });
  map.addEventListener("mouseover", (ev) => {
    const t = ev.target.closest("[data-tip]");
    if (!t) { hideTip(); return; }
    if (!tip) { tip = document.createElement("div"); tip.id = "tip"; tip.setAttribute("role", "tooltip"); document.body.appendChild(tip); }
    tip.hidden = false;
    tip.textContent = t.dataset.tip;
    const r = t.getBoundingClientRect();
    // (inside the window: to the left of the cell near the right edge)
    const w = tip.offsetWidth;
    tip.style.left = `${r.right + 6 + w > window.innerWidth ? Math.max(0, r.left - 6 - w) : r.right + 6}px`;
    tip.style.top = `${r.top - 4}px`;
  });
  map.addEventListener("mouseleave", hideTip);
}
window.addEventListener("scroll", hideTip, { passive: true });

// --- queue ----------------------------------------------------------------------------------------
const STATE_FILTERS = { pending: ["pending"], running: ["running"], active: ["pending", "running"], ended: ["finished", "failed", "cancelled", "unschedulable"] };
// a predicted start in words from now, with its band: "in ~2h05m (1h10m–3h40m)"
function predictedText(r, now) {
  if (r.p50 == null) return r.as_of == null ? "" : "not in the twin's horizon";
  if (r.p50 <= now) return "any moment";
  // (the band where the twin's runs differ, as kant why says it)
  const lo = r.p10 == null ? "?" : dur(Math.max(0, r.p10 - now)), hi = r.p90 == null ? "later" : dur(r.p90 - now);
  const band = r.runs > 1 && lo !== hi ? ` (${lo}–${hi})` : "";
  return `in ~${dur(r.p50 - now)}${band}`;
}
// the sortable columns of the pending queue: how to compare two rows (ties: the scheduler's order)
const QUEUE_COLS = [
  ["pos", "#", "num", (r) => r.position], ["id", "job", "num", (r) => r.id], ["name", "name", "", (r) => r.name],
  ["tenant", "tenant", "", (r) => r.tenant], ["gpus", "GPUs", "num", (r) => r.gpus], ["wait", "waited", "num", (r) => -r.submit_time],
  ["predicted", "predicted start", "", (r) => (r.p50 == null ? Infinity : r.p50)], ["reason", "why it waits", "", (r) => r.reason],
];
function sortRows(rows, cols, sort) {
  const col = cols.find((c) => c[0] === sort.col) || cols[0];
  const key = col[3];
  const dir = sort.dir === "desc" ? -1 : 1;
  return [...rows].sort((a, b) => {
    const x = key(a), y = key(b);
    return (x < y ? -dir : x > y ? dir : 0) || (a.position ?? 0) - (b.position ?? 0) || (a.id ?? 0) - (b.id ?? 0);
  });
}
function sortHead(cols, sort) {
  return cols.map(([id, label, cls]) => `<th class="sort ${cls}" data-sort="${id}"${sort.col === id ? ` aria-sort="${sort.dir === "desc" ? "descending" : "ascending"}"` : ""}>${esc(label)}</th>`).join("");
}
const gpusText = (j) => (j.gpu_milli && j.gpus_per_worker <= 1 && j.gpu_milli < 1000 ? `${j.workers}×${j.gpu_milli / 1000}` : `${j.workers}×${j.gpus_per_worker}`);
async function queueView(q) {
  const filter = q.get("state") || "pending";
  const tenant = q.get("tenant") || "";
  const admin = S.who.role === "admin";
  const tenants = admin ? await api("/v1/dashboard/tenants") : null;
  const opt = (v, label, cur) => `<option value="${esc(v)}"${v === cur ? " selected" : ""}>${esc(label)}</option>`;
  const tenantSel = admin ? `<label>Tenant <select id="f-tenant">${opt("", "all", tenant)}${tenants.tenants.map((t) => opt(t.tenant, t.tenant, tenant)).join("")}</select></label>` : `<span class="muted">tenant ${esc(S.who.tenant)} (your jobs)</span>`;
  const stateSel = `<label>State <select id="f-state">${opt("pending", "waiting, in scheduler order", filter)}${opt("running", "running", filter)}${opt("active", "waiting and running", filter)}${opt("ended", "ended", filter)}</select></label>`;
  if (filter === "pending") return pendingView(tenant, stateSel, tenantSel);
  return jobsView(q, filter, tenant, stateSel, tenantSel);
}
async function pendingView(tenant, stateSel, tenantSel) {
  const params = new URLSearchParams({ limit: "500" });
  if (tenant) params.set("tenant", tenant);
  const d = await api(`/v1/dashboard/queue?${params}`);
  const now = d.now;
  const sort = S.queueSort;
  const text = S.queueText.toLowerCase();
  const shown = d.rows.filter((r) => (!S.queueReason || reasonKind(r.reason) === S.queueReason)
    && (!text || `${r.id} ${r.name} ${r.tenant} ${r.reason}`.toLowerCase().includes(text)));
  const headRow = d.rows.find((r) => r.head);
  // what the predictions' bands cover (the twin's words, as kant why's prediction gives them)
  const covers = [...new Set(d.rows.map((r) => r.covers).filter(Boolean))];
  const rows = sortRows(shown, QUEUE_COLS, sort).map((r) => `<tr data-job="${r.id}"${r.head ? ` class="head"` : ""}>
      <td class="num" data-col="pos" data-label="#">${r.position + 1}</td><td class="num" data-label="job"><a href="#/job/${r.id}">${r.id}</a></td>
      <td class="name" data-col="name" data-label="name" title="${esc(r.name)}">${esc(r.name)}</td><td data-col="tenant" data-label="tenant">${esc(r.tenant)}</td>
      <td class="num" data-col="gpus" data-label="GPUs">${gpusText(r)}</td><td class="num" data-col="wait" data-label="waited">${dur(now - r.submit_time)}</td>
      <td class="nowrap" data-col="predicted" data-label="predicted start" data-p50="${r.p50 ?? ""}"${r.covers ? ` title="the band covers: ${esc(r.covers)}"` : ""}>${predictedText(r, now)}</td>
      <td data-col="reason" data-label="why">${r.head && d.behind_head ? `<b data-testid="head-blocks">first: ${d.behind_head} job(s) wait behind it</b> · ` : ""}${esc(r.reason)}</td></tr>`).join("");
  const chips = d.reasons.map((c) => `<button type="button" class="chip${S.queueReason === c.reason ? " on" : ""}" data-reason="${esc(c.reason)}" title="${esc(c.reason)}"><b>${c.jobs}</b> ${esc(c.reason.length > 90 ? `${c.reason.slice(0, 88)}…` : c.reason)}</button>`).join("");
  const next = headRow ? `<div class="next" data-testid="next">Next to start: <a href="#/job/${headRow.id}">job ${headRow.id}</a> ${esc(headRow.name)}
      (${esc(headRow.tenant)}, ${gpusText(headRow)} GPUs)${predictedText(headRow, now) ? `, predicted ${predictedText(headRow, now)}` : ""}.
      <span class="muted">${esc(headRow.reason)}</span></div>` : d.queue_len ? "" : `<div class="next">Nothing waits.</div>`;
  return `<h1>Queue <span class="muted">${int(d.matching)} waiting${d.matching !== d.queue_len ? ` of ${int(d.queue_len)}` : ""}, in the scheduler's order</span></h1>
    ${next}
    <div class="toolbar">${stateSel}${tenantSel}<input id="q-filter" type="search" placeholder="filter: id, name, tenant, reason" value="${esc(S.queueText)}"></div>
    <div class="chips" id="reasons" aria-label="why they wait">${chips}</div>
    <table id="jobs" class="cards"><thead><tr>${sortHead(QUEUE_COLS, sort)}</tr></thead>
    <tbody>${rows || `<tr><td colspan="8" class="muted">no jobs</td></tr>`}</tbody></table>
    <div class="pager"><span class="muted" data-testid="shown">${shown.length} shown${d.matching > d.rows.length ? ` (the first ${d.rows.length} in order)` : ""}</span></div>
    <p class="muted">#: place in the order the scheduler's next cycle walks the queue (1: first); predicted start: the digital twin's
      median start from now and its P10–P90 band (docs/twin.md); waited: since submission.</p>
    ${covers.length ? `<p class="muted" data-testid="band-covers">The band covers: ${covers.map(esc).join("; ")}.</p>` : ""}`;
}
const reasonKind = (r) => r.split("; back in the queue after:")[0].replace(/\d+(?:\.\d+)?/g, "N");
async function jobsView(q, filter, tenant, stateSel, tenantSel) {
  const after = q.get("after") || "";
  const params = new URLSearchParams({ limit: "100" });
  for (const st of STATE_FILTERS[filter] || ["pending"]) params.append("state", st);
  if (tenant) params.set("tenant", tenant);
  if (after) params.set("after", after);
  const [page, clock] = await Promise.all([api(`/v1/jobs?${params}`), api("/v1/clock")]);
  const now = clock.now;
  const rows = page.items.map((j) => {
    const wait = j.state === "pending" ? dur(now - j.submit_time) : j.first_start_time != null ? dur(j.first_start_time - j.submit_time) : "";
    const ran = j.state === "running" && j.start_time != null ? dur(now - j.start_time) : "";
    return `<tr data-job="${j.id}"><td data-label="job"><a href="#/job/${j.id}">${j.id}</a></td><td class="name" data-label="name" title="${esc(j.name)}">${esc(j.name)}</td><td data-col="tenant" data-label="tenant">${esc(j.tenant)}</td>
      <td class="num" data-col="gpus" data-label="GPUs">${gpusText(j)}</td><td data-col="state" data-label="state">${esc(j.state)}</td><td class="num" data-col="wait" data-label="waited">${wait}</td>
      <td class="num" data-label="running for">${ran}</td><td data-col="reason" data-label="reason / nodes">${esc(j.state === "pending" ? j.reason : j.placement ? j.placement.join(", ") : j.reason)}</td></tr>`;
  }).join("");
  const link = (a) => `#/queue?${new URLSearchParams({ state: filter, ...(tenant ? { tenant } : {}), ...(a ? { after: a } : {}) })}`;
  return `<h1>Jobs</h1>
    <div class="toolbar">${stateSel}${tenantSel}</div>
    <table id="jobs" class="cards"><thead><tr><th>id</th><th>name</th><th>tenant</th><th class="num">GPUs</th><th>state</th><th class="num">waited</th><th class="num">running for</th><th>reason / nodes</th></tr></thead>
    <tbody>${rows || `<tr><td colspan="8" class="muted">no jobs</td></tr>`}</tbody></table>
    <div class="pager">${after ? `<a href="${link("")}">first page</a>` : ""}${page.next != null ? `<a id="next-page" href="${link(page.next)}">next page</a>` : ""}<span class="muted" data-testid="shown">${page.items.length} shown</span></div>`;
}
function bindSort(table, sortState, rerender) {
  if (!table) return;
  table.querySelector("thead").addEventListener("click", (ev) => {
    const th = ev.target.closest("th[data-sort]");
    if (!th) return;
    const col = th.dataset.sort;
    sortState.dir = sortState.col === col && sortState.dir === "asc" ? "desc" : "asc";
    sortState.col = col;
    rerender();
  });
}
function bindQueue() {
  const go = () => {
    const st = $("#f-state").value;
    const t = $("#f-tenant") ? $("#f-tenant").value : "";
    location.hash = `#/queue?${new URLSearchParams({ state: st, ...(t ? { tenant: t } : {}) })}`;
  };
  $("#f-state").addEventListener("change", go);
  if ($("#f-tenant")) $("#f-tenant").addEventListener("change", go);
  bindSort($("#jobs.cards"), S.queueSort, () => render(true));
  const f = $("#q-filter");
  if (f) f.addEventListener("input", () => { S.queueText = f.value; render(true); });
  const chips = $("#reasons");
  if (chips) chips.addEventListener("click", (ev) => {
    const c = ev.target.closest("[data-reason]");
    if (!c) return;
    S.queueReason = S.queueReason === c.dataset.reason ? "" : c.dataset.reason;
    render(true);
  });
}

// --- job ------------------------------------------------------------------------------------------
async function jobView(id) {
  const j = await api(`/v1/jobs/${encodeURIComponent(id)}`);
  // logs: GET /v1/jobs/{id}/logs (an executor that keeps output, such as Ray); "no logs" otherwise
  let logs = null;
  const worker = Number(new URLSearchParams(location.hash.split("?")[1] || "").get("worker") || 0);
  try {
    const r = await fetch(`/v1/jobs/${encodeURIComponent(id)}/logs?worker=${worker}`, { headers: { Authorization: `Bearer ${S.token}` } });
    if (r.ok) {
      const body = await r.json();
      if (body.kept !== false && (body.size > 0 || body.text)) logs = body;
    }
  } catch { /* no logs */ }
  const field = (k, v) => `<dt>${esc(k)}</dt><dd data-field="${esc(k)}">${v}</dd>`;
  const fields = [
    field("tenant", esc(j.tenant)), field("user", esc(j.user)), field("kind", esc(j.kind)), field("state", esc(j.state)),
    field("workers", `${j.workers} × ${j.gpus_per_worker} GPU${j.gpu_type ? ` (${esc(j.gpu_type)})` : ""}`),
    field("priority", j.priority), field("submitted", clockText(j.submit_time, S.clockKind)),
    field("first start", j.first_start_time == null ? "" : `${clockText(j.first_start_time, S.clockKind)} (waited ${dur(j.first_start_time - j.submit_time)})`),
    field("end", j.end_time == null ? "" : clockText(j.end_time, S.clockKind)), field("runs", j.runs),
    field("nodes", esc((j.placement || []).join(", "))), field("exit code", j.exit_code ?? ""),
    field("estimate", dur(j.estimate_s)), field("command", `<code>${esc(j.command || "")}</code>`),
  ].join("");
  const why = j.why ? `<h2>Why</h2><p data-testid="why">${esc(j.why.summary || j.why.reason)}${j.why.position != null ? ` · ${j.why.position} job(s) ahead` : ""}</p>` : "";
  const events = j.events.map((e) => `<tr><td class="num" title="${e.time}">${clockText(e.time, S.clockKind)}</td><td>${esc(e.kind)}</td><td>${esc(e.node || "")}</td><td>${esc(e.message)}</td></tr>`).join("");
  return `<p><a href="#/queue">&larr; queue</a></p><h1 data-testid="job-title">Job ${j.id} <span class="muted">${esc(j.name)}</span></h1>
    <dl class="fields">${fields}</dl>${why}
    <h2>Events</h2><table id="events"><thead><tr><th class="num">time</th><th>event</th><th>node</th><th>message</th></tr></thead><tbody>${events}</tbody></table>
    <h2>Logs</h2>${logs == null ? `<p class="muted" data-testid="logs">no logs</p>` : `${logs.workers > 1
      ? `<p>worker ${Array.from({ length: logs.workers }, (_, k) => k === worker ? `<b>${k}</b>` : `<a href="#/job/${j.id}?worker=${k}">${k}</a>`).join(" ")}</p>` : ""}
      <p class="muted">run ${logs.run}, worker ${logs.worker}: ${int(logs.size)} bytes${logs.next_offset < logs.size ? `, the first ${int(logs.next_offset - logs.offset)} shown` : ""}</p>
      <pre class="logs" data-testid="logs">${esc(logs.text)}</pre>`}`;
}

// --- tenants --------------------------------------------------------------------------------------
// a fairness view: each tenant's share of the cluster, GPUs held and asked, how long its waiting jobs
// have waited (P90), and its guarantee and borrowing only where a quota is set
async function tenantsView() {
  const [t, queues] = await Promise.all([api("/v1/dashboard/tenants"), api("/v1/queues")]);
  const total = t.total_gpus;
  meetTenants(t.tenants.map((r) => r.tenant));
  const quotas = t.tenants.some((r) => r.guaranteed_gpus != null || r.max_gpus != null);
  const cols = [
    ["tenant", "tenant", "", (r) => r.tenant], ["share", "share of the cluster", "", (r) => r.used_gpus],
    ["used", "GPUs held", "num", (r) => r.used_gpus], ["pending-gpus", "GPUs asked (waiting jobs)", "num", (r) => r.pending_gpus],
    ["pending-jobs", "jobs waiting", "num", (r) => r.pending_jobs], ["wait-p90", "P90 waited so far", "num", (r) => r.wait_p90_s ?? -1],
    ...(quotas ? [["guaranteed", "guaranteed", "num", (r) => r.guaranteed_gpus ?? -1], ["max", "max", "num", (r) => r.max_gpus ?? -1],
      ["borrowed", "borrowed", "num", (r) => (r.guaranteed_gpus == null ? -1 : r.borrowed_gpus)], ["lent", "lent", "num", (r) => r.lent_gpus]] : []),
  ];
  const row = (r, cls = "") => {
    const share = total ? r.used_gpus / total : 0;
    const has = r.guaranteed_gpus != null;
    return `<tr class="${cls}" data-tenant="${esc(r.tenant)}"><td data-label="tenant"><span class="sw" style="background:${tenantColor(r.tenant)}"></span>${esc(r.tenant)}</td>
    <td data-col="share" data-label="share" data-value="${share}"><span class="sharebar"><span style="width:${100 * share}%;background:${tenantColor(r.tenant)}"></span></span>${pct(share)}</td>
    <td class="num" data-col="used" data-label="GPUs held">${r.used_gpus}</td><td class="num" data-col="pending-gpus" data-label="GPUs asked">${r.pending_gpus}</td>
    <td class="num" data-col="pending-jobs" data-label="jobs waiting">${r.pending_jobs}</td>
    <td class="num" data-col="wait-p90" data-label="P90 waited" data-value="${r.wait_p90_s ?? ""}">${r.wait_p90_s == null ? "" : dur(r.wait_p90_s)}</td>
    ${quotas ? `<td class="num" data-col="guaranteed" data-label="guaranteed">${r.guaranteed_gpus ?? ""}</td>
    <td class="num" data-col="max" data-label="max">${r.max_gpus ?? ""}</td><td class="num" data-col="borrowed" data-label="borrowed">${has ? r.borrowed_gpus : ""}</td>
    <td class="num" data-col="lent" data-label="lent">${has ? r.lent_gpus : ""}</td>` : ""}</tr>`;
  };
  const rows = sortRows(t.tenants.map((r, i) => ({ ...r, position: i })), cols, S.tenantSort).map((r) => row(r)).join("");
  return `<h1>Tenants <span class="muted">${int(total)} GPUs · ${quotas ? (t.quota_enforced ? "quotas enforced" : "quotas shown, not enforced by this policy") : "no quotas set"}</span></h1>
    <table id="tenants" class="cards"><thead><tr>${sortHead(cols, S.tenantSort)}</tr></thead>
    <tbody>${rows}${t.others ? row(t.others, "others") : ""}</tbody></table>
    <p class="muted">share: GPUs held over the cluster's; P90 waited so far: of the tenant's jobs waiting now.${quotas ? " borrowed: GPUs held above the guarantee; lent: idle guarantee that others' borrowing uses (both where a guarantee is set)." : ""}</p>${queuesTable(queues)}`;
}
function bindTenants() { bindSort($("#tenants"), S.tenantSort, () => render(true)); }

// the tree of queues (kant serve --queues; GET /v1/queues): each queue under its parent, GPUs and fair share
function queuesTable(queues) {
  if (!queues.length) return "";
  const depth = {};
  const f3 = (x) => (x == null ? "" : Number(x).toFixed(3));
  // per-GPU-type limits: GPUs in use / guaranteed of each type ("V100 16/8")
  const byType = queues.some((q) => q.per_type);
  const types = (q) => Object.entries(q.per_type ?? {}).map(([t, c]) => `${esc(t)} ${c.in_use}/${c.guaranteed}`).join(" ");
  const rows = queues.map((q) => {
    const d = (depth[q.name] = q.parent == null ? 0 : (depth[q.parent] ?? 0) + 1);
    return `<tr data-queue="${esc(q.name)}"><td style="padding-left:${0.5 + 1.2 * d}em">${esc(q.name)}</td>
      <td class="num" data-col="in-use">${q.in_use}</td><td class="num" data-col="guaranteed">${q.guaranteed}</td>
      <td class="num" data-col="borrowed">${q.borrowed}</td><td class="num" data-col="capacity">${q.capacity}</td>
      <td class="num" data-col="share">${f3(q.share)}</td><td class="num" data-col="usage">${f3(q.usage)}</td>
      <td class="num" data-col="factor">${f3(q.factor)}</td>${byType ? `<td data-col="by-type">${types(q)}</td>` : ""}</tr>`;
  }).join("");
  return `<h2>Queues</h2><div class="scroll"><table id="queues"><thead><tr><th>queue</th><th class="num">GPUs used</th><th class="num">guaranteed</th>
    <th class="num">borrowed</th><th class="num">capacity now</th><th class="num">share</th><th class="num">usage</th><th class="num">fair-share factor</th>${byType ? "<th>by GPU type (used/guaranteed)</th>" : ""}</tr></thead>
    <tbody>${rows}</tbody></table></div>
    <p class="muted">capacity now: GPUs the queue may take given its limits and what the other queues use or keep reserved;
      usage: its GPU-seconds decayed by the half-life over the cluster's; factor 2^(-usage/share): higher goes first.</p>`;
}

// --- services -------------------------------------------------------------------------------------
// GET /v1/dashboard/services: the inference services the token may see (docs/dashboard.md)
const SERVICES_REFRESH_MS = 2000;
const ms = (x) => (x == null ? "n/a" : `${Number(x).toFixed(x < 10 ? 1 : 0)} ms`);
async function servicesView() {
  const d = await api("/v1/dashboard/services");
  const rows = d.services.map((s) => {
    const late = s.slo_ms != null && s.response_p99_ms != null && s.response_p99_ms > s.slo_ms;
    const state = s.state === "degraded" ? `<span class="error">degraded</span>: ${esc(s.degraded_reason)}` : esc(s.state);
    return `<tr data-service="${s.id}"><td>${esc(s.name)}</td><td>${esc(s.tenant)}</td><td data-col="state">${state}</td>
      <td class="num" data-col="replicas" data-ready="${s.ready_replicas}" data-target="${s.target_replicas}">${s.ready_replicas} / ${s.target_replicas}${s.starting_replicas ? ` <span class="muted">(${s.starting_replicas} starting)</span>` : ""}</td>
      <td class="num muted">${s.min_replicas}–${s.max_replicas} × ${s.gpus_per_replica} GPU${s.autoscaled ? ", autoscaled" : ""}</td>
      <td class="num" data-col="rate" data-value="${s.arrival_rate}">${num(s.arrival_rate, 2)}/s</td>
      <td class="num${late ? " error" : ""}" data-col="p99" data-value="${s.response_p99_ms ?? ""}">${ms(s.response_p99_ms)} <span class="muted">/ ${s.slo_ms == null ? "no SLO" : ms(s.slo_ms)}</span></td>
      <td class="num" data-col="slo" data-value="${s.slo_attainment ?? ""}">${pct(s.slo_attainment)}</td>
      <td class="num" data-col="lent" data-value="${s.lent_gpus}">${s.lent_gpus} <span class="muted">of ${s.headroom_gpus}</span></td>
      <td class="num" data-col="reclaims" data-value="${s.reclaims}">${s.reclaims}</td>
      <td class="num" data-col="reclaim">${dur(s.reclaim_p50_s)} / ${dur(s.reclaim_p99_s)}</td></tr>`;
  }).join("");
  const kpis = [
    kpi("training-gpus", "GPUs held by training", int(d.training_gpus), d.training_gpus),
    kpi("training-share", "training's share (cluster less every service at max)", int(d.training_share_gpus), d.training_share_gpus),
    kpi("loaned", "GPUs lent to training", int(d.loaned_gpus), d.loaned_gpus),
  ].join("");
  return `<h1>Services <span class="muted">${d.total_gpus} GPUs · traffic over the last ${dur(d.window_s)}</span></h1>
    <div class="kpis">${kpis}</div>
    <div class="scroll"><table id="services"><thead><tr><th>service</th><th>tenant</th><th>state</th><th class="num">ready / target</th><th class="num">replicas</th>
      <th class="num">requests</th><th class="num">P99 response / SLO</th><th class="num">SLO attainment</th><th class="num">GPUs lent / headroom</th>
      <th class="num">reclaims</th><th class="num">reclaim P50 / P99</th></tr></thead>
    <tbody>${rows || `<tr><td colspan="11" class="muted">no services</td></tr>`}</tbody></table></div>
    <p class="muted">lent: GPUs of the service's headroom (max replicas less the replicas it keeps) that training holds now;
      a reclaim: a replica started by evicting training, timed from the scale decision to the replica ready.</p>`;
}
let servicesTimer = null;
function refreshServices() {
  // (traffic moves without a state change: read the panel again every 2 s while it is shown)
  clearTimeout(servicesTimer);
  servicesTimer = setTimeout(() => { if (routeName() === "services" && S.token) render(true); }, SERVICES_REFRESH_MS);
}

// --- charts ---------------------------------------------------------------------------------------
// (SOR before GAR: GAR is drawn over it, so a GAR of 100 % beside a SOR of 100 % stays in sight)
const CHARTS = [
  { id: "ratios", title: "GAR, SOR and GFR", series: [["SOR", "sor", "#009E73", [6, 4]], ["GAR", "gar", "#0072B2"], ["GFR nodes", "gfr_nodes", "#E69F00"], ["GFR GPUs", "gfr_gpus", "#CC79A7"]], fmt: pct, range: [0, 1.05], ticks: [0, 0.25, 0.5, 0.75, 1] },
  { id: "queue", title: "Queue length (jobs) and GPUs they ask for", series: [["jobs waiting", "queue_len", "#332288"], ["GPUs asked", "pending_gpus", "#88CCEE"]], fmt: (v) => int(v), counts: true },
  { id: "wait", title: "Wait before first start (JWTD) of the jobs that started in each interval", series: [["P50", "wait.p50", "#0072B2"], ["P90", "wait.p90", "#E69F00"], ["P99", "wait.p99", "#D55E00"]], fmt: dur, points: true, durations: true },
];
// whole counts on a count axis (jobs, GPUs)
const COUNT_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];
const pick = (s, key) => key.split(".").reduce((o, k) => (o == null ? null : o[k]), s);
function chartsView() {
  const last = S.samples[S.samples.length - 1];
  const lastLine = last ? CHARTS.flatMap((c) => c.series.map(([label, key]) => `<span>${esc(label)} <b data-testid="last-${key.replace(".", "-")}" data-value="${pick(last, key) ?? ""}">${pick(last, key) == null && key.startsWith("gfr") ? "undefined" : c.fmt(pick(last, key))}</b></span>`)).join(" · ") : "no samples yet";
  return `<h1>Time series <span class="muted" data-testid="samples">${S.samples.length} samples</span></h1>
    <p class="legend" id="last-values"><span>latest, at <span data-testid="last-t" data-value="${last ? last.t : ""}">${last ? clockText(last.t, S.clockKind) : ""}</span>:</span> ${lastLine}</p>
    ${CHARTS.map((c) => `<h2>${esc(c.title)}</h2><div class="chart" id="chart-${c.id}"></div>`).join("")}
    <p class="muted">Definitions as docs/metrics.md, at each sample: the live values of /v1/cluster. GFR is undefined (a gap)
      while no GPU is free, or no node is up. Updated live.</p>`;
}
// the time axis's labels: a date on a wall clock; "day 27" at midnight, else the time of day, on a replay
function timeTicks(u, vals) {
  return vals.map((v) => {
    const t = clockText(v, S.clockKind);
    if (S.clockKind === "wall") return v % 86400 === 0 ? t.slice(0, 10) : t.slice(11);
    return v % 86400 === 0 ? t.slice(0, t.indexOf(" ", 4)) : t.slice(t.lastIndexOf(" ") + 1);
  });
}
function chartWidth(el) { return Math.max(240, Math.floor((el.clientWidth || window.innerWidth - 40) - 10)); }
function drawCharts() {
  if (routeName() !== "charts" || !window.uPlot) return;
  const samples = S.samples;
  const xs = samples.map((s) => s.t);
  // refresh the latest-values line without rebuilding the page
  const fresh = document.createElement("div");
  fresh.innerHTML = chartsView();
  const lv = $("#last-values"); if (lv) lv.replaceWith($("#last-values", fresh));
  const cnt = $('[data-testid="samples"]'); if (cnt) cnt.textContent = `${samples.length} samples`;
  for (const c of CHARTS) {
    const el = $(`#chart-${c.id}`);
    if (!el) continue;
    const data = [xs, ...c.series.map(([, key]) => samples.map((s) => pick(s, key)))];
    let chart = S.charts.find((x) => x.el === el);
    if (chart) { chart.u.setData(data); showLatest(chart.u); continue; }
    const opts = {
      width: chartWidth(el), height: 220,
      scales: { x: { time: false }, y: c.range ? { range: c.range } : { range: (u, lo, hi) => [0, hi > 0 ? hi * 1.1 : 1] } },
      axes: [
        { incrs: TIME_INCRS, values: timeTicks, space: 70, label: S.clockKind === "wall" ? "" : "service clock (day, time of day)" },
        { values: (u, vals) => vals.map((v) => c.fmt(v)), size: 70,
          ...(c.ticks ? { splits: () => c.ticks } : c.durations ? { incrs: TIME_INCRS } : c.counts ? { incrs: COUNT_INCRS } : {}) },
      ],
      cursor: { drag: { x: false, y: false } },
      // a sample is the state from its time until the next one: steps; the waits are per interval: points;
      // a null (GFR undefined) is a gap
      series: [{ label: "time", value: (u, v) => (v == null ? "" : clockText(v, S.clockKind)) }, ...c.series.map(([label, , color, dash]) => ({
        label, stroke: color, width: dash ? 2 : 1.5, dash, spanGaps: false, value: (u, v) => (v == null ? "–" : c.fmt(v)),
        ...(c.points ? { paths: () => null, points: { show: true, size: 6, fill: color } } : { paths: uPlot.paths.stepped({ align: 1 }) }),
      }))],
      hooks: { setCursor: [(u) => { if (u.cursor.idx == null) showLatest(u); }] },
    };
    S.charts = S.charts.filter((x) => document.body.contains(x.el));
    const u = new uPlot(opts, data, el);
    showLatest(u);
    // the chart follows its box (the window's width)
    const ro = new ResizeObserver(() => { const w = chartWidth(el); if (Math.abs(w - u.width) > 2) u.setSize({ width: w, height: 220 }); });
    ro.observe(el);
    S.charts.push({ el, u, ro });
  }
}
// the legend shows the latest values while the pointer is not over the chart
function showLatest(u) {
  const n = u.data[0].length;
  if (n && u.cursor.idx == null) u.setLegend({ idx: n - 1 });
}

// --- simulation results ---------------------------------------------------------------------------
// what the results pages show of a result.json (its metrics, docs/metrics.md): label, dotted key,
// format, and whether more is better (for the side-by-side's best value); the service writes them into
// the page from kant.metrics.report.METRIC_ROWS, the rows of kant compare's page too
const FORMATS = { pct, dur, int, num: (v) => num(v) };
const RESULT_ROWS = JSON.parse(document.getElementById("metric-rows").textContent)
  .map((r) => [r.label, r.key, FORMATS[r.format], r.better]);
function parseResults(text, fileName) {
  let data;
  try { data = JSON.parse(text); } catch (e) { throw new Error(`${fileName}: not JSON (${e.message})`); }
  if (data && typeof data === "object" && data.metrics && data.policy) return { kind: "result", runs: [[data.policy, data]], fileName };
  if (data && typeof data === "object" && Object.keys(data).length && Object.values(data).every((v) => v && typeof v === "object" && v.metrics)) {
    return { kind: "comparison", runs: Object.entries(data), fileName };
  }
  throw new Error(`${fileName}: not a kant result.json or comparison.json (no 'metrics' key)`);
}
function resultsView() {
  const R = S.results;
  let body = "";
  if (R) {
    const names = R.runs.map(([n]) => n);
    const head = `<tr><th>metric</th>${names.map((n) => `<th class="num">${esc(n)}</th>`).join("")}</tr>`;
    const rows = RESULT_ROWS.map(([label, key, fmt, better]) => {
      const vals = R.runs.map(([, r]) => pick(r.metrics, key));
      const finite = vals.filter((v) => v != null);
      // the best value of a row where the runs differ (more is better for GAR, SOR, finished; less for the rest)
      const differ = new Set(finite).size > 1;
      const best = better && differ ? (better > 0 ? Math.max(...finite) : Math.min(...finite)) : null;
      return `<tr data-key="${esc(key)}"><td>${esc(label)}</td>${vals.map((v) => `<td class="num${best != null && v === best ? " best" : ""}" data-value="${v ?? ""}">${fmt(v)}</td>`).join("")}</tr>`;
    }).join("");
    const order = ["1", "2-4", "5-8", "9-16", "17-32", "33-64", ">64"];  // docs/metrics.md's gang-size buckets
    const rank = (b) => (order.includes(b) ? order.indexOf(b) : order.length);
    const buckets = Object.keys(R.runs[0][1].metrics.jwtd?.buckets || {}).sort((x, y) => rank(x) - rank(y));
    const bucketRows = buckets.map((b) => `<tr><td>${esc(b)}</td>${R.runs.map(([, r]) => { const d = r.metrics.jwtd.buckets[b] || {}; return `<td class="num">${int(d.count)}</td><td class="num">${dur(d.p50)}</td><td class="num">${dur(d.p99)}</td>`; }).join("")}</tr>`).join("");
    const first = R.runs[0][1];
    body = `<h2>${R.kind === "comparison" ? `Side by side: ${R.runs.length} policies` : `Policy ${esc(first.policy)}`} <span class="muted">${esc(R.fileName)}</span></h2>
      <p class="muted">trace ${esc(typeof first.trace === "string" ? first.trace : JSON.stringify(first.trace))} · cluster ${esc(typeof first.cluster === "string" ? first.cluster : JSON.stringify(first.cluster))}</p>
      <table id="result-table"><thead>${head}</thead><tbody>${rows}</tbody></table>
      <h2>GAR per day</h2><div class="chart" id="chart-daily"></div>
      <h2>Wait before first start by gang size (GPUs)</h2>
      <table><thead><tr><th>gang</th>${names.map((n) => `<th class="num" colspan="3">${esc(n)}: count · P50 · P99</th>`).join("")}</tr></thead><tbody>${bucketRows}</tbody></table>`;
  }
  return `<h1>Simulation results</h1>
    <p>Open a <code>result.json</code> (<code>kant simulate</code>) or <code>comparison.json</code> (<code>kant compare</code>);
       it is read in this browser, nothing is uploaded. The static HTML reports next to them are for sharing.</p>
    <input type="file" id="results-file" accept=".json,application/json"><p id="results-error" class="error"></p>${body}`;
}
function bindResults() {
  $("#results-file").addEventListener("change", async (ev) => {
    const f = ev.target.files[0];
    if (!f) return;
    try {
      S.results = parseResults(await f.text(), f.name);
      await render();
    } catch (e) {
      $("#results-error").textContent = String(e.message || e);
    }
  });
  if (!S.results || !window.uPlot) return;
  const days = Math.max(0, ...S.results.runs.map(([, r]) => (r.metrics.gar?.daily?.values || []).length));
  const xs = Array.from({ length: days }, (_, i) => i + 1);
  const colors = PALETTE;  // (the policies' colours of kant compare's page: POLICY_COLORS)
  const data = [xs, ...S.results.runs.map(([, r]) => xs.map((_, i) => (r.metrics.gar?.daily?.values || [])[i] ?? null))];
  const u = new uPlot({
    width: chartWidth($("#chart-daily")), height: 220, scales: { x: { time: false, range: [0.5, days + 0.5] }, y: { range: [0, 1.05] } },
    axes: [{ label: "day", incrs: COUNT_INCRS }, { values: (u, vals) => vals.map(pct), size: 60 }],
    series: [{ label: "day" }, ...S.results.runs.map(([n], i) => ({ label: n, stroke: colors[i % colors.length], width: 1.5, value: (u, v) => pct(v), points: { show: true, size: 6 } }))],
    hooks: { setCursor: [(u) => { if (u.cursor.idx == null) showLatest(u); }] },
  }, data, $("#chart-daily"));
  showLatest(u);
}

// --- start ----------------------------------------------------------------------------------------
(async () => {
  if (S.token) {
    try { await login(S.token); } catch { $("#login").hidden = false; }
  }
  await render();
})();
