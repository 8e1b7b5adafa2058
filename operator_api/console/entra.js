// Interactive sign-in with Microsoft Entra ID: the OAuth 2.0 authorization code flow with PKCE (RFC 7636),
// written here with fetch and WebCrypto rather than a vendored library (docs/console.md). The page sends
// the operator to the authority's authorize endpoint, gets a one-time code back on its own URL, and
// exchanges it (with the verifier only this tab holds) for an access token to the operator API, kept
// as a pasted token is kept.

import { API_ROOT, setToken } from "./api.js";

const PENDING_KEY = "orderflow.signIn";

function base64Url(bytes) {
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomText(bytes) {
  return base64Url(crypto.getRandomValues(new Uint8Array(bytes)));
}

async function challengeOf(verifier) {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  return base64Url(new Uint8Array(digest));
}

/** How this deployment signs operators in ({authority, clientId, scope}), or null: paste a token. */
export async function consoleConfig() {
  try {
    const response = await fetch(new URL("console-config", API_ROOT), { cache: "no-store", credentials: "omit" });
    const config = response.ok ? await response.json() : null;
    return config && config.clientId ? config : null;
  } catch {
    return null;
  }
}

/** The authority's endpoints, from its OpenID configuration; both must be on the authority's origin. */
async function endpoints(config) {
  const response = await fetch(`${config.authority}/.well-known/openid-configuration`, { cache: "no-store", credentials: "omit" });
  if (!response.ok) throw new Error(`the sign-in authority answered ${response.status}`);
  const found = await response.json();
  const origin = new URL(config.authority).origin;
  for (const name of ["authorization_endpoint", "token_endpoint"]) {
    if (typeof found[name] !== "string" || new URL(found[name]).origin !== origin) {
      throw new Error(`the authority's ${name} is not at ${origin}`);
    }
  }
  return found;
}

/** The console's own URL, without query or hash: the SPA redirect URI of the app registration. */
export function redirectUri() {
  return `${window.location.origin}${window.location.pathname}`;
}

/** Go to the authority to sign in; the answer comes back to redirectUri() with ?code=&state=. */
export async function beginSignIn(config) {
  const found = await endpoints(config);
  const pending = {
    verifier: randomText(48),
    state: randomText(16),
    tokenEndpoint: found.token_endpoint,
    clientId: config.clientId,
    scope: config.scope,
    redirectUri: redirectUri(),
  };
  window.sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
  const url = new URL(found.authorization_endpoint);
  url.search = new URLSearchParams({
    client_id: pending.clientId,
    response_type: "code",
    response_mode: "query",
    redirect_uri: pending.redirectUri,
    scope: pending.scope,
    state: pending.state,
    code_challenge: await challengeOf(pending.verifier),
    code_challenge_method: "S256",
  }).toString();
  window.location.assign(url.toString());
}

async function redeem(pending, code) {
  const response = await fetch(pending.tokenEndpoint, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      client_id: pending.clientId,
      grant_type: "authorization_code",
      code,
      redirect_uri: pending.redirectUri,
      code_verifier: pending.verifier,
      scope: pending.scope,
    }),
    cache: "no-store",
    credentials: "omit",
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok || typeof answer.access_token !== "string") {
    return { error: String(answer.error_description || answer.error || `the token endpoint answered ${response.status}`) };
  }
  setToken(answer.access_token);
  return { ok: true };
}

/**
 * When the page is the authority's answer (?code=&state=, or ?error=): take the code out of the address
 * bar, check the state is this tab's, redeem the code and keep the token. Null when the page is no
 * answer; else {ok: true} or {error}.
 */
export async function completeSignIn() {
  const params = new URLSearchParams(window.location.search);
  if (!params.has("code") && !params.has("error")) return null;
  const pending = JSON.parse(window.sessionStorage.getItem(PENDING_KEY) || "null");
  window.sessionStorage.removeItem(PENDING_KEY);
  window.history.replaceState(null, "", `${window.location.pathname}#/`);
  if (params.has("error")) return { error: `${params.get("error")}: ${params.get("error_description") || ""}` };
  if (!pending || params.get("state") !== pending.state) return { error: "the answer is not to this tab's sign-in" };
  try {
    return await redeem(pending, params.get("code"));
  } catch (failure) {
    return { error: String(failure.message) };
  }
}
