"""Type-checks Bicep resource declarations against the Bicep compiler's own type definitions.

What ``bicep build`` checks of a ``resource`` and a policy scanner does not: the type and API version
exist, every property set exists in that version's body type and is not read-only, literal values have
the property's type (a string among the allowed literals, an integer in range), required properties are
there. The definitions are the vendored bicep-types files in ``tests/infra/azure-types`` (their README
gives the format). Templates are parsed with pycep (the parser checkov uses), which keeps a reference
(``location``) apart from a literal (``'location'``): see :func:`is_reference`.

Where a value is an expression (a reference, a function call, an operator), its type is unknown and it
is accepted, but the object literals it holds are still checked where their type is known: both
branches of ``c ? {...} : {...}``, the object arguments of ``union(...)`` (as partial objects: their
required properties may come from another argument), the body of a ``[for ...]``. Property names
must match exactly (the compiler ignores case; ARM mostly does too, and the policy checks read the
exact name).
"""

from __future__ import annotations

import difflib
import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeGuard, cast

from pycep import BicepParser
from pycep.transformer import BicepElement

TYPES_ROOT = Path(__file__).resolve().parent / "azure-types"

REQUIRED, READ_ONLY = 1, 2
"""Property flags of the bicep-types format (4 write-only, 8 deploy-time constant, 16 identifier)."""

BICEP_KEYWORDS = frozenset({"parent", "scope", "dependsOn"})
"""Keys of a resource declaration that Bicep itself reads: never part of the body type."""
PYCEP_KEYS = frozenset({"depends_on"})
"""Keys pycep adds to a nested child resource's body (its dependency on the parent)."""


@dataclass(frozen=True)
class Problem:
    """One thing the compiler would report: ``file`` and resource symbol, the property path, what."""

    file: str
    resource: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.resource}: {self.path or '(body)'}: {self.message}"


@dataclass(frozen=True)
class TypeTable:
    """One bicep-types file: its types by index (``{"$ref": "#/N"}`` is element N)."""

    types: tuple[dict[str, Any], ...]

    def get(self, ref: dict[str, str]) -> dict[str, Any]:
        """The type a ``$ref`` points at."""
        return self.types[int(ref["$ref"].removeprefix("#/"))]


@cache
def resource_types(root: Path = TYPES_ROOT) -> dict[tuple[str, str], tuple[TypeTable, dict[str, str]]]:
    """(lower-case type, API version) -> (its file's table, its body type's ``$ref``), for every vendored
    file."""
    found: dict[tuple[str, str], tuple[TypeTable, dict[str, str]]] = {}
    for path in sorted(root.rglob("types.json.gz")):
        table = TypeTable(tuple(json.loads(gzip.decompress(path.read_bytes()))))
        for entry in table.types:
            if entry.get("$type") == "ResourceType":
                name, _, version = entry["name"].partition("@")
                found.setdefault((name.lower(), version), (table, entry["body"]))
    return found


@cache
def parser() -> BicepParser:
    """One pycep parser for every file (building one compiles its grammar: about 0.3 s)."""
    return BicepParser()


def parse(path: Path) -> dict[str, Any]:
    """A Bicep file as pycep parses it (``resources``, ``parameters``, ...).

    Raises:
        lark.exceptions.LarkError, ValueError: the file does not parse.
    """
    return cast(dict[str, Any], parser().parse(file_path=path))


def versions_of(resource_type: str) -> list[str]:
    """The vendored API versions of a resource type (case-insensitive), oldest first."""
    return sorted(version for name, version in resource_types() if name == resource_type.lower())


def is_reference(value: object) -> bool:
    """Whether a parsed value is a bare identifier (a parameter, variable, resource or loop item)."""
    return isinstance(value, BicepElement)


def is_expression(value: object) -> TypeGuard[dict[str, Any]]:
    """Whether a parsed value is a function call or an operator (pycep: ``{"function": {...}}``)."""
    return (
        isinstance(value, dict)
        and len(value) == 1
        and next(iter(value)) in ("function", "operator")
        and isinstance(next(iter(value.values())), dict)
    )


def is_loop(value: object) -> TypeGuard[dict[str, Any]]:
    """Whether a parsed value is a ``[for ...]`` expression (pycep: ``loop_type``, ``config``)."""
    return isinstance(value, dict) and "loop_type" in value and "config" in value


def resource_body(config: dict[str, Any]) -> dict[str, Any]:
    """The body of a resource declaration: inside its ``[for ...]`` loop and ``if (...)`` condition."""
    while isinstance(config.get("config"), dict) and ("loop_type" in config or "condition" in config):
        config = config["config"]
    return config


def _key(raw: str) -> str | None:
    """An object key as written: ``name`` or ``'odata.type'``; None for an interpolated key."""
    if raw.startswith("'") and raw.endswith("'"):
        raw = raw[1:-1]
    return None if "${" in raw else raw


class _Checker:
    """Checks one resource body against its type, collecting problems (paths like ``a.b[0].c``)."""

    def __init__(self, table: TypeTable, report: list[tuple[str, str]]) -> None:
        self.table, self.report = table, report

    def value(self, value: object, ref: dict[str, str], path: str, *, partial: bool = False) -> None:
        """Check a value against the type ``ref`` points at; ``partial``: required ones may be absent."""
        node = self.table.get(ref)
        if value is None or is_reference(value) or node["$type"] == "AnyType":
            return
        if is_expression(value):
            self.expression(value, ref, path)
        elif is_loop(value):
            self.loop(value, node, path)
        elif node["$type"] == "UnionType":
            self.union(value, node, path, partial=partial)
        elif node["$type"] in ("ObjectType", "DiscriminatedObjectType"):
            self.object_value(value, node, path, partial=partial)
        elif node["$type"] == "ArrayType":
            self.array(value, node, path)
        else:
            self.scalar(value, node, path)

    def expression(self, value: dict[str, Any], ref: dict[str, str], path: str) -> None:
        """The object literals an expression holds where their type is the expression's own."""
        kind, detail = next(iter(value.items()))
        operands = detail.get("operands", {}) if kind == "operator" else {}
        if kind == "operator" and detail.get("type") == "conditional":
            self.value(operands.get("true_value"), ref, path)
            self.value(operands.get("false_value"), ref, path)
        elif kind == "function" and detail.get("type") == "union":
            for argument in detail.get("parameters", {}).values():
                if isinstance(argument, dict) and not is_expression(argument) and not is_loop(argument):
                    self.value(argument, ref, path, partial=True)

    def loop(self, value: dict[str, Any], node: dict[str, Any], path: str) -> None:
        if node["$type"] != "ArrayType":
            self.report.append((path, f"a [for ...] array where {_describe(self.table, node)} is expected"))
            return
        self.value(resource_body(value), node["itemType"], f"{path}[*]")

    def union(self, value: object, node: dict[str, Any], path: str, *, partial: bool) -> None:
        attempts: list[list[tuple[str, str]]] = []
        for element in node["elements"]:
            found: list[tuple[str, str]] = []
            _Checker(self.table, found).value(value, element, path, partial=partial)
            if not found:
                return
            attempts.append(found)
        if len(attempts) == 1 or all(
            self.table.get(e)["$type"] == "StringLiteralType" for e in node["elements"]
        ):
            allowed = ", ".join(_describe(self.table, self.table.get(e)) for e in node["elements"])
            self.report.append((path, f"{_show(value)} is none of {allowed}"))
        else:  # the closest alternative: the one with the fewest problems
            closest: list[tuple[str, str]] = min(attempts, key=len)
            self.report.extend(closest)

    def array(self, value: object, node: dict[str, Any], path: str) -> None:
        if not isinstance(value, list):
            self.report.append((path, f"{_show(value)} where an array is expected"))
            return
        for index, item in enumerate(value):
            self.value(item, node["itemType"], f"{path}[{index}]")

    def object_value(self, value: object, node: dict[str, Any], path: str, *, partial: bool) -> None:
        if not isinstance(value, dict):
            self.report.append((path, f"{_show(value)} where an object is expected"))
            return
        properties, additional = self.properties_of(value, node, path)
        if properties is None:
            return
        for raw, item in value.items():
            self.property(raw, item, properties, additional, path)
        if not partial:
            present = {_key(raw) for raw in value}
            for name, prop in properties.items():
                if prop["flags"] & REQUIRED and not prop["flags"] & READ_ONLY and name not in present:
                    self.report.append((_join(path, name), "required property missing"))

    def properties_of(
        self, value: dict[str, Any], node: dict[str, Any], path: str
    ) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
        """The properties (and the additional-properties type) an object value is checked against.

        A discriminated object's come from the element its discriminator's literal value picks; with a
        discriminator that is an expression, the value's type is unknown and (None, None) is returned.
        """
        if node["$type"] == "ObjectType":
            return node.get("properties", {}), node.get("additionalProperties")
        discriminator = node["discriminator"]
        chosen = next((item for raw, item in value.items() if _key(raw) == discriminator), None)
        if chosen is None:
            self.report.append((_join(path, discriminator), "required property missing (the discriminator)"))
            return None, None
        if not isinstance(chosen, str) or is_reference(chosen) or "${" in chosen:
            return None, None
        if chosen not in node["elements"]:
            allowed = ", ".join(repr(name) for name in node["elements"])
            self.report.append((_join(path, discriminator), f"{chosen!r} is none of {allowed}"))
            return None, None
        element = self.table.get(node["elements"][chosen])
        return {**node.get("baseProperties", {}), **element.get("properties", {})}, element.get(
            "additionalProperties"
        )

    def property(
        self,
        raw: str,
        item: object,
        properties: dict[str, Any],
        additional: dict[str, str] | None,
        path: str,
    ) -> None:
        name = _key(raw)
        if name is None:  # an interpolated key: its name is known at deployment only
            return
        where = _join(path, name)
        if name in properties:
            if properties[name]["flags"] & READ_ONLY:
                self.report.append((where, "read-only property: set by Azure, not by the template"))
            else:
                self.value(item, properties[name]["type"], where)
        elif additional is not None:
            self.value(item, additional, where)
        else:
            close = difflib.get_close_matches(name, list(properties), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            self.report.append((where, f"no such property{hint}"))

    def scalar(self, value: object, node: dict[str, Any], path: str) -> None:
        problem = _scalar_problem(value, node)
        if problem:
            self.report.append((path, problem))


def _scalar_problem(value: object, node: dict[str, Any]) -> str | None:
    """What is wrong with a literal of a primitive or string-literal type, or None."""
    kind = node["$type"]
    if kind == "StringLiteralType":
        interpolated = isinstance(value, str) and "${" in value
        return None if value == node["value"] or interpolated else f"{_show(value)} is not {node['value']!r}"
    if kind == "StringType":
        if not isinstance(value, str):
            return f"{_show(value)} where a string is expected"
        if "${" not in value and not node.get("minLength", 0) <= len(value) <= node.get(
            "maxLength", len(value)
        ):
            bounds = f"{node.get('minLength')}..{node.get('maxLength')}"
            return f"{_show(value)} is outside the allowed length {bounds}"
        return None
    if kind == "IntegerType":
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{_show(value)} where an integer is expected"
        low, high = node.get("minValue", value), node.get("maxValue", value)
        return None if low <= value <= high else f"{value} is outside {low}..{high}"
    if kind == "BooleanType":
        return None if isinstance(value, bool) else f"{_show(value)} where a boolean is expected"
    return None


def _describe(table: TypeTable, node: dict[str, Any]) -> str:
    if node["$type"] == "StringLiteralType":
        return repr(node["value"])
    return {"StringType": "any string", "IntegerType": "an integer", "BooleanType": "a boolean"}.get(
        node["$type"], str(node.get("name") or node["$type"])
    )


def _show(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def split_type(declared_type: str, declared_version: str) -> tuple[str, str]:
    """A resource's type and API version; a nested child's own ``'child@version'`` wins over its parent's."""
    if "@" in declared_type:
        parent_and_child, _, version = declared_type.partition("@")
        return parent_and_child, version
    return declared_type, declared_version


def check_resource(file: str, symbol: str, declaration: dict[str, Any]) -> Iterator[Problem]:
    """The problems of one parsed ``resource`` declaration (pycep's form: type, api_version, config)."""
    resource_type, version = split_type(str(declaration["type"]), str(declaration["api_version"]))
    known = resource_types().get((resource_type.lower(), version))
    if known is None:
        vendored = versions_of(resource_type) or "none"
        yield Problem(
            file,
            symbol,
            "",
            f"{resource_type}@{version} is not a known type and API version "
            f"(vendored versions: {vendored}; tests/infra/azure-types/README.md)",
        )
        return
    if declaration.get("existing"):
        return  # an existing resource names what is there; it sets nothing
    table, body_ref = known
    body = {
        k: v for k, v in resource_body(declaration["config"]).items() if k not in BICEP_KEYWORDS | PYCEP_KEYS
    }
    found: list[tuple[str, str]] = []
    _Checker(table, found).value(body, body_ref, "")
    for path, message in found:
        yield Problem(file, symbol, path, f"{message} ({resource_type}@{version})")


def check_file(path: Path, *, relative_to: Path | None = None) -> list[Problem]:
    """Every problem of every resource declared in one Bicep file (nested child resources included).

    Raises:
        lark.exceptions.LarkError, ValueError: the file does not parse.
    """
    name = str(path.relative_to(relative_to)) if relative_to else str(path)
    parsed = parse(path)
    return [
        problem
        for symbol, declaration in parsed.get("resources", {}).items()
        for problem in check_resource(name, symbol, declaration)
    ]
