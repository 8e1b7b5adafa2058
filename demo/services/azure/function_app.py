"""The demo services' Function App (azd service ``demo-services``): their FastAPI app behind the Functions
host's HTTP trigger. Each route checks its own bearer token (demo.services.auth), so the trigger is
anonymous; the package is assembled by ``python -m demo.services.package`` (azure.yaml's prepackage hook)."""

import os
from pathlib import Path

import azure.functions as func

from demo.services.hosted import hosted_app

# The TPC-H tables ship in the package (demo.services.package), beside this file.
services = hosted_app(os.environ, data_dir=Path(__file__).resolve().parent / "tpch")
app = func.AsgiFunctionApp(app=services, http_auth_level=func.AuthLevel.ANONYMOUS)
