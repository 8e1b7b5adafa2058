// Sign-in: the operator pastes an access token for the operator API. Locally it comes from
// `python -m devhost.local_issuer login`; on Azure from `az account get-access-token` (docs/console.md).
// The token is checked by the API on every call; here it is only read to show who it names.

import { setToken, tokenClaims } from "./api.js";
import { h, notify, replaceChildren } from "./dom.js";

export function render(main, _args, query) {
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
