"""Azure Functions entry point (Python v2 programming model): creates the app, registers the blueprints
and the per-client intake triggers.

One blueprint per role (:mod:`function_host.blueprints`); the triggers call the same role functions the
local host calls. The intake has one trigger per registered client, so it is registered from the client
registry (``CLIENTS``) here, explicitly: a registry that does not parse stops the app at indexing.
"""

import azure.durable_functions as df
import azure.functions as func

from function_host.blueprints.activities import bp as activities
from function_host.blueprints.agents import bp as agents
from function_host.blueprints.intake import register_client_triggers
from function_host.blueprints.operator_api import bp as operator_api
from function_host.blueprints.orchestrators import bp as orchestrators
from function_host.blueprints.supervisor import bp as supervisor
from function_host.startup import check_start_up
from orderflow.settings import Settings
from orderflow.telemetry import configure_telemetry

check_start_up()
configure_telemetry("orderflow-functions")
app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
for blueprint in (operator_api, orchestrators, activities, agents, supervisor):
    app.register_functions(blueprint)
register_client_triggers(app, Settings.load().clients.clients())
