// Shared helpers of the pages: DOM building (no innerHTML: every value is text), the /v1 client,
// the bearer token (sessionStorage, sent in a header, never in a URL) and number formats.

export function h(tag, attrs = {}, ...children) {
  const svg = ["svg", "g", "circle", "text", "line", "rect", "path", "title"].includes(tag);
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const $ = (selector, root = document) => root.querySelector(selector);

const TOKEN_KEY = "locus-registry-token";
export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY) || "",
  set: (value) => (value ? sessionStorage.setItem(TOKEN_KEY, value) : sessionStorage.removeItem(TOKEN_KEY)),
};

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail.message || `HTTP ${status}`);
    this.status = status;
    this.type = detail.type;
    this.field = detail.field;
  }
}

// The newest store generation this tab was answered with (X-Locus-Generation), kept across its pages:
// every request asks for a state at least that new (X-Locus-Read: N), so the tab sees its own writes
// and never an older state, without waiting for other clients' writes (docs/service.md).
const GENERATION = "locus-generation";
export const generation = {
  get() {
    try {
      const n = Number(sessionStorage.getItem(GENERATION));
      return Number.isSafeInteger(n) && n > 0 ? n : null;
    } catch {
      return null; // storage refused (a privacy mode): read as the server's default
    }
  },
  saw(value) {
    const n = Number(value);
    if (!Number.isSafeInteger(n) || n <= (generation.get() || 0)) return;
    try {
      sessionStorage.setItem(GENERATION, String(n));
    } catch {}
  },
};

// GET/POST/PUT/DELETE on the API; a write sends the token (when one was given) in the
// Authorization header. An error answer becomes an ApiError carrying the API's own message.
// A write also says it comes from this UI (X-Locus-Client): a server without a token takes a multipart
// upload or a bodiless POST only with it, a custom header a foreign page cannot send without a CORS preflight.
export async function api(path, { method = "GET", params = null, body = undefined, write = false } = {}) {
  let url = path;
  if (params) {
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(params)) {
      if (value === null || value === undefined || value === "") continue;
      query.set(key, value);
    }
    const text = query.toString();
    if (text) url += "?" + text;
  }
  const headers = { Accept: "application/json" };
  // a FormData body (a file upload) goes as multipart, its boundary set by the browser
  const form = typeof FormData !== "undefined" && body instanceof FormData;
  if (body !== undefined && !form) headers["Content-Type"] = "application/json";
  if (write) headers["X-Locus-Client"] = "web-ui";
  if (write && token.get()) headers.Authorization = "Bearer " + token.get();
  const seen = generation.get();
  if (seen !== null) headers["X-Locus-Read"] = String(seen);
  let response;
  try {
    response = await fetch(url, { method, headers, body: body === undefined ? undefined : form ? body : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(0, { message: `the server did not answer (${err.message})` });
  }
  if (response.ok && response.headers.get("X-Locus-Generation")) generation.saw(response.headers.get("X-Locus-Generation"));
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    throw new ApiError(response.status, (data && data.error) || { message: `HTTP ${response.status}` });
  }
  return data;
}

// A form's runs, newest wins: `const current = fresh()` at the start of a run makes every earlier run of
// the form stale, and a stale run draws nothing (neither its answer nor its error), so a slow answer to an
// earlier submit never lands over a later one's (the form and the address would disagree with it).
export function newestRun() {
  let newest = 0;
  return () => {
    const mine = ++newest;
    return () => mine === newest;
  };
}

// The controls of a write are disabled while it runs (a double-click would send it twice, the second
// answered "exists"); enabled again however it ends.
export async function busy(controls, work) {
  for (const control of controls) control.disabled = true;
  try {
    return await work();
  } finally {
    for (const control of controls) control.disabled = false;
  }
}

// A deep link's value its control could not take (?k=abc in a number box, ?by=bogus in a select) would run
// as the default, unsaid: say each, "k=abc in the link: not a number". None: [].
export function linkProblems(start, controls) {
  const problems = [];
  for (const [key, input] of Object.entries(controls)) {
    const given = start.get(key);
    if (given === null || given === "" || input.value === given) continue;
    const why = input.tagName === "SELECT"
      ? "not one of " + [...input.options].map((o) => o.value).filter(Boolean).join(", ") : "not a number";
    problems.push(`${key}=${given} in the link: ${why}`);
  }
  return problems;
}

// A whole number from lo to hi typed in a box (null: fine). A number box takes "1e9" or "2.5", which the API
// refuses in its own words ("unable to parse string as an integer"): said next to the box instead.
export function wholeProblem(input, lo, hi) {
  const text = input.value.trim();
  const n = Number(text);
  if (input.validity && input.validity.badInput) return "not a number";
  if (text === "") return `give a whole number from ${lo} to ${hi}`;
  if (!/^[0-9]+$/.test(text) || n < lo || n > hi) return `${text}: give a whole number from ${lo} to ${hi}`;
  return null;
}

// The hint under a refused filter (an error whose field is `where`), else none.
export const whereHint = (err) => (err.field === "where" ? "A filter is FIELD OP VALUE, joined by and/or (see the Models page)." : null);

export function errorBox(err, hint) {
  const box = h("div", { class: "error", role: "alert" }, err.message || String(err));
  if (err.status === 401) box.append(h("br"), "Paste the token in the Token box at the top of the page, then try again.");
  else if (hint) box.append(h("br"), hint);
  return box;
}

export const fmt = {
  acc: (x) => (x === null || x === undefined ? "–" : x.toFixed(3)),
  pct: (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%"),
  dist: (x) => (x === null || x === undefined ? "–" : x.toFixed(4)),
  p: (x) => (x === null || x === undefined ? "–" : x < 1e-3 ? x.toExponential(1) : x.toPrecision(2)),
  signed: (x, digits = 2) => (x === null || x === undefined ? "–" : (x >= 0 ? "+" : "") + x.toFixed(digits)),
  time: (t) => (t ? new Date(t).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "–"),
  value: (v) => (v === null || v === undefined ? "–" : Array.isArray(v) ? v.join(", ") || "–" : String(v)),
};

export const modelHref = (name) => "/model?name=" + encodeURIComponent(name);
export const compareHref = (a, b) => "/compare?a=" + encodeURIComponent(a) + "&b=" + encodeURIComponent(b);
export const modelLink = (name) => h("a", { href: modelHref(name), class: "model" }, name);

export function params() {
  return new URLSearchParams(location.search);
}

// Keep a page's state in its URL (shareable, survives reload) without adding history entries.
export function setParams(values) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(values)) if (value !== "" && value !== null && value !== undefined) query.set(key, value);
  const text = query.toString();
  history.replaceState(null, "", location.pathname + (text ? "?" + text : ""));
}

export function field(label, input, extra) {
  const id = input.id || "f-" + Math.random().toString(36).slice(2, 9);
  input.id = id;
  return h("label", { for: id }, label, input, extra || null);
}

// What is wrong with a name before it is sent (null: nothing). A model name goes in a URL path percent-encoded
// ('/' too), but "." and ".." are segments browsers remove; an alias is a path segment of its own rules
// (the registry's ALIAS_PATTERN).
export function modelNameProblem(name) {
  if (!name) return "type a model name";
  if (name === "." || name === "..") return `a model cannot be named “${name}”: choose another name`;
  return null;
}

export function aliasProblem(alias) {
  if (!alias) return "type an alias";
  if (!/^[A-Za-z][A-Za-z0-9_.-]{0,63}$/.test(alias)) {
    return "an alias starts with a letter and holds only letters, digits, '-', '_' and '.' (at most 64 characters)";
  }
  return null;
}

// Say a problem next to its input (after its label, so not in its name; tied by aria-describedby, the input
// marked invalid); null clears it. Returns whether the input is fine.
export function fieldProblem(input, problem) {
  const id = input.id + "-problem";
  let note = document.getElementById(id);
  if (!note && problem) {
    note = h("span", { id, class: "field-problem", role: "alert" });
    (input.closest("label") || input).after(note);
    input.setAttribute("aria-describedby", [input.getAttribute("aria-describedby"), id].filter(Boolean).join(" "));
  }
  if (note) {
    note.textContent = problem || "";
    note.hidden = !problem;
  }
  if (problem) input.setAttribute("aria-invalid", "true");
  else input.removeAttribute("aria-invalid");
  return !problem;
}

export function accuracyBar(x) {
  const fill = h("span", { class: "bar-fill" });
  fill.style.width = `${Math.round(100 * (x || 0))}%`;
  return h("span", { class: "bar-cell" }, h("span", { class: "bar-track", "aria-hidden": "true" }, fill), fmt.acc(x));
}
