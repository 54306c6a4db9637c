// Portfolio: a few models that cover the pool (/v1/portfolio, `registry portfolio`), chosen by a number of
// models or a parameter budget, with their routing accuracy on held-out test queries against the whole
// pool and against random subsets of the same size.
import { api, errorBox, field, fmt, h, linkProblems, modelLink, newestRun, params, replace, setParams, whereHint } from "./lib.js";

const METHODS = [["", "default"], ["answers", "answers (cover the recorded answers)"], ["kmedoids", "k-medoids"],
  ["kcenter", "k-center"], ["greedy-budget", "greedy under a budget"]];

function options(values, chosen) {
  return values.map(([value, label]) => h("option", { value, selected: value === chosen }, label));
}

// What is wrong with the two limits (null: nothing): exactly one of them, a number. A number box holding
// text that is no number (typed, or ?k=abc in the address) reads as empty: say which.
function limitProblem(query, k, budget, start) {
  const typed = [[k, "Models"], [budget, "Budget"]].filter(([input]) => input.validity.badInput).map(([, label]) => `${label}: not a number`);
  const bad = [...typed, ...(start ? linkProblems(start, { k, budget_b: budget }) : [])];
  if (bad.length) return `${bad.join("; ")}. Give a number of models or a parameter budget (billions).`;
  if (query.k !== "" && query.budget_b !== "") return "Give either a number of models or a parameter budget, not both.";
  if (query.k === "" && query.budget_b === "") return "Give a number of models (Models) or a parameter budget (Budget, billions of parameters): both are empty.";
  return null;
}

export async function render(root) {
  const start = params();
  const k = h("input", { id: "pf-k", type: "number", min: "1", step: "1", class: "narrow", value: start.get("k") || (start.get("budget_b") ? "" : "3"), title: "how many models (leave blank to choose by a budget)" });
  const budget = h("input", { id: "pf-budget", type: "number", min: "0", step: "any", class: "narrow", value: start.get("budget_b") || "", placeholder: "none", title: "total parameters, billions (instead of a number of models)" });
  const method = h("select", { id: "pf-method" }, options(METHODS, start.get("method") || ""));
  const by = h("select", { id: "pf-by" }, options([["", "default"], ["locus", "LOCUS"], ["fingerprint", "fingerprint"]], start.get("by") || ""));
  const where = h("input", { id: "pf-where", class: "wide", value: start.get("where") || "", spellcheck: "false", placeholder: "e.g. access == open" });
  const form = h("form", { class: "bar", "aria-label": "Portfolio options" }, field("Models", k), field("Budget (B params)", budget),
    field("Method", method), field("By", by), field("Only models where", where), h("button", { type: "submit" }, "Choose"));
  const out = h("div", { id: "portfolio-out", "aria-live": "polite" });
  replace(root, form, out);

  let first = true; // the first run reads the address too
  const fresh = newestRun();
  async function run() {
    const current = fresh();
    const query = { k: k.value.trim(), budget_b: budget.value.trim(), method: method.value, by: by.value, where: where.value.trim() };
    const problem = limitProblem(query, k, budget, first ? start : null);
    first = false;
    if (problem) { // said, and nothing run: the address keeps what was given
      replace(out, h("div", { class: "error", role: "alert" }, problem));
      return;
    }
    setParams(query);
    replace(out, h("p", { class: "muted" }, "Choosing …"));
    let r;
    try {
      r = await api("/v1/portfolio", { params: query });
    } catch (err) {
      if (current()) replace(out, errorBox(err, whereHint(err)));
      return;
    }
    if (!current()) return;
    const limit = r.budget_b === null ? `${r.k} models` : `a budget of ${r.budget_b}B parameters`;
    const read = r.method === "answers" ? "their recorded answers" : `their ${r.by === "locus" ? "LOCUS embeddings" : "fingerprints"}`;
    const total = r.total_params_b === null ? "unknown" : `${r.total_params_b}B${r.total_params_b_is_lower_bound ? " at least (some sizes unknown)" : ""}`;
    const accuracy = r.routing_accuracy === null
      ? h("p", { id: "portfolio-accuracy", class: "muted" }, `Routing accuracy not measured: ${r.accuracy_reason}.`)
      : h("div", { class: "table-wrap" }, h("table", { id: "portfolio-accuracy" },
        h("caption", { class: "muted small" }, `Routing accuracy on ${r.n_test_queries} held-out test queries: each query sent to the model predicted most likely to answer it, scored by its real score.`),
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "models routed among"), h("th", { scope: "col", class: "num" }, "routing accuracy"))),
        h("tbody", {},
          h("tr", {}, h("th", { scope: "row" }, "this portfolio"), h("td", { class: "num" }, fmt.acc(r.routing_accuracy))),
          h("tr", {}, h("th", { scope: "row" }, `the whole pool (${r.pool_size})`), h("td", { class: "num" }, fmt.acc(r.full_pool_routing_accuracy))),
          h("tr", {}, h("th", { scope: "row" }, `random subsets (${r.random_draws} draws)`),
            h("td", { class: "num" }, `${fmt.acc(r.random_routing_accuracy_mean)} ± ${fmt.acc(r.random_routing_accuracy_sd)}`)))));
    replace(out,
      h("p", { id: "portfolio-summary" }, `${r.method} portfolio of `, h("strong", {}, limit), ` from a pool of ${r.pool_size}, compared by ${read}; total parameters ${total}; coverage ${r.coverage.toFixed(3)}`
        + (r.answer_coverage === null || r.answer_coverage === undefined ? "." : `; answer coverage ${r.answer_coverage.toFixed(3)} of ${r.answer_queries} queries.`)
        + (r.random_below_fraction === null ? "" : ` ${fmt.pct(r.random_below_fraction)} of random subsets route worse.`)),
      r.warnings.length ? h("ul", { class: "warn", id: "portfolio-warnings" }, r.warnings.map((w) => h("li", {}, w))) : "",
      h("div", { class: "table-wrap" }, h("table", { id: "portfolio-table" },
        h("thead", {}, h("tr", {}, h("th", { scope: "col", class: "num" }, "#"), h("th", { scope: "col" }, "model"), h("th", { scope: "col", class: "num" }, "parameters"))),
        h("tbody", {}, r.models.map((name, i) => h("tr", {}, h("td", { class: "num" }, i + 1), h("td", {}, modelLink(name)),
          h("td", { class: "num" }, r.params_b[name] === null ? "?" : `${r.params_b[name]}B`)))))),
      accuracy);
  }
  form.addEventListener("submit", (event) => { event.preventDefault(); run(); });
  await run();
}
