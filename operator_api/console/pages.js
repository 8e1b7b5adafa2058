// The console's pages: a hash route each ("#/", "#/orders", "#/orders/<key>", "#/deadletters", "#/alerts",
// "#/supervisor", "#/sign-in"). A new page is one module with a `render(main, args, query)` export and one
// entry here.

export const PAGES = [
  { name: "dashboard", title: "Dashboard", nav: true, href: "#/", pattern: /^\/?$/, load: () => import("./page-dashboard.js") },
  { name: "orders", title: "Orders", nav: true, href: "#/orders", pattern: /^\/orders$/, load: () => import("./page-orders.js") },
  { name: "alerts", title: "Alerts", nav: true, href: "#/alerts", pattern: /^\/alerts$/, load: () => import("./page-alerts.js") },
  { name: "supervisor", title: "Supervisor", nav: true, href: "#/supervisor", pattern: /^\/supervisor$/, load: () => import("./page-supervisor.js") },
  { name: "order", title: "Order", nav: false, pattern: /^\/orders\/([^/?]+)$/, load: () => import("./page-order.js") },
  { name: "deadletters", title: "Dead letters", nav: true, href: "#/deadletters", pattern: /^\/deadletters$/, load: () => import("./page-deadletters.js") },
  { name: "deadletter", title: "Dead letter", nav: false, pattern: /^\/deadletters\/([^/?]+)\/([^/?]+)$/, load: () => import("./page-deadletters.js") },
  { name: "sign-in", title: "Sign in", nav: false, pattern: /^\/sign-in$/, load: () => import("./page-signin.js"), public: true },
];

/** The page of a hash ("#/orders/a%3Ao-1?x=1"): {page, args (decoded groups), query}, or null. */
export function resolve(hash) {
  const [path, search] = (hash.replace(/^#/, "") || "/").split("?", 2);
  for (const page of PAGES) {
    const match = page.pattern.exec(path);
    if (match) {
      return { page, args: match.slice(1).map(decodeURIComponent), query: new URLSearchParams(search || "") };
    }
  }
  return null;
}
