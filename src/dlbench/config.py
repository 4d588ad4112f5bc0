"""Validate config.yaml against its JSON schema, fill in the schema's defaults, and explain mistakes in one line."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import yaml
from jsonschema import validators

from .errors import UserError


def _with_defaults(cls):
    """A validator class that also writes each property's `default` into the instance when it is missing."""
    validate_properties = cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = _copy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(cls, {"properties": set_defaults})


def _copy(value):
    return yaml.safe_load(yaml.safe_dump(value))


def _explain(error: jsonschema.ValidationError) -> str:
    while error.validator in ("oneOf", "anyOf", "allOf") and error.context:
        # a scalar-or-list axis: report the branch that matches the value's shape
        branch_index = 1 if isinstance(error.instance, list) else 0
        branch = [e for e in error.context if e.schema_path and e.schema_path[0] == branch_index]
        error = jsonschema.exceptions.best_match(branch or error.context)
    key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        hint = f"allowed keys: {', '.join(allowed)}" if allowed else "check the key's spelling"
        return f"{key}: unknown key(s) {extra}; {hint}"
    if error.validator == "enum":
        return f"{key}: {error.instance!r} is not allowed; choose one of {error.validator_value}"
    return f"{key}: {error.message}"


def validate_config(config: dict, schema_path: str | Path, source: str = "config.yaml") -> dict:
    """Validate `config` in place (defaults filled in); raise `UserError` naming the key and what is allowed."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    cls = _with_defaults(validators.validator_for(schema))
    errors = sorted(cls(schema).iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        raise UserError(f"{source}: {_explain(errors[0])}")
    return config
