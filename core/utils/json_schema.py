"""JSON Schema validation that is safe on untrusted schemas (a remote tool's, a plugin's): it never touches the
network and no regular expression in a schema can freeze the process.

jsonschema, left to its defaults, fetches any `$ref` it cannot resolve locally over urllib (no timeout, redirects
followed), and evaluates `pattern`/`patternProperties` with `re`, which backtracks without bound and holds the
GIL while it does, so not even a worker thread helps. `safe_validator` resolves references only inside the schema
(and the JSON Schema meta-schemas) and evaluates patterns with the `regex` engine under a per-match time bound.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

# jsonschema, referencing and regex are imported on first validation: loading the plugins (`hookchat plugins`)
# checks only a schema's references (`schema_hazard`), which needs none of them (tests/test_imports.py).
if TYPE_CHECKING:
    from jsonschema import ValidationError

__all__ = ["safe_validator", "schema_errors", "schema_hazard", "UnusableSchemaError", "PATTERN_TIME_LIMIT"]

#: Seconds one `pattern` match may take before the value counts as invalid (the engine checks the bound while
#: it backtracks, so a match can overrun it by a fraction).
PATTERN_TIME_LIMIT = 0.1
_REF_KEYS = ("$ref", "$dynamicRef")


class UnusableSchemaError(ValueError):
    """A schema cannot be used to validate (a `$ref` it cannot resolve from itself, a broken keyword): the fault
    of whoever wrote the schema, not of the value checked against it."""


def _refuse(uri: str) -> Any:
    """The registry's retrieval: nothing outside the schema is ever fetched."""
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)


def _search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text`; `TimeoutError` past `PATTERN_TIME_LIMIT`."""
    import regex

    return regex.search(pattern, text, timeout=PATTERN_TIME_LIMIT, concurrent=True) is not None


def _slow(pattern: str, what: str) -> ValidationError:
    from jsonschema import ValidationError

    return ValidationError(f"{what} could not be checked against the pattern {pattern!r} in time")


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    import regex
    from jsonschema import ValidationError

    if not validator.is_type(instance, "string"):
        return
    try:
        if not _search(pattern, instance):
            yield ValidationError(f"{instance!r} does not match {pattern!r}")
    except TimeoutError:
        yield _slow(pattern, "the value")
    except regex.error as exc:
        yield ValidationError(f"the schema's pattern {pattern!r} is not a valid regular expression: {exc}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    import regex

    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            try:
                matched = _search(pattern, key)
            except (TimeoutError, regex.error):
                yield _slow(pattern, f"the property name {key!r}")
                continue
            if matched:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    import regex
    from jsonschema import ValidationError

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = []
    for key in instance:
        if key in properties:
            continue
        try:
            if any(_search(p, key) for p in patterns):
                continue
        except (TimeoutError, regex.error):
            yield _slow("|".join(patterns), f"the property name {key!r}")
            continue
        extras.append(key)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        yield ValidationError(
            f"additional properties are not allowed ({', '.join(repr(e) for e in sorted(extras, key=str))})"
        )


@functools.cache
def _safe_validator_class() -> tuple[Any, Any]:
    """Draft 2020-12 with the bounded pattern keywords, and the registry that knows the meta-schemas (jsonschema
    adds them) and retrieves nothing else; built on first use."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import extend
    from referencing import Registry

    validator = extend(
        Draft202012Validator,
        validators={
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )
    return validator, Registry(retrieve=_refuse)


@functools.lru_cache(maxsize=1024)
def _cached(schema_json: str) -> Any:
    validator, registry = _safe_validator_class()
    return validator(json.loads(schema_json), registry=registry)


def safe_validator(schema: dict[str, Any]) -> Any:
    """A Draft 2020-12 validator for `schema` that retrieves no reference and bounds every pattern match.

    A `$ref` the schema cannot resolve from itself raises `referencing.exceptions.Unresolvable` (a `jsonschema`
    error) when validation reaches it. Validators are cached by the schema's content.
    """
    return _cached(json.dumps(schema, sort_keys=True, default=repr))


def schema_errors(schema: dict[str, Any], instance: Any) -> list[str]:
    """Every way `instance` breaks `schema`, each as `where: why` (`where` is the dotted path, or `arguments`),
    sorted by path; [] when it is valid. Raises `UnusableSchemaError` when the schema itself cannot be used."""
    from jsonschema.exceptions import SchemaError
    from referencing.exceptions import Unresolvable

    try:
        errors = sorted(safe_validator(schema).iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path])
    except (Unresolvable, SchemaError) as exc:
        raise UnusableSchemaError(str(exc)) from exc
    return [f"{'.'.join(map(str, e.absolute_path)) or 'arguments'}: {e.message}" for e in errors]


def schema_hazard(schema: Any) -> str | None:
    """Why `schema` is unsafe to validate with, or None: a `$ref`/`$dynamicRef` that points outside the schema
    (anything but `#...`, which would mean fetching a URL or reading a file), or `unevaluatedProperties` beside
    `patternProperties` (jsonschema checks that pair with an unbounded `re` search)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in _REF_KEYS:
                ref = node.get(key)
                if isinstance(ref, str) and not ref.startswith("#"):
                    return (
                        f"{key} {ref!r} points outside the schema; only references inside it ('#/$defs/...') "
                        "are allowed, so put the referenced schema under $defs"
                    )
            if "unevaluatedProperties" in node and "patternProperties" in node:
                return "unevaluatedProperties beside patternProperties is not supported; use additionalProperties"
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None
