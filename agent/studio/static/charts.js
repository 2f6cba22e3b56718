// Charts drawn as inline SVG: line charts with interval bands, and the bank's scatter map.
"use strict";
const SVG_NS = "http://www.w3.org/2000/svg";
const FIXED = { success: "#1d7a46", failure: "#b3261e", unfinished: "#868e96", rule: "#8a3ffc", golden: "#a07000", regular: "#2457c5", quarantine: "#8a3ffc", real: "#2457c5", synthetic: "#d9480f" };
const PALETTE = ["#2457c5", "#d9480f", "#1d7a46", "#8a3ffc", "#a07000", "#0b7285", "#c2255c", "#5c940d", "#495057", "#e67700"];

function svgEl(name, attrs, parent) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  if (parent) parent.appendChild(el);
  return el;
}

function clearSvg(svg) { while (svg.firstChild) svg.removeChild(svg.firstChild); }

function viewSize(svg) {
  const vb = svg.viewBox.baseVal;
  return { w: vb.width, h: vb.height };
}

// series: [{name, colour, hidden, points: [{x, y, lo, hi, dot}]}]; y in [0, 1].
function lineChart(svg, series, opts) {
  clearSvg(svg);
  const { w, h } = viewSize(svg);
  const m = { l: 44, r: 14, t: 12, b: 34 };
  const xs = series.flatMap(s => s.points.map(p => p.x));
  const xmin = Math.min(0, ...xs), xmax = Math.max(1, ...xs);
  const X = x => m.l + (x - xmin) / (xmax - xmin || 1) * (w - m.l - m.r);
  const Y = y => h - m.b - y * (h - m.t - m.b);
  for (let i = 0; i <= 4; i++) {
    const y = i / 4;
    svgEl("line", { x1: m.l, x2: w - m.r, y1: Y(y), y2: Y(y), stroke: "#e6e9ee" }, svg);
    svgEl("text", { x: m.l - 6, y: Y(y) + 4, "text-anchor": "end" }, svg).textContent = Math.round(y * 100) + "%";
  }
  const span = xmax - xmin;
  const step = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000].find(s => span / s <= 8) || span / 8;
  for (let x = Math.ceil(xmin / step) * step; x <= xmax + 1e-9; x += step) {
    svgEl("text", { x: X(x), y: h - m.b + 16, "text-anchor": "middle" }, svg).textContent = Math.round(x);
  }
  svgEl("text", { x: (w + m.l) / 2, y: h - 4, "text-anchor": "middle" }, svg).textContent = opts.xlabel || "";
  for (const s of series) {
    if (s.hidden || !s.points.length) continue;
    const g = svgEl("g", { "data-series": s.name }, svg);
    const band = s.points.filter(p => p.lo !== undefined);
    if (band.length) {
      const up = band.map(p => `${X(p.x)},${Y(p.hi)}`), down = band.slice().reverse().map(p => `${X(p.x)},${Y(p.lo)}`);
      svgEl("polygon", { points: up.concat(down).join(" "), fill: s.colour, "fill-opacity": 0.14, stroke: "none" }, g);
    }
    svgEl("polyline", { points: s.points.map(p => `${X(p.x)},${Y(p.y)}`).join(" "), fill: "none", stroke: s.colour, "stroke-width": 2 }, g);
    for (const p of s.points) {
      const dotY = p.dot === undefined ? p.y : (p.dot ? 1 : 0);
      const c = svgEl("circle", { cx: X(p.x), cy: Y(dotY), r: p.dot === undefined ? 3 : 2.5, fill: p.dot === false ? "#b3261e" : s.colour }, g);
      svgEl("title", {}, c).textContent = `${s.name}: ${Math.round(p.y * 100)}% after ${p.x}` + (p.lo !== undefined ? ` (95% ${Math.round(p.lo * 100)}–${Math.round(p.hi * 100)}%)` : "");
    }
  }
}

// points: [{id, x, y, ...}] coloured by point[colourBy]; each point links to its memory.
function scatterMap(svg, points, colourBy, legend, query) {
  clearSvg(svg);
  const { w, h } = viewSize(svg);
  const pad = 16;
  const xs = points.map(p => p.x), ys = points.map(p => p.y);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const X = x => pad + (x - x0) / ((x1 - x0) || 1) * (w - 2 * pad);
  const Y = y => h - pad - (y - y0) / ((y1 - y0) || 1) * (h - 2 * pad);
  const groups = [...new Set(points.map(p => String(p[colourBy])))].sort();
  const colour = Object.fromEntries(groups.map((g, i) => [g, colourBy === "family" ? PALETTE[i % PALETTE.length] : (FIXED[g] || PALETTE[i % PALETTE.length])]));
  for (const p of points) {
    const a = svgEl("a", { href: "/memories/" + encodeURIComponent(p.id) + (query || ""), class: "point" }, svg);
    const c = svgEl("circle", { cx: X(p.x), cy: Y(p.y), r: points.length > 2000 ? 2.2 : 4, fill: colour[String(p[colourBy])], "fill-opacity": 0.8, "data-id": p.id }, a);
    svgEl("title", {}, c).textContent = `${p.id} (${p[colourBy]})\n${p.label || ""}`;
  }
  if (legend) {
    legend.textContent = "";
    for (const g of groups) {
      const span = document.createElement("span");
      const sw = document.createElement("i");
      sw.className = "swatch";
      sw.style.background = colour[g];
      span.appendChild(sw);
      span.appendChild(document.createTextNode(`${g} (${points.filter(p => String(p[colourBy]) === g).length})`));
      legend.appendChild(span);
    }
  }
}

window.crlCharts = { lineChart, scatterMap, PALETTE };
