// kubelet-sim's web view: one EventSource for the nodes, pods, watch stream and scheduler,
// one for the selected pod's timeline. Plain DOM, no library, nothing fetched from elsewhere.
"use strict";

const WATCH_ROWS = 500; // rows kept on the page; the server keeps more for a new tab
const state = {
  nodes: new Map(), pods: new Map(), leases: new Map(), ourNodes: [],
  skew: 0, selected: null, timelineSource: null, limits: {}, notes: {},
};

const $ = (id) => document.getElementById(id);
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("data-") || k.startsWith("aria-") || k === "role" || k === "title" || k === "type") node.setAttribute(k, v === true ? "" : String(v));
    else node[k] = v;
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// -- preferences: large type and theme (kept in this browser) ------------------------------
const THEMES = ["auto", "light", "dark"];
function applyPrefs() {
  const large = localStorage.getItem("ksui-large") === "1" || new URLSearchParams(location.search).get("large") === "1";
  document.documentElement.classList.toggle("large", large);
  $("large-type").setAttribute("aria-pressed", String(large));
  const theme = new URLSearchParams(location.search).get("theme") || localStorage.getItem("ksui-theme") || "auto";
  document.documentElement.dataset.theme = THEMES.includes(theme) ? theme : "auto";
  const t = document.documentElement.dataset.theme;
  $("theme").textContent = `Theme: ${t}`;
  $("theme").setAttribute("aria-label", `Colour theme: ${t === "auto" ? "follow the system" : t}; change`);
}
$("large-type").addEventListener("click", () => {
  const on = $("large-type").getAttribute("aria-pressed") !== "true";
  localStorage.setItem("ksui-large", on ? "1" : "0");
  applyPrefs();
});
$("theme").addEventListener("click", () => {
  const now = document.documentElement.dataset.theme;
  localStorage.setItem("ksui-theme", THEMES[(THEMES.indexOf(now) + 1) % THEMES.length]);
  applyPrefs();
});
applyPrefs();

// -- nodes -----------------------------------------------------------------------------------
function leaseAge(name) {
  const renew = state.leases.get(name);
  if (!renew) return "—";
  const age = (Date.now() + state.skew - Date.parse(renew)) / 1000;
  return `${Math.max(0, age).toFixed(0)} s`;
}
function podsOn(name) {
  let n = 0;
  for (const p of state.pods.values()) if (p.node === name) n++;
  return n;
}
function human(v) {
  const m = /^(\d+)Ki$/.exec(String(v));
  return m ? `${(Number(m[1]) / 1048576).toFixed(1)} GiB` : String(v);
}
function res(node, key) {
  const a = human(node.allocatable[key]), c = human(node.capacity[key]);
  if (a === "undefined" && c === "undefined") return "—";
  return a === c || c === "undefined" ? a : `${a} (of ${c})`;
}
function renderNodes() {
  const body = $("nodes").tBodies[0];
  const names = [...state.nodes.keys()].sort((a, b) => {
    const oa = state.ourNodes.includes(a), ob = state.ourNodes.includes(b);
    return oa === ob ? a.localeCompare(b) : (oa ? -1 : 1);
  });
  body.replaceChildren(...names.map((name) => {
    const n = state.nodes.get(name);
    return el("tr", { class: n.ours ? "ours" : "", "data-node": name, "data-ready": String(n.ready) },
      el("td", {}, el("span", { class: "mono" }, name), n.ours ? el("span", { class: "sr-only" }, " (a node of this process)") : null),
      el("td", {}, el("span", { class: `badge ${n.ready ? "ok" : "bad"}`, title: n.readyReason }, n.ready ? "Ready" : `NotReady${n.readyReason ? ": " + n.readyReason : ""}`)),
      el("td", { class: "num lease", "data-lease": name }, leaseAge(name)),
      el("td", { class: "num" }, res(n, "cpu")),
      el("td", { class: "num" }, res(n, "memory")),
      el("td", { class: "num" }, `${podsOn(name)} / ${n.allocatable.pods ?? "—"}`));
  }));
}
setInterval(() => {
  for (const cell of document.querySelectorAll("td.lease")) cell.textContent = leaseAge(cell.dataset.lease);
}, 1000);

// -- pods ------------------------------------------------------------------------------------
function phaseClass(p) {
  if (p.deleting) return "warn";
  if (p.phase === "Running") return p.ready ? "ok" : "warn";
  if (p.phase === "Succeeded") return "ok";
  if (p.phase === "Failed") return "bad";
  return "warn";
}
function shown(p) {
  return !$("pods-ours").checked || !state.ourNodes.length || !p.node || state.ourNodes.includes(p.node);
}
function podRow(p, fresh) {
  const selected = state.selected === p.key;
  const conditions = el("div", { class: "chips" }, p.conditions.map((c) =>
    el("span", { class: `badge ${c.status === "True" ? "ok" : "warn"}`, title: c.reason || "" }, `${c.type}${c.status === "True" ? "" : "=" + c.status}`)));
  const containers = el("ul", { class: "containers" }, p.containers.map((c) =>
    el("li", { "data-container": c.name, "data-state": c.state },
      `${c.init ? "init " : ""}${c.name}: ${c.state}${c.restarts ? ` (${c.restarts} restarts)` : ""}`)));
  const phase = p.deleting ? "Terminating" : (p.reason || p.phase);
  return el("tr", {
      class: [fresh ? "fresh" : "", selected ? "selected" : ""].join(" ").trim(),
      "data-pod": p.key, "data-uid": p.uid, "data-phase": p.phase, "data-ready": String(p.ready),
      "data-node": p.node, "data-deleting": String(p.deleting), hidden: !shown(p),
    },
    el("td", {}, el("button", { type: "button", class: "pod-name", "aria-label": `Show the handoff timeline of pod ${p.key}`, "aria-current": selected ? "true" : false, onclick: () => select(p.key) }, p.key)),
    el("td", { class: "mono" }, p.node || el("span", { class: "badge warn" }, "not scheduled")),
    el("td", {}, el("span", { class: `badge ${phaseClass(p)}` }, phase)),
    el("td", {}, el("span", { class: `badge ${p.ready ? "ok" : "warn"}` }, p.ready ? "Ready" : "not ready")),
    el("td", {}, conditions),
    el("td", {}, containers));
}
function podOrder(a, b) {
  return (a.created || "").localeCompare(b.created || "") || a.key.localeCompare(b.key);
}
function renderPods() {
  const pods = [...state.pods.values()].sort(podOrder);
  $("pods").tBodies[0].replaceChildren(...pods.map((p) => podRow(p, false)));
  $("pods-empty").hidden = pods.some(shown);
}
$("pods-ours").addEventListener("change", renderPods);
function upsertPod(p) {
  const old = state.pods.get(p.uid);
  state.pods.set(p.uid, p);
  const body = $("pods").tBodies[0];
  const row = body.querySelector(`tr[data-uid="${CSS.escape(p.uid)}"]`);
  const fresh = !old || old.phase !== p.phase || old.ready !== p.ready || old.node !== p.node;
  const next = podRow(p, fresh);
  if (row) row.replaceWith(next);
  else {
    const after = [...state.pods.values()].sort(podOrder).findIndex((q) => q.uid === p.uid);
    body.insertBefore(next, body.rows[after] || null);
  }
  $("pods-empty").hidden = [...state.pods.values()].some(shown);
  if (!old || old.node !== p.node) renderNodes();
}
function removePod(uid) {
  const p = state.pods.get(uid);
  state.pods.delete(uid);
  const row = $("pods").tBodies[0].querySelector(`tr[data-uid="${CSS.escape(uid)}"]`);
  if (row) {
    row.classList.add("gone");
    row.setAttribute("data-gone", "true");
    setTimeout(() => row.remove(), 700);
  }
  $("pods-empty").hidden = [...state.pods.values()].some(shown);
  if (p) renderNodes();
}

// -- the selected pod's timeline ---------------------------------------------------------------
function select(key) {
  state.selected = key;
  history.replaceState(null, "", `#pod=${encodeURIComponent(key)}`);
  for (const row of $("pods").tBodies[0].rows) {
    const on = row.dataset.pod === key;
    row.classList.toggle("selected", on);
    const button = row.querySelector("button");
    if (on) button.setAttribute("aria-current", "true"); else button.removeAttribute("aria-current");
  }
  if (state.timelineSource) state.timelineSource.close();
  $("timeline-pod").textContent = key;
  $("timeline").replaceChildren();
  $("timeline").dataset.pod = key;
  $("timeline").dataset.settled = "false";
  $("timeline-note").textContent = "";
  const [namespace, name] = key.split("/");
  const src = new EventSource(`/events/timeline?namespace=${encodeURIComponent(namespace)}&name=${encodeURIComponent(name)}`);
  src.addEventListener("timeline", (e) => renderTimeline(JSON.parse(e.data)));
  state.timelineSource = src;
}
// "0.040s" → "+0.040s"; a step recorded a moment "before" the one above stays "-0.003s".
const signed = (latency) => (latency.startsWith("-") ? latency : `+${latency}`);
function renderTimeline(t) {
  const box = $("timeline");
  if (t.error) { $("timeline-note").textContent = `cannot read the timeline: ${t.error}`; return; }
  if (t.gone) {
    $("timeline-note").textContent = "the pod is gone; its last timeline stays above";
    box.dataset.gone = "true";
    if (state.timelineSource) state.timelineSource.close();
    return;
  }
  box.dataset.settled = String(t.settled);
  box.dataset.gone = "false";
  const span = Math.max(0.001, ...t.steps.map((s) => s.offset ?? 0));
  let prev = 0;
  const rows = t.steps.map((s) => {
    const timed = s.offset !== null && s.offset !== undefined;
    const from = timed ? Math.min(prev, s.offset) : 0;
    const bar = timed ? el("span", {
      class: `tl-bar src-${s.source}${s.precise ? "" : " rough"}`,
      title: `${s.step}: ${s.sincePrevious || "start"}`,
    }) : null;
    if (bar) {
      bar.style.left = `${(from / span) * 100}%`;
      bar.style.width = `${(Math.max(0, s.offset - from) / span) * 100}%`;
    }
    if (timed && s.precise) prev = s.offset;
    else if (timed && prev === 0) prev = s.offset;
    const when = s.time ? s.time.slice(11, 23) + (s.precise ? "" : "~") : "not yet";
    // As trace prints it: since the previous step with a sub-second time; the first such step
    // (after the API's whole-second creation) gets its time since creation, marked rough.
    const lat = !timed ? "—" : (s.sincePrevious === "~" ? "~" : (s.sincePrevious ? signed(s.sincePrevious) : `${signed(s.sinceCreated)}~`));
    const label = `${s.step}${s.detail ? ", " + s.detail : ""}: ${timed ? `${lat}, ${s.sinceCreated} after creation` : "not recorded yet"}`;
    return el("div", {
        class: `tl-row${timed ? "" : " pending"}`, role: "listitem", "aria-label": label,
        "data-step": s.step, "data-time": s.time || "", "data-since-previous": s.sincePrevious,
        "data-since-created": s.sinceCreated, "data-source": s.source,
      },
      el("span", { class: "tl-step", title: s.detail || "" }, s.step, el("span", { class: "when" }, when + (s.detail ? `  ${s.detail}` : ""))),
      el("span", { class: "tl-track" }, bar),
      el("span", { class: "tl-lat" }, lat));
  });
  box.replaceChildren(...rows);
  $("timeline-help").hidden = true;
  $("timeline-note").textContent = t.note || "";
}

// -- the scheduler's decisions ---------------------------------------------------------------
function addScheduler(e) {
  const list = $("scheduler");
  const time = (e.time || "").slice(11, 19);
  list.append(el("li", { "data-reason": e.reason, "data-pod": e.pod },
    el("span", { class: "mono" }, time), " ", el("strong", { class: "reason" }, e.reason), " ",
    el("span", { class: "mono" }, e.pod), e.count > 1 ? ` (×${e.count})` : "", ": ", e.message));
  while (list.children.length > 200) list.firstElementChild.remove();
  list.scrollTop = list.scrollHeight;
}

// -- the watch stream ------------------------------------------------------------------------
const SHORT = { resourceVersion: "rv", nodeName: "node", phase: "phase", code: "code" };
function watchLine(r) {
  const parts = [(r.time || "").slice(11, 23), (r.watch || "").padEnd(18), (r.type || "").padEnd(9)];
  if (r.kind) parts.push(`${r.kind} ${r.name || ""}`.trim());
  for (const [k, s] of Object.entries(SHORT)) if (r[k] !== undefined && r[k] !== null) parts.push(`${s}=${r[k]}`);
  const skip = new Set(["seq", "time", "watch", "type", "kind", "name", ...Object.keys(SHORT)]);
  for (const [k, v] of Object.entries(r)) if (!skip.has(k) && v !== null && v !== undefined) parts.push(`${k}=${v}`);
  return parts.join(" ");
}
function matches(text) {
  const f = $("watch-filter").value.trim().toLowerCase();
  return !f || text.toLowerCase().includes(f);
}
function addWatch(r) {
  const list = $("watch");
  const text = watchLine(r);
  const item = el("li", { "data-type": r.type, "data-watch": r.watch, "data-seq": r.seq }, text);
  item.hidden = !matches(text);
  list.append(item);
  while (list.children.length > WATCH_ROWS) list.firstElementChild.remove();
  if (!$("watch-pause").checked) list.scrollTop = list.scrollHeight;
}
$("watch-filter").addEventListener("input", () => {
  for (const item of $("watch").children) item.hidden = !matches(item.textContent);
});
function renderLimits() {
  const l = state.limits;
  const parts = [`The server keeps the last ${l.stream} watch events (this page shows ${WATCH_ROWS}).`];
  if (l.streamDropped) parts.push(`${l.streamDropped} older ones were dropped.`);
  $("watch-limit").textContent = parts.join(" ");
  $("scheduler-note").textContent = (l.schedulerDropped ? `${l.schedulerDropped} older decisions dropped (limit ${l.scheduler}). ` : "") + (state.notes.scheduler || "");
  $("notes").textContent = Object.entries(state.notes).filter(([k]) => k !== "scheduler").map(([, v]) => v).join(" · ");
}

// -- the live connection ---------------------------------------------------------------------
function connect() {
  const source = new EventSource("/events");
  const status = $("connection");
  source.addEventListener("open", () => { status.dataset.state = "live"; status.textContent = "live"; });
  source.addEventListener("error", () => { status.dataset.state = "lost"; status.textContent = "connection lost, reconnecting…"; });
  source.addEventListener("snapshot", (e) => {
    const s = JSON.parse(e.data);
    state.skew = Date.parse(s.serverTime) - Date.now();
    state.ourNodes = s.ourNodes;
    $("pods-ours-label").hidden = !s.ourNodes.length;
    state.nodes = new Map(s.nodes.map((n) => [n.name, n]));
    state.pods = new Map(s.pods.map((p) => [p.uid, p]));
    state.leases = new Map(Object.entries(s.leases));
    state.limits = s.limits;
    state.notes = s.notes;
    renderNodes();
    renderPods();
    $("scheduler").replaceChildren();
    s.scheduler.forEach(addScheduler);
    $("watch").replaceChildren();
    s.stream.forEach(addWatch);
    renderLimits();
    status.dataset.state = "live";
    status.textContent = "live";
    document.body.dataset.ready = "true";
  });
  source.addEventListener("pod", (e) => upsertPod(JSON.parse(e.data)));
  source.addEventListener("pod-deleted", (e) => removePod(JSON.parse(e.data).uid));
  source.addEventListener("node", (e) => { const n = JSON.parse(e.data); state.nodes.set(n.name, n); renderNodes(); });
  source.addEventListener("node-deleted", (e) => { state.nodes.delete(JSON.parse(e.data).name); renderNodes(); });
  source.addEventListener("lease", (e) => {
    const l = JSON.parse(e.data);
    if (l.renewTime) state.leases.set(l.node, l.renewTime); else state.leases.delete(l.node);
  });
  source.addEventListener("watch", (e) => addWatch(JSON.parse(e.data)));
  source.addEventListener("scheduler", (e) => addScheduler(JSON.parse(e.data)));
  source.addEventListener("limits", (e) => { state.limits = JSON.parse(e.data); renderLimits(); });
  source.addEventListener("note", (e) => { const n = JSON.parse(e.data); state.notes[n.what] = n.why; renderLimits(); });
}
connect();
const fromHash = new URLSearchParams(location.hash.slice(1)).get("pod");
if (fromHash) select(fromHash);
