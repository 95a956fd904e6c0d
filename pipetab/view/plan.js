// pipetab plan --html: the ranked table, the Pareto picture and the notes (the panels of the
// winner and the runner-up are the viewer's, drawn by view.js after this).
"use strict";

(function planPage() {
  const PLAN = JSON.parse(document.getElementById("pipetab-data").textContent).plan;
  const tipBox = document.getElementById("tip");
  const SVG = "http://www.w3.org/2000/svg";

  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }

  // n significant digits; thousands separated from 10^4 on
  function num(v, n) {
    const x = +(+v).toPrecision(n);
    return Math.abs(x) >= 1e4 ? x.toLocaleString("en-US", { maximumFractionDigits: 0 }) : String(x);
  }

  // ---- the counts ------------------------------------------------------------------------
  const c = PLAN.counts;
  document.getElementById("counts").textContent =
    `${c.candidates} candidates: ${c.pruned_memory} cannot fit the memory (bound), ${c.pruned_time} cannot beat ` +
    `the configurations shown (bound), ${c.simulated} simulated` +
    (c.refined ? ` (and ${c.refined} refinements of the best: uneven layouts, per-stage recomputation)` : "") +
    (c.outside ? `, ${c.outside} outside their schedule's regime (the schedule does not exist for that ` +
      `number of stages and microbatches)` : "") + `; ${c.runtime_s} s.`;
  document.getElementById("certificate").textContent = PLAN.certificate
    ? `Certificate: ${PLAN.certificate.text}. It assumes: ${PLAN.certificate.assumes.join("; ")}.`
    : "No certificate: no configuration fits the GPU memory.";

  // ---- the ranked table ------------------------------------------------------------------
  // columns marked true are shown only where the rows differ in them (CP, EP, ZeRO, SP, layout,
  // causal MFU), so rows that read alike differ in a column shown
  const ALL_COLUMNS = [
    ["rank", "#", (r) => r.rank], ["schedule", "schedule", (r) => r.schedule], ["pp", "PP", (r) => r.pp],
    ["tp", "TP", (r) => r.tp], ["cp", "CP", (r) => r.cp, true], ["dp", "DP", (r) => r.dp],
    ["ep", "EP", (r) => r.ep, true], ["zero", "ZeRO", (r) => r.zero, true], ["sp", "SP", (r) => (r.sp ? "yes" : "no"), true],
    ["layers", "layers per stage", (r) => r.layers, true], ["mb", "mb", (r) => r.mb],
    ["micro", "micro", (r) => r.micro], ["recompute", "recompute", (r) => r.recompute],
    ["step", "step (s)", (r) => num(r.step, 4)], ["tokens", "tokens/s", (r) => num(r.tokens, 6)],
    ["mfu", "MFU", (r) => `${(100 * r.mfu).toFixed(1)}%`],
    ["mfu_causal", "MFU causal", (r) => `${(100 * r.mfu_causal).toFixed(1)}%`, true],
    ["peak", "peak GiB", (r) => r.peak.toFixed(1)],
    ["free", "free GiB", (r) => r.free.toFixed(1)], ["fits", "fits", (r) => (r.fits ? "yes" : "NO")],
    ["source", "found by", (r) => r.source],
  ];
  const COLUMNS = ALL_COLUMNS.filter(([, , f, optional]) => !optional || new Set(PLAN.rows.map(f)).size > 1);
  const table = document.getElementById("ranked");
  const rows = PLAN.rows.slice();
  const sort = { key: "rank", dir: 1 };

  function fill() {
    table.replaceChildren();
    const head = el("tr");
    for (const [key, label] of COLUMNS) {
      const th = el("th", { "data-key": key }, label);
      if (key === sort.key) th.dataset.sorted = sort.dir > 0 ? "asc" : "desc";
      th.addEventListener("click", () => {
        sort.dir = sort.key === key ? -sort.dir : 1;
        sort.key = key;
        rows.sort((a, b) => (a[key] < b[key] ? -1 : a[key] > b[key] ? 1 : 0) * sort.dir || a.rank - b.rank);
        fill();
      });
      head.append(th);
    }
    table.append(el("thead", {}, head));
    const body = el("tbody");
    for (const r of rows) {
      const tr = el("tr", { "data-rank": r.rank });
      if (r.rank <= PLAN.shown) tr.classList.add("shown");
      if (!r.fits) tr.classList.add("misfit");
      for (const [, , show] of COLUMNS) tr.append(el("td", {}, String(show(r))));
      body.append(tr);
    }
    table.append(body);
  }
  fill();

  // ---- the Pareto picture ----------------------------------------------------------------
  const W = 860, H = 420, L = 64, R = 16, T = 12, B = 44;
  const box = document.getElementById("pareto");
  const plot = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
  const pts = PLAN.rows;
  const most = Math.max(...pts.map((r) => r.peak));
  // the usable memory is drawn when it is near the points (else the points would crowd one edge)
  const capShown = PLAN.capacity !== null && PLAN.capacity <= 1.6 * most;
  const ys = pts.map((r) => r.step);
  const x0 = 0, x1 = (capShown ? Math.max(most, PLAN.capacity) : most) * 1.08 || 1;
  const y0 = Math.min(...ys) * 0.95, y1 = Math.max(...ys) * 1.05 || 1;
  const px = (v) => L + (v - x0) / (x1 - x0) * (W - L - R);
  const py = (v) => H - B - (v - y0) / (y1 - y0 || 1) * (H - B - T);
  const names = [...new Set(pts.map((r) => r.schedule))];
  const hueOf = (name) => `hsl(${(names.indexOf(name) * 360 / names.length) % 360}, 60%, 42%)`;

  function axis(vertical, lo, hi, label) {
    const ticks = 6, g = svg("g");
    for (let i = 0; i <= ticks; i++) {
      const v = lo + (hi - lo) * i / ticks;
      const t = svg("text", vertical
        ? { x: L - 6, y: py(v) + 4, "text-anchor": "end" } : { x: px(v), y: H - B + 16, "text-anchor": "middle" });
      t.textContent = num(v, 3);
      g.append(t, svg("line", vertical ? { x1: L, x2: W - R, y1: py(v), y2: py(v), stroke: "#eee" }
        : { x1: px(v), x2: px(v), y1: T, y2: H - B, stroke: "#eee" }));
    }
    const t = svg("text", vertical
      ? { x: 14, y: (T + H - B) / 2, "text-anchor": "middle", transform: `rotate(-90 14 ${(T + H - B) / 2})` }
      : { x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle" });
    t.textContent = label;
    g.append(t);
    return g;
  }

  plot.append(axis(false, x0, x1, "peak memory per GPU (GiB)"), axis(true, y0, y1, "step time (s)"));
  if (capShown) {
    plot.append(svg("line", { x1: px(PLAN.capacity), x2: px(PLAN.capacity), y1: T, y2: H - B, stroke: "#c00",
      "stroke-dasharray": "5 4" }));
  }
  if (PLAN.front.length) {
    let d = "";
    PLAN.front.forEach(([m, t], i) => {
      d += i ? ` H ${px(m)} V ${py(t)}` : `M ${px(m)} ${py(t)}`;
    });
    plot.append(svg("path", { d, fill: "none", stroke: "#555", "stroke-width": 1.2, class: "front" }));
  }
  for (const r of pts.slice().reverse()) {   // the best drawn last, on top
    const dot = svg("circle", { cx: px(r.peak), cy: py(r.step), r: r.rank === 1 ? 7 : 5, stroke: hueOf(r.schedule),
      fill: r.fits ? hueOf(r.schedule) : "none", "stroke-width": 1.5, "data-rank": r.rank, "data-shape": r.shape,
      class: "point" });
    const title = svg("title");
    title.textContent = r.shape;
    dot.append(title);
    dot.addEventListener("pointermove", (e) => {
      tipBox.innerHTML = "";
      tipBox.append(el("b", {}, `#${r.rank} ${r.shape}`), el("br"),
        `step ${num(r.step, 4)} s, MFU ${(100 * r.mfu).toFixed(1)}%, peak ${r.peak.toFixed(1)} GiB` +
        (r.fits ? "" : " (does not fit)"));
      tipBox.hidden = false;
      tipBox.style.left = `${Math.min(e.clientX + 14, window.innerWidth - tipBox.offsetWidth - 4)}px`;
      tipBox.style.top = `${e.clientY + 16}px`;
    });
    dot.addEventListener("pointerleave", () => { tipBox.hidden = true; });
    plot.append(dot);
  }
  const key = el("div", { class: "legend" });
  for (const n of names) key.append(el("span", {}, el("i", { style: `background:${hueOf(n)}` }), n));
  if (PLAN.capacity !== null) {
    key.append(el("span", {}, `${capShown ? "dashed red line: " : ""}usable GPU memory ${num(PLAN.capacity, 3)} GiB`
      + (capShown ? "" : " (far right of every point)")));
  }
  box.append(plot, key);

  // ---- the notes -------------------------------------------------------------------------
  const list = (id, items) => document.getElementById(id).append(...items.map((t) => el("li", {}, t)));
  list("cpsat", PLAN.cpsat.length ? PLAN.cpsat : ["not run"]);
  list("assumptions", PLAN.assumptions);
  list("not-considered", PLAN.not_considered);
})();
