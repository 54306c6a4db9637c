// Add a model: which stored queries to evaluate a new model on first (/v1/suggest-queries at the pool's
// prior, downloadable as a JSON Lines file to fill in), then its evaluations uploaded as a file
// (POST /v1/models/{name}/file, with the token): stored and embedded in one forward pass, no training.
import { api, errorBox, field, fieldProblem, h, modelHref, modelNameProblem, replace } from "./lib.js";

const enc = encodeURIComponent;

// "key=value" per line -> {key: "value"}: the CLI's --meta pairs, parsed by the server as the CLI's are
function metadataOf(text) {
  const meta = {};
  text.split("\n").map((line) => line.trim()).filter(Boolean).forEach((line, i) => {
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`metadata line ${i + 1}: ${JSON.stringify(line)} is not key=value`);
    meta[line.slice(0, at).trim()] = line.slice(at + 1).trim();
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
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    replace(out, h("p", { class: "muted" }, "Choosing …"));
    let r;
    try {
      r = await api("/v1/suggest-queries", { params: { n: n.value, task: task.value, from_pool: "true" } });
    } catch (err) {
      replace(out, errorBox(err));
      return;
    }
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
  const form = h("form", { class: "stack", "aria-label": "Add a model" },
    h("div", { class: "row" }, field("Name", name), field("Evaluations file (.csv, .jsonl, .parquet)", file)),
    field("Metadata", meta),
    h("div", { class: "row" }, h("label", { for: "add-replace", class: "check" }, replaceBox, " Replace a model of that name (its history is kept)"),
      h("button", { type: "submit" }, "Add model")));
  name.addEventListener("input", () => fieldProblem(name, null));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!fieldProblem(name, modelNameProblem(name.value.trim()))) return; // before a request to /v1/models//file
    let metadata;
    try {
      metadata = metadataOf(meta.value);
    } catch (err) {
      replace(out, errorBox(err));
      return;
    }
    if (!file.files.length) { replace(out, h("div", { class: "error", role: "alert" }, "file: choose the evaluations file")); return; }
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
  });
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
