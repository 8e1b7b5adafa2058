"""Azure Functions entry point (Python v2 programming model): creates the Durable Functions app.

It registers no functions yet: every role runs on the local host (``python -m devhost``), over the
same role code the Functions triggers will call.
"""

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
