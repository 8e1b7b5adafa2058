"""The FunctionRpc messages the worker's handlers read and build, compiled from ``protos/``.

``protos/FunctionRpc.proto`` is orderflow's own definition of the subset of the Azure Functions
language worker protocol that ``azure_functions_runtime.handle_event`` uses, with the protocol's names
and field numbers. It is compiled here with ``grpcio-tools`` into a temporary directory on first
import, and the generated module is what the harness hands the worker as ``protos``.
"""

from __future__ import annotations

import importlib
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from grpc_tools import protoc

PROTO_DIR = Path(__file__).resolve().parent / "protos"


def compile_protos() -> ModuleType:
    """Compile ``FunctionRpc.proto`` and import the generated ``FunctionRpc_pb2`` module.

    Raises:
        RuntimeError: protoc reported an error (it prints the reason on stderr).
    """
    out = Path(tempfile.mkdtemp(prefix="orderflow-rpc-"))
    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"-I{Path(protoc.__file__).parent / '_proto'}",
            f"--python_out={out}",
            str(PROTO_DIR / "FunctionRpc.proto"),
        ]
    )
    if status != 0:
        raise RuntimeError(f"protoc failed on {PROTO_DIR / 'FunctionRpc.proto'} (exit {status})")
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("FunctionRpc_pb2")
    finally:
        sys.path.remove(str(out))


protos = compile_protos()
