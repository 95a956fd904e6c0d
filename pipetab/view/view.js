// pipetab view: draws the schedules embedded in #pipetab-data (see pipetab/view/__init__.py).
"use strict";

const DATA = JSON.parse(document.getElementById("pipetab-data").textContent);
const KIND_NAMES = { F: "forward", B: "backward", W: "weight gradient" };
// one colour per kind and pipeline (pipeline 0 darker, pipeline 1 lighter)
const COLOURS = { F: ["#4e79a7", "#a0cbe8"], B: ["#e15759", "#ff9d9a"], W: ["#59a14f", "#8cd17d"] };
const LEFT = 54, RIGHT = 10, TOP = 6, AXIS = 26;
const tip = document.getElementById("tip");
const views = [];   // every zoomable view, for redraws

function colour(kind, pipeline) { return COLOURS[kind][Math.min(pipeline, 1)]; }

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

// ---- numbers ---------------------------------------------------------------------------

function fmtNum(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  return a >= 1e4 || a < 1e-3 ? v.toExponential(3) : String(+v.toPrecision(4));
}

function fmtTime(s, v) {
  const x = v * s.time_scale;
  if (s.time_unit !== "s") return `${fmtNum(x)} slots`;
  const a = Math.abs(x);
  if (a !== 0 && a < 1e-3) return `${fmtNum(x * 1e6)} µs`;
  if (a !== 0 && a < 1) return `${fmtNum(x * 1e3)} ms`;
  return `${fmtNum(x)} s`;
}

function memoryScale(s) {
  if (s.memory_unit !== "bytes") return [1, "activations"];
  let peak = 0;
  for (const [, vals] of s.memory) for (const v of vals) peak = Math.max(peak, v);
  return peak >= 2 ** 40 ? [2 ** 40, "TiB"] : [2 ** 30, "GiB"];
}

function fmtMemory(s, v) {
  const [scale, unit] = memoryScale(s);
  return `${fmtNum(v / scale)} ${unit}`;
}

function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

// ---- searching -------------------------------------------------------------------------

// first index in [lo, hi) whose arr value is > x (arr ascending on that range)
function upper(arr, lo, hi, x) {
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (arr[mid] > x) hi = mid; else lo = mid + 1;
  }
  return lo;
}

function memoryAt(s, device, t) {
  const [times, vals] = s.memory[device];
  const i = upper(times, 0, times.length, t) - 1;
  return i >= 0 ? vals[i] : vals[0];
}

// ---- views (a time window shared by tracks) --------------------------------------------

function makeView(full) {
  const v = { full, t0: 0, t1: full, tracks: [] };
  views.push(v);
  return v;
}

function setView(v, t0, t1) {
  const minSpan = v.full / 1e6;
  let span = Math.max(minSpan, Math.min(v.full, t1 - t0));
  t0 = Math.max(0, Math.min(t0, v.full - span));
  v.t0 = t0; v.t1 = t0 + span;
  for (const t of v.tracks) t.draw();
}

function zoom(v, factor, at) {
  const centre = at === undefined ? (v.t0 + v.t1) / 2 : at;
  setView(v, centre - (centre - v.t0) * factor, centre + (v.t1 - centre) * factor);
}

// ---- tracks ----------------------------------------------------------------------------

function makeTrack(view, height, draw, hover) {
  const canvas = el("canvas", { height: String(height) });
  const box = el("div", { class: "track" }, canvas);
  const track = { view, canvas, box, height, hover };
  track.geometry = () => {
    const w = canvas.clientWidth;
    return { w, plot: Math.max(1, w - LEFT - RIGHT) };
  };
  track.x = (t) => LEFT + (t - view.t0) / (view.t1 - view.t0) * track.geometry().plot;
  track.t = (x) => view.t0 + (x - LEFT) / track.geometry().plot * (view.t1 - view.t0);
  track.draw = () => {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.height = `${height}px`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, height);
    draw(ctx, track);
    Object.assign(canvas.dataset, { t0: view.t0, t1: view.t1, left: LEFT, right: w - RIGHT });
  };
  view.tracks.push(track);
  let drag = null;
  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = canvas.getBoundingClientRect();
    zoom(view, Math.exp(e.deltaY * 0.0015), track.t(e.clientX - r.left));
  }, { passive: false });
  canvas.addEventListener("pointerdown", (e) => {
    drag = { x: e.clientX, t0: view.t0, t1: view.t1 };
    canvas.setPointerCapture(e.pointerId);
  });
  canvas.addEventListener("pointerup", () => { drag = null; });
  canvas.addEventListener("dblclick", () => setView(view, 0, view.full));
  canvas.addEventListener("pointermove", (e) => {
    const r = canvas.getBoundingClientRect();
    if (drag) {
      const dt = (e.clientX - drag.x) / track.geometry().plot * (drag.t1 - drag.t0);
      setView(view, drag.t0 - dt, drag.t1 - dt);
      tip.hidden = true;
      return;
    }
    const text = hover(track, e.clientX - r.left, e.clientY - r.top);
    showTip(text, e.clientX, e.clientY);
  });
  canvas.addEventListener("pointerleave", () => { tip.hidden = true; });
  return track;
}

function showTip(html, x, y) {
  if (!html) { tip.hidden = true; return; }
  tip.innerHTML = html;
  tip.hidden = false;
  const w = tip.offsetWidth, h = tip.offsetHeight;
  tip.style.left = `${Math.min(x + 14, window.innerWidth - w - 4)}px`;
  tip.style.top = `${y + 16 + h > window.innerHeight ? y - h - 8 : y + 16}px`;
}

function timeAxis(ctx, track, y, label, toUnits) {
  const { w } = track.geometry();
  const v = track.view;
  const a = toUnits(v.t0), b = toUnits(v.t1);
  const step = niceStep(b - a, Math.floor((w - LEFT - RIGHT) / 90));
  ctx.fillStyle = "#444"; ctx.strokeStyle = "#999"; ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "center"; ctx.textBaseline = "top";
  ctx.beginPath(); ctx.moveTo(LEFT, y); ctx.lineTo(w - RIGHT, y); ctx.stroke();
  for (let u = Math.ceil(a / step) * step; u <= b + step * 1e-9; u += step) {
    const x = LEFT + (u - a) / (b - a) * (w - LEFT - RIGHT);
    ctx.beginPath(); ctx.moveTo(x, y); ctx.lineTo(x, y + 4); ctx.stroke();
    ctx.fillText(fmtNum(+u.toPrecision(12)), x, y + 5);
  }
  ctx.textAlign = "right";
  ctx.fillText(label, w - RIGHT, y + 14);
}

function rowGeometry(devices) {
  const rowH = Math.max(3, Math.min(24, Math.floor(420 / devices)));
  return { rowH, height: TOP + devices * rowH + AXIS + 12 };
}

// the ops of one schedule on a device x time grid: table (ticks) or simulation
function opsTrack(s, view, startKey, endKey, axisLabel, toUnits, describe) {
  const ops = s.ops, n = ops.kind.length;
  const starts = ops[startKey], ends = ops[endKey];
  const first = new Array(s.devices + 1).fill(0);   // ops are in device order
  for (let i = 0; i < n; i++) first[ops.device[i] + 1] = i + 1;
  for (let d = 1; d <= s.devices; d++) first[d] = Math.max(first[d], first[d - 1]);
  const { rowH, height } = rowGeometry(s.devices);

  function draw(ctx, track) {
    const { w } = track.geometry();
    let drawn = 0;
    ctx.font = "10px system-ui, sans-serif"; ctx.textBaseline = "middle"; ctx.textAlign = "right";
    for (let d = 0; d < s.devices; d++) {
      const y = TOP + d * rowH;
      if (rowH >= 9 || d % Math.ceil(9 / rowH) === 0) { ctx.fillStyle = "#444"; ctx.fillText(`dev ${d}`, LEFT - 4, y + rowH / 2); }
      const lo = upper(ends, first[d], first[d + 1], track.view.t0);
      let last = "";
      for (let i = lo; i < first[d + 1] && starts[i] < track.view.t1; i++) {
        const x0 = Math.max(LEFT, track.x(starts[i])), x1 = Math.min(w - RIGHT, track.x(ends[i]));
        const c = colour(ops.kind[i], ops.pipeline[i]);
        if (c !== last) { ctx.fillStyle = c; last = c; }
        const gap = x1 - x0 > 4 ? 0.5 : 0;
        ctx.fillRect(x0 + gap, y + 1, Math.max(1, x1 - x0 - 2 * gap), rowH - 2);
        if (x1 - x0 > 26 && rowH >= 12) {
          ctx.fillStyle = "#fff"; ctx.textAlign = "center";
          ctx.fillText(`${ops.kind[i]}${ops.microbatch[i]}`, (x0 + x1) / 2, y + rowH / 2);
          ctx.textAlign = "right"; last = "";
        }
        drawn++;
      }
    }
    timeAxis(ctx, track, TOP + s.devices * rowH + 2, axisLabel, toUnits);
    Object.assign(track.canvas.dataset, { drawn, top: TOP, rowHeight: rowH, devices: s.devices });
  }

  function hover(track, x, y) {
    const d = Math.floor((y - TOP) / rowH);
    if (d < 0 || d >= s.devices || x < LEFT) return "";
    const t = track.t(x);
    const i = upper(starts, first[d], first[d + 1], t) - 1;
    if (i < first[d] || t >= ends[i]) return "";
    return describe(i);
  }

  const track = makeTrack(view, height, draw, hover);
  track.canvas.classList.add(startKey === "start" ? "timeline" : "table");
  return track;
}

function describeOp(s, i) {
  const o = s.ops, d = o.device[i];
  const pipe = s.pipelines > 1 ? ` of pipeline ${o.pipeline[i]}` : "";
  const ts = s.table_tick_slots;
  return `<b>${o.kind[i]} · microbatch ${o.microbatch[i]} · stage ${o.stage[i]}${pipe}</b> (${KIND_NAMES[o.kind[i]]}) on device ${d}<br>`
    + `simulated: start ${fmtTime(s, o.start[i])}, end ${fmtTime(s, o.end[i])}, takes ${fmtTime(s, o.end[i] - o.start[i])}<br>`
    + `table: slots ${fmtNum(o.table_start[i] * ts)}–${fmtNum(o.table_end[i] * ts)}<br>`
    + `device ${d} memory: ${fmtMemory(s, memoryAt(s, d, o.start[i]))} at start, ${fmtMemory(s, memoryAt(s, d, o.end[i]))} at end`;
}

// one colour per device in the memory chart (its legend and its hover use the same)
function hue(s, d) { return `hsl(${(d * 360 / s.devices) % 360}, 65%, 42%)`; }

function memoryLegend(s) {
  const box = el("div", { class: "legend memory-legend" });
  const step = Math.max(1, Math.ceil(s.devices / 16));   // at most 16 entries: every step-th device
  for (let d = 0; d < s.devices; d += step) box.append(el("span", {}, el("i", { style: `background:${hue(s, d)}` }), `dev ${d}`));
  if (step > 1) box.append(el("span", {}, `(every ${step}th of ${s.devices} devices; hover for the others)`));
  box.append(el("span", {}, el("i", { style: "background:none;border:0;border-top:2px dashed #c00;height:0" }), "capacity"));
  return box;
}

function memoryTrack(s, view) {
  const height = 170, bottom = height - AXIS - 8;
  const [scale, unit] = memoryScale(s);
  let peak = 0;
  for (const [, vals] of s.memory) for (const v of vals) peak = Math.max(peak, v);
  const caps = s.capacity.filter((c) => c !== null);
  const cap = caps.length ? Math.min(...caps) : null;
  const top = Math.max(peak, cap !== null && cap <= 2 * peak ? cap : 0) * 1.05 || 1;
  const y = (v) => bottom - v / top * (bottom - TOP);

  function draw(ctx, track) {
    const { w } = track.geometry();
    ctx.font = "10px system-ui, sans-serif"; ctx.fillStyle = "#444"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    const step = niceStep(top / scale, 4);
    ctx.strokeStyle = "#eee";
    for (let u = 0; u * scale <= top; u += step) {
      ctx.beginPath(); ctx.moveTo(LEFT, y(u * scale)); ctx.lineTo(w - RIGHT, y(u * scale)); ctx.stroke();
      ctx.fillText(fmtNum(+u.toPrecision(12)), LEFT - 4, y(u * scale));
    }
    ctx.save(); ctx.translate(10, (TOP + bottom) / 2); ctx.rotate(-Math.PI / 2); ctx.textAlign = "center";
    ctx.fillText(unit, 0, 0); ctx.restore();
    ctx.save(); ctx.beginPath(); ctx.rect(LEFT, 0, w - LEFT - RIGHT, height); ctx.clip();
    if (cap !== null && cap <= top) {
      ctx.strokeStyle = "#c00"; ctx.setLineDash([5, 4]);
      ctx.beginPath(); ctx.moveTo(LEFT, y(cap)); ctx.lineTo(w - RIGHT, y(cap)); ctx.stroke();
      ctx.setLineDash([]); ctx.fillStyle = "#c00"; ctx.textAlign = "left"; ctx.fillText("capacity", LEFT + 4, y(cap) - 7);
    }
    for (let d = 0; d < s.devices; d++) {
      const [times, vals] = s.memory[d];
      const lo = Math.max(0, upper(times, 0, times.length, track.view.t0) - 1);
      ctx.strokeStyle = hue(s, d); ctx.lineWidth = 1.2; ctx.beginPath();
      let py = y(vals[lo]);
      ctx.moveTo(LEFT, py);
      for (let i = lo + 1; i < times.length && times[i] <= track.view.t1; i++) {
        const x = track.x(times[i]);
        ctx.lineTo(x, py); py = y(vals[i]); ctx.lineTo(x, py);
      }
      ctx.lineTo(w - RIGHT, py); ctx.stroke();
    }
    ctx.restore();
    timeAxis(ctx, track, bottom + 2, s.time_unit === "s" ? "time (s)" : "slot", (t) => t * s.time_scale);
  }

  function hover(track, x) {
    if (x < LEFT) return "";
    const t = track.t(x);
    const list = [];
    for (let d = 0; d < s.devices; d++) list.push([memoryAt(s, d, t), d]);
    list.sort((a, b) => b[0] - a[0]);
    const shown = list.slice(0, 8).map(([v, d]) => `<span style="color:${hue(s, d)}">■</span> device ${d}: ${fmtMemory(s, v)}`);
    const more = list.length > 8 ? `<br>… ${list.length - 8} more devices` : "";
    return `<b>memory at ${fmtTime(s, t)}</b> (highest first)<br>${shown.join("<br>")}${more}`;
  }

  const track = makeTrack(view, height, draw, hover);
  track.canvas.classList.add("memory");
  return track;
}

function toolbar(view, label) {
  const b = (text, f) => { const x = el("button", { type: "button" }, text); x.addEventListener("click", f); return x; };
  return el("div", { class: "tools" }, label,
    b("+", () => zoom(view, 0.5)), b("−", () => zoom(view, 2)), b("reset", () => setView(view, 0, view.full)));
}

function levelsTable(s) {
  const [head, ...rows] = s.rows;
  const table = el("table", { class: "levels" });
  table.append(el("tr", {}, ...head.map((h) => el("th", {}, h))));
  for (const r of rows) table.append(el("tr", {}, ...r.map((c) => el("td", {}, c))));
  return table;
}

function panel(s, index) {
  const p = el("section", { class: "panel", id: `schedule-${index}` });
  p.append(el("h2", {}, s.title), levelsTable(s), el("p", { class: "source" }, `formula: ${s.formula_source}`));
  const ts = s.table_tick_slots;
  const hardware = s.time_unit === "s";
  const tableView = makeView(s.table_makespan);
  const describe = (i) => describeOp(s, i);
  p.append(el("h3", {}, `table: ${s.ops.kind.length} ops, ${fmtNum(s.table_makespan * ts)} slots`
    + (hardware ? "" : " (no message time: the table is the timeline)")),
  toolbar(tableView, hardware ? "zoom" : "zoom (table and memory)"),
  opsTrack(s, tableView, "table_start", "table_end", "slot", (t) => t * ts, describe).box);
  let memoryView = tableView;   // without hardware the memory is on the table's ticks
  if (hardware) {
    memoryView = makeView(s.makespan);
    Object.assign(memoryView, { own: s.makespan, unit: s.time_unit, shared: true });
    p.append(el("h3", {}, `simulated timeline (with communication): ${fmtTime(s, s.makespan)}`),
      toolbar(memoryView, "zoom (timeline and memory)"),
      opsTrack(s, memoryView, "start", "end", "time (s)", (t) => t * s.time_scale, describe).box);
  }
  p.append(el("h3", {}, `memory per device over time (${memoryScale(s)[1]})`), memoryTrack(s, memoryView).box,
    memoryLegend(s));
  return p;
}

function legend() {
  const box = document.getElementById("legend");
  const seen = new Set();
  for (const s of DATA.schedules) {
    for (let i = 0; i < s.ops.kind.length; i++) seen.add(`${s.ops.kind[i]}${Math.min(s.ops.pipeline[i], 1)}`);
  }
  const two = [...seen].some((k) => k.endsWith("1"));
  for (const kind of "FBW") {
    for (const p of [0, 1]) {
      if (!seen.has(`${kind}${p}`)) continue;
      const name = KIND_NAMES[kind] + (two ? ` (pipeline ${p})` : "");
      box.append(el("span", {}, el("i", { style: `background:${colour(kind, p)}` }), name));
    }
  }
}

function sharedAxis(on) {
  const sims = views.filter((v) => v.shared);
  const units = new Set(sims.map((v) => v.unit));
  const longest = Math.max(...sims.map((v) => v.own));
  for (const v of sims) {
    v.full = on && units.size === 1 ? longest : v.own;
    setView(v, 0, v.full);
  }
}

function main() {
  legend();
  const box = document.getElementById("panels");
  DATA.schedules.forEach((s, i) => box.append(panel(s, i)));
  const shared = document.getElementById("shared-axis");
  shared.addEventListener("change", () => sharedAxis(shared.checked));
  const redraw = () => { for (const v of views) for (const t of v.tracks) t.draw(); };
  window.addEventListener("resize", redraw);
  redraw();
  document.body.dataset.ready = "1";
}

main();
