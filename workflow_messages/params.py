"""Run parameters: what a workflow declares (``<param name type default>``), what a Trigger
carries (``[params,'{"KEY":"VALUE",...}']``) and what a job sees (``WFM_PARAM_KEY``).

One attribute holding canonical JSON, not an attribute per parameter: a publication fits an
advertisement only if every attribute it has is advertised, and ``wfm trigger`` advertises once
for Triggers of any workflow, so it cannot name each workflow's keys; and ``.`` is not allowed in
an attribute name anyway. The JSON is signed with the rest of the Trigger.

Values travel as canonical text (:func:`parse_value`): an int as its digits, a float as Python
writes it, a bool ``true``/``false``, a date ``YYYY-MM-DD``. The issuer fills in the defaults, so
a Trigger names every parameter (and the history keeps them); an agent checks them again against
the declarations its DEPLOY carried (:func:`resolve`), filling in the defaults of a Trigger from an
older issuer, and refuses a firing whose parameters do not fit. Pure, like the rest of the package.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from broker.language import Publication

__all__ = [
    "ENV_PREFIX",
    "MAX_PARAMS",
    "MAX_VALUE",
    "PARAMS",
    "PARAM_NAME_RULE",
    "PARAM_TYPES",
    "Param",
    "check_param_name",
    "decode_params",
    "encode_params",
    "param_environment",
    "parse_assignment",
    "parse_declarations",
    "parse_value",
    "records",
    "resolve",
    "trigger_params",
]

PARAMS = "params"  # the Trigger's attribute
ENV_PREFIX = "WFM_PARAM_"
PARAM_TYPES = ("string", "int", "float", "bool", "date")
MAX_PARAMS = 64  # parameters a workflow declares at most
MAX_VALUE = 4096  # characters of one value
PARAM_NAME_RULE = "a letter or _, then up to 63 letters, digits and _ (jobs see it as WFM_PARAM_NAME)"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_INT = re.compile(r"[+-]?[0-9]{1,18}\Z")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")
_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


@dataclass(frozen=True, slots=True)
class Param:
    """``<param name type default>``: ``default`` is canonical text, None when the parameter is
    required; ``line`` (of the file) takes no part in equality."""

    name: str
    type: str = "string"
    default: str | None = None
    line: int | None = field(default=None, compare=False)

    def record(self) -> dict[str, str]:
        """As JSON-ready data: in the DEPLOY content, the version and the WORKFLOWS answer."""
        return {
            "name": self.name,
            "type": self.type,
            **({} if self.default is None else {"default": self.default}),
        }


def check_param_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"invalid parameter name {name!r:.80}: {PARAM_NAME_RULE}")
    return name


def parse_value(kind: str, text: object) -> str:
    """``text`` as a value of type ``kind``, in canonical text; ValueError (one line) if it is not."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r:.40} is not text")
    if len(text) > MAX_VALUE:
        raise ValueError(f"a value of {len(text)} characters is longer than {MAX_VALUE}")
    if "\x00" in text:
        raise ValueError("a value cannot hold a NUL character (an environment variable cannot)")
    if kind == "string":
        return text
    plain = text.strip()
    if kind == "int" and _INT.match(plain):
        return str(int(plain))
    if kind == "float" and _FLOAT.match(plain) and math.isfinite(number := float(plain)):
        return repr(number)
    if kind == "bool" and plain.lower() in (*_TRUE, *_FALSE):
        return "true" if plain.lower() in _TRUE else "false"
    if kind == "date" and _DATE.match(plain):
        try:
            return date.fromisoformat(plain).isoformat()
        except ValueError:
            pass
    if kind not in PARAM_TYPES:
        raise ValueError(f"unknown parameter type {kind!r:.40} (one of {', '.join(PARAM_TYPES)})")
    wanted = {
        "int": "an integer",
        "float": "a finite number",
        "bool": "true or false",
        "date": "a date YYYY-MM-DD",
    }[kind]
    raise ValueError(f"{text!r:.60} is not {wanted}")


def resolve(declared: Sequence[Param], given: Mapping[str, object]) -> dict[str, str]:
    """Every declared parameter's value, in declaration order: the given one checked against its
    type, else its default. ValueError (one line) for a key not declared, a value not of its
    type, or a required parameter not given."""
    names = {param.name: param for param in declared}
    unknown = sorted(set(given) - set(names))
    if unknown:
        known = ", ".join(names) or "none"
        raise ValueError(f"unknown parameter {', '.join(unknown)} (declared: {known})")
    values: dict[str, str] = {}
    missing = []
    for param in declared:
        if param.name in given:
            try:
                values[param.name] = parse_value(param.type, given[param.name])
            except ValueError as error:
                raise ValueError(f"parameter {param.name} ({param.type}): {error}") from None
        elif param.default is not None:
            values[param.name] = param.default
        else:
            missing.append(f"{param.name} ({param.type})")
    if missing:
        raise ValueError(f"required parameter {', '.join(missing)} not given")
    return values


def parse_assignment(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (``--param``): the key checked as a name, the value as given."""
    key, equals, value = text.partition("=")
    if not equals:
        raise ValueError(f"{text!r:.60} is not KEY=VALUE")
    return check_param_name(key), value


def encode_params(values: Mapping[str, str]) -> str:
    """Canonical JSON of ``values`` that fits in a string value: sorted keys, ASCII (no line
    break), ``'`` as ``\\u0027`` (a string value may not hold both quote kinds)."""
    return json.dumps(dict(values), sort_keys=True, separators=(",", ":")).replace("'", "\\u0027")


def decode_params(text: object) -> dict[str, str]:
    """The parameters a Trigger's ``params`` (or a run's) holds; ValueError (one line) unless
    it is a JSON object of at most :data:`MAX_PARAMS` names to text: anyone may publish a Trigger
    without TLS, and a broker carries whatever value it was given."""
    if not isinstance(text, str):
        raise ValueError(f"the trigger's params {text!r:.40} is not text")
    if len(text) > MAX_PARAMS * (MAX_VALUE + 80):
        raise ValueError(f"the trigger's params is {len(text)} characters long")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"the trigger's params {text!r:.40} is not JSON") from None
    if not isinstance(data, dict) or len(data) > MAX_PARAMS:
        raise ValueError(f"the trigger's params {text!r:.40} is not an object of at most {MAX_PARAMS} names")
    for name, value in data.items():
        check_param_name(name)
        if not isinstance(value, str):
            raise ValueError(f"the trigger's parameter {name} is {value!r:.40}, not text")
    return data


def trigger_params(publication: Publication) -> dict[str, str]:
    """What a Trigger's ``params`` holds ({} without one: an issuer older than parameters, or a
    workflow without any); ValueError if it is garbled."""
    value = publication.get(PARAMS)
    return {} if value is None else decode_params(value)


def parse_declarations(data: object) -> tuple[Param, ...]:
    """The declarations of a DEPLOY content's ``params`` (absent: none), each checked as
    ``wfm validate`` checks them; ValueError (one line)."""
    if data is None:
        return ()
    if not isinstance(data, list) or len(data) > MAX_PARAMS or not all(isinstance(d, dict) for d in data):
        raise ValueError(f"DEPLOY params must be a list of at most {MAX_PARAMS} objects")
    found: list[Param] = []
    for entry in data:
        name = check_param_name(entry.get("name"))
        kind, default = entry.get("type", "string"), entry.get("default")
        if kind not in PARAM_TYPES:
            raise ValueError(f"DEPLOY param {name}: type {kind!r:.40} is not one of {', '.join(PARAM_TYPES)}")
        if default is not None:
            try:
                default = parse_value(kind, default)
            except ValueError as error:
                raise ValueError(f"DEPLOY param {name}: default {error}") from None
        if any(param.name == name for param in found):
            raise ValueError(f"DEPLOY declares param {name} twice")
        found.append(Param(name, kind, default))
    return tuple(found)


def param_environment(values: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """``{"WFM_PARAM_KEY": VALUE}`` for each parameter of a run."""
    items = values.items() if isinstance(values, Mapping) else values
    return {ENV_PREFIX + name: value for name, value in items}


def records(declared: Iterable[Param]) -> list[dict[str, Any]]:
    """The declarations as JSON-ready data."""
    return [param.record() for param in declared]
