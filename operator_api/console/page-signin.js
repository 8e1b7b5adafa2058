// Sign-in: "Sign in with Microsoft" where the deployment configures it (GET console-config: entra.js),
// and always the paste-a-token form: a token from `python -m devhost.local_issuer login` locally, or from
// `az account get-access-token` (docs/console.md). The token is checked by the API on every call; here
// it is only read to show who it names.

import { setToken, tokenClaims } from "./api.js";
import { h, notify, replaceChildren } from "./dom.js";
import { beginSignIn, consoleConfig } from "./entra.js";

function microsoftSignIn(config) {
  const start = async () => {
    try {
      await beginSignIn(config);
    } catch (failure) {
      notify(`Sign-in failed: ${failure.message}`, "error");
    }
  };
  return h(
    "section",
    { class: "sign-in", "data-testid": "entra-sign-in" },
    h("button", { type: "button", id: "sign-in-microsoft", onclick: start }, "Sign in with Microsoft"),
    h("p", { class: "help" }, "Signs you in at your organisation's Microsoft Entra ID; the token goes only to this API."),
  );
}

export async function render(main, _args, query) {
  const config = await consoleConfig();
  if (query.get("refused")) {
    notify("Your token was refused or has expired: sign in again.", "error");
  }
  const field = h("textarea", {
    id: "token",
    name: "token",
    rows: 6,
    cols: 80,
    spellcheck: "false",
    autocomplete: "off",
    required: true,
    "aria-describedby": "token-help",
  });
  const submit = (event) => {
    event.preventDefault();
    const token = field.value.trim();
    const claims = tokenClaims(token);
    if (!claims) {
      notify("That is not an access token (three dot-separated parts).", "error");
      return;
    }
    if (claims.expiresAt !== null && claims.expiresAt <= Date.now()) {
      notify("That token has expired: get a new one.", "error");
      return;
    }
    setToken(token);
    window.location.hash = "#/";
  };
  replaceChildren(
    main,
    h("h1", {}, "Sign in"),
    config ? microsoftSignIn(config) : null,
    config ? h("h2", {}, "Or paste a token") : null,
    h(
      "form",
      { class: "sign-in", onsubmit: submit },
      h("label", { for: "token" }, "Access token for the operator API"),
      field,
      h(
        "p",
        { id: "token-help", class: "help" },
        "Locally: ",
        h("code", {}, ".venv/bin/python -m devhost.local_issuer login --name you --role orderflow.operator --role orderflow.reviewer"),
        ". On Azure: ",
        h("code", {}, "az account get-access-token --scope api://<client id>/.default --query accessToken -o tsv"),
        ". The token stays in this tab (sessionStorage) and goes only to this API.",
      ),
      h("button", { type: "submit", id: "sign-in" }, "Sign in"),
    ),
  );
}
