"""`schema.json`, the settings a plugin declares, turned into the plugin's `cfg`: hookchat's JSON-typed fields and
KiraAI's WebUI field types (`switch`, `list`, `enum`, `section`, ...) alike. Defaults are built the way KiraAI builds
them; the operator's values are checked against each field's type; fields of an unknown type pass as they are."""

from __future__ import annotations

import copy
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.utils.log import logger

__all__ = [
    "ConfigField",
    "ConfigSchema",
    "ConfigValueError",
    "PluginConfigError",
    "parse_schema",
    "build_config",
    "to_json_schema",
    "validate_config",
]

# What a value of each field type must be, as JSON Schema. hookchat's JSON types, then KiraAI's field types
# (KiraAI core/config/config_field.py, ConfigType and create_field_from_schema, and its plugin docs), aliases
# included: `text` is a string, `int` an integer, `bool`/`boolean` a switch. `json` takes any JSON value.
_VALUE_SCHEMAS: dict[str, dict[str, Any]] = {
    "string": {"type": "string"},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "boolean": {"type": "boolean"},
    "array": {"type": "array"},
    "object": {"type": "object"},
    "null": {"type": "null"},
    "text": {"type": "string"},
    "sensitive": {"type": "string"},
    "markdown": {"type": "string"},
    "textarea": {"type": "string"},
    "yaml": {"type": "string"},
    "editor": {"type": "string"},
    "model_select": {"type": "string"},
    "persona_select": {"type": "string"},
    "session_select": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "switch": {"type": "boolean"},
    "bool": {"type": "boolean"},
    "list": {"type": "array"},
    "multi_select": {"type": "array"},
    "json": {},
}
#: Field types with a meaning of their own: a choice among `options`, a group of nested fields, a read-only note.
_SPECIAL_TYPES = frozenset({"enum", "section", "info"})
_SWITCH_TYPES = frozenset({"switch", "bool", "boolean"})
_LIST_TYPES = frozenset({"list", "multi_select"})

#: JSON Schema keywords a field may add to its type (`minimum`, `pattern`, `items`, ...). Other keys of a field
#: (`name`, `hint`, `locales`, `collapsed`, `model_type`, ...) describe the WebUI and are ignored here.
_KEYWORDS = frozenset(
    {
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "items",
        "prefixItems",
        "contains",
        "minItems",
        "maxItems",
        "uniqueItems",
        "properties",
        "patternProperties",
        "additionalProperties",
        "required",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "dependentRequired",
        "dependentSchemas",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
    }
)


class ConfigValueError(ValueError):
    """A value (or the shape) of the operator's configuration does not fit the schema; says which field."""


@dataclass(frozen=True)
class ConfigField:
    """One declared setting: its key, its (normalised) type, its default as KiraAI builds it, and what its values
    must be (`check`, JSON Schema; None accepts any value). A `section` holds its own fields and no check."""

    key: str
    kind: str
    default: Any = None
    check: dict[str, Any] | None = None
    fields: tuple[ConfigField, ...] = ()

    def problem(self, value: Any) -> str | None:
        """Why `value` does not fit this field, or None. None ("not set") fits every field, as in KiraAI, where
        a field without a default is None."""
        if value is None or self.check is None or _plainly_fits(self.check, value):
            return None
        return _first_error(self.check, value)


@dataclass(frozen=True)
class ConfigSchema:
    """A parsed `schema.json`: its fields, or a complete JSON Schema object used as it is, and the warnings about
    the schema itself (unknown field types, defaults that do not fit their type), to be logged by the caller."""

    fields: tuple[ConfigField, ...] = ()
    json_schema: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()


def parse_schema(schema: Mapping[str, Any]) -> ConfigSchema:
    """Read a `schema.json` object: field key -> `{"type", "default", ...}`, sections nesting the same under
    `"fields"`. A schema that already is one JSON Schema object (`"type": "object"` with `"properties"`) is kept as
    it is. Never fails for a field it does not understand: that field is reported in `warnings` and accepts any
    value, as KiraAI, which shows such a field as text and stores what it is given."""
    if schema.get("type") == "object" and isinstance(schema.get("properties"), Mapping):
        return ConfigSchema(json_schema=dict(schema))
    warnings: list[str] = []
    fields = _parse_fields(schema, (), warnings)
    return ConfigSchema(fields=fields, warnings=tuple(warnings))


def build_config(parsed: ConfigSchema, values: Mapping[str, Any]) -> dict[str, Any]:
    """The plugin's `cfg`: every declared field with its default, the operator's `values` over them (a section's
    values over its own defaults, field by field), each value checked. Raises `ConfigValueError` naming the
    field (`section.field` inside a section) for a value of the wrong type, an unknown field, or a section given
    something other than a table."""
    if parsed.json_schema is not None:
        return _build_from_json_schema(parsed.json_schema, values)
    return _build(parsed.fields, values, ())


def to_json_schema(parsed: ConfigSchema) -> dict[str, Any]:
    """The whole configuration as one JSON Schema object (sections as nested objects); for tools that want one."""
    if parsed.json_schema is not None:
        return parsed.json_schema
    return _object_schema(parsed.fields)


# -- parsing ------------------------------------------------------------------------------------------------------


def _parse_fields(specs: Mapping[str, Any], where: tuple[str, ...], warnings: list[str]) -> tuple[ConfigField, ...]:
    fields: list[ConfigField] = []
    for key, spec in specs.items():
        if not isinstance(spec, Mapping):
            path = ".".join((*where, str(key)))
            warnings.append(f'schema.json entry {path!r} is not a field (an object with a "type"); ignored')
            continue
        parsed = _parse_field(str(key), spec, where, warnings)
        if parsed is not None:
            fields.append(parsed)
    return tuple(fields)


def _parse_field(key: str, spec: Mapping[str, Any], where: tuple[str, ...], warnings: list[str]) -> ConfigField | None:
    path = ".".join((*where, key))
    kind = spec.get("type", "string")  # KiraAI reads a field without a type as a string
    if kind == "info":
        return None  # a note shown in KiraAI's WebUI: it stores no value
    if kind == "section":
        children = spec.get("fields")
        if not isinstance(children, Mapping):
            warnings.append(f'schema.json section {path!r} has no "fields" object; it is an empty section')
            children = {}
        return ConfigField(key, "section", fields=_parse_fields(children, (*where, key), warnings))

    check = _value_schema(kind, spec, path, warnings)
    name = kind if isinstance(kind, str) else "|".join(map(str, kind)) if isinstance(kind, list) else repr(kind)
    default = _default(name, spec)
    parsed = ConfigField(key, name, default, check)
    problem = parsed.problem(default)
    if problem is not None:
        warnings.append(
            f"the default of schema.json field {path!r} does not fit its type ({problem}); "
            "it is passed to the plugin as it is"
        )
    return parsed


def _value_schema(kind: Any, spec: Mapping[str, Any], path: str, warnings: list[str]) -> dict[str, Any] | None:
    """JSON Schema for the values of a field, or None (any value) for a type hookchat does not know."""
    options = spec.get("options")
    options = list(options) if isinstance(options, list) else None
    if kind == "enum":
        if not options:
            warnings.append(f'schema.json field {path!r} is an enum without "options"; any value is accepted')
            return None
        check: dict[str, Any] = {"enum": options}
    elif isinstance(kind, list) and kind and all(isinstance(k, str) and _VALUE_SCHEMAS.get(k) for k in kind):
        check = {"type": sorted({_VALUE_SCHEMAS[k]["type"] for k in kind})}  # JSON Schema's list of types
    elif isinstance(kind, str) and kind in _VALUE_SCHEMAS:
        check = dict(_VALUE_SCHEMAS[kind])
        if options and kind == "multi_select":
            if not spec.get("allow_custom") and not spec.get("source"):
                check["items"] = {"enum": options}
        elif options:
            check["enum"] = options  # KiraAI: a string, integer or float field with options is a dropdown
    else:
        warnings.append(
            f"schema.json field {path!r} has the type {kind!r}, which hookchat does not know; "
            "its value is passed to the plugin as it is"
        )
        return None
    check.update({k: v for k, v in spec.items() if k in _KEYWORDS and k not in check})
    return check


def _default(kind: str, spec: Mapping[str, Any]) -> Any:
    """The default as KiraAI's config fields set it: a switch defaults to False unless its default is a bool, a
    list to [] unless its default is a list, a choice to its first option unless its default is one of them,
    `json` to {} unless its default is set; every other field to its default, None when there is none."""
    default = copy.deepcopy(spec.get("default"))
    options = spec.get("options")
    if kind in _SWITCH_TYPES:
        return default if isinstance(default, bool) else False
    if kind in _LIST_TYPES:
        return default if isinstance(default, list) else []
    if kind == "json":
        return default if default else {}
    if isinstance(options, list) and options and default not in options:
        return copy.deepcopy(options[0])
    return default


# -- building the cfg ---------------------------------------------------------------------------------------------


def _build(fields: tuple[ConfigField, ...], values: Mapping[str, Any], where: tuple[str, ...]) -> dict[str, Any]:
    known = {f.key for f in fields}
    unknown = sorted(str(k) for k in values if k not in known)
    if unknown:
        raise ConfigValueError(_unknown_fields(unknown, known, where))
    cfg: dict[str, Any] = {}
    for f in fields:
        path = (*where, f.key)
        if f.kind == "section":
            given = values.get(f.key, {})
            if not isinstance(given, Mapping):
                raise ConfigValueError(
                    f"config field {'.'.join(path)!r} is a section: give a table of its fields, not {given!r}"
                )
            cfg[f.key] = _build(f.fields, given, path)
        elif f.key in values:
            value = values[f.key]
            problem = f.problem(value)
            if problem is not None:
                raise ConfigValueError(f"config field {'.'.join(path)!r}: {problem}")
            cfg[f.key] = value
        else:
            cfg[f.key] = copy.deepcopy(f.default)
    return cfg


def _unknown_fields(unknown: list[str], known: set[str], where: tuple[str, ...]) -> str:
    """ "unknown config field 'x'", with the nearest known field ("did you mean") or the fields there are."""
    names = ", ".join(".".join((*where, k)) for k in unknown)
    near = difflib.get_close_matches(unknown[0], sorted(known), n=1)
    if near:
        return f"unknown config field {names!r}: did you mean {'.'.join((*where, near[0]))!r}?"
    fields = ", ".join(sorted(known)) or "none"
    return f"unknown config field {names!r} (the fields are: {fields})"


def _build_from_json_schema(schema: dict[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties", {})
    cfg = {
        name: copy.deepcopy(spec["default"])
        for name, spec in properties.items()
        if isinstance(spec, Mapping) and "default" in spec
    }
    cfg.update(values)
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(schema).iter_errors(cfg), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        err = errors[0]
        where = ".".join(map(str, err.absolute_path))
        if not where and err.validator == "additionalProperties":
            raise ConfigValueError(_unknown_fields(sorted(set(cfg) - set(properties)), set(properties), ()))
        raise ConfigValueError(f"config field {where!r}: {err.message}")
    return cfg


def _object_schema(fields: tuple[ConfigField, ...]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for f in fields:
        if f.kind == "section":
            properties[f.key] = _object_schema(f.fields)
        else:
            properties[f.key] = dict(f.check) if f.check is not None else {}
    return {"type": "object", "properties": properties, "additionalProperties": False}


# What `_plainly_fits` can decide alone: a JSON type and the Python types that are surely of it (bool is no number).
_PLAIN_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}
_BOUNDS = {
    "minimum": lambda value, bound: value >= bound,
    "maximum": lambda value, bound: value <= bound,
    "exclusiveMinimum": lambda value, bound: value > bound,
    "exclusiveMaximum": lambda value, bound: value < bound,
}


def _plainly_fits(check: Mapping[str, Any], value: Any) -> bool:
    """Whether `value` surely fits `check` by the common keywords alone (a type, bounds, lengths, `items`), so
    jsonschema (~30 ms to import) is needed only for the rest. False means "ask jsonschema", never "invalid":
    a check with any other keyword, or a value this cannot judge, goes to `_first_error`."""
    for keyword, want in check.items():
        if keyword == "type":
            types = _PLAIN_TYPES.get(want) if isinstance(want, str) else None
            if types is None or not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                return False
        elif keyword in _BOUNDS:
            numeric = (int, float)
            if not isinstance(want, numeric) or isinstance(want, bool):
                return False
            if isinstance(value, numeric) and not isinstance(value, bool) and not _BOUNDS[keyword](value, want):
                return False
        elif keyword in ("minLength", "maxLength"):
            if not isinstance(want, int) or isinstance(want, bool):
                return False
            if isinstance(value, str) and (len(value) < want if keyword == "minLength" else len(value) > want):
                return False
        elif keyword == "items":
            if not isinstance(want, Mapping):
                return False
            if isinstance(value, list) and not all(_plainly_fits(want, item) for item in value):
                return False
        else:
            return False
    return True


def _first_error(check: dict[str, Any], value: Any) -> str | None:
    from jsonschema import Draft202012Validator  # imported on the first value `_plainly_fits` cannot judge
    from jsonschema.exceptions import best_match

    error = best_match(Draft202012Validator(check).iter_errors(value))
    if error is None:
        return None
    inner = "".join(f"[{part!r}]" for part in error.absolute_path)  # where inside a list or JSON value
    return f"{error.message} (at {inner})" if inner else error.message


class PluginConfigError(ValueError):
    """A plugin's configuration does not match its `schema.json`; the message names the plugin and the field."""


def validate_config(plugin_id: str, schema: dict[str, Any] | None, values: dict[str, Any]) -> dict[str, Any]:
    """The plugin's `cfg`: the defaults of `schema` (hookchat's JSON-typed fields or KiraAI's field types, sections
    nested as KiraAI nests them) overlaid with the operator's `values`, which are checked. A bad value raises
    `PluginConfigError` naming the plugin and the field; what is wrong with the schema itself (a field type
    hookchat does not know, a default that does not fit its type) is logged as a warning and does not stop the
    plugin. See docs/plugins.md, "Plugins written for KiraAI"."""
    if not schema:
        return dict(values)
    parsed = parse_schema(schema)
    for warning in parsed.warnings:
        logger.warning("plugin %r: %s", plugin_id, warning)
    try:
        return build_config(parsed, values)
    except ConfigValueError as exc:
        raise PluginConfigError(f"plugin {plugin_id!r}: {exc}") from None
