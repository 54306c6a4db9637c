// Audit: the flagged pairs (duplicate / same product line?) with the evidence sentence of each,
// and the run's calibration line, as `registry audit` prints them (/v1/audit).
import { api, errorBox, field, h, linkProblems, newestRun, params, replace, setParams } from "./lib.js";
import { flagView } from "./model.js";

// Holm's threshold of the run; 0 when no pair's p-value passes it (nothing can be flagged at this alpha).
const level = (p) => (p > 0 ? `flag level p ≤ ${p.toExponential(1)}` : "no pair's p-value passes Holm's test at this alpha");

export async function render(root) {
  const start = params();
  const model = h("input", { id: "audit-model", value: start.get("model") || "", placeholder: "every model", autocomplete: "off" });
  const k = h("input", { id: "audit-k", type: "number", min: 1, max: 1000, value: start.get("k") || 10 });
  const alpha = h("input", { id: "audit-alpha", type: "number", min: 0.0001, max: 0.5, step: "any", value: start.get("alpha") || 0.01 });
  const form = h("form", { class: "bar", "aria-label": "Audit options" }, field("One model (optional)", model),
    field("Nearest neighbours (k)", k), field("False-flag rate (alpha)", alpha), h("button", { type: "submit" }, "Run audit"));
  const out = h("div", { id: "audit-out", "aria-live": "polite" });
  replace(root, form, out);
  const fresh = newestRun();
  let first = true; // the first run reads the address too
  async function run() {
    const current = fresh();
    const problems = first ? linkProblems(start, { k, alpha }) : [];
    first = false;
    if (problems.length) { // said, and nothing run: the link stays as it was given
      replace(out, h("div", { class: "error", role: "alert" }, problems.join("; ") + ". Correct it above and run the audit."));
      return;
    }
    setParams({ model: model.value.trim(), k: k.value === "10" ? "" : k.value, alpha: alpha.value === "0.01" ? "" : alpha.value });
    replace(out, h("p", { class: "muted" }, "Auditing …"));
    let r;
    try {
      r = await api("/v1/audit", { params: { model: model.value.trim(), k: k.value, alpha: alpha.value } });
    } catch (err) {
      if (current()) replace(out, errorBox(err));
      return;
    }
    if (!current()) return;
    const cal = r.calibration;
    const scope = r.model ? `model ${r.model}` : `${r.models} models`;
    const nearest = r.by_fingerprint ? `${r.k} nearest by embedding and by fingerprint` : `${r.k} nearest neighbours`;
    const calibration = `${scope}: ${r.candidates} candidate pairs (${nearest}, ${r.metric}); pool calibration over ${cal.models} models and ` +
      `${cal.reference_pairs} reference pairs` + (cal.cached ? ` (cached${cal.stale ? ", from an older generation" : ""})` : "") +
      (cal.reference_kappa_median === null ? "" : `; reference pairs' median kappa ${cal.reference_kappa_median.toFixed(3)}`) +
      `; alpha ${r.alpha} (${level(r.flag_level_p)}), max noise ${r.max_noise}; ${r.seconds.toFixed(2)} s.`;
    const duplicates = r.flags.filter((f) => f.label === "duplicate").length;
    replace(out, h("p", { id: "calibration" }, calibration),
      h("h2", {}, `Flagged pairs (${r.flags.length})`),
      r.flags.length ? h("div", { id: "flags" }, r.flags.map(flagView)) : h("p", { class: "notice" }, "No pair is flagged."),
      r.untested.length ? [h("h2", {}, `Untested (${r.untested.length})`), r.untested.map((u) => h("p", { class: "small" }, h("strong", {}, `${u.a} ~ ${u.b}`), `: ${u.reason}`))] : "",
      h("p", { id: "audit-summary" }, `${r.cleared.length} of ${r.candidates} candidate pairs cleared by their evaluations; ${duplicates} duplicate(s), ${r.flags.length - duplicates} same product line?`),
      r.cleared.length ? h("details", {}, h("summary", {}, `Cleared pairs (${r.cleared.length})`),
        r.cleared.map((p) => h("p", { class: "small" }, h("strong", {}, `${p.a} ~ ${p.b}`), `: ${p.reason}`))) : "");
  }
  form.addEventListener("submit", (event) => { event.preventDefault(); run(); });
  await run();
}
