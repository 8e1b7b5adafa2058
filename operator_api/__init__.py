"""The operator API role: what operators and reviewers do to orders, as authenticated HTTP calls.

- :mod:`operator_api.handler`: the framework-neutral request handler both hosts serve: the dispatch
  and the token check;
- :mod:`operator_api.routes`: every route, declared once (method, path, roles, handler, what the
  OpenAPI document says of it), with :mod:`operator_api.routing` (how a request finds one) and
  :mod:`operator_api.openapi` (the document generated from them);
- :mod:`operator_api.answers`: the response, and the one refusal type with its status;
- :mod:`operator_api.order_routes`, :mod:`operator_api.plane_routes`: the routes' handlers;
- :mod:`operator_api.review`: a reviewer's decision on an order awaiting review;
- :mod:`operator_api.compensate`: an operator's decision to stop and undo an order, or to retry a
  failed compensation;
- :mod:`operator_api.views`: what the API shows of an order.

Nothing here arrives on a queue: a client can send to the orders queue, so operator and reviewer actions
never travel there (docs/design.md §9). The caller is the principal its bearer token proves
(:mod:`orderflow.operator_auth`).
"""
