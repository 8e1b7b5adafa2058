"""Azure Functions entry point (Python v2 programming model): creates the app, registers the blueprints.

One blueprint per role folder; the triggers call the same role functions the local host calls.
"""

import azure.durable_functions as df
import azure.functions as func

from activities.blueprint import bp as activities
from agents.blueprint import bp as agents
from function_host import check_start_up
from orchestrators.blueprint import bp as orchestrators
from orderflow.telemetry import configure_telemetry
from supervisor.blueprint import bp as supervisor

check_start_up()
configure_telemetry("orderflow-functions")
app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
for blueprint in (orchestrators, activities, agents, supervisor):
    app.register_functions(blueprint)
