// Calls to the operator API, each with the operator's bearer token. The token is kept in
// sessionStorage: it lives as long as the tab and is never sent anywhere but this API.

const TOKEN_KEY = "orderflow.operatorToken";
/** The API's root: the console is served at <root>console/, so one folder up. */
export const API_ROOT = new URL("../", window.location.href);

/** A refusal or failure of the API: status, error code and message as the API gave them. */
export class ApiError extends Error {
  constructor(status, code, message, etag) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
    this.detail = message;
    this.etag = etag;
  }
}

export function getToken() {
  return window.sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token) {
  window.sessionStorage.setItem(TOKEN_KEY, token);
}

export function signOut() {
  window.sessionStorage.removeItem(TOKEN_KEY);
}

function base64UrlJson(part) {
  const text = atob(part.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(part.length / 4) * 4, "="));
  const bytes = Uint8Array.from(text, (c) => c.charCodeAt(0));
  return JSON.parse(new TextDecoder().decode(bytes));
}

/**
 * What the token says of its holder, for display only (the API verifies it on every call):
 * {name, roles, expiresAt (ms)}, or null when it is not a JWT.
 */
export function tokenClaims(token) {
  const parts = (token || "").split(".");
  if (parts.length !== 3) return null;
  try {
    const claims = base64UrlJson(parts[1]);
    return {
      name: String(claims.name || claims.preferred_username || claims.oid || "unknown"),
      roles: Array.isArray(claims.roles) ? claims.roles.map(String) : [],
      expiresAt: typeof claims.exp === "number" ? claims.exp * 1000 : null,
    };
  } catch {
    return null;
  }
}

/**
 * A request body sent as the JSON text it holds, not re-serialised: what an operator typed reaches the
 * API as typed, so the API's own checks (a duplicate key, say, which JSON.parse would silently resolve
 * to its last value) apply to it.
 */
export class RawJson {
  constructor(text) {
    this.text = text;
  }
}

/**
 * One API call: `path` relative to the API root ("orders?state=Error"), JSON body if given (a RawJson
 * is sent as its text).
 * Returns {status, body, etag}; throws ApiError on a refusal (a 401 also forgets the token).
 */
export async function call(method, path, { body, ifMatch } = {}) {
  const headers = { Accept: "application/json" };
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  if (ifMatch) headers["If-Match"] = ifMatch;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(new URL(path, API_ROOT), {
    method,
    headers,
    body: body === undefined ? undefined : body instanceof RawJson ? body.text : JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
  });
  const etag = response.headers.get("ETag");
  let answer = null;
  try {
    answer = await response.json();
  } catch {
    answer = null;
  }
  if (!response.ok) {
    const problem = (answer && answer.error) || {};
    if (response.status === 401) signOut();
    throw new ApiError(response.status, problem.code || "Error", problem.message || response.statusText, etag);
  }
  return { status: response.status, body: answer, etag };
}

/** Every page of a list route (up to `maxPages` of `limit`): {items, truncated}. */
export async function listAll(path, key, { limit = 100, maxPages = 20 } = {}) {
  const items = [];
  let continuation = null;
  for (let page = 0; page < maxPages; page += 1) {
    const more = continuation ? `&continuation=${encodeURIComponent(continuation)}` : "";
    const { body } = await call("GET", `${path}${path.includes("?") ? "&" : "?"}limit=${limit}${more}`);
    items.push(...body[key]);
    continuation = body.continuation;
    if (!continuation) return { items, truncated: false };
  }
  return { items, truncated: true };
}

/** An order key as one path segment. */
export function orderPath(key, action) {
  return `orders/${encodeURIComponent(key)}${action ? `/${action}` : ""}`;
}
