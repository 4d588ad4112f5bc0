"""Read config.yaml: check what the schema cannot say, validate against the schema, fill in its defaults, and
explain every mistake in one line naming the key. (jsonschema is imported only to validate: the LeRobot peer
environment reads the defaults without it.)

The schema (`schemas/config.schema.yaml`, also reached as workflow/schemas/config.schema.yaml) is the one source of
defaults: the workflow, the CLI and the library's `BenchConfig` all read them from here.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import yaml

from .errors import UserError

SCHEMA_PATH = Path(__file__).parent / "schemas" / "config.schema.yaml"
DATASET_KINDS = ("synth", "v21", "v30")
BUILTIN_MODES = ("single", "sarm")  # dlbench.loader.dataset_meta.MODES; others come from config.yaml's `modes:`
_REMOTE_COMMON = {
    "type",
    "stage",
    "require_warm",
    "on_cold",
    "on_unreachable",
    "prewarm",
    "data_files_root",
    "max_requests_per_s",
}
SOURCE_KEYS = {  # the keys each source type uses; any other is a mistake, never silently ignored
    "local": {"type", "data_files_root"},
    "s3": _REMOTE_COMMON | {"url", "endpoint_url", "loopback"},
    "http": _REMOTE_COMMON - {"stage"} | {"url"},
    "bucket": _REMOTE_COMMON | {"bucket", "prefix"},
    "hub": {"type", "stage", "loopback", "on_unreachable", "max_requests_per_s"},  # the loopback Hub
}


@lru_cache(maxsize=1)
def schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


# the loaders, as the schema's run `loader` enum names them: <project>_<kind>, kind map (random access) or stream
LOADERS: tuple[str, ...] = tuple(schema()["definitions"]["run"]["properties"]["loader"]["oneOf"][0]["enum"])
DLBENCH_LOADERS = tuple(name for name in LOADERS if name.startswith("dlbench_"))
LEROBOT_LOADERS = tuple(name for name in LOADERS if name.startswith("lerobot_"))
SAME_KIND = "lerobot"  # baseline_loader: each run against LeRobot's loader of its own kind


def baseline_loader(loader: str, baseline: str = SAME_KIND) -> str:
    """The loader a run of `loader` is compared with: `baseline`, or for `lerobot` LeRobot's loader of the same kind
    (lerobot_map for map-style runs, lerobot_stream for streaming ones)."""
    return f"lerobot_{loader.split('_', 1)[1]}" if baseline == SAME_KIND else baseline


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


def check_deltas(deltas, where: str) -> None:
    """Raise `UserError` unless `deltas` is what a `modes:` entry holds (the schema's form: seconds per key)."""
    import jsonschema

    try:
        jsonschema.validate(deltas, schema()["properties"]["modes"]["additionalProperties"])
    except jsonschema.ValidationError:
        raise UserError(
            f"{where}: expected seconds per feature key, e.g. {{cameras: [-1.0, 0.0], action: [0.0]}}"
        ) from None


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


def _explain(error) -> str:
    import jsonschema

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
            raise UserError(f"datasets.{name}: give exactly one of synth, v21, v30 ({found})")
    for name in config.get("modes") or {}:
        if name in BUILTIN_MODES:
            raise UserError(f"modes.{name}: {name} is built in; give your mode another name")
    for name, src in (config.get("sources") or {}).items():
        if not isinstance(src, dict) or src.get("type") not in SOURCE_KEYS:
            continue  # the schema names it
        allowed = SOURCE_KEYS[src["type"]]
        for key in src:
            if key not in allowed:
                hint = {
                    "local": " (it reads each dataset where it lives; to benchmark your own dataset, add it under "
                    "datasets:, e.g. datasets: {mine: {v30: /data/my_dataset}})",
                    "hub": " (it is the loopback Hub the workflow starts; a repo on the real Hub is a dataset: "
                    "datasets: {NAME: {v30: hf://datasets/ORG/NAME@REVISION}}, read with source: local)",
                }.get(src["type"], "")
                raise UserError(
                    f"sources.{name}.{key}: a {src['type']} source does not use {key}{hint}; "
                    f"its keys: {', '.join(sorted(allowed))}"
                )


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
