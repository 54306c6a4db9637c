// Families: the models' hierarchical clusters as `registry clusters` cuts them (/v1/clusters), each
// cluster with its members (links to their pages) and the `family` metadata they carry, and how well
// the clusters agree with that metadata.
import { api, errorBox, field, fmt, h, linkProblems, modelLink, newestRun, params, replace, setParams, whereHint } from "./lib.js";

const LINKAGES = ["complete", "average", "single", "ward"];

function options(values, chosen) {
  return values.map(([value, label]) => h("option", { value, selected: value === chosen }, label));
}

export async function render(root) {
  const start = params();
  const by = h("select", { id: "fam-by" }, options([["", "default"], ["fingerprint", "fingerprint"], ["locus", "LOCUS"]], start.get("by") || ""));
  const linkage = h("select", { id: "fam-linkage" }, options(LINKAGES.map((l) => [l, l]), start.get("linkage") || "complete"));
  const k = h("input", { id: "fam-k", type: "number", min: "1", step: "1", value: start.get("k") || "", placeholder: "auto", title: "blank: the number with the highest mean silhouette", class: "narrow" });
  const where = h("input", { id: "fam-where", class: "wide", value: start.get("where") || "", spellcheck: "false", placeholder: "e.g. access == open" });
  const form = h("form", { class: "bar", "aria-label": "Clustering options" }, field("By", by), field("Linkage", linkage),
    field("Clusters", k), field("Only models where", where), h("button", { type: "submit" }, "Cluster"));
  const out = h("div", { id: "families-out", "aria-live": "polite" });
  replace(root, form, out);

  const fresh = newestRun();
  let first = true; // the first run reads the address too
  async function run() {
    const current = fresh();
    const problems = first ? linkProblems(start, { by, linkage, k }) : [];
    first = false;
    if (problems.length) { // said, and nothing run: the link stays as it was given
      replace(out, h("div", { class: "error", role: "alert" }, problems.join("; ") + ". Correct it above and cluster again."));
      return;
    }
    const query = { by: by.value, linkage: linkage.value, k: k.value.trim(), where: where.value.trim() };
    setParams(query);
    replace(out, h("p", { class: "muted" }, "Clustering …"));
    let r;
    try {
      r = await api("/v1/clusters", { params: query });
    } catch (err) {
      if (current()) replace(out, errorBox(err, whereHint(err)));
      return;
    }
    if (!current()) return;
    const g = r.family_agreement;
    const structure = r.silhouette === null ? "" : `; mean silhouette ${r.silhouette.toFixed(2)} (structure: ${r.structure})`;
    const agreement = g ? h("p", { id: "family-agreement" },
      `Agreement with the family metadata (${g.n_models} models, ${g.n_families} families): adjusted Rand ${g.adjusted_rand.toFixed(2)} `
      + `(0 is chance, 1 the same grouping; permutation p ${fmt.p(g.p_value)}), purity ${g.purity.toFixed(2)}`
      + (g.at_family_count ? `; cut into ${g.at_family_count.k} clusters, adjusted Rand ${g.at_family_count.adjusted_rand.toFixed(2)}.` : "."))
      : h("p", { class: "muted" }, "No model carries a family: nothing to compare the clusters with.");
    replace(out,
      h("p", { id: "clusters-summary" }, `${r.n_models} models by ${r.by}, ${r.linkage} linkage on ${r.metric} distances: `,
        h("strong", {}, `${r.k} clusters`), `${r.k_rule === "given" ? " (as asked)" : ", the " + r.k_rule}${structure}` + (r.cophenetic_correlation === null ? "." : `; cophenetic correlation ${r.cophenetic_correlation.toFixed(2)}.`)),
      agreement,
      r.evidence_note ? h("p", { class: "muted small" }, r.evidence_note) : "",
      h("div", { class: "table-wrap" }, h("table", { id: "clusters-table" },
        h("caption", { class: "muted small" }, `Merge heights: ${r.heights}. Members in dendrogram order.`),
        h("thead", {}, h("tr", {}, h("th", { scope: "col", class: "num" }, "cluster"), h("th", { scope: "col", class: "num" }, "models"),
          h("th", { scope: "col" }, "members"), h("th", { scope: "col" }, "families"), h("th", { scope: "col", class: "num" }, "mean distance within"))),
        h("tbody", {}, r.clusters.map((c) => h("tr", {},
          h("td", { class: "num" }, c.id), h("td", { class: "num" }, c.size),
          h("td", {}, c.members.map((m, i) => [i ? ", " : "", modelLink(m)])),
          h("td", {}, Object.entries(c.families).map(([f, n]) => (n > 1 ? `${f} ×${n}` : f)).join(", ") || "–"),
          h("td", { class: "num" }, c.size > 1 ? fmt.dist(c.mean_distance) : "–")))))));
  }
  form.addEventListener("submit", (event) => { event.preventDefault(); run(); });
  await run();
}
