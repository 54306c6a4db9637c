// Boot: mark the current page in the navigation, wire the token box, show the server's state in
// the footer, then load the page's own module.
import { $, api, h, replace, token } from "./lib.js";

const PAGES = {
  models: "./models.js", model: "./model.js", map: "./map.js", audit: "./audit.js",
  route: "./route.js", compare: "./compare.js", families: "./families.js", portfolio: "./portfolio.js", add: "./add.js",
  api: "./api.js",
};

function tokenBox() {
  const form = $("#token-form");
  const input = $("#token-input");
  const state = $("#token-state");
  const show = () => {
    const open = document.body.dataset.auth === "open";
    state.textContent = token.get() ? "token set for this tab" : open ? "writes open (loopback server)" : "read-only";
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    token.set(input.value.trim());
    input.value = "";
    show();
  });
  $("#token-forget").addEventListener("click", () => {
    token.set("");
    show();
  });
  show();
}

async function footer() {
  try {
    const health = await api("/v1/health");
    replace($("#footer"), `${health.home} · ${health.models} models, ${health.embedded} embedded · encoder `,
      health.encoder_id || "none", ` · query encoder ${health.query_encoder || "–"}`,
      health.status === "ok" ? "" : ` · ${health.problem}`);
  } catch (err) {
    replace($("#footer"), `health: ${err.message}`);
  }
}

async function main() {
  const page = document.body.dataset.page;
  for (const link of document.querySelectorAll("[data-nav]")) {
    if (link.dataset.nav === page || (page === "model" && link.dataset.nav === "models")) link.setAttribute("aria-current", "page");
  }
  tokenBox();
  footer();
  const root = $("#app");
  try {
    const module = await import(PAGES[page]);
    await module.render(root);
  } catch (err) {
    replace(root, h("div", { class: "error", role: "alert" }, err.message || String(err)));
  }
}

main();
