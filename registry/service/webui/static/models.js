// Models: the table of every model, paged, sorted and filtered by the server (/v1/table).
import { api, errorBox, field, fmt, h, modelHref, modelLink, newestRun, params, replace, setParams } from "./lib.js";

const LIMITS = [25, 50, 100, 200];
const MAX_LIMIT = 500; // /v1/table's largest page

// A whole number from the address, at least lo (at most hi), else the default: a bad deep link reads as none.
function whole(text, fallback, lo, hi) {
  const n = text === null || text.trim() === "" ? NaN : Number(text);
  return Number.isInteger(n) && n >= lo ? Math.min(n, hi) : fallback;
}

export async function render(root) {
  const start = params();
  const state = {
    q: start.get("q") || "", where: start.get("where") || "", sort: start.get("sort") || "name",
    order: start.get("order") || "asc", offset: whole(start.get("offset"), 0, 0, 1e9), limit: whole(start.get("limit"), 50, 1, MAX_LIMIT),
  };
  const q = h("input", { id: "q", type: "search", value: state.q, placeholder: "part of a name", autocomplete: "off" });
  const where = h("input", { id: "where", class: "wide", value: state.where, spellcheck: "false",
    placeholder: "e.g. family == alpha and params_b <= 13", "aria-describedby": "where-help" });
  // a deep link's own page size (?limit=5) is offered beside the usual ones, so Apply keeps it
  const sizes = [...new Set([...LIMITS, state.limit])].sort((a, b) => a - b);
  const limit = h("select", { id: "limit" }, sizes.map((n) => h("option", { value: n, selected: n === state.limit }, n)));
  const form = h("form", { class: "bar", role: "search", "aria-label": "Filter models" },
    field("Search names", q), field("Filter (where)", where), field("Rows per page", limit),
    h("button", { type: "submit" }, "Apply"),
    h("button", { type: "button", class: "secondary", onclick: () => { q.value = ""; where.value = ""; apply(); } }, "Clear"));
  const help = h("p", { id: "where-help", class: "muted small" },
    "The registry's filter language, as in --where: ==, !=, <, <=, >, >=, in [..], contains, and, or, not, parentheses. ",
    "Click a column to sort by it; * marks an accuracy measured on too few evaluations.");
  const message = h("div", { id: "table-message", "aria-live": "polite" });
  const summary = h("p", { id: "summary", class: "muted", role: "status" });
  const wrap = h("div", { class: "table-wrap" });
  const pager = h("div", { class: "pager" });
  replace(root, form, help, message, summary, wrap, pager);

  function apply() {
    state.q = q.value.trim();
    state.where = where.value.trim();
    state.limit = Number(limit.value);
    state.offset = 0;
    load();
  }
  form.addEventListener("submit", (event) => { event.preventDefault(); apply(); });

  const fresh = newestRun();
  let refocus = null; // the sort or page button that asked for this load: focused again in the rebuilt table
  async function load() {
    const current = fresh();
    setParams({ q: state.q, where: state.where, sort: state.sort === "name" ? "" : state.sort,
      order: state.order === "asc" ? "" : state.order, offset: state.offset || "", limit: state.limit === 50 ? "" : state.limit });
    let table;
    try {
      table = await api("/v1/table", { params: { q: state.q, where: state.where, sort: state.sort, order: state.order,
        offset: state.offset, limit: state.limit } });
    } catch (err) {
      if (!current()) return;
      replace(message, errorBox(err));
      if (err.field === "where") where.setAttribute("aria-invalid", "true");
      // the rows of an earlier answer would read as this one's: gone with their count and pager
      summary.textContent = "";
      replace(wrap);
      replace(pager);
      refocus = null;
      return;
    }
    if (!current()) return;
    if (!table.rows.length && table.offset > 0 && table.matched > 0) { // past the end (an old or edited link): its last page
      state.offset = Math.floor((table.matched - 1) / table.limit) * table.limit;
      return load();
    }
    where.removeAttribute("aria-invalid");
    replace(message);
    draw(table);
  }

  function draw(t) {
    const first = t.matched ? t.offset + 1 : 0;
    const last = Math.min(t.offset + t.limit, t.matched);
    summary.textContent = (t.matched ? `${first}–${last} of ${t.matched} matching models` : "no matching models")
      + (t.matched !== t.total ? ` (${t.total} in the registry)` : "");
    if (t.q && !t.matched && t.suggestions.length) {
      replace(message, h("p", { class: "warn suggest", id: "did-you-mean" }, `No model name contains “${t.q}”. Did you mean `,
        t.suggestions.map((name, i) => [i ? ", " : "", h("a", { href: modelHref(name) }, name)]), "?"));
    }
    const columns = [
      { key: "name", label: "Name", cell: (r) => [modelLink(r.name), r.embedded ? "" : h("span", { class: "tag", title: "not embedded yet" }, "not embedded"),
        r.thin_evidence ? h("span", { class: "tag low", title: `embedded from ${r.embedded_from} evaluations, fewer than ${t.low_evidence_below}: ranked after well-evidenced models in search, route fallbacks and clusters unless min_evals=0` }, "low evidence") : ""] },
      ...t.fields.map((f) => ({ key: f, label: f, cell: (r) => fmt.value(f in r.record.extra ? r.record.extra[f] : r.record[f]),
        num: f === "params_b" })),
      { key: "version", label: "Version", num: true, cell: (r) => fmt.value(r.version) },
      { key: "n_evals", label: "Evaluations", num: true, cell: (r) => r.n_evals },
      { key: "accuracy", label: "Accuracy", num: true, cell: (r) => fmt.acc(r.accuracy) },
      ...t.tasks.map((task) => ({ key: "task:" + task, label: task, num: true, cell: (r) => {
        const a = r.tasks[task];
        if (!a) return "–";
        const low = r.low_evidence.includes(task);
        return [fmt.acc(a.accuracy), low ? h("span", { class: "low", title: `only ${a.n} evaluations (fewer than ${t.low_evidence_below})`,
          "aria-label": `low evidence: ${a.n} evaluations` }, "*") : ""];
      } })),
    ];
    const head = h("tr", {}, columns.map((c) => {
      const active = c.key === t.sort;
      const next = active && !t.descending ? "desc" : "asc";
      return h("th", { scope: "col", class: c.num ? "num" : null, "aria-sort": active ? (t.descending ? "descending" : "ascending") : null },
        h("button", { type: "button", title: `sort by ${c.label}`, "data-focus": "sort:" + c.key,
          onclick: () => { state.sort = c.key; state.order = next; state.offset = 0; refocus = "sort:" + c.key; load(); } },
          c.label, active ? h("span", { class: "dir", "aria-hidden": "true" }, t.descending ? " ▼" : " ▲") : ""));
    }));
    const body = h("tbody", {}, t.rows.map((r) => h("tr", { "data-name": r.name },
      columns.map((c) => h("td", { class: c.num ? "num" : null }, c.cell(r))))));
    replace(wrap, h("table", { id: "models-table" }, h("thead", {}, head), body));
    const prev = h("button", { type: "button", class: "secondary", disabled: t.offset === 0,
      onclick: () => { state.offset = Math.max(0, t.offset - t.limit); refocus = "prev"; load(); } }, "← Previous");
    const next = h("button", { type: "button", class: "secondary", disabled: last >= t.matched,
      onclick: () => { state.offset = t.offset + t.limit; refocus = "next"; load(); } }, "Next →");
    const pages = Math.max(1, Math.ceil(t.matched / t.limit));
    replace(pager, prev, h("span", {}, `page ${Math.floor(t.offset / t.limit) + 1} of ${pages}`), next);
    // Keyboard focus stays on the control that rebuilt the table (a page button that just turned disabled
    // hands it to the other one) instead of falling to the page's body.
    const again = refocus === "prev" ? [prev, next] : refocus === "next" ? [next, prev]
      : [...head.querySelectorAll("button")].filter((b) => refocus && b.dataset.focus === refocus);
    refocus = null;
    const target = again.find((b) => !b.disabled);
    if (target) target.focus();
  }

  await load();
}
