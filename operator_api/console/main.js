// The console's entry point: the navigation, who is signed in, and the hash router.

import { getToken, signOut, tokenClaims } from "./api.js";
import { completeSignIn } from "./entra.js";
import { h, notify, replaceChildren } from "./dom.js";
import { PAGES, resolve } from "./pages.js";

function showWho() {
  const who = document.getElementById("who");
  const claims = tokenClaims(getToken());
  if (!claims) {
    replaceChildren(who, h("a", { href: "#/sign-in" }, "Sign in"));
    return;
  }
  const leave = () => {
    signOut();
    window.location.hash = "#/sign-in";
  };
  replaceChildren(
    who,
    h("span", { "data-testid": "signed-in-as" }, claims.name),
    h("span", { class: "roles" }, claims.roles.join(", ") || "no app role"),
    h("button", { type: "button", class: "link", onclick: leave }, "Sign out"),
  );
}

function showNav(current) {
  const links = PAGES.filter((page) => page.nav).map((page) =>
    h("a", { href: page.href, "aria-current": page.name === current ? "page" : undefined }, page.title),
  );
  replaceChildren(document.getElementById("nav"), links);
}

function signedIn() {
  const claims = tokenClaims(getToken());
  return claims !== null && (claims.expiresAt === null || claims.expiresAt > Date.now());
}

async function route() {
  const main = document.getElementById("page");
  const found = resolve(window.location.hash);
  if (!found) {
    replaceChildren(main, h("h1", {}, "No such page"), h("p", {}, h("a", { href: "#/" }, "Dashboard")));
    return;
  }
  if (!found.page.public && !signedIn()) {
    const expired = getToken() !== null;
    signOut();
    window.location.hash = expired ? "#/sign-in?refused=1" : "#/sign-in";
    return;
  }
  showWho();
  showNav(found.page.name);
  notify("");
  // Each navigation renders into a view of its own: a page left before its requests answered goes on
  // rendering into its view, no longer in the document, and never over the page opened after it.
  const view = h("div", { class: "view" });
  replaceChildren(main, view);
  const module = await found.page.load();
  if (view.parentNode !== main) return;
  document.title = `${found.page.title} · orderflow console`;
  try {
    await module.render(view, found.args, found.query);
  } catch (failure) {
    if (view.parentNode !== main) return;
    if (failure.status === 401) {
      window.location.hash = "#/sign-in?refused=1";
      return;
    }
    replaceChildren(view, h("h1", {}, found.page.title), h("p", { class: "error", "data-testid": "page-error" }, String(failure.message)));
  }
}

async function start() {
  const answered = await completeSignIn(); // back from "Sign in with Microsoft"?
  if (answered && answered.error) window.history.replaceState(null, "", `${window.location.pathname}#/sign-in`);
  window.addEventListener("hashchange", route);
  await route();
  if (answered && answered.error) notify(`Sign-in failed: ${answered.error}`, "error");
}

start();
