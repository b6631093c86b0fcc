// Thaw's status page: polls /thaw/status and /thaw/history, renders tables and SVG plots.
// No library, no build step: plain DOM and SVG, loaded from this server only (CSP 'self').
"use strict";

const POLL_MS = 1000;
const COLORS = ["#5b9bd5", "#e6a23c", "#4caf78", "#d66f9a", "#a67fd6", "#4fc1c9", "#c9b94f", "#e07b5d"];
const SVG = "http://www.w3.org/2000/svg";

const state = {
  lastSeq: 0,
  capacity: 1800,
  t: [],
  models: {},        // name -> {ready: [], running: [], held: [], in_flight: [], replica_seconds: []}
  colors: {},
  status: null,
};

// ---- formatting ------------------------------------------------------------------------

function seconds(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
  if (s < 3600) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(2) + " h";
}

function duration(s) {
  s = Math.max(0, Math.floor(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return h ? `${h}h ${m}m` : m ? `${m}m ${sec}s` : `${sec}s`;
}

function amount(v, unit) {
  // replica-seconds or GPU-seconds, in hours once large
  const a = Math.abs(v);
  if (a >= 36000) return (v / 3600).toFixed(1) + " " + unit + "-h";
  if (a >= 100) return v.toFixed(0) + " " + unit + "-s";
  return v.toFixed(1) + " " + unit + "-s";
}

function money(v) {
  return v === null || v === undefined ? null : "$" + v.toFixed(v < 10 ? 4 : 2);
}

function clock(unix) {
  return new Date(unix * 1000).toLocaleTimeString([], { hour12: false });
}

function colorOf(name) {
  if (!(name in state.colors)) {
    state.colors[name] = COLORS[Object.keys(state.colors).length % COLORS.length];
  }
  return state.colors[name];
}

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

// `text` cut to `n` characters, the cut shown: "a_very_long…".
function shortened(text, n) {
  return text.length > n ? text.slice(0, n - 1) + "\u2026" : text;
}

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

// ---- data ------------------------------------------------------------------------------

async function getJSON(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function mergeHistory(h) {
  if (h.last_seq < state.lastSeq || h.first_seq > state.lastSeq + 1) {
    // the server restarted, or we fell behind its ring: start over from what it holds
    state.t = [];
    state.models = {};
  }
  state.capacity = h.capacity;
  state.lastSeq = h.last_seq;
  state.t.push(...h.t);
  for (const [name, cols] of Object.entries(h.models)) {
    const mine = (state.models[name] = state.models[name] || {});
    for (const [field, values] of Object.entries(cols)) {
      (mine[field] = mine[field] || []).push(...values);
    }
  }
  const extra = state.t.length - state.capacity;
  if (extra > 0) {
    state.t.splice(0, extra);
    for (const cols of Object.values(state.models)) {
      for (const values of Object.values(cols)) values.splice(0, extra);
    }
  }
}

// ---- tables and cards ------------------------------------------------------------------

const IMAGE_READY = new Set(["built", "cached"]); // an image a wake restores from

function imageCell(text) {
  const td = el("td");
  const value = text || "–";
  // the vocabulary of activator/observe/status_document.py's ImageState; failures are "failed: <why>"
  const kind = IMAGE_READY.has(value) ? "ok" : value.startsWith("failed") ? "bad" : "";
  td.appendChild(el("span", { class: `image ${kind}`.trim(), title: value }, value.slice(0, 28)));
  return td;
}

function firstToken(m) {
  // generative models (the OpenAI API): time to first token, at zero / with a replica ready;
  // optional fields (an older thaw up's document lacks them)
  const cold = m.first_token_cold_s ?? null;
  const warm = m.first_token_warm_s ?? null;
  if (cold === null && warm === null) return "–";
  return `${seconds(cold)} / ${seconds(warm)}`;
}

function inFlight(m) {
  // through the activator, plus on connections handed straight to replicas
  return m.in_flight + m.replicas.reduce((a, r) => a + r.direct_in_flight, 0);
}

function renderModels(doc) {
  const cost = Object.fromEntries(doc.cost.models.map((c) => [c.model, c]));
  const gpu = doc.cost.models.some((c) => c.gpus_per_replica > 0);
  document.getElementById("th-used").textContent = gpu ? "GPU-s used" : "Replica-s used";
  const body = document.querySelector("#models tbody");
  body.replaceChildren();
  for (const m of doc.models) {
    const tr = el("tr", { "data-model": m.model, "data-state": m.state });
    const name = el("td", { class: "model" });
    const swatch = el("i");
    swatch.style.background = colorOf(m.model);
    name.append(swatch, m.model);
    tr.appendChild(name);
    const st = el("td");
    st.appendChild(el("span", { class: `state ${m.state}` }, m.state));
    if (m.load_state && m.load_state !== "loaded") {
      st.appendChild(el("span", { class: "load-state" }, ` (${m.load_state})`));
    }
    tr.appendChild(st);
    tr.appendChild(el("td", { class: "num" }, `${m.replicas_ready} / ${m.replicas_desired}`));
    tr.appendChild(el("td", { class: "num" }, String(m.replicas_starting)));
    tr.appendChild(el("td", { class: "num" }, String(m.held_requests)));
    tr.appendChild(el("td", { class: "num" }, String(inFlight(m))));
    tr.appendChild(imageCell(doc.image_builds[m.model]));
    tr.appendChild(el("td", { class: "num" }, seconds(m.last_cold_start_s)));
    tr.appendChild(el("td", { class: "num first-token" }, firstToken(m)));
    const c = cost[m.model];
    const used = c ? (gpu ? c.gpu_seconds : c.replica_seconds) : null;
    const saved = c ? (gpu ? c.saved_gpu_seconds : c.saved_replica_seconds) : null;
    tr.appendChild(el("td", { class: "num" }, used === null ? "–" : amount(used, gpu ? "GPU" : "replica")));
    tr.appendChild(el("td", { class: "num saved" }, saved === null ? "–" : amount(saved, gpu ? "GPU" : "replica")));
    tr.appendChild(el("td", { class: "err", title: m.last_error || "" }, (m.last_error || "").slice(0, 120)));
    body.appendChild(tr);
  }
}

function renderCards(doc) {
  const served = doc.models.filter((m) => m.state !== "unavailable");
  const warm = served.filter((m) => m.state === "warm").length;
  document.getElementById("card-warm").textContent = `${warm} / ${doc.models.length}`;
  document.getElementById("card-held").textContent = String(served.reduce((a, m) => a + m.held_requests, 0));
  document.getElementById("card-inflight").textContent = String(served.reduce((a, m) => a + inFlight(m), 0));
  const gpu = doc.cost.models.some((c) => c.gpus_per_replica > 0);
  const sum = (f) => doc.cost.models.reduce((a, c) => a + c[f], 0);
  const unit = gpu ? "GPU" : "replica";
  const used = sum(gpu ? "gpu_seconds" : "replica_seconds");
  const always = sum(gpu ? "always_on_gpu_seconds" : "always_on_replica_seconds");
  document.getElementById("card-used-label").textContent = gpu ? "GPU-seconds used" : "Replica-seconds used";
  document.getElementById("card-used").textContent = amount(used, unit);
  document.getElementById("card-saved").textContent = amount(always - used, unit);
  const pct = always > 0 ? ` (${(((always - used) / always) * 100).toFixed(0)}%)` : "";
  let note = `always-on would use ${amount(always, unit)}${pct}`;
  const price = doc.cost.gpu_hour_price;
  if (price !== null && gpu) {
    note += ` · saved ${money(sum("saved_money"))} at $${price}/GPU-h`;
  }
  document.getElementById("card-saved-note").textContent = note;
  document.getElementById("card-idle").textContent = seconds(sum("idle_at_zero_s"));
  const pool = doc.warm_pool;
  document.getElementById("pool").textContent = `${pool.ready}/${pool.size} ready`;
  const observed = Math.max(0, ...doc.cost.models.map((c) => c.observed_s));
  document.getElementById("uptime").textContent = duration(observed);
}

function renderColdStarts(doc) {
  const body = document.querySelector("#cold-starts tbody");
  body.replaceChildren();
  document.getElementById("no-cold").hidden = doc.cold_starts.length > 0;
  const longest = Math.max(0.001, ...doc.cold_starts.map((c) => c.total_s || 0));
  for (const c of doc.cold_starts) {
    const tr = el("tr", { "data-model": c.model });
    tr.appendChild(el("td", {}, clock(c.began_unix)));
    tr.appendChild(el("td", { class: "model" }, c.model));
    if (c.total_s === null) {
      tr.appendChild(el("td", { class: "num err" }, "failed"));
      tr.appendChild(el("td", { class: "err", colspan: "4", title: c.error || "" }, (c.error || "").slice(0, 140)));
      body.appendChild(tr);
      continue;
    }
    for (const v of [c.total_s, c.claim_s, c.restore_s, c.warmup_s]) {
      tr.appendChild(el("td", { class: "num" }, seconds(v)));
    }
    const cell = el("td", { class: "bar-col" });
    const bar = el("div", { class: "phasebar", title: "claim / restore / warm-up" });
    bar.style.width = `${Math.max(2, (c.total_s / longest) * 100)}%`;
    const phases = [["claim", c.claim_s], ["restore", c.restore_s], ["warmup", c.warmup_s]];
    const parts = phases.reduce((a, [, v]) => a + (v || 0), 0) || 1;
    for (const [phase, v] of phases) {
      const span = el("span", { class: phase });
      span.style.width = `${((v || 0) / parts) * 100}%`;
      bar.appendChild(span);
    }
    cell.appendChild(bar);
    tr.appendChild(cell);
    body.appendChild(tr);
  }
}

// ---- shared replicas (activator/observe/shared_report.py's `shared` section) ------------

const LOAD_SOURCES = ["host", "cache", "store", "files"]; // where a load's weights came from

function bytes(n) {
  if (n >= 1 << 30) return (n / (1 << 30)).toFixed(2) + " GiB";
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(n < 10 << 20 ? 1 : 0) + " MiB";
  if (n >= 1 << 10) return (n / (1 << 10)).toFixed(0) + " KiB";
  return n + " B";
}

function renderShared(doc) {
  // absent from a document of a thaw up that never shared: nothing to draw
  const shared = doc.shared || { replicas: [], models: {} };
  const names = Object.keys(shared.models).sort();
  document.getElementById("shared-panel").hidden = !shared.replicas.length && !names.length;
  document.getElementById("no-shared").hidden = shared.replicas.length > 0;
  const where = {};
  const body = document.querySelector("#shared-replicas tbody");
  body.replaceChildren();
  for (const r of shared.replicas) {
    const tr = el("tr", { "data-replica": r.id });
    tr.appendChild(el("td", { class: "model", title: r.url }, r.id));
    tr.appendChild(el("td", { class: "num" }, r.pid === null ? "–" : String(r.pid)));
    tr.appendChild(el("td", { class: "num budget" }, `${bytes(r.used_bytes)} / ${bytes(r.budget_bytes)}`));
    const cell = el("td", { class: "bar-col" });
    const bar = el("div", { class: "budgetbar", title: "budget used" });
    const fill = el("span", { class: r.used_bytes > r.budget_bytes ? "over" : "" });
    fill.style.width = `${Math.min(100, (r.used_bytes / Math.max(1, r.budget_bytes)) * 100)}%`;
    bar.appendChild(fill);
    cell.appendChild(bar);
    tr.appendChild(cell);
    const models = el("td", { class: "shared-models" });
    for (const name of r.models) {
      where[name] = r.id;
      const chip = el("span", { class: "chip", "data-model": name });
      const swatch = el("i");
      swatch.style.background = colorOf(name);
      chip.append(swatch, name);
      models.appendChild(chip);
    }
    tr.appendChild(models);
    body.appendChild(tr);
  }
  const mbody = document.querySelector("#shared-models tbody");
  mbody.replaceChildren();
  for (const name of names) {
    const c = shared.models[name];
    const tr = el("tr", { "data-model": name });
    tr.appendChild(el("td", { class: "model" }, name));
    tr.appendChild(el("td", { class: where[name] ? "" : "dim" }, where[name] || "at zero"));
    tr.appendChild(el("td", { class: "num evictions" }, String(c.evictions)));
    for (const source of LOAD_SOURCES) {
      tr.appendChild(el("td", { class: `num loads-${source}` }, String(c.loads[source] || 0)));
    }
    mbody.appendChild(tr);
  }
}

// ---- plots -----------------------------------------------------------------------------

const BOX = { w: 560, h: 220, left: 56, right: 12, top: 10, bottom: 40 };

// An axis from 0 in steps of 1, 2, 2.5 or 5 x 10^k, 4 of them (counts up to 4: one per unit).
function niceScale(v, integer) {
  if (integer && v <= 4) return { max: Math.max(2, Math.ceil(v)), step: 1 };
  const raw = Math.max(v, 1e-9) / 4;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((m) => m >= raw);
  if (integer) step = Math.max(1, Math.ceil(step));
  return { max: step * 4, step };
}

function frame(svg, xMin, xMax, scale, yFormat) {
  svg.replaceChildren();
  const { w, h, left, right, top, bottom } = BOX;
  const x = (v) => left + ((v - xMin) / Math.max(1e-9, xMax - xMin)) * (w - left - right);
  const y = (v) => top + (1 - v / scale.max) * (h - top - bottom);
  for (let i = 0; i <= Math.round(scale.max / scale.step); i++) {
    const v = scale.step * i;
    svg.appendChild(svgEl("line", { class: "grid", x1: left, x2: w - right, y1: y(v), y2: y(v) }));
    svg.appendChild(svgEl("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" }, yFormat(v)));
  }
  svg.appendChild(svgEl("line", { class: "axis", x1: left, x2: left, y1: top, y2: h - bottom }));
  return { x, y };
}

function axisNumber(v) {
  if (v >= 10000) return (v / 1000).toFixed(0) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(v < 1 ? 2 : 1);
}

function axisSeconds(v) {
  return v === 0 ? "0" : v < 1 ? (v * 1000).toFixed(0) + " ms" : axisNumber(v) + " s";
}

function timeAxis(svg, x, t0, t1) {
  const { h, bottom } = BOX;
  for (let i = 0; i <= 4; i++) {
    const t = t0 + ((t1 - t0) * i) / 4;
    const anchor = i === 0 ? "start" : i === 4 ? "end" : "middle";
    svg.appendChild(svgEl("text", { x: x(t), y: h - bottom + 14, "text-anchor": anchor }, clock(t)));
  }
}

function legend(svg, names) {
  let cx = BOX.left;
  for (const name of names) {
    svg.appendChild(svgEl("rect", { x: cx, y: BOX.h - 14, width: 10, height: 10, rx: 2, fill: colorOf(name) }));
    svg.appendChild(svgEl("text", { x: cx + 14, y: BOX.h - 5 }, name));
    cx += 24 + name.length * 6.5;
  }
}

function stepPath(xs, ys, x, y) {
  let d = "";
  for (let i = 0; i < xs.length; i++) {
    const px = x(xs[i]).toFixed(1), py = y(ys[i]).toFixed(1);
    if (i === 0) d += `M${px},${py}`;
    else d += `H${px}V${py}`;
  }
  return d;
}

function emptyNote(svg, text) {
  svg.appendChild(svgEl("text", { x: BOX.w / 2, y: BOX.h / 2 - 10, "text-anchor": "middle" }, text));
}

function linePlot(svgId, field) {
  const svg = document.getElementById(svgId);
  const names = Object.keys(state.models).sort();
  const t = state.t;
  const scale = niceScale(Math.max(1, ...names.flatMap((n) => state.models[n][field] || [0])), true);
  const t0 = t.length ? t[0] : 0, t1 = t.length > 1 ? t[t.length - 1] : t0 + 1;
  const { x, y } = frame(svg, t0, t1, scale, axisNumber);
  if (t.length < 2) return emptyNote(svg, "collecting samples…");
  timeAxis(svg, x, t0, t1);
  for (const name of names) {
    const ys = state.models[name][field];
    svg.appendChild(svgEl("path", {
      d: stepPath(t, ys, x, y), fill: "none", stroke: colorOf(name), "stroke-width": 2,
      "stroke-linejoin": "round", "data-model": name,
    }));
  }
  legend(svg, names);
}

function coldPlot(doc) {
  const svg = document.getElementById("plot-cold");
  const starts = doc.cold_starts.slice().reverse(); // oldest first, left to right
  const scale = niceScale(Math.max(0.1, ...starts.map((c) => c.total_s || 0)) * 1.05, false);
  const { y } = frame(svg, 0, 1, scale, axisSeconds);
  if (!starts.length) return emptyNote(svg, "no cold start yet");
  const { w, left, right, h, bottom } = BOX;
  const slot = (w - left - right) / Math.max(starts.length, 8);
  starts.forEach((c, i) => {
    const bx = left + i * slot + slot * 0.2, bw = slot * 0.6;
    if (c.total_s === null) {
      svg.appendChild(svgEl("text", { x: bx + bw / 2, y: y(0) - 4, "text-anchor": "middle", fill: "#e05d5d" }, "✕"));
    } else {
      let base = 0;
      for (const [phase, color] of [["claim_s", "#5b9bd5"], ["restore_s", "#e6a23c"], ["warmup_s", "#4caf78"]]) {
        const v = c[phase] || 0;
        svg.appendChild(svgEl("rect", { x: bx, y: y(base + v), width: bw, height: Math.max(0, y(base) - y(base + v)), fill: color }));
        base += v;
      }
    }
    const label = svgEl("text", { x: bx + bw / 2, y: h - bottom + 14, "text-anchor": "middle" }, shortened(c.model, 12));
    label.appendChild(svgEl("title", {}, c.model)); // the whole name on hover
    svg.appendChild(label);
    svg.appendChild(svgEl("text", { x: bx + bw / 2, y: h - bottom + 27, "text-anchor": "middle" }, clock(c.began_unix)));
  });
}

function costPlot(doc) {
  const svg = document.getElementById("plot-cost");
  const gpu = doc.cost.models.some((c) => c.gpus_per_replica > 0);
  document.getElementById("cost-title").textContent = gpu
    ? "GPU-seconds: used vs always-on at peak"
    : "Replica-seconds: used vs always-on at peak";
  const t = state.t;
  const perModel = Object.fromEntries(doc.cost.models.map((c) => [c.model, c]));
  const weight = (name) => (gpu ? (perModel[name] || { gpus_per_replica: 0 }).gpus_per_replica : 1);
  const used = t.map((_, i) => Object.keys(state.models).reduce(
    (a, n) => a + (state.models[n].replica_seconds[i] || 0) * weight(n), 0));
  // always-on at today's peak, from when thaw up started
  const observed = Math.max(0, ...doc.cost.models.map((c) => c.observed_s));
  const tEnd = t.length ? t[t.length - 1] : 0;
  const started = tEnd - observed;
  const rate = doc.cost.models.reduce((a, c) => a + c.peak_replicas * (gpu ? c.gpus_per_replica : 1), 0);
  const always = t.map((ti) => rate * Math.max(0, ti - started));
  const scale = niceScale(Math.max(1, ...used, ...always), false);
  const t0 = t.length ? t[0] : 0, t1 = t.length > 1 ? tEnd : t0 + 1;
  const unit = gpu ? "GPU" : "replica";
  const { x, y } = frame(svg, t0, t1, scale, axisNumber);
  if (t.length < 2) return emptyNote(svg, "collecting samples…");
  timeAxis(svg, x, t0, t1);
  const line = (ys, color, dash, label) => {
    const d = ys.map((v, i) => `${i ? "L" : "M"}${x(t[i]).toFixed(1)},${y(v).toFixed(1)}`).join("");
    const attrs = { d, fill: "none", stroke: color, "stroke-width": 2, "data-series": label };
    if (dash) attrs["stroke-dasharray"] = "6 4";
    svg.appendChild(svgEl("path", attrs));
  };
  line(always, "#e05d5d", true, "always-on");
  line(used, "#4caf78", false, "used");
  const lx = BOX.left;
  svg.appendChild(svgEl("rect", { x: lx, y: BOX.h - 14, width: 10, height: 10, rx: 2, fill: "#4caf78" }));
  svg.appendChild(svgEl("text", { x: lx + 14, y: BOX.h - 5 }, `used (scale to zero)`));
  svg.appendChild(svgEl("rect", { x: lx + 160, y: BOX.h - 14, width: 10, height: 10, rx: 2, fill: "#e05d5d" }));
  svg.appendChild(svgEl("text", { x: lx + 174, y: BOX.h - 5 }, `always-on at peak (${rate} ${unit}${rate === 1 ? "" : "s"})`));
}

// ---- loop ------------------------------------------------------------------------------

function setLive(ok, text) {
  document.getElementById("live-dot").className = ok ? "dot ok" : "dot err";
  document.getElementById("live-text").textContent = text;
}

async function poll() {
  try {
    const [doc, hist] = await Promise.all([
      getJSON("../thaw/status"),
      getJSON(`../thaw/history?since=${state.lastSeq}`),
    ]);
    mergeHistory(hist);
    state.status = doc;
    for (const m of doc.models) colorOf(m.model);
    renderCards(doc);
    renderModels(doc);
    renderColdStarts(doc);
    renderShared(doc);
    linePlot("plot-replicas", "ready");
    linePlot("plot-held", "held");
    coldPlot(doc);
    costPlot(doc);
    setLive(true, `live · updated ${new Date().toLocaleTimeString([], { hour12: false })}`);
  } catch (err) {
    setLive(false, `not reachable: ${err.message}`);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
