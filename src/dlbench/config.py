"""Read config.yaml: check what the schema cannot say, validate against the schema, fill in its defaults, and
explain every mistake in one line naming the key. (jsonschema is imported only to validate: the LeRobot peer
environment reads the defaults without it.)

The schema (`schemas/config.schema.yaml`, also reached as workflow/schemas/config.schema.yaml) is the one source of
defaults: the workflow, the CLI and the library's `RunSpec` all read them from here.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import yaml

from .errors import UserError
from .run.modes import BUILTIN_MODES

SCHEMA_PATH = Path(__file__).parent / "schemas" / "config.schema.yaml"
DATASET_KINDS = ("synth", "v21", "v30", "reencode")


@lru_cache(maxsize=1)
def schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def defaults(*path: str) -> dict:
    """The schema's defaults for the object at `path` (property names, e.g. "bench", "defaults"), as a dict."""
    node = schema()
    for name in path:
        node = node["properties"][name]
        if "$ref" in node:
            node = _resolve(node["$ref"])
    return {k: copy.deepcopy(v["default"]) for k, v in node["properties"].items() if "default" in v}


def synth_defaults() -> dict:
    return {
        k: copy.deepcopy(v["default"])
        for k, v in _resolve("#/definitions/synth")["properties"].items()
        if "default" in v
    }


def _resolve(ref: str) -> dict:
    node = schema()
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def _with_defaults(cls):
    """A validator class that also writes each property's `default` into the instance when it is missing."""
    from jsonschema import validators

    validate_properties = cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(cls, {"properties": set_defaults})


def _json_type(value) -> str:
    """The JSON type of a Python value, as a schema's `type` names it."""
    if isinstance(value, bool):
        return "boolean"
    names = {int: "integer", float: "number", str: "string", list: "array", dict: "object", type(None): "null"}
    return next((n for t, n in names.items() if isinstance(value, t)), "object")


def _fits(branch: dict, value) -> bool:
    """Whether a oneOf branch is for values of this JSON type (an integer fits a number)."""
    wanted, have = branch.get("type"), _json_type(value)
    return wanted is None or wanted == have or (wanted == "number" and have == "integer")


def _bounds(node: dict) -> str:
    """A number's bounds in words: ' of 1 or more', ' above 0', ' up to 1'."""
    low = f" of {node['minimum']} or more" if "minimum" in node else ""
    low = f" above {node['exclusiveMinimum']}" if "exclusiveMinimum" in node else low
    high = f" up to {node['maximum']}" if "maximum" in node else ""
    return low + (" and" if low and high else "") + high


def _describe(node: dict) -> str:
    """What a schema node accepts, in words: 'a whole number of 1 or more, or a list of them'."""
    if "$ref" in node:
        node = _resolve(node["$ref"])
    branches = node.get("oneOf") or node.get("anyOf")
    if branches:
        scalars = [_describe(b) for b in branches if b.get("type") != "array"]
        listed = any(b.get("type") == "array" for b in branches)
        return ", ".join(scalars) + (", or a list of them" if listed else "")
    if "title" in node:  # a pattern's meaning, in words
        return node["title"]
    if "enum" in node:
        return ("one of " if len(node["enum"]) > 1 else "") + ", ".join(str(v) for v in node["enum"])
    kind = {
        "integer": "a whole number",
        "number": "a number",
        "boolean": "true or false",
        "string": "text",
        "array": "a list",
        "object": "a map (key: value)",
    }.get(node.get("type"), "a valid value")
    return kind + _bounds(node)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _explain(error, label=None) -> str:
    """One line for the first schema error: the key path (`label` turns the path into a name), what is wrong with
    the value, and what to give instead."""
    import jsonschema

    allowed = _describe(error.schema) if isinstance(error.schema, dict) else "a valid value"
    while error.validator in ("oneOf", "anyOf", "allOf") and error.context:
        # a scalar-or-list axis: report the branch that matches the value's shape
        fitting = [i for i, b in enumerate(error.validator_value) if _fits(b, error.instance)]
        branch = [e for e in error.context if e.schema_path and e.schema_path[0] in fitting[:1]]
        error = jsonschema.exceptions.best_match(branch or error.context)
    path = list(error.absolute_path)
    key = (label(path) if label and path else ".".join(str(p) for p in path)) or "(top level)"
    value, limit = _show(error.instance), error.validator_value
    if error.validator == "additionalProperties":
        names = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(names))
        hint = f"allowed keys: {', '.join(names)}" if names else "check the key's spelling"
        return f"{key}: unknown key(s) {extra}; {hint}"
    if error.validator == "enum":
        return f"{key}: {value} is not allowed; give {allowed}"
    problem = {
        "type": "has the wrong type",
        "minimum": f"is below the minimum {limit}",
        "exclusiveMinimum": f"must be above {limit}",
        "maximum": f"is above the maximum {limit}",
        "minItems": "is an empty list",
        "minLength": "is empty",
    }.get(error.validator)
    if problem:
        return f"{key}: {value} {problem}; give {allowed}"
    if error.validator == "required":
        missing = [k for k in limit if k not in error.instance]
        return f"{key}: {', '.join(missing)} missing; add it"
    if error.validator == "minProperties":
        return f"{key}: is empty; give at least {limit} entry"
    if error.validator == "pattern":
        what = error.schema.get("description")  # a value's pattern says what it is; a name's, only its letters
        return f"{key}: {value} is not {what}" if what else f"{key}: {value} does not match {limit}; rename it"
    return f"{key}: {error.message}"


@lru_cache(maxsize=1)
def _run_validator():
    from jsonschema import validators

    run = _resolve("#/definitions/run")
    return validators.validator_for(schema())({**run, "definitions": schema()["definitions"]})


def check_run_values(run: dict, label) -> None:
    """Check a run's values against the schema's run definition (types, bounds, choices); `label(key)` names a key
    in the message (`bench.scenarios.s.batch_size`, `--batch-size`). Unset (None) values are not checked."""
    keys = schema()["definitions"]["run"]["properties"]  # a run spec holds more: root, scenario, run_id...
    values = {k: v for k, v in run.items() if k in keys and v is not None}
    errors = sorted(_run_validator().iter_errors(values), key=lambda e: list(e.absolute_path))
    if errors:
        raise UserError(_explain(errors[0], lambda path: ".".join([label(str(path[0])), *map(str, path[1:])])))


def _check_shape(config: dict) -> None:
    """What the schema cannot say well, checked on the config as written (before defaults are filled in)."""
    if "dataset" in config:
        raise UserError(
            "dataset: replaced by `datasets:`, a map from a name to one of synth: {...}, v21: PATH_OR_URL "
            "or v30: PATH_OR_URL (e.g. datasets: {synthetic: {synth: {episodes: 24}}})"
        )
    for name, ds in (config.get("datasets") or {}).items():
        if not isinstance(ds, dict):
            continue  # the schema names it
        kinds = [k for k in DATASET_KINDS if k in ds]
        if len(kinds) != 1:
            found = f"found {', '.join(kinds)}" if kinds else "found none"
            raise UserError(f"datasets.{name}: give exactly one of synth, v21, v30, reencode ({found})")
    for name, peer in (config.get("peers") or {}).items():
        if isinstance(peer, dict) and len(peer) != 1:
            found = f"found {', '.join(peer)}" if peer else "found none"
            raise UserError(
                f"peers.{name}: give exactly one of pip: lerobot==VERSION, path: CHECKOUT, wheel: FILE.whl ({found})"
            )
    for name in config.get("modes") or {}:
        if name in BUILTIN_MODES:
            raise UserError(f"modes.{name}: {name} is built in; give your mode another name")
    from .sources import KEYS, Source

    for name, src in (config.get("sources") or {}).items():
        if isinstance(src, dict) and src.get("type") in KEYS:  # else the schema names it
            Source(src, name).check_keys()


def validate_config(config: dict, schema_path: str | Path = SCHEMA_PATH, source: str = "config.yaml") -> dict:
    """Validate `config` in place (defaults filled in); raise `UserError` naming the key and what is allowed."""
    try:
        _check_shape(config)
    except UserError as e:
        raise UserError(f"{source}: {e}") from None
    from jsonschema import validators

    schema_doc = yaml.safe_load(Path(schema_path).read_text())
    cls = _with_defaults(validators.validator_for(schema_doc))
    errors = sorted(cls(schema_doc).iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        raise UserError(f"{source}: {_explain(errors[0])}")
    return config


def check_deltas(deltas, where: str) -> None:
    """Raise `UserError` unless `deltas` is what a `modes:` entry holds (the schema's form: seconds per key)."""
    import jsonschema

    try:
        jsonschema.validate(deltas, schema()["properties"]["modes"]["additionalProperties"])
    except jsonschema.ValidationError:
        raise UserError(
            f"{where}: expected seconds per feature key, e.g. {{cameras: [-1.0, 0.0], action: [0.0]}}"
        ) from None
