"""A small evaluator of orderflow's Bicep: what ``infra/main.bicep`` would deploy, for tests to inspect.

pycep-parser turns each file into plain dicts, with expressions as nested ``function`` / ``operator``
nodes, identifiers as bare strings and string interpolations as raw text. This module evaluates that for
one set of parameter values: variables, ``for`` loops, ``if`` conditions, module calls and their outputs,
the functions the templates use (``guid``, ``subscriptionResourceId``, ``union`` ...). A resource's
runtime properties (a principal id, an endpoint) become :class:`Runtime` values naming the resource and
the property, so a test can tell whose principal id a role assignment holds.

It understands the subset of Bicep the templates are written in, and refuses anything else
(:class:`UnsupportedBicep`): an unknown function (``listKeys`` among them), an interpolation that is
more than a dotted name, an unknown identifier.

pycep leaves a string literal and an identifier indistinguishable (``'name'`` and ``name`` both come
back as ``"name"``), so every literal is marked with :data:`LITERAL` in the source text before parsing.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pycep import BicepParser

LITERAL = "\u00a7L\u00a7"
"""Marks a string literal in the text handed to pycep (it keeps the marker inside the string)."""

SUBSCRIPTION_ID = "00000000-0000-4000-8000-00000000cafe"
TENANT_ID = "00000000-0000-4000-8000-0000000fade0"

_NO_MARK = re.compile(r"(^|\n)\s*((resource|module)\s+\w+|targetScope\s*=)\s*$")
_INTERPOLATION = re.compile(r"\$\{([^}]*)\}")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class UnsupportedBicep(ValueError):
    """The template uses Bicep this evaluator does not understand."""


def mark_literals(text: str) -> str:
    """``text`` with :data:`LITERAL` after the opening quote of every single-quoted string, except a
    resource's type and a module's path; comments are left as they are."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            out.append(text[i:end])
            i = end
        elif text.startswith("/*", i):
            end = text.index("*/", i) + 2
            out.append(text[i:end])
            i = end
        elif text[i] == "'":
            end = i + 1
            while text[end] != "'":
                end += 2 if text[end] == "\\" else 1
            line_start = "".join(out).rfind("\n")
            mark = "" if _NO_MARK.search("".join(out)[line_start:]) else LITERAL
            out.append(f"'{mark}{text[i + 1 : end]}'")
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@functools.cache
def _parser() -> BicepParser:
    return BicepParser()


@functools.lru_cache(maxsize=64)
def _parse_text(text: str) -> dict[str, Any]:
    parsed: dict[str, Any] = dict(_parser().parse(text=mark_literals(text)))
    return parsed


def parse_bicep(path: Path) -> dict[str, Any]:
    """pycep's JSON of ``path``, literals marked (:func:`mark_literals`); a copy per call (cached by text)."""
    return copy.deepcopy(_parse_text(path.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class ResourceRef:
    """A resource by type and name chain (a child's names start with its parent's)."""

    type: str
    names: tuple[str, ...]
    resource_group: str | None

    @property
    def id(self) -> str:
        """The resource id, as ARM would form it."""
        if self.type == "Microsoft.Resources/resourceGroups":
            return f"/subscriptions/{SUBSCRIPTION_ID}/resourceGroups/{self.names[0]}"
        namespace, *types = self.type.split("/")
        path = "/".join(f"{t}/{n}" for t, n in zip(types, self.names, strict=True))
        group = f"/subscriptions/{SUBSCRIPTION_ID}/resourceGroups/{self.resource_group}"
        return f"{group}/providers/{namespace}/{path}"

    @property
    def name(self) -> str:
        """The resource's own name (the last of the chain)."""
        return self.names[-1]


@dataclass(frozen=True)
class Runtime:
    """A value known only at deployment: ``path`` of resource ``ref`` (``properties.principalId``)."""

    ref: ResourceRef
    path: tuple[str, ...]

    def __str__(self) -> str:
        return f"[{self.ref.id}:{'.'.join(self.path)}]"


@dataclass
class Resource:
    """One resource a template declares (or references with ``existing``), evaluated."""

    symbol: str
    type: str
    api_version: str
    template: str
    ref: ResourceRef
    body: dict[str, Any]
    existing: bool

    @property
    def properties(self) -> dict[str, Any]:
        """Its ``properties`` (empty when it sets none)."""
        return dict(self.body.get("properties") or {})


@dataclass
class _ModuleRef:
    template: Template


@dataclass
class Template:
    """One Bicep file evaluated with ``params``; modules are evaluated as child templates.

    Raises:
        UnsupportedBicep: see the module docstring.
        KeyError: a required parameter without a value.
        ValueError: a parameter's value is not one of its ``@allowed`` values (when it is first read).
    """

    path: Path
    params: Mapping[str, Any]
    resource_group: str | None = None
    ast: dict[str, Any] = field(init=False)
    _values: dict[str, Any] = field(init=False, default_factory=dict)
    _resources: dict[str, list[Resource]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.ast = parse_bicep(self.path)
        unknown = set(self.params) - set(self.ast.get("parameters", {}))
        if unknown:
            raise UnsupportedBicep(f"{self.path.name}: no such parameters {sorted(unknown)}")

    # --- symbols -----------------------------------------------------------------------------

    def symbol(self, name: str) -> Any:
        """The value of parameter, variable, resource or module ``name`` (a resource: its ref)."""
        if name in self._values:
            return self._values[name]
        ast = self.ast
        if name in ast.get("parameters", {}):
            value = self.params[name] if name in self.params else self._default(name)
            self._check_allowed(name, value)
        elif name in ast.get("variables", {}):
            value = self.eval(ast["variables"][name]["value"], {})
        elif name in ast.get("resources", {}):
            declared = self.resources_of(name)
            loop = "loop_type" in ast["resources"][name]["config"]
            value = [r.ref for r in declared] if loop else (declared[0].ref if declared else None)
        elif name in ast.get("modules", {}):
            # A module whose condition is false deploys nothing; reading its outputs is an error.
            module = self._module(name)
            value = _ModuleRef(module) if module is not None else None
        else:
            raise UnsupportedBicep(f"{self.path.name}: unknown identifier {name!r}")
        self._values[name] = value
        return value

    def allowed(self, name: str) -> list[Any] | None:
        """The values parameter ``name``'s ``@allowed`` decorator lists, or None: any value."""
        for decorator in self.ast["parameters"][name].get("decorators", []):
            if decorator["type"] == "allowed":
                return [self.eval(item, {}) for item in decorator["argument"]]
        return None

    def _check_allowed(self, name: str, value: Any) -> None:
        allowed = self.allowed(name)
        if allowed is not None and value not in allowed:
            raise ValueError(f"{self.path.name}: {name} {value!r} is not one of its allowed values")

    def _default(self, name: str) -> Any:
        spec = self.ast["parameters"][name]
        if spec.get("default") is None:
            raise KeyError(f"{self.path.name}: parameter {name} has no value")
        return self.eval(spec["default"], {})

    def output(self, name: str) -> Any:
        """The value of output ``name``."""
        return self.eval(self.ast["outputs"][name]["value"], {})

    def outputs(self) -> dict[str, Any]:
        """Every output, evaluated."""
        return {name: self.output(name) for name in self.ast.get("outputs", {})}

    # --- resources and modules ---------------------------------------------------------------

    def resources_of(self, symbol: str) -> list[Resource]:
        """The resources declared under ``symbol``: one, none (a false condition) or one per loop item."""
        if symbol in self._resources:
            return self._resources[symbol]
        spec = self.ast["resources"][symbol]
        found = [self._resource(symbol, spec, body, env) for body, env in self._instances(spec["config"])]
        self._resources[symbol] = found
        return found

    def _instances(self, config: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        if "loop_type" in config:
            for env in self._loop_envs(config["loop_type"], {}):
                yield config["config"], env
        elif "condition" in config and set(config) == {"condition", "config"}:
            if self.eval(config["condition"], {}):
                yield config["config"], {}
        else:
            yield config, {}

    def _loop_envs(self, loop: dict[str, Any], env: dict[str, Any]) -> Iterator[dict[str, Any]]:
        detail = loop["detail"]
        items = self.eval(detail["array_name"], env)
        if loop["type"] not in ("array", "array_index"):
            raise UnsupportedBicep(f"loop type {loop['type']}")
        for index, item in enumerate(items):
            inner = {**env, detail["item_name"]: item}
            if loop["type"] == "array_index":
                inner[detail["index_name"]] = index
            yield inner

    def _resource(
        self, symbol: str, spec: dict[str, Any], body: dict[str, Any], env: dict[str, Any]
    ) -> Resource:
        evaluated = {key: self.eval(value, env) for key, value in body.items() if key != "parent"}
        name = str(evaluated["name"])
        if "parent" in body:
            parent: ResourceRef = self.eval(body["parent"], env)
            ref = ResourceRef(spec["type"], (*parent.names, name), parent.resource_group)
        else:
            ref = ResourceRef(spec["type"], (name,), self.resource_group)
        return Resource(
            symbol=symbol,
            type=spec["type"],
            api_version=spec["api_version"],
            template=self.path.name,
            ref=ref,
            body=evaluated,
            existing=bool(spec.get("existing")),
        )

    def _module(self, symbol: str) -> Template | None:
        spec = self.ast["modules"][symbol]
        config = spec["config"]
        if "loop_type" in config:
            raise UnsupportedBicep("module loops")
        if set(config) == {"condition", "config"}:
            if not self.eval(config["condition"], {}):
                return None
            config = config["config"]
        params = {name: self.eval(value, {}) for name, value in (config.get("params") or {}).items()}
        group = self.resource_group
        if "scope" in config:
            scope = self.eval(config["scope"], {})
            group = scope.name if isinstance(scope, ResourceRef) else group
        return Template(self.path.parent / _literal(spec["detail"]["path"]), params, group)

    def modules(self) -> dict[str, Template]:
        """The module calls of this template that deploy (their condition holds), by symbol."""
        refs = {name: self.symbol(name) for name in self.ast.get("modules", {})}
        return {name: ref.template for name, ref in refs.items() if ref is not None}

    def all_resources(self) -> list[Resource]:
        """Every resource of this template and, recursively, of its modules."""
        found = [r for symbol in self.ast.get("resources", {}) for r in self.resources_of(symbol)]
        for module in self.modules().values():
            found += module.all_resources()
        return found

    # --- expressions -------------------------------------------------------------------------

    def eval(self, node: Any, env: dict[str, Any]) -> Any:
        """Evaluate a pycep expression node in this template, with loop variables ``env``."""
        if isinstance(node, str):
            if node.startswith(LITERAL):
                return self._interpolate(node[len(LITERAL) :], env)
            return env[node] if node in env else self.symbol(node)
        if isinstance(node, bool | int | float) or node is None:
            return node
        if isinstance(node, list):
            return [self.eval(item, env) for item in node]
        if "loop_type" in node and "config" in node:
            return [self.eval(node["config"], inner) for inner in self._loop_envs(node["loop_type"], env)]
        if set(node) == {"function"}:
            return self._call(node["function"], env)
        if set(node) == {"operator"}:
            return self._operate(node["operator"], env)
        return {self._key(key, env): self.eval(value, env) for key, value in node.items()}

    def _key(self, key: str, env: dict[str, Any]) -> str:
        text = key.strip("'")
        return str(self._interpolate(text.removeprefix(LITERAL), env))

    def _interpolate(self, text: str, env: dict[str, Any]) -> Any:
        parts = _INTERPOLATION.split(text)
        if len(parts) == 1:
            return text
        values = []
        for index, part in enumerate(parts):
            if index % 2 == 0:
                values.append(part)
                continue
            if not _DOTTED.match(part.strip()):
                raise UnsupportedBicep(f"interpolation of {part!r}: use a variable")
            first, *rest = part.strip().split(".")
            value = env[first] if first in env else self.symbol(first)
            for name in rest:
                value = _access(value, name)
            values.append(str(value))
        return "".join(values)

    def _operate(self, op: dict[str, Any], env: dict[str, Any]) -> Any:
        kind, operands = op["type"], op["operands"]
        ev: Callable[[str], Any] = lambda key: self.eval(operands[key], env)  # noqa: E731
        match kind:
            case "property_accessor":
                value = ev("operand_1")
                accessor = operands["operand_2"]
                while isinstance(accessor, dict):
                    inner = accessor["operator"]["operands"]
                    value = _access(value, _literal(inner["operand_1"]))
                    accessor = inner["operand_2"]
                return _access(value, _literal(accessor))
            case "index_accessor":
                return ev("operand_1")[ev("operand_2")]
            case "conditional":
                return ev("true_value") if ev("condition") else ev("false_value")
            case "not":
                return not ev("bool_value")
            case "greater_than":
                return ev("operand_1") > ev("operand_2")
            case "equals":
                return ev("operand_1") == ev("operand_2")
            case "not_equals":
                return ev("operand_1") != ev("operand_2")
            case "and":
                return ev("operand_1") and ev("operand_2")
            case "or":
                return ev("operand_1") or ev("operand_2")
        raise UnsupportedBicep(f"operator {kind}")

    def _call(self, fn: dict[str, Any], env: dict[str, Any]) -> Any:
        kind = fn["type"]
        args = [self.eval(v, env) for v in (fn.get("parameters") or {}).values() if v is not None]
        match kind:
            case "subscription":
                return {"id": f"/subscriptions/{SUBSCRIPTION_ID}", "tenantId": TENANT_ID}[
                    _literal(fn["property_name"])
                ]
            case "guid":
                return str(uuid.uuid5(uuid.NAMESPACE_URL, "|".join(str(a) for a in args)))
            case "unique_string":
                return hashlib.sha256("|".join(map(str, args)).encode()).hexdigest()[:13]
            case "to_lower":
                return str(args[0]).lower()
            case "string":
                return _bicep_string(args[0])
            case "empty":
                return not args[0]
            case "union":
                merged: dict[str, Any] = {}
                for arg in args:
                    merged.update(arg)
                return merged
            case "concat":
                return [item for arg in args for item in arg]
            case "split":
                return str(args[0]).split(str(args[1]))
            case "replace":
                return str(args[0]).replace(str(args[1]), str(args[2]))
            case "subscription_resource_id":
                resource_type, *names = args
                return f"/subscriptions/{SUBSCRIPTION_ID}/providers/{resource_type}/{'/'.join(names)}"
        raise UnsupportedBicep(f"function {kind}")


def _literal(value: Any) -> str:
    return str(value).removeprefix(LITERAL)


def _access(value: Any, name: str) -> Any:
    if isinstance(value, ResourceRef):
        if name in ("id", "name"):
            return getattr(value, name)
        return Runtime(value, (name,))
    if isinstance(value, Runtime):
        return Runtime(value.ref, (*value.path, name))
    if value is None:
        raise UnsupportedBicep(f"{name} of a module or resource its condition leaves out")
    if isinstance(value, _ModuleRef):
        if name != "outputs":
            raise UnsupportedBicep(f"module property {name}")
        return value.template.outputs()
    return value[name]


def _bicep_string(value: Any) -> str:
    """``string(value)`` as Bicep renders it: JSON for arrays and objects, text for the rest."""
    import json  # noqa: PLC0415

    if isinstance(value, list | dict):
        return json.dumps(value, default=str, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
