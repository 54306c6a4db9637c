// Route playground: questions -> models ranked by predicted P(correct) with fallbacks (/v1/route);
// a capability profile -> the nearest real models (/v1/profile).
import { api, errorBox, field, fmt, h, modelLink, newestRun, replace } from "./lib.js";

const list = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);

// The API words a cost refusal for the command line (--meta, --unpriced): what to do on this page instead.
function costHint(err, unpriced) {
  if ((err.field !== "max_cost" && err.field !== "willingness_to_pay") || !/no price/.test(err.message)) return null;
  return (unpriced.checked ? "" : "Tick “Leave out models with no price …” beside the Route button, or ")
    + "give those models price metadata (price_in and price_out in USD per 1M tokens, price_call or params_b) when adding them; "
    + "“Only models where” or “Exclude” can narrow the pool too.";
}

export async function render(root) {
  const questions = h("textarea", { id: "questions", rows: 4, placeholder: "one question per line", required: true });
  const where = h("input", { id: "route-where", class: "wide", spellcheck: "false", placeholder: "e.g. access == open" });
  const exclude = h("input", { id: "route-exclude", placeholder: "names, comma-separated" });
  const k = h("input", { id: "route-k", type: "number", min: 1, max: 100, value: 3 });
  const fallback = h("input", { id: "route-fallback", type: "number", min: 0, max: 100, value: 3 });
  const maxCost = h("input", { id: "route-max-cost", type: "number", min: 0, step: "any", class: "narrow", placeholder: "none", title: "only models costing at most this per call (price metadata, else the params_b proxy)" });
  const pay = h("input", { id: "route-wtp", type: "number", min: 0, step: "any", class: "narrow", placeholder: "none", title: "rank by P(correct) − λ · cost per call" });
  // Under a cost limit every model needs a cost (its price, else the params_b proxy): those with neither are
  // left out (the API's unpriced=exclude, said in the answer's note) unless this is unticked (a refusal naming them).
  const unpriced = h("input", { id: "route-unpriced", type: "checkbox", checked: true });
  const routeOut = h("div", { id: "route-out", "aria-live": "polite" });
  // a first visit has nothing to type: one stored question of each of the first three tasks
  const examples = h("button", { type: "button", id: "route-examples", class: "secondary",
    title: "fill in stored questions of three tasks" }, "Try stored questions");
  examples.addEventListener("click", async () => {
    try {
      const stored = await api("/v1/queries?limit=1000");
      const first = new Map();
      for (const q of stored.queries) if (!first.has(q.task) && first.size < 3) first.set(q.task, q.text);
      questions.value = [...first.values()].join("\n");
    } catch (err) {
      replace(routeOut, errorBox(err));
    }
  });
  const routeForm = h("form", { class: "stack", id: "route-form", "aria-labelledby": "h-route" },
    field("Questions (one per line)", questions), h("div", {}, examples),
    h("div", { class: "row" }, field("Only models where", where), field("Exclude (down or unwanted)", exclude), field("Top k", k), field("Fallbacks", fallback),
      field("Max cost (USD/call)", maxCost), field("Willingness to pay λ", pay)),
    h("div", { class: "row" }, h("label", { for: "route-unpriced", class: "check",
      title: "ticked: they are left out and the answer names them; unticked: the route is refused, naming them" }, unpriced,
      " Leave out models with no price and no params_b under a cost limit"), h("button", { type: "submit" }, "Route")));
  const number = (input) => (input.value.trim() === "" ? null : Number(input.value));
  const ranked = (m) => h("li", {}, modelLink(m.name), ` — P(correct) ${m.p_correct.toFixed(3)}`,
    m.cost_usd === undefined ? "" : `, $${m.cost_usd.toPrecision(3)} a call${m.cost_source === "params_b" ? " (size proxy)" : ""}`
      + (m.utility === null || m.utility === undefined ? "" : `, utility ${m.utility.toFixed(3)}`),
    m.low_evidence ? h("span", { class: "low", title: "embedded from few evaluations" }, " *") : "");
  // a fallback's distance is in the metric of the index that found it (behaviour by default), not LOCUS's cosine
  const near = (f) => (f.distance === null || f.distance === undefined ? `cosine d ${fmt.dist(f.distance_cosine)}` : `${f.metric} d ${fmt.dist(f.distance)}`);
  const freshRoute = newestRun();
  routeForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const current = freshRoute();
    const texts = questions.value.split("\n").map((s) => s.trim()).filter(Boolean);
    if (!texts.length) { replace(routeOut, h("div", { class: "error", role: "alert" }, "queries: type at least one question")); return; }
    replace(routeOut, h("p", { class: "muted" }, "Routing …"));
    try {
      const body = { queries: texts, k: Number(k.value), fallback: Number(fallback.value), exclude: list(exclude.value),
        where: where.value.trim() || null };
      if (number(maxCost) !== null) body.max_cost = number(maxCost);
      if (number(pay) !== null) body.willingness_to_pay = number(pay);
      if ((number(maxCost) !== null || number(pay) !== null) && unpriced.checked) body.unpriced = "exclude";
      const r = await api("/v1/route", { method: "POST", body });
      if (!current()) return;
      replace(routeOut, r.results.map((d, i) => h("div", { class: "flag ranking", "data-query": i },
        h("strong", {}, d.query),
        h("ol", {}, d.ranking.map(ranked)),
        d.fallbacks.length ? h("p", { class: "small fallbacks" }, "Fallbacks if the first is down: ",
          d.fallbacks.map((f, j) => [j ? ", " : "", modelLink(f.name), ` (${near(f)})`])) : "")),
      [...new Set(r.results.flatMap((d) => [d.cost_note, d.evidence_note]).filter(Boolean))].map((note) => h("p", { class: "muted small route-note" }, note)),
      h("p", { class: "muted small" }, `P(correct) from ${r.results[0].predictor_description}; `
        + `${r.encoded_texts} new text(s) encoded, the rest came from the cache.`));
    } catch (err) {
      if (current()) replace(routeOut, errorBox(err, costHint(err, unpriced)));
    }
  });

  const stats = await api("/v1/stats").catch(() => ({ queries_per_task: {} }));
  const tasks = Object.keys(stats.queries_per_task);
  const targets = h("div", { id: "targets", class: "row" }, tasks.map((task, i) =>
    field(`${task} accuracy`, h("input", { id: `target-${i}`, type: "number", min: 0, max: 1, step: "any", "data-task": task, placeholder: "skip" }))));
  const pk = h("input", { id: "profile-k", type: "number", min: 1, max: 100, value: 5 });
  const pwhere = h("input", { id: "profile-where", class: "wide", spellcheck: "false", placeholder: "e.g. access == open" });
  const profileOut = h("div", { id: "profile-out", "aria-live": "polite" });
  const profileForm = h("form", { class: "stack", id: "profile-form", "aria-labelledby": "h-profile" },
    h("p", { class: "muted small" }, "Give a target accuracy (0 to 1) for the tasks that matter; leave the others empty."), targets,
    h("div", { class: "row" }, field("Top k", pk), field("Only models where", pwhere), h("button", { type: "submit" }, "Find models")));
  const freshProfile = newestRun();
  profileForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const current = freshProfile();
    const wanted = {};
    for (const input of targets.querySelectorAll("input")) if (input.value !== "") wanted[input.dataset.task] = Number(input.value);
    if (!Object.keys(wanted).length) { replace(profileOut, h("div", { class: "error", role: "alert" }, "targets: give at least one task's accuracy")); return; }
    replace(profileOut, h("p", { class: "muted" }, "Embedding the profile …"));
    try {
      const r = await api("/v1/profile", { method: "POST", body: { targets: wanted, k: Number(pk.value), where: pwhere.value.trim() || null } });
      if (!current()) return;
      replace(profileOut, h("p", { class: "small" }, `hypothetical model from ${r.n_evals} synthetic evaluations: `,
        Object.entries(r.per_task).map(([t, s], i) => `${i ? ", " : ""}${t} ${r.targets[t].toFixed(2)} (sampled ${s.sampled_accuracy.toFixed(2)} over ${s.n_evals}${s.n_queries < s.n_evals ? ` of ${s.n_queries} queries, drawn again` : ""})`)),
      h("table", { id: "profile-table" }, h("thead", {}, h("tr", {}, ["model", "cosine d", "family", "access"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, r.neighbours.map((n) => h("tr", {}, h("td", {}, modelLink(n.name)), h("td", { class: "num" }, fmt.dist(n.distance)),
          h("td", {}, fmt.value(n.metadata.family)), h("td", {}, fmt.value(n.metadata.access)))))));
    } catch (err) {
      if (current()) replace(profileOut, errorBox(err));
    }
  });
  replace(root, h("h2", { id: "h-route" }, "Route questions"), routeForm, routeOut,
    h("h2", { id: "h-profile" }, "Find a model by capability profile"), profileForm, profileOut);
}
