// The map: every embedded model as a point of `registry map`'s projection (/v1/map), coloured by a
// metadata field; hover names a point, a click (or Enter) opens its model; wheel/drag or the
// buttons zoom and pan.
import { api, errorBox, field, fmt, h, modelHref, newestRun, params, replace, setParams, whereHint } from "./lib.js";

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
  "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363"];
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
const UNKNOWN = "#c4c8cf";
const SIZE = 1000;

function viridis(t) {
  const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const c = VIRIDIS[i].map((v, k) => Math.round(v + f * (VIRIDIS[i + 1][k] - v)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function colouring(points) {
  const values = points.map((p) => p.value).filter((v) => v !== null && v !== undefined);
  const numeric = values.length > 0 && values.every((v) => typeof v === "number") && new Set(values).size > 8;
  if (numeric) {
    const lo = Math.min(...values), hi = Math.max(...values);
    return { numeric: true, lo, hi, colour: (v) => (v === null || v === undefined ? UNKNOWN : viridis(hi > lo ? (v - lo) / (hi - lo) : 0.5)) };
  }
  const counts = new Map();
  for (const v of values) counts.set(String(v), (counts.get(String(v)) || 0) + 1);
  const order = [...counts.keys()].sort((a, b) => counts.get(b) - counts.get(a) || a.localeCompare(b));
  const index = new Map(order.map((v, i) => [v, i]));
  const colour = (v) => (v === null || v === undefined ? UNKNOWN : index.get(String(v)) < PALETTE.length ? PALETTE[index.get(String(v))] : "#999");
  return { numeric: false, order, counts, colour };
}

export async function render(root) {
  const start = params();
  // The address's choice is an option from the start, so the address and every draw read the select alone;
  // the map's own fields fill it in once a draw has answered.
  const asked = start.get("color_by") || "";
  const colourBy = h("select", { id: "color-by" }, h("option", { value: "" }, "(none)"), asked ? h("option", { value: asked, selected: true }, asked) : "");
  const where = h("input", { id: "map-where", class: "wide", value: start.get("where") || "", spellcheck: "false", placeholder: "e.g. access == open" });
  const form = h("form", { class: "bar", "aria-label": "Map options" }, field("Colour by", colourBy), field("Only models where", where),
    h("button", { type: "submit" }, "Draw"),
    h("button", { type: "button", class: "secondary", id: "zoom-in", "aria-label": "zoom in" }, "+"),
    h("button", { type: "button", class: "secondary", id: "zoom-out", "aria-label": "zoom out" }, "−"),
    h("button", { type: "button", class: "secondary", id: "zoom-reset" }, "Reset view"));
  const message = h("div", { "aria-live": "polite" });
  const caption = h("p", { class: "muted small", id: "map-caption" });
  const legend = h("div", { class: "legend", id: "legend" });
  const svg = h("svg", { id: "map", viewBox: `0 0 ${SIZE} ${SIZE * 0.56}`, role: "group", "aria-label": "map of the models" });
  const tooltip = h("div", { class: "tooltip", hidden: true });
  const wrap = h("div", { class: "map-wrap" }, svg, tooltip);
  replace(root, form, message, caption, legend, wrap,
    h("p", { class: "muted small" }, "Scroll to zoom, drag to pan; Tab reaches each point and Enter opens it."));

  let view = { x: 0, y: 0, w: SIZE, h: SIZE * 0.56 };
  const setView = () => svg.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);
  const home = () => { view = { x: 0, y: 0, w: SIZE, h: SIZE * 0.56 }; setView(); rescale(); };
  function zoom(factor, cx = view.x + view.w / 2, cy = view.y + view.h / 2) {
    view = { x: cx - (cx - view.x) * factor, y: cy - (cy - view.y) * factor, w: view.w * factor, h: view.h * factor };
    setView();
    rescale();
  }
  // Points and labels keep their screen size while zooming.
  function rescale() {
    const k = view.w / SIZE;
    for (const c of svg.querySelectorAll("circle")) c.setAttribute("r", 6 * k);
    for (const t of svg.querySelectorAll("text.label")) {
      t.setAttribute("font-size", 11 * k);
      t.setAttribute("dx", 8 * k);
      t.setAttribute("dy", 4 * k);
    }
    for (const c of svg.querySelectorAll("circle")) c.setAttribute("stroke-width", k);
    // A label that would cover one already placed stays hidden (its point still names itself on hover).
    const placed = [];
    for (const t of svg.querySelectorAll("text.label")) {
      const x = Number(t.getAttribute("x")) + 8 * k, y = Number(t.getAttribute("y")) - 8 * k;
      const box = { x0: x, y0: y, x1: x + t.textContent.length * 6.4 * k, y1: y + 13 * k };
      const clash = placed.some((b) => box.x0 < b.x1 && b.x0 < box.x1 && box.y0 < b.y1 && b.y0 < box.y1);
      t.setAttribute("visibility", clash ? "hidden" : "visible");
      if (!clash) placed.push(box);
    }
  }
  document.getElementById("zoom-in").addEventListener("click", () => zoom(0.7));
  document.getElementById("zoom-out").addEventListener("click", () => zoom(1 / 0.7));
  document.getElementById("zoom-reset").addEventListener("click", home);
  const toSvg = (event) => {
    const box = svg.getBoundingClientRect();
    return { x: view.x + ((event.clientX - box.left) / box.width) * view.w, y: view.y + ((event.clientY - box.top) / box.height) * view.h };
  };
  svg.addEventListener("wheel", (event) => {
    event.preventDefault();
    const p = toSvg(event);
    zoom(event.deltaY > 0 ? 1.15 : 1 / 1.15, p.x, p.y);
  }, { passive: false });
  let drag = null;
  svg.addEventListener("pointerdown", (event) => {
    drag = { x: event.clientX, y: event.clientY, view: { ...view }, moved: false };
  });
  svg.addEventListener("pointermove", (event) => {
    if (!drag) return;
    const dx = event.clientX - drag.x, dy = event.clientY - drag.y;
    if (!drag.moved && Math.hypot(dx, dy) < 4) return;
    if (!drag.moved) svg.setPointerCapture(event.pointerId);
    drag.moved = true;
    svg.classList.add("dragging");
    const box = svg.getBoundingClientRect();
    view = { ...drag.view, x: drag.view.x - (dx / box.width) * view.w, y: drag.view.y - (dy / box.height) * view.h };
    setView();
  });
  const endDrag = () => { svg.classList.remove("dragging"); setTimeout(() => { drag = null; }, 0); };
  svg.addEventListener("pointerup", endDrag);
  svg.addEventListener("pointercancel", endDrag);

  let filled = false; // the select holds the map's fields
  const fresh = newestRun();
  async function draw() {
    const current = fresh();
    const by = colourBy.value, filter = where.value.trim();
    setParams({ color_by: by, where: filter });
    let map;
    try {
      map = await api("/v1/map", { params: { color_by: by, where: filter } });
    } catch (err) {
      if (!current()) return;
      replace(message, errorBox(err, whereHint(err)));
      // an earlier map under this error would read as its answer: gone, with its caption and legend
      caption.textContent = "";
      replace(legend);
      replace(svg);
      return;
    }
    if (!current()) return;
    replace(message);
    if (!filled) {
      filled = true;
      const wanted = by || (asked ? "" : map.fields.includes("family") ? "family" : ""); // family unless the address chose
      const fields = !wanted || map.fields.includes(wanted) ? map.fields : [...map.fields, wanted];
      replace(colourBy, h("option", { value: "" }, "(none)"), fields.map((f) => h("option", { value: f, selected: f === wanted }, f)));
      if (colourBy.value !== by) return draw();
    }
    const projection = map.projection.charAt(0).toUpperCase() + map.projection.slice(1);
    caption.textContent = `${map.n_models} models by ${map.by}. ${projection}; the axes keep ${fmt.pct(map.explained_variance.x)} and ${fmt.pct(map.explained_variance.y)} of ${map.share_of}` +
      (map.distance_correlation === null ? "." : `; map distances correlate with the distances drawn at r = ${map.distance_correlation.toFixed(2)}.`) +
      (map.note ? ` Note: ${map.note}.` : "");
    const paint = colouring(map.points);
    const xs = map.points.map((p) => p.x), ys = map.points.map((p) => p.y);
    const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    const W = SIZE, H = SIZE * 0.56, pad = 60;
    const sx = (x) => pad + ((x - x0) / (x1 - x0 || 1)) * (W - 2 * pad - 120);
    const sy = (y) => H - pad / 1.5 - ((y - y0) / (y1 - y0 || 1)) * (H - 2 * pad / 1.5);
    const labels = map.points.length <= 80;
    const g = h("g", {});
    for (const p of map.points) {
      const c = h("circle", { cx: sx(p.x), cy: sy(p.y), r: 6, fill: paint.colour(p.value), tabindex: 0, role: "link",
        "aria-label": `${p.name}${map.color_by ? `, ${map.color_by} ${fmt.value(p.value)}` : ""}`, "data-name": p.name },
      h("title", {}, `${p.name}${map.color_by ? ` — ${map.color_by}: ${fmt.value(p.value)}` : ""}`));
      const open = () => { location.href = modelHref(p.name); };
      c.addEventListener("click", () => { if (!drag || !drag.moved) open(); });
      c.addEventListener("keydown", (event) => { if (event.key === "Enter") open(); });
      c.addEventListener("pointerenter", (event) => {
        tooltip.hidden = false;
        tooltip.textContent = p.name + (map.color_by ? ` · ${fmt.value(p.value)}` : "");
        const box = wrap.getBoundingClientRect();
        tooltip.style.left = `${event.clientX - box.left + 12}px`;
        tooltip.style.top = `${event.clientY - box.top - 28}px`;
      });
      c.addEventListener("pointerleave", () => { tooltip.hidden = true; });
      g.append(c);
      if (labels) g.append(h("text", { class: "label", x: sx(p.x), y: sy(p.y), dx: 8, dy: 4 }, p.name));
    }
    replace(svg, g);
    home();
    if (!map.color_by) replace(legend);
    else if (paint.numeric) replace(legend, h("span", {}, `${map.color_by}: ${paint.lo} `, h("span", { class: "gradient" }), ` ${paint.hi}`));
    else {
      const swatch = (colour) => { const s = h("span", { class: "sw" }); s.style.background = colour; return s; };
      replace(legend, paint.order.slice(0, PALETTE.length).map((v) => h("span", {}, swatch(paint.colour(v)), `${v} (${paint.counts.get(v)})`)),
        paint.order.length > PALETTE.length ? h("span", {}, swatch("#999"), `${paint.order.length - PALETTE.length} more values`) : "",
        map.points.some((p) => p.value === null) ? h("span", {}, swatch(UNKNOWN), "unknown") : "");
    }
  }
  form.addEventListener("submit", (event) => { event.preventDefault(); draw(); });
  colourBy.addEventListener("change", () => draw());
  await draw();
}
