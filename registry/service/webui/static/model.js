// A model's page: record, versions (restore, aliases), accuracy per task, nearest models by LOCUS
// and by behaviour, audit verdicts. Every number comes from a /v1 call.
import { accuracyBar, aliasProblem, api, busy, compareHref, errorBox, field, fieldProblem, fmt, h, modelLink, modelNameProblem, newestRun, params,
  replace } from "./lib.js";

const enc = encodeURIComponent;

export async function render(root) {
  const name = params().get("name");
  if (!name) {
    replace(root, h("p", {}, "No model named in the address. Pick one from the ", h("a", { href: "/" }, "models table"), "."));
    return;
  }
  // "." and ".." are path segments the browser folds away (/v1/models/./accuracy would ask for a model named
  // "accuracy" and show it under this name): said, and nothing asked
  const problem = modelNameProblem(name);
  if (problem) {
    replace(root, h("div", { class: "error", role: "alert", id: "name-problem" }, `name=${name} in the address: ${problem}`));
    return;
  }
  document.title = `${name} · locus-registry`;
  document.getElementById("heading").textContent = name;
  const sections = {
    record: h("section", { id: "record", "aria-labelledby": "h-record" }),
    accuracy: h("section", { id: "accuracy", "aria-labelledby": "h-accuracy" }),
    versions: h("section", { id: "versions", "aria-labelledby": "h-versions" }),
    neighbours: h("section", { id: "neighbours", "aria-labelledby": "h-neighbours" }),
    audit: h("section", { id: "audit", "aria-labelledby": "h-audit" }),
  };
  replace(root, h("div", { class: "grid2" }, sections.record, sections.accuracy), sections.versions, sections.neighbours, sections.audit);
  // Every section but the versions (they read themselves again): after a restore, the neighbours and the
  // audit of a model that was removed are there too. A section's answer to an earlier load draws nothing.
  const fresh = newestRun();
  const load = () => {
    const current = fresh();
    return Promise.all([record(name, sections, current), accuracy(name, sections.accuracy, current),
      neighbours(name, sections.neighbours, current), audit(name, sections.audit, current)]);
  };
  await Promise.all([load(), versions(name, sections.versions, load)]);
}

async function record(name, s, current) {
  const el = s.record;
  try {
    const info = await api(`/v1/models/${enc(name)}`);
    if (!current()) return;
    const r = info.record;
    // reached by an alias: the heading names the model it stands for too
    if (r.name !== name) document.getElementById("heading").textContent = `${name} → ${r.name}`;
    const rows = [["family", r.family], ["params_b", r.params_b], ["provider", r.provider], ["endpoint", r.endpoint],
      ["licence", r.licence], ["access", r.access], ["tags", r.tags], ...Object.entries(r.extra)]
      .filter(([, v]) => v !== null && v !== undefined && !(Array.isArray(v) && !v.length));
    replace(el, h("h2", { id: "h-record" }, "Record"), h("dl", { class: "kv" },
      rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, fmt.value(v))]),
      h("dt", {}, "version"), h("dd", { id: "live-version" }, fmt.value(info.version)),
      h("dt", {}, "embedded"), h("dd", {}, info.embedded ? `yes, by encoder ${info.encoder_id} from ${info.n_evals} evaluations` : "no",
        info.low_evidence ? h("span", { class: "tag low", id: "low-evidence", title: "fewer evaluations than the documented minimum: ranked after well-evidenced models in search, route fallbacks and clusters unless min_evals=0" }, " low evidence") : ""),
      h("dt", {}, "embedded at"), h("dd", {}, fmt.time(info.embedded_at)),
      h("dt", {}, "added"), h("dd", {}, fmt.time(info.added))));
  } catch (err) {
    if (!current()) return;
    replace(el, h("h2", { id: "h-record" }, "Record"), errorBox(err, err.status === 404 ? "A removed model keeps its history below: restore brings it back." : null));
  }
}

async function accuracy(name, el, current) {
  try {
    const row = await api(`/v1/models/${enc(name)}/accuracy`);
    if (!current()) return;
    const tasks = Object.entries(row.tasks);
    replace(el, h("h2", { id: "h-accuracy" }, "Accuracy per task"),
      h("p", { class: "muted small" }, `${row.n_evals} stored evaluations; overall ${fmt.acc(row.accuracy)}.`),
      h("table", { id: "accuracy-table" }, h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "task"), h("th", { scope: "col" }, "accuracy"),
        h("th", { scope: "col", class: "num" }, "evaluations"))),
      h("tbody", {}, tasks.map(([task, a]) => h("tr", {}, h("td", {}, task), h("td", {}, accuracyBar(a.accuracy)),
        h("td", { class: "num" }, a.n, row.low_evidence.includes(task) ? h("span", { class: "low", title: `low evidence: fewer than ${row.low_evidence_below} evaluations` }, " *") : ""))))),
      row.low_evidence.length ? h("p", { class: "muted small" }, `* low evidence: fewer than ${row.low_evidence_below} evaluations in the task.`) : "");
  } catch (err) {
    if (current()) replace(el, h("h2", { id: "h-accuracy" }, "Accuracy per task"), errorBox(err));
  }
}

async function versions(name, el, refresh) {
  let past, aliases, live = null;
  try {
    [past, aliases] = await Promise.all([api(`/v1/models/${enc(name)}/history`), api("/v1/aliases")]);
  } catch (err) {
    replace(el, h("h2", { id: "h-versions" }, "Versions"), errorBox(err));
    return;
  }
  try {
    live = (await api(`/v1/models/${enc(past.name)}`)).version;
  } catch (err) {
    live = null; // removed: every version can be restored
  }
  const status = h("div", { id: "write-status", "aria-live": "polite" });
  // The section's buttons wait for a write: a second click would send it again.
  const write = (label, call) => busy(el.querySelectorAll("button"), async () => {
    replace(status, h("p", { class: "muted" }, label + " …"));
    try {
      const result = await call();
      replace(status, h("div", { class: "notice", role: "status" }, result));
      await Promise.all([versions(name, el, refresh), refresh()]);
      const again = document.getElementById("write-status");
      if (again) replace(again, h("div", { class: "notice", role: "status" }, result));
    } catch (err) {
      replace(status, errorBox(err));
    }
  });
  const restore = (version) => write(`restoring version ${version}`, async () => {
    const r = await api(`/v1/models/${enc(past.name)}/restore`, { method: "POST", params: { version }, write: true });
    return r.restored ? `restored version ${r.restored_version}: ${r.name} is now version ${r.version}`
      : `${r.name} is version ${r.version}, already version ${r.restored_version}'s content: nothing to restore`;
  });
  const rows = past.versions.map((v, i) => {
    const current = live !== null && v.version === live && i === past.versions.length - 1;
    return h("tr", { "data-version": v.version }, h("td", { class: "num" }, v.version), h("td", {}, v.event), h("td", {}, fmt.time(v.time)),
      h("td", {}, v.encoder_id || "–"), h("td", { class: "num" }, fmt.value(v.n_evals)),
      h("td", {}, v.record.family || "–"),
      h("td", {}, current ? h("span", { class: "muted" }, "live") : v.event === "remove" ? "" :
        h("button", { type: "button", class: "secondary", "data-restore": v.version, onclick: () => restore(v.version) }, `Restore version ${v.version}`)));
  });
  const mine = aliases.filter((a) => a.name === past.name);
  const aliasName = h("input", { id: "alias-name", required: true, placeholder: "e.g. production", autocomplete: "off" });
  const versionsSeen = [...new Set(past.versions.map((v) => v.version))];
  const aliasVersion = h("select", { id: "alias-version" }, h("option", { value: "" }, "the live version"),
    versionsSeen.map((v) => h("option", { value: v }, `version ${v} only`)));
  aliasName.addEventListener("input", () => fieldProblem(aliasName, null));
  const aliasForm = h("form", { class: "bar", "aria-label": "Set an alias", onsubmit: (event) => {
    event.preventDefault();
    const alias = aliasName.value.trim();
    // refused here (the API would answer a bare 404/405), and an earlier write's error is gone
    if (!fieldProblem(aliasName, aliasProblem(alias))) { replace(status); return; }
    const target = past.name + (aliasVersion.value ? "@" + aliasVersion.value : "");
    write(`setting alias ${alias}`, async () => {
      const a = await api(`/v1/aliases/${enc(alias)}`, { method: "PUT", body: { target }, write: true });
      return `alias ${a.alias} → ${a.name}${a.version ? "@" + a.version : ""}`;
    });
  } }, field("Alias", aliasName), field("Points at", aliasVersion), h("button", { type: "submit" }, "Set alias"));
  const drifted = h("p", { id: "drift", class: "muted", "aria-live": "polite" });
  replace(el, h("h2", { id: "h-versions" }, "Versions"),
    h("div", { class: "table-wrap" }, h("table", { id: "versions-table" }, h("thead", {}, h("tr", {},
      ["version", "event", "time", "encoder", "evaluations", "family", "action"].map((c) => h("th", { scope: "col" }, c)))), h("tbody", {}, rows))),
    live === null ? "" : drifted,
    status,
    h("h2", {}, "Aliases"),
    mine.length ? h("ul", { id: "aliases" }, mine.map((a) => h("li", {}, h("code", {}, a.alias), ` → ${a.name}${a.version ? "@" + a.version : " (live version)"} `,
      h("button", { type: "button", class: "secondary", onclick: () => write(`deleting alias ${a.alias}`, async () => {
        const gone = await api(`/v1/aliases/${enc(a.alias)}`, { method: "DELETE", write: true });
        return `alias ${gone.alias} deleted`;
      }) }, `Delete ${a.alias}`)))) : h("p", { class: "muted" }, "No alias points at this model."),
    aliasForm,
    h("p", { class: "muted small" }, "Restore and alias changes need the server's bearer token (the Token box at the top) unless the server runs without one on loopback."));
  if (live !== null) await drift(past.name, drifted);
}

// Whether the newest version behaves like the earlier ones (`registry drift`), in the API's own words.
async function drift(name, el) {
  replace(el, "Drift: testing the newest version against the earlier ones …");
  try {
    const r = await api(`/v1/models/${enc(name)}/drift`);
    el.className = r.moved ? "warn" : "muted";
    el.dataset.status = r.status;
    replace(el, h("strong", {}, `Drift (${r.status}): `), r.sentence);
  } catch (err) {
    replace(el, errorBox(err));
  }
}

// A model without a behaviour fingerprint (too few evaluations for one) is a state, not a failure: said in
// the page's words. The search leaves `by` to the server, which answers by LOCUS for such a model (a 200,
// so the browser logs no failed request); a 409 from an older server reads the same.
const NO_FINGERPRINT = "This model has no behaviour fingerprint (too few of its evaluations are on the queries fingerprints are "
  + "fitted on, or none are fitted in this registry yet): its nearest models are under “By LOCUS embedding”.";
const noFingerprint = () => h("p", { class: "muted", id: "no-fingerprint" }, NO_FINGERPRINT);
const missing = (err) => (err.status === 409 ? noFingerprint() : errorBox(err));

async function neighbours(name, el, current) {
  const [byLocus, byBehaviour] = await Promise.allSettled([
    api("/v1/similar", { params: { name, k: 10, by: "locus" } }), api("/v1/similar", { params: { name, k: 10 } })]);
  if (!current()) return;
  const compare = (other) => h("a", { href: compareHref(name, other), "aria-label": `compare ${name} with ${other}` }, "compare");
  const locus = byLocus.status === "fulfilled" ? h("div", { class: "table-wrap" }, h("table", { id: "near-locus" },
    h("thead", {}, h("tr", {}, ["model", "cosine d", "family", ""].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, byLocus.value.neighbours.map((n) => h("tr", {}, h("td", {}, modelLink(n.name)), h("td", { class: "num" }, fmt.dist(n.distance)),
      h("td", {}, fmt.value(n.metadata.family)), h("td", {}, compare(n.name))))))) : errorBox(byLocus.reason);
  const behaviour = byBehaviour.status !== "fulfilled" ? missing(byBehaviour.reason)
    : byBehaviour.value.by !== "fingerprint" ? noFingerprint() : h("div", { class: "table-wrap" }, h("table", { id: "near-behaviour" },
    h("thead", {}, h("tr", {}, ["model", "euclidean d", "behav. d", "kappa", "shared", ""].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, byBehaviour.value.neighbours.map((n) => h("tr", {}, h("td", {}, modelLink(n.name)), h("td", { class: "num" }, fmt.dist(n.distance)),
      h("td", { class: "num" }, (n.same_model ? "= " : "") + fmt.dist(n.behaviour_distance)), h("td", { class: "num" }, fmt.acc(n.agreement_kappa)),
      h("td", { class: "num" }, fmt.value(n.shared_queries)), h("td", {}, compare(n.name)))))));
  replace(el, h("h2", { id: "h-neighbours" }, "Nearest models"), h("div", { class: "grid2" },
    h("div", {}, h("h3", {}, "By LOCUS embedding"), locus),
    h("div", {}, h("h3", {}, "By behaviour fingerprint"), behaviour)),
    h("p", { class: "muted small" }, "behav. d: how often this model's recorded answers would disagree with the neighbour's, as the neighbour's fingerprint predicts them; = marks a neighbour whose fingerprint could have produced its answers (a copy), listed first. kappa: excess agreement on the queries both answered (1 = they answer alike)."));
}

async function audit(name, el, current) {
  replace(el, h("h2", { id: "h-audit" }, "Audit"), h("p", { class: "muted" }, "Auditing against its nearest neighbours …"));
  try {
    const report = await api("/v1/audit", { params: { model: name } });
    if (!current()) return;
    replace(el, h("h2", { id: "h-audit" }, "Audit"),
      h("p", { class: "muted" }, `${report.candidates} candidate pairs; ${report.flags.length} flagged, ${report.cleared.length} cleared by their evaluations, ${report.untested.length} untested.`),
      report.flags.map(flagView), report.flags.length ? "" : h("p", { class: "notice" }, "No neighbour is flagged as the same model."),
      report.cleared.length ? h("details", {}, h("summary", {}, `Cleared pairs (${report.cleared.length})`),
        report.cleared.map((p) => h("p", { class: "small" }, h("strong", {}, `${p.a} ~ ${p.b}`), `: ${p.reason}`))) : "");
  } catch (err) {
    if (current()) replace(el, h("h2", { id: "h-audit" }, "Audit"), errorBox(err));
  }
}

export function flagView(f) {
  const cls = f.label === "duplicate" ? "label-duplicate" : "label-same";
  return h("div", { class: "flag" }, h("span", { class: "tag " + cls }, f.label === "duplicate" ? "DUPLICATE" : "SAME PRODUCT LINE?"), " ",
    modelLink(f.a), " ~ ", modelLink(f.b), ` (distance ${fmt.dist(f.distance)}, neighbour ${f.neighbour_rank}${f.proposed_by === "fingerprint" ? " by fingerprint" : ""}) · `,
    h("a", { href: compareHref(f.a, f.b) }, "compare"), h("p", { class: "small" }, f.reason));
}
