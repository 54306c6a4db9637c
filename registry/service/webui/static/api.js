// API reference: every operation of this server and every schema, read from its own /openapi.json and
// drawn here, so the reference works with no internet (/docs loads Swagger UI from a CDN).
import { api, field, h, replace } from "./lib.js";

const METHODS = ["get", "post", "put", "delete"];

// A schema as one line of text: a $ref by its name (linked), arrays as T[], unions with " | ".
function typeOf(schema) {
  if (!schema) return "any";
  if (schema.$ref) {
    const name = schema.$ref.split("/").pop();
    return h("a", { href: "#schema-" + name }, name);
  }
  if (schema.anyOf || schema.oneOf) {
    const parts = (schema.anyOf || schema.oneOf).map(typeOf);
    return parts.flatMap((p, i) => (i ? [" | ", p] : [p]));
  }
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ");
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (schema.type === "array") return [typeOf(schema.items), "[]"];
  if (schema.type === "object" && schema.additionalProperties) return ["{string: ", typeOf(schema.additionalProperties), "}"];
  return schema.type || "any";
}

// Bounds a user hits: lengths, counts, ranges, defaults.
function rules(schema) {
  if (!schema) return "";
  const out = [];
  const add = (key, words) => schema[key] !== undefined && out.push(`${words} ${schema[key]}`);
  add("minLength", "min length"); add("maxLength", "max length"); add("minItems", "min items"); add("maxItems", "max items");
  add("minimum", "≥"); add("maximum", "≤"); add("exclusiveMinimum", ">"); add("exclusiveMaximum", "<"); add("maxProperties", "max keys");
  if (schema.default !== undefined) out.push(`default ${JSON.stringify(schema.default)}`);
  return out.join(", ");
}

function fieldsTable(schema, id) {
  const props = Object.entries(schema.properties || {});
  if (!props.length) return h("p", { class: "muted small" }, "(no fields)");
  const required = new Set(schema.required || []);
  return h("div", { class: "table-wrap" }, h("table", { id },
    h("thead", {}, h("tr", {}, ["field", "type", "required", "rules", "description"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, props.map(([name, s]) => h("tr", {}, h("td", {}, h("code", {}, name)), h("td", {}, typeOf(s)),
      h("td", {}, required.has(name) ? "yes" : ""), h("td", { class: "small" }, rules(s)), h("td", { class: "small" }, s.description || ""))))));
}

function operation(path, method, op) {
  const id = "op-" + (op.operationId || `${method}-${path}`).replace(/[^A-Za-z0-9_-]/g, "-");
  const params = op.parameters || [];
  const body = op.requestBody && op.requestBody.content ? Object.entries(op.requestBody.content) : [];
  const responses = Object.entries(op.responses || {});
  return h("section", { class: "operation", id, "data-search": `${method} ${path} ${op.summary || ""} ${(op.tags || []).join(" ")}`.toLowerCase() },
    h("h3", {}, h("code", { class: "method method-" + method }, method.toUpperCase()), " ", h("code", {}, path), " ",
      h("span", { class: "muted" }, op.summary || ""), op.security ? h("span", { class: "badge" }, "write: needs the token") : ""),
    op.description ? h("p", { class: "small pre" }, op.description) : "",
    params.length ? h("div", { class: "table-wrap" }, h("table", {},
      h("thead", {}, h("tr", {}, ["parameter", "in", "type", "required", "rules", "description"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, params.map((p) => h("tr", {}, h("td", {}, h("code", {}, p.name)), h("td", {}, p.in), h("td", {}, typeOf(p.schema)),
        h("td", {}, p.required ? "yes" : ""), h("td", { class: "small" }, rules(p.schema)),
        h("td", { class: "small" }, p.description || (p.schema && p.schema.description) || "")))))) : "",
    body.map(([kind, content]) => h("p", {}, "Body (", h("code", {}, kind), "): ", typeOf(content.schema))),
    h("p", { class: "small" }, "Answers: ", responses.flatMap(([code, r], i) => {
      const schema = r.content && r.content["application/json"] && r.content["application/json"].schema;
      return [i ? "; " : "", h("strong", {}, code), " ", r.description || "", schema ? [" (", typeOf(schema), ")"] : ""];
    })));
}

export async function render(root) {
  const spec = await api("/openapi.json");
  const search = h("input", { id: "api-filter", type: "search", placeholder: "path, method or word", autocomplete: "off" });
  const groups = new Map();
  for (const [path, item] of Object.entries(spec.paths)) {
    for (const method of METHODS) {
      const op = item[method];
      if (!op) continue;
      const tag = (op.tags && op.tags[0]) || "other";
      if (!groups.has(tag)) groups.set(tag, []);
      groups.get(tag).push(operation(path, method, op));
    }
  }
  const schemas = Object.entries((spec.components && spec.components.schemas) || {}).sort(([a], [b]) => a.localeCompare(b));
  const count = [...groups.values()].reduce((n, ops) => n + ops.length, 0);
  replace(root,
    h("p", {}, `${spec.info.title} ${spec.info.version}: ${count} operations, read from this server's `,
      h("a", { href: "/openapi.json" }, "/openapi.json"), ". ", spec.info.description || ""),
    h("p", { class: "muted small" }, "Swagger UI, to try calls from the browser: ", h("a", { href: "/docs" }, "/docs"),
      " (it loads its scripts from the internet)."),
    h("form", { class: "bar", role: "search", onsubmit: (event) => event.preventDefault() }, field("Filter", search)),
    h("nav", { class: "small", "aria-label": "Groups" }, [...groups.keys()].flatMap((tag, i) => [i ? " · " : "", h("a", { href: "#tag-" + tag }, tag)]),
      " · ", h("a", { href: "#schemas" }, "schemas")),
    [...groups.entries()].map(([tag, ops]) => h("div", { class: "api-group" }, h("h2", { id: "tag-" + tag }, tag), ops)),
    h("h2", { id: "schemas" }, "Schemas"),
    schemas.map(([name, schema]) => h("section", { class: "schema", id: "schema-" + name },
      h("h3", {}, h("code", {}, name)), schema.description ? h("p", { class: "small pre" }, schema.description) : "",
      schema.enum ? h("p", {}, typeOf(schema)) : fieldsTable(schema, "fields-" + name))));
  search.addEventListener("input", () => {
    const words = search.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
    for (const section of root.querySelectorAll("section.operation")) {
      section.hidden = !words.every((w) => section.dataset.search.includes(w));
    }
    for (const group of root.querySelectorAll(".api-group")) {
      group.hidden = !group.querySelector("section.operation:not([hidden])");
    }
  });
}
