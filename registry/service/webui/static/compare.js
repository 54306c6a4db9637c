// Compare: two models task by task with the paired tests, as `registry compare` prints (/v1/compare).
import { api, errorBox, field, fmt, h, modelLink, newestRun, params, replace, setParams } from "./lib.js";

export async function render(root) {
  const start = params();
  const a = h("input", { id: "cmp-a", value: start.get("a") || "", required: true, list: "model-names", autocomplete: "off" });
  const b = h("input", { id: "cmp-b", value: start.get("b") || "", required: true, list: "model-names", autocomplete: "off" });
  const names = h("datalist", { id: "model-names" });
  const form = h("form", { class: "bar", "aria-label": "Models to compare" }, field("Model A", a), field("Model B", b),
    h("button", { type: "submit" }, "Compare"), names);
  const out = h("div", { id: "compare-out", "aria-live": "polite" });
  replace(root, form, out);
  api("/v1/table", { params: { limit: 500 } }).then((t) => replace(names, t.rows.map((r) => h("option", { value: r.name })))).catch(() => {});

  const fresh = newestRun();
  async function run() {
    const current = fresh();
    setParams({ a: a.value.trim(), b: b.value.trim() });
    replace(out, h("p", { class: "muted" }, "Comparing …"));
    let r;
    try {
      r = await api("/v1/compare", { params: { a: a.value.trim(), b: b.value.trim() } });
    } catch (err) {
      if (current()) replace(out, errorBox(err));
      return;
    }
    if (!current()) return;
    const g = r.agreement, o = r.overall;
    const predicted = r.predicted_from !== null;
    const cols = ["task", "A", "n", "B", "n", "A−B (points)", "shared", "A−B shared", "test", "z", "p (Holm)", ...(predicted ? ["pred A", "pred B"] : [])];
    replace(out,
      h("p", {}, modelLink(r.a), " vs ", modelLink(r.b), `: cosine distance ${fmt.dist(r.distance_cosine)}` + (r.by === "fingerprint" && r.distance !== null ? `, ${r.distance_metric === "behaviour" ? "behaviour distance (expected disagreement)" : "fingerprint distance"} ${fmt.dist(r.distance)}` : "") + `; by ${r.by}, ${r.b} is ${r.a}'s #${r.rank_of_b_among_a_neighbours} neighbour of ${r.n_neighbours}, ${r.a} is ${r.b}'s #${r.rank_of_a_among_b_neighbours}.`),
      g.shared_queries ? h("p", {}, `${g.shared_queries} shared queries: they disagree on ${fmt.pct(g.disagreement_rate)} (both right ${g.both_correct}, only A ${g.only_a}, only B ${g.only_b}, both wrong ${g.both_wrong}).`) : "",
      h("p", {}, `Overall accuracy: A ${fmt.pct(o.a_accuracy)} (${o.a_n}), B ${fmt.pct(o.b_accuracy)} (${o.b_n}); ` + (o.test === "paired"
        ? `on the ${o.shared_n} shared queries A−B ${fmt.signed(100 * o.shared_difference, 1)} points, z ${fmt.signed(o.z)}, p ${fmt.p(o.p_value)}.`
        : `no overall test: ${o.shared_n} shared queries, fewer than 10 (the tasks' rows test task by task).`)),
      h("div", { class: "table-wrap" }, h("table", { id: "compare-table" }, h("thead", {}, h("tr", {}, cols.map((c, i) => h("th", { scope: "col", class: i === 0 || c === "test" ? null : "num" }, c)))),
        h("tbody", {}, r.tasks.map((t) => h("tr", {}, h("td", {}, t.task || "(none)"), h("td", { class: "num" }, fmt.pct(t.a_accuracy)), h("td", { class: "num" }, t.a_n),
          h("td", { class: "num" }, fmt.pct(t.b_accuracy)), h("td", { class: "num" }, t.b_n),
          h("td", { class: "num" }, t.difference === null ? "–" : fmt.signed(100 * t.difference, 1)), h("td", { class: "num" }, t.shared_n),
          h("td", { class: "num" }, t.shared_difference === null ? "–" : fmt.signed(100 * t.shared_difference, 1)), h("td", {}, t.test),
          h("td", { class: "num" }, fmt.signed(t.z)), h("td", { class: "num" }, fmt.p(t.p_adjusted)),
          predicted ? [h("td", { class: "num" }, fmt.pct(t.a_predicted)), h("td", { class: "num" }, fmt.pct(t.b_predicted))] : ""))))),
      h("p", { class: "muted small" }, r.test + (predicted ? `; pred: ${r.predicted_from}.` : r.predicted_note ? `; no predictions: ${r.predicted_note}.` : ".")));
  }
  form.addEventListener("submit", (event) => { event.preventDefault(); run(); });
  if (a.value && b.value) await run();
  else replace(out, h("p", { class: "muted" }, "Pick two models (a model's page links each neighbour here)."));
}
