// Add a model: which stored queries to evaluate a new model on first (/v1/suggest-queries at the pool's
// prior, downloadable as a JSON Lines file to fill in), then its evaluations uploaded as a file
// (POST /v1/models/{name}/file, with the token): stored and embedded in one forward pass, no training.
import { api, busy, errorBox, field, fieldProblem, h, modelHref, modelNameProblem, newestRun, replace, wholeProblem } from "./lib.js";

const enc = encodeURIComponent;
const MAX_SUGGEST = 100000; // /v1/suggest-queries' largest n (as many evaluations as one add carries)

// "key=value" per line -> {key: "value"}: the CLI's --meta pairs, parsed by the server as the CLI's are.
// A key given twice is refused as the JSON API refuses it: merged, the first value would vanish unsaid.
function metadataOf(text) {
  const meta = Object.create(null); // no prototype: a key "__proto__" is a key like any other
  text.split("\n").map((line) => line.trim()).filter(Boolean).forEach((line, i) => {
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`metadata line ${i + 1}: ${JSON.stringify(line)} is not key=value`);
    const key = line.slice(0, at).trim();
    if (Object.hasOwn(meta, key)) throw new Error(`metadata line ${i + 1}: key '${key}' appears more than once`);
    meta[key] = line.slice(at + 1).trim();
  });
  return meta;
}

async function suggestions(root) {
  const stats = await api("/v1/stats").catch(() => ({ queries_per_task: {} }));
  const n = h("input", { id: "suggest-n", type: "number", min: 1, step: 1, value: 64, class: "narrow" });
  const task = h("select", { id: "suggest-task" }, h("option", { value: "" }, "every task"),
    Object.keys(stats.queries_per_task).map((t) => h("option", { value: t }, t)));
  const out = h("div", { id: "suggest-out", "aria-live": "polite" });
  const form = h("form", { class: "bar", "aria-label": "Suggest queries" }, field("Queries", n), field("Task", task),
    h("button", { type: "submit" }, "Suggest"));
  const fresh = newestRun();
  n.addEventListener("input", () => fieldProblem(n, null));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const current = fresh();
    if (!fieldProblem(n, wholeProblem(n, 1, MAX_SUGGEST))) { replace(out); return; }
    replace(out, h("p", { class: "muted" }, "Choosing …"));
    let r;
    try {
      r = await api("/v1/suggest-queries", { params: { n: n.value.trim(), task: task.value, from_pool: "true" } });
    } catch (err) {
      if (current()) replace(out, errorBox(err));
      return;
    }
    if (!current()) return;
    // the file to fill in: one row per query, its score left for the model's own answer
    const lines = r.queries.map((q) => JSON.stringify({ query_id: q.query_id, task: q.task, query: q.text, score: null }));
    const file = URL.createObjectURL(new Blob([lines.join("\n") + "\n"], { type: "application/x-ndjson" }));
    replace(out,
      h("p", { id: "suggest-summary" }, `${r.queries.length} of ${r.n_candidates} candidate queries${r.task ? " of task " + r.task : ""}, `
        + `chosen at the pool's prior (${r.pool_models} models, item table ${r.table_id}) to stand for the stored queries as a whole: `,
        h("a", { id: "suggest-download", href: file, download: "suggested-queries.jsonl" }, "download them as JSON Lines"),
        ", fill in each score (0 to 1) from your model's answers, and upload the file below."),
      h("div", { class: "table-wrap" }, h("table", { id: "suggest-table" },
        h("thead", {}, h("tr", {}, h("th", { scope: "col", class: "num" }, "#"), h("th", { scope: "col" }, "query_id"),
          h("th", { scope: "col" }, "task"), h("th", { scope: "col", class: "num" }, "pool P(correct)"), h("th", { scope: "col" }, "text"))),
        h("tbody", {}, r.queries.map((q) => h("tr", {}, h("td", { class: "num" }, q.rank), h("td", {}, h("code", {}, q.query_id)),
          h("td", {}, q.task), h("td", { class: "num" }, q.p_correct.toFixed(2)),
          h("td", { class: "text", title: q.text }, q.text.length > 160 ? q.text.slice(0, 160) + "…" : q.text)))))));
  });
  replace(root, h("h2", { id: "h-suggest" }, "1. Which queries to evaluate first"),
    h("p", { class: "muted small" }, "A new model needs evaluations on stored queries; these are the ones whose answers tell the most about it."),
    form, out);
}

function upload(root) {
  const name = h("input", { id: "add-name", class: "wide", required: true, autocomplete: "off", spellcheck: "false", placeholder: "e.g. llama-3-8b-instruct" });
  const meta = h("textarea", { id: "add-meta", rows: 3, spellcheck: "false", placeholder: "key=value per line, e.g.\nfamily=llama\nparams_b=8" });
  const file = h("input", { id: "add-file", type: "file", required: true, accept: ".csv,.jsonl,.parquet" });
  const replaceBox = h("input", { id: "add-replace", type: "checkbox" });
  const out = h("div", { id: "add-out", "aria-live": "polite" });
  const submit = h("button", { type: "submit" }, "Add model");
  const form = h("form", { class: "stack", "aria-label": "Add a model" },
    h("div", { class: "row" }, field("Name", name), field("Evaluations file (.csv, .jsonl, .parquet)", file)),
    field("Metadata", meta),
    h("div", { class: "row" }, h("label", { for: "add-replace", class: "check" }, replaceBox, " Replace a model of that name (its history is kept)"),
      submit));
  name.addEventListener("input", () => fieldProblem(name, null));
  meta.addEventListener("input", () => fieldProblem(meta, null));
  file.addEventListener("change", () => fieldProblem(file, null));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    // the form's own checks, each said next to its field; an earlier answer's error under the form goes
    let metadata = null, metaProblem = null;
    try {
      metadata = metadataOf(meta.value);
    } catch (err) {
      metaProblem = err.message;
    }
    const fine = [fieldProblem(name, modelNameProblem(name.value.trim())), // before a request to /v1/models//file
      fieldProblem(meta, metaProblem), fieldProblem(file, file.files.length ? null : "choose the evaluations file")];
    if (!fine.every(Boolean)) { replace(out); return; }
    busy([submit], () => store(metadata)); // disabled at once: a double-click sends one upload
  });
  async function store(metadata) {
    const body = new FormData();
    body.append("file", file.files[0]);
    body.append("metadata", JSON.stringify(metadata));
    body.append("replace", replaceBox.checked ? "true" : "false");
    replace(out, h("p", { class: "muted" }, "Storing and embedding …"));
    try {
      let r = await api(`/v1/models/${enc(name.value.trim())}/file`, { method: "POST", body, write: true });
      while (r.state !== undefined) { // 202: a job still queued behind other writes; follow it until it lands
        if (r.state === "done") { r = r.result; break; }
        if (r.state === "failed") throw Object.assign(new Error(r.error.message), { status: r.error_status, field: r.error.field });
        replace(out, h("p", { class: "muted" }, `Job ${r.id} is ${r.state} …`));
        await new Promise((done) => setTimeout(done, 1000));
        r = await api(`/v1/jobs/${enc(r.id)}`);
      }
      replace(out, h("div", { class: "notice", role: "status", id: "add-result" },
        h("a", { href: modelHref(r.name) }, r.name), ` is version ${r.version} (${r.event}), embedded by encoder ${r.encoder_id} `
          + `from ${r.n_evals} evaluations (${r.new_evaluations} new; ${r.encoded_texts} query text(s) encoded now).`,
        r.warnings.length ? h("ul", { class: "warn" }, r.warnings.map((w) => h("li", {}, w))) : ""));
    } catch (err) {
      replace(out, errorBox(err, err.status === 409 ? "Tick Replace to store it over the model of that name." : null));
    }
  }
  replace(root, h("h2", { id: "h-add" }, "2. Add the model"),
    h("p", { class: "muted small" }, "A file with a column query (the text) or query_id, a column score in [0, 1], and optionally task; "
      + "the model is stored and embedded in one forward pass, no retraining. Adding needs the server's bearer token (the Token box at the top) "
      + "unless the server runs without one on loopback."),
    form, out);
}

export async function render(root) {
  const first = h("section", { id: "suggest", "aria-labelledby": "h-suggest" });
  const second = h("section", { id: "add", "aria-labelledby": "h-add" });
  replace(root, first, second);
  upload(second);
  await suggestions(first);
}
