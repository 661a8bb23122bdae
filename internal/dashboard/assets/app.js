// metalhub dashboard: one EventSource keeps an in-memory copy of the fleet; DOM writes are
// batched per animation frame and touch only the tiles whose server changed (keyed by name).
"use strict";

const STATES = ["Initial", "Discovery", "Available", "Reserved", "Released", "Cleaning", "Error", "Maintenance", "Parked"];
const MIN_UNITS = 12;
const ACCESS_WORDS = { forbidden: "no access", missing: "not installed", error: "cannot be read", loading: "loading…" };

const $ = (sel, root = document) => root.querySelector(sel);
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k === "style") e.style.cssText = v; // CSSOM: the CSP forbids style attributes
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}
// natural order: rack "2-10" after "2-9"
const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });
const byName = (a, b) => collator.compare(a, b);

// ---- state -------------------------------------------------------------------------------

const model = {
  servers: new Map(),       // name -> summary
  claims: new Map(), maintenances: new Map(), syncs: new Map(), // "ns/name" -> item
  access: {}, actions: false, powerVerbs: [],
  auth: "", // set when actions need a bearer token: what to ask the user for
};
const tiles = new Map();    // name -> {el, rackKey, sum}
const racks = new Map();    // rackKey -> {el, units, loose, members: Map(name -> top)}
const dirtyServers = new Set();
const dirtyLists = new Set();
let fullRender = false;
let frame = 0;
let selected = null;

// keyOf matches the server's keys: a name, or "<namespace>/<name>" for namespaced kinds.
function keyOf(coll, item) { return coll === "servers" || !item.namespace ? item.name : item.namespace + "/" + item.name; }

function schedule() {
  if (!frame) frame = requestAnimationFrame(render);
}

function applySnapshot(snap) {
  model.actions = !!snap.actions;
  model.powerVerbs = snap.powerVerbs || [];
  model.auth = snap.auth || "";
  model.access = snap.access || {};
  for (const coll of ["servers", "claims", "maintenances", "syncs"]) {
    const next = new Map();
    for (const it of (snap.items && snap.items[coll]) || []) next.set(keyOf(coll, it), it);
    if (coll === "servers") {
      for (const name of model.servers.keys()) if (!next.has(name)) dirtyServers.add(name);
      for (const name of next.keys()) dirtyServers.add(name);
    }
    model[coll] = next;
    dirtyLists.add(coll);
  }
  fullRender = true;
  schedule();
}

function applyBatch(b) {
  if (b.access) { model.access = b.access; fullRender = true; }
  for (const [coll, d] of Object.entries(b.changes || {})) {
    const m = model[coll];
    if (!m) continue;
    for (const it of d.upsert || []) {
      const k = keyOf(coll, it);
      m.set(k, it);
      if (coll === "servers") dirtyServers.add(k);
    }
    for (const k of d.delete || []) {
      m.delete(k);
      if (coll === "servers") dirtyServers.add(k);
    }
    dirtyLists.add(coll);
  }
  schedule();
}

// ---- rendering ---------------------------------------------------------------------------

function render() {
  frame = 0;
  for (const name of dirtyServers) renderServer(name);
  const changedSelected = selected && dirtyServers.has(selected);
  dirtyServers.clear();
  for (const r of racks.values()) if (r.dirty) fitRack(r);
  if (dirtyLists.size || fullRender) renderCounts();
  for (const coll of dirtyLists) renderList(coll);
  dirtyLists.clear();
  if (fullRender) renderAccess();
  fullRender = false;
  if (changedSelected) refreshPanel();
}

function renderServer(name) {
  const sum = model.servers.get(name);
  let t = tiles.get(name);
  if (!sum) {
    if (t) { leaveRack(t, name); t.el.remove(); tiles.delete(name); }
    if (selected === name) closePanel();
    return;
  }
  if (!t) {
    const e = el("div", { class: "tile", "data-server": name, tabindex: "0" },
      el("span", { class: "name", text: name }),
      el("span", { class: "tel" }),
      el("span", { class: "ind" },
        el("i", { class: "i power" }), el("i", { class: "i claim" }), el("i", { class: "i led" }),
        el("i", { class: "i bmc" }), el("i", { class: "i maint" }), el("i", { class: "i cordon" }), el("i", { class: "i health" }),
        el("i", { class: "i hw" })));
    t = { el: e, rackKey: null, sum: null };
    tiles.set(name, t);
  }
  updateTile(t, sum);
  placeTile(t, name, sum.placement || {});
  t.sum = sum;
}

function healthText(h) {
  if (!h) return "";
  return h.split(",").map(x => x === "fault" ? "critical hardware event (HardwareFault)" : "less hardware than its baseline (InventoryDrift)").join("; ");
}

// The collector's latest reading (only where the dashboard is given one): "312W 61°" on the
// tile, the sensor and when it was read in its title, failed supplies and fans as a badge.
function telemetryText(t) {
  if (!t) return "";
  return [t.powerWatts != null && `${t.powerWatts}W`, t.hottestCelsius != null && `${t.hottestCelsius}°`].filter(Boolean).join(" ");
}

function telemetryFailed(t) {
  if (!t) return "";
  const parts = [...(t.failedPSUs || []).map(n => "PSU " + n), ...(t.failedFans || []).map(n => "fan " + n)];
  return parts.length ? "failed: " + parts.join(", ") : "";
}

function telemetryTip(t) {
  return [t.powerWatts != null && `draws ${t.powerWatts} W`, t.hottestCelsius != null && `hottest ${t.hottestSensor || "sensor"} ${t.hottestCelsius} °C`,
    telemetryFailed(t), `read ${new Date(t.at * 1000).toLocaleTimeString()}`].filter(Boolean).join(", ");
}

function setInd(e, on, v, title) {
  e.classList.toggle("on", !!on);
  if (v !== undefined && e.dataset.v !== v) e.dataset.v = v;
  if (e.title !== (title || "")) e.title = title || "";
}

function updateTile(t, s) {
  const e = t.el;
  if (t.sum && JSON.stringify(t.sum) === JSON.stringify(s)) return;
  if (e.dataset.state !== s.state) e.dataset.state = s.state;
  const [power, claim, led, bmc, maint, cordon, health, hw] = e.querySelectorAll(".ind .i");
  setInd(power, !!s.power, s.power || "", "power " + (s.power || "unknown"));
  setInd(claim, !!s.claim, undefined, s.claim ? "claimed by " + s.claim : "");
  setInd(led, s.led === "Lit" || s.led === "Blinking", s.led || "", "LED " + (s.led || ""));
  setInd(bmc, !!s.bmc, s.bmcHealth || "unknown", s.bmc ? `BMC ${s.bmc}: ${s.bmcHealth}${s.bmcMessage ? " — " + s.bmcMessage : ""}` : "");
  setInd(maint, !!s.maintenance, undefined, s.maintenance ? "maintenance " + s.maintenance : "");
  setInd(cordon, s.cordoned, undefined, s.cordoned ? "cordoned (unclaimable)" : "");
  setInd(health, !!s.health, s.health && s.health.includes("fault") ? "fault" : "drift", healthText(s.health));
  const tm = s.telemetry;
  const failed = telemetryFailed(tm);
  setInd(hw, !!failed, undefined, failed);
  const tel = e.querySelector(".tel");
  const telText = telemetryText(tm);
  if (tel.textContent !== telText) tel.textContent = telText;
  const tip = [s.name, s.state, s.power && "power " + s.power, s.claim && "claim " + s.claim, s.pending && "pending " + s.pending,
    tm && telemetryTip(tm)].filter(Boolean).join(" · ");
  e.title = tip;
}

function rackKeyOf(p) { return p.placed ? `${p.location}/${p.rack}` : "unplaced"; }

function placeTile(t, name, p) {
  const key = rackKeyOf(p);
  const top = p.placed && p.shelf ? p.shelf + (p.height || 1) - 1 : 0;
  if (t.rackKey !== key) {
    leaveRack(t, name);
    const r = rackFor(key, p);
    t.rackKey = key;
    r.members.set(name, top);
    r.dirty = true;
  } else {
    const r = racks.get(key);
    if (r.members.get(name) !== top) { r.members.set(name, top); r.dirty = true; }
  }
  const r = racks.get(key);
  const e = t.el;
  if (p.placed && p.shelf) {
    const row = `${-(p.shelf + (p.height || 1))} / ${-p.shelf}`;
    if (e.style.gridRow !== row || e.parentNode !== r.units) { e.style.gridRow = row; if (e.parentNode !== r.units) r.units.append(e); }
  } else {
    if (e.style.gridRow) e.style.gridRow = "";
    if (e.parentNode !== r.loose) insertSorted(r.loose, e, name);
  }
}

function insertSorted(parent, e, name) {
  for (const c of parent.children) {
    if (byName(c.dataset.server, name) > 0) { parent.insertBefore(e, c); return; }
  }
  parent.append(e);
}

function leaveRack(t, name) {
  if (!t.rackKey) return;
  const r = racks.get(t.rackKey);
  t.rackKey = null;
  if (!r) return;
  r.members.delete(name);
  r.dirty = true;
}

// rackFor finds or makes the rack element, inside its row inside its location, in order.
function rackFor(key, p) {
  let r = racks.get(key);
  if (r) return r;
  if (key === "unplaced") {
    const e = $('[data-rack="unplaced"]');
    r = { el: e, units: null, loose: $(".loose", e), members: new Map(), unplaced: true };
    racks.set(key, r);
    return r;
  }
  const locs = $("#locations");
  let loc = [...locs.children].find(c => c.dataset.location === p.location);
  if (!loc) {
    loc = el("section", { class: "location", "data-location": p.location }, el("h2", { text: p.location === "?" ? "Unknown location" : p.location }));
    insertOrdered(locs, loc, c => byName(c.dataset.location, p.location) > 0);
  }
  let row = [...loc.querySelectorAll(":scope > .row")].find(c => c.dataset.row === p.row);
  if (!row) {
    row = el("div", { class: "row", "data-row": p.row }, el("h3", { text: p.row === "?" ? "Other racks" : "Row " + p.row }), el("div", { class: "racks" }));
    const rowOrder = v => v === "?" ? "\uffff" : v;
    insertOrdered(loc, row, c => c.classList.contains("row") && byName(rowOrder(c.dataset.row), rowOrder(p.row)) > 0);
  }
  const units = el("div", { class: "units" });
  const loose = el("div", { class: "loose" });
  const count = el("span", { class: "n" });
  const e = el("div", { class: "rack", "data-rack": key }, el("div", { class: "rack-label" }, el("span", { text: p.rack }), count), loose, units);
  insertOrdered($(".racks", row), e, c => byName(c.dataset.rack, key) > 0);
  r = { el: e, units, loose, count, members: new Map(), units_n: 0 };
  racks.set(key, r);
  return r;
}

function insertOrdered(parent, e, after) {
  for (const c of parent.children) if (after(c)) { parent.insertBefore(e, c); return; }
  parent.append(e);
}

// fitRack sizes a rack to its highest server and drops racks (rows, locations) left empty.
function fitRack(r) {
  r.dirty = false;
  if (r.unplaced) return;
  if (r.members.size === 0) {
    const row = r.el.closest(".row"), loc = r.el.closest(".location");
    r.el.remove();
    for (const [k, v] of racks) if (v === r) racks.delete(k);
    if (row && !row.querySelector(".rack")) row.remove();
    if (loc && !loc.querySelector(".rack")) loc.remove();
    return;
  }
  let n = MIN_UNITS;
  for (const top of r.members.values()) n = Math.max(n, top);
  if (r.units_n !== n) {
    r.units_n = n;
    r.units.style.setProperty("--units", n);
    r.units.dataset.top = n;
  }
  r.count.textContent = r.members.size + (r.members.size === 1 ? " server" : " servers");
}

function renderCounts() {
  const counts = Object.fromEntries(STATES.map(s => [s, 0]));
  for (const s of model.servers.values()) counts[s.state] = (counts[s.state] || 0) + 1;
  const box = $("#counts");
  box.replaceChildren(el("span", { class: "count" }, "servers ", el("b", { text: String(model.servers.size) })),
    ...Object.entries(counts).map(([st, n]) => el("span", { class: "count", "data-count": st, "data-zero": n === 0, title: st },
      el("span", { class: "swatch", style: `background: var(--${STATES.includes(st) ? st : "Initial"})` }), st + " ", el("b", { text: String(n) }))));
  const mode = $("#mode");
  mode.textContent = model.actions ? "actions enabled" : "read-only";
  mode.classList.toggle("write", model.actions);
}

function accessNote(kind) {
  const a = model.access[kind];
  if (!a || a === "ok") return "";
  return `${kind}: ${ACCESS_WORDS[a] || a}`;
}

function renderAccess() {
  const fa = $("#fleet-access");
  const notes = [accessNote("servers"), accessNote("bmcs")].filter(Boolean);
  fa.hidden = notes.length === 0;
  fa.textContent = notes.join(" · ");
  const kinds = { claims: "serverclaims", maintenances: "servermaintenances", syncs: "infrahubsyncs" };
  for (const [coll, kind] of Object.entries(kinds)) {
    const box = $(`[data-panel="${coll}"] .access`);
    const notes = [accessNote(kind)];
    if (coll === "syncs") notes.push(accessNote("vidraresources"));
    const text = notes.filter(Boolean).join(" · ");
    box.hidden = !text;
    box.textContent = text;
  }
}

// ---- tables ------------------------------------------------------------------------------

function renderList(coll) {
  if (coll === "servers") return;
  const panel = $(`[data-panel="${coll}"]`);
  const items = [...model[coll].values()].sort((a, b) => byName(a.namespace + "/" + a.name, b.namespace + "/" + b.name));
  $(`[data-tab="${coll}"] .n`).textContent = String(items.length);
  const rows = items.map(it => {
    switch (coll) {
      case "claims":
        return el("tr", { "data-key": it.namespace + "/" + it.name }, td(it.namespace), td(it.name), serverCell(it.server), td(it.phase), td(it.power), td(it.ready));
      case "maintenances":
        return el("tr", { "data-key": it.namespace + "/" + it.name }, td(it.namespace), td(it.name), serverCell(it.server), td(it.policy), td(it.priority), td(it.state));
      case "syncs": {
        const res = el("td");
        if (!it.resources.length) res.append(el("span", { class: "muted", text: "none" }));
        for (const r of it.resources) {
          const cls = r.ready === "True" || r.health === "Current" ? "ok" : (r.ready && r.ready.startsWith("False")) || r.health === "Failed" || r.lastError ? "bad" : "wait";
          res.append(el("span", { class: "res " + cls, title: [r.state, r.health, r.ready && "Ready " + r.ready, r.lastError].filter(Boolean).join(" · "), text: r.name }));
        }
        return el("tr", { "data-key": it.namespace + "/" + it.name }, td(it.namespace), td(it.name), td(it.state), td(it.ready),
          td(it.lastSync ? new Date(it.lastSync).toLocaleString() : ""), res, el("td", { class: "err", text: it.lastError || "" }));
      }
    }
  });
  $("tbody", panel).replaceChildren(...rows);
}
function td(v) { return el("td", { text: v === undefined || v === null ? "" : String(v) }); }
function serverCell(name) {
  if (!name) return td("");
  const a = el("a", { href: "#", text: name });
  a.addEventListener("click", ev => { ev.preventDefault(); openPanel(name); });
  return el("td", {}, a);
}

// ---- details panel -----------------------------------------------------------------------

let panelSeq = 0;
let panelTimer = 0;

function openPanel(name) {
  if (selected && tiles.get(selected)) tiles.get(selected).el.classList.remove("selected");
  selected = name;
  const t = tiles.get(name);
  if (t) t.el.classList.add("selected");
  $("#panel").hidden = false;
  $("#panel-title").textContent = name;
  $("#panel-body").replaceChildren(el("p", { class: "muted", text: "loading…" }));
  loadPanel(name, null);
}

function closePanel() {
  if (selected && tiles.get(selected)) tiles.get(selected).el.classList.remove("selected");
  selected = null;
  $("#panel").hidden = true;
}

// refreshPanel reloads the open details after its server changed, at most twice a second.
function refreshPanel() {
  if (panelTimer) return;
  panelTimer = setTimeout(() => { panelTimer = 0; if (selected) loadPanel(selected, $("#panel .result")); }, 500);
}

async function loadPanel(name, keepResult) {
  const seq = ++panelSeq;
  let d;
  try {
    const resp = await fetch("/api/servers/" + encodeURIComponent(name), { cache: "no-store" });
    d = await resp.json();
    if (!resp.ok) throw new Error(d.error || resp.statusText);
  } catch (err) {
    if (seq === panelSeq) $("#panel-body").replaceChildren(el("p", { class: "result error", text: String(err.message || err) }));
    return;
  }
  if (seq !== panelSeq || selected !== name) return;
  $("#panel-body").replaceChildren(...panelContent(name, d, keepResult));
}

function panelContent(name, d, keepResult) {
  const s = model.servers.get(name) || (d.summary ? d.summary : { name });
  const srv = d.server || {};
  const p = s.placement || {};
  const dl = el("dl");
  const row = (k, v) => { if (v !== undefined && v !== null && v !== "") dl.append(el("dt", { text: k }), el("dd", {}, v)); };
  row("State", el("span", { class: "state-chip", style: `background: var(--${STATES.includes(s.state) ? s.state : "Initial"})`, text: s.state }));
  row("Power", s.power || "unknown");
  row("Claim", s.claim || "—");
  row("LED", s.led || "—");
  row("BMC", s.bmc ? `${s.bmc} (${s.bmcHealth}${s.bmcMessage ? ": " + s.bmcMessage : ""})` : "—");
  row("Maintenance", s.maintenance || "—");
  row("Cordoned", s.cordoned ? "yes (unclaimable)" : "no");
  row("Health", s.health ? healthText(s.health) : "ok");
  if (s.telemetry) row("Telemetry", telemetryTip(s.telemetry));
  row("Cleaned", s.cleaned || "—");
  row("Parked", s.parked ? "yes" : "no");
  row("Pending operation", s.pending);
  row("Placement", p.placed ? `${p.location} / rack ${p.rack}` + (p.shelf ? ` / U${p.shelf}${p.height > 1 ? "–" + (p.shelf + p.height - 1) : ""}` : "") : "unplaced");
  const st = srv.status || {};
  row("Hardware", [st.manufacturer, st.model, st.serialNumber && "SN " + st.serialNumber].filter(Boolean).join(" · "));
  row("System UUID", (srv.spec || {}).systemUUID);
  const out = [dl];

  if (model.actions) {
    const result = keepResult && keepResult.textContent ? keepResult : el("div", { class: "result", hidden: true });
    const acts = el("div", { class: "actions" });
    const btn = (label, path, confirmText) => {
      const b = el("button", { "data-action": path, text: label });
      b.addEventListener("click", () => act(name, path, confirmText, result, acts));
      acts.append(b);
    };
    btn(s.cordoned ? "Uncordon" : "Cordon", s.cordoned ? "uncordon" : "cordon");
    btn(s.parked ? "Unpark" : "Park", s.parked ? "unpark" : "park", s.parked ? null : `Park ${name}? The operator leaves it alone, power untouched, until it is unparked.`);
    const verbs = model.powerVerbs.length ? model.powerVerbs : ["on", "off", "restart"];
    const order = ["on", "off", "restart", ...verbs.filter(v => !["on", "off", "restart"].includes(v))];
    for (const v of order.filter(v => verbs.includes(v))) {
      btn("Power " + v, "power/" + v, v === "on" ? null : `Power ${v} ${name}?`);
    }
    out.push(el("h3", { text: "Actions" }), acts, result);
  }

  out.push(el("h3", { text: "Conditions" }));
  const conds = d.conditions || [];
  out.push(conds.length ? table(["Type", "Status", "Reason", "Message", "Since"],
    conds.map(c => [c.type, c.status, c.reason, c.message, c.lastTransitionTime ? new Date(c.lastTransitionTime).toLocaleString() : ""]))
    : el("p", { class: "muted", text: "none" }));

  out.push(el("h3", { text: "Recent events" }));
  if (d.eventsAccess && d.eventsAccess !== "ok") out.push(el("p", { class: "access", text: "events: " + (ACCESS_WORDS[d.eventsAccess] || d.eventsAccess) }));
  const evs = d.events || [];
  out.push(evs.length ? table(["Time", "Type", "Reason", "Message"],
    evs.map(e => [new Date(e.time).toLocaleTimeString(), e.type, e.reason, e.message + (e.count > 1 ? ` (×${e.count})` : "")]))
    : el("p", { class: "muted", text: "none" }));

  if (d.records || d.recordsError) {
    out.push(el("h3", { text: "Recorded BMC actions" }));
    if (d.recordsError) out.push(el("p", { class: "result error", text: d.recordsError }));
    const recs = d.records || [];
    out.push(recs.length ? table(["Time", "Action", "Detail"], recs.map(r => [new Date(r.time).toLocaleTimeString(), r.action, recordDetail(r)]))
      : el("p", { class: "muted", text: "none" }));
  }
  return out;
}

function recordDetail(r) {
  if (r.resetType) return r.resetType;
  if (r.boot) return [r.boot.target, r.boot.enabled, r.boot.mode].filter(Boolean).join(" ") || JSON.stringify(r.boot);
  if (r.led) return r.led;
  if (r.image) return r.image;
  if (r.bootOrder) return r.bootOrder.join(", ");
  if (r.settings) return Object.entries(r.settings).map(([k, v]) => `${k}=${v}`).join(", ");
  if (r.account) return r.account;
  return "";
}

function table(head, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, ...head.map(h => el("th", { text: h })))),
    el("tbody", {}, ...rows.map(r => el("tr", {}, ...r.map(td)))));
}

// The actions' bearer token lives in this tab's sessionStorage and goes out only in the
// Authorization header, which no other site's page can make the browser send.
const TOKEN_KEY = "metalhub-dashboard-token";

function actionToken() {
  let tok = sessionStorage.getItem(TOKEN_KEY);
  if (!tok) {
    tok = (window.prompt(model.auth) || "").trim();
    if (tok) sessionStorage.setItem(TOKEN_KEY, tok);
  }
  return tok;
}

async function act(name, path, confirmText, result, buttons) {
  if (confirmText && !window.confirm(confirmText)) return;
  const headers = { "X-Metalhub-Action": "1" };
  if (model.auth) {
    const tok = actionToken();
    if (!tok) return;
    headers.Authorization = "Bearer " + tok;
  }
  for (const b of buttons.querySelectorAll("button")) b.disabled = true;
  result.hidden = false;
  result.className = "result";
  result.textContent = "…";
  try {
    const resp = await fetch(`/api/servers/${encodeURIComponent(name)}/${path}`, {
      method: "POST", headers, cache: "no-store",
    });
    const body = await resp.json().catch(() => ({}));
    if (resp.status === 401) sessionStorage.removeItem(TOKEN_KEY); // asked for again next time
    if (!resp.ok) throw new Error(body.error || `${resp.status} ${resp.statusText}`);
    result.textContent = body.message || "done";
  } catch (err) {
    result.className = "result error";
    result.textContent = String(err.message || err);
  } finally {
    for (const b of buttons.querySelectorAll("button")) b.disabled = false;
  }
}

// ---- connection --------------------------------------------------------------------------

let source = null;
let retryDelay = 1000;

function setConn(status, label) {
  const c = $("#conn");
  c.dataset.status = status;
  $(".label", c).textContent = label || status;
}

function connect() {
  if (source) source.close();
  source = new EventSource("/api/stream");
  source.addEventListener("snapshot", ev => {
    retryDelay = 1000;
    applySnapshot(JSON.parse(ev.data));
    setConn("live");
  });
  source.addEventListener("batch", ev => applyBatch(JSON.parse(ev.data)));
  source.onerror = () => {
    setConn("reconnecting");
    // The browser retries a dropped stream by itself; a refused one (CLOSED) is ours to retry.
    if (source.readyState === EventSource.CLOSED) {
      setTimeout(connect, retryDelay);
      retryDelay = Math.min(retryDelay * 2, 15000);
    }
  };
}

function init() {
  const legend = $("#legend");
  legend.append(...STATES.map(s => el("span", { "data-legend": s }, el("span", { class: "swatch", style: `background: var(--${s})` }), s)),
    el("span", {}, el("i", { class: "i power on", "data-v": "On" }), "power on"),
    el("span", {}, el("i", { class: "i claim on" }), "claimed"),
    el("span", {}, el("i", { class: "i led on", "data-v": "Blinking" }), "LED lit/blinking"),
    el("span", {}, el("i", { class: "i bmc on", "data-v": "error" }), "BMC unhealthy"),
    el("span", {}, el("i", { class: "i maint on" }), "maintenance"),
    el("span", {}, el("i", { class: "i cordon on" }), "cordoned"),
    el("span", {}, el("i", { class: "i health on", "data-v": "fault" }), "hardware fault"),
    el("span", {}, el("i", { class: "i health on", "data-v": "drift" }), "hardware missing"),
    el("span", {}, el("i", { class: "i hw on" }), "PSU or fan failed"));
  rackFor("unplaced", {});
  document.addEventListener("click", ev => {
    const t = ev.target.closest(".tile");
    if (t) openPanel(t.dataset.server);
  });
  document.addEventListener("keydown", ev => {
    if (ev.key === "Escape") closePanel();
    if (ev.key === "Enter" && ev.target.classList && ev.target.classList.contains("tile")) openPanel(ev.target.dataset.server);
  });
  $("#panel-close").addEventListener("click", closePanel);
  for (const b of document.querySelectorAll(".tabs button")) {
    b.addEventListener("click", () => {
      for (const o of document.querySelectorAll(".tabs button")) o.setAttribute("aria-selected", String(o === b));
      for (const p of document.querySelectorAll(".tabpanel")) p.hidden = p.dataset.panel !== b.dataset.tab;
    });
  }
  renderCounts();
  connect();
}

init();
