"""Check that what the docs name exists: repository paths, `dlbench` commands, benchmark modules, `make` targets,
code references (`module.name`) and config keys (`section.key`), in README.md, docs/*.md and profiles/slurm; and
that config.yaml says why on the line wherever it moves a setting off the schema's default (one set of defaults:
the schema's; config.yaml's matrix moves them only with a reason a reader sees).

python scripts/docs_check.py   # one line per problem; exit 1 if any (make lint runs this)

Only code spans (`...`) are read: prose may say anything, a code span names something a reader will look for.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "profiles" / "slurm" / "README.md"]
TOP = ("src/", "docs/", "workflow/", "profiles/", "benchmarks/", "tests/", "scripts/", "config/", ".ci/")
PLACEHOLDER = re.compile(r"[<>{}*\[\]]|\.\.\.")
# a dotted span ending so names a file: a source file must exist somewhere here, an output (results/) need not
SOURCE_FILES = ("py", "yaml", "yml", "md", "sh", "smk", "rst", "toml", "cfg")
OUTPUT_FILES = ("png", "csv", "json", "npy", "html", "log", "mp4", "parquet", "txt", "jsonl", "zip", "svg")
SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def modules() -> dict[str, list[Path]]:
    """Each dlbench module by every dotted tail of its name (`dlbench.loader.stream`, `loader.stream`, `stream`)."""
    out: dict[str, list[Path]] = {}
    for path in (ROOT / "src").rglob("*.py"):
        parts = list(path.relative_to(ROOT / "src").with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        for k in range(len(parts)):
            out.setdefault(".".join(parts[k:]), []).append(path)
    return out


def commands() -> set[str]:
    """The `dlbench` subcommands, as its parser knows them."""
    sys.path.insert(0, str(ROOT / "src"))
    from dlbench.cli import build_parser

    parser = build_parser()
    return {name for action in parser._subparsers._group_actions for name in action.choices}


def schema_keys() -> dict:
    """The config schema's properties, nested as dicts (a leaf: {})."""

    def walk(node: dict) -> dict:
        props = dict(node.get("properties", {}))
        for extra in (node.get("additionalProperties"), node.get("items")):
            if isinstance(extra, dict):
                props.update(walk(extra))
        return {k: walk(v) if isinstance(v, dict) else {} for k, v in props.items()}

    return walk(yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text()))


def defined(name: str, paths: list[Path]) -> bool:
    """Whether `name` is defined, assigned or imported in one of these modules (a class, function, constant,
    attribute or re-export)."""
    word = re.compile(rf"\b{re.escape(name)}\b")
    return any(word.search(p.read_text()) for p in paths)


def problems(docs: list[Path] = DOCS) -> list[str]:
    mods, cmds, keys = modules(), commands(), schema_keys()
    make = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    bench = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    out = []
    for doc in docs:
        text = doc.read_text()
        for line_no, line in enumerate(text.splitlines(), 1):
            for span in SPAN.findall(line):
                where = f"{doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc}:{line_no}"
                if PLACEHOLDER.search(span):
                    continue
                words = span.split()
                if span.startswith(TOP):
                    path = words[0].rstrip(":,.")
                    if not (ROOT / path).exists():
                        out.append(f"{where}: {path} does not exist")
                elif words[0] == "dlbench" and len(words) > 1 and not words[1].startswith("-"):
                    if words[1] not in cmds:
                        out.append(f"{where}: `dlbench {words[1]}` is not a dlbench command")
                elif words[:2] == ["python", "-m"] and len(words) > 2 and words[2].startswith("benchmarks"):
                    name = words[2].removeprefix("benchmarks").lstrip(".") or (words[3] if len(words) > 3 else "")
                    if name and not name.startswith("-") and name not in bench:
                        out.append(f"{where}: benchmark {name} does not exist (benchmarks/{name}.py)")
                elif words[0] == "make" and len(words) > 1 and words[1] not in make:
                    out.append(f"{where}: `make {words[1]}` is not a Makefile target")
                elif DOTTED.fullmatch(span):
                    out += [f"{where}: {p}" for p in _dotted(span, mods, keys)]
    return out


def _dotted(span: str, mods: dict, keys: dict) -> list[str]:
    """A code reference (the longest prefix that is a dlbench module, then a name in it) or a config key path
    (from a top-level key of the schema); other dotted words (file names, attributes of objects) pass."""
    parts = span.split(".")
    if parts[-1] in OUTPUT_FILES:
        return []
    if parts[-1] in SOURCE_FILES:
        found = any(p for p in ROOT.rglob(span) if ".venv" not in p.parts and ".git" not in p.parts)
        return [] if found else [f"no file {span} in the repository"]
    if parts[0] in keys:
        node = keys
        for k, part in enumerate(parts):
            if part not in node:
                if node:  # a leaf's value may be a free mapping (a source's storage options)
                    return [f"config key {'.'.join(parts[: k + 1])} is not in the schema"]
                return []
            node = node[part]
        return []
    for k in range(len(parts), 0, -1):
        key = ".".join(parts[:k])
        if key in mods:
            if k < len(parts) and not defined(parts[k], mods[key]):
                files = ", ".join(str(p.relative_to(ROOT)) for p in mods[key])
                return [f"{parts[k]} is not defined in {key} ({files})"]
            return []
    return []


# config.yaml's sections of fixed settings (the others define datasets, sources and scenarios by name)
SETTINGS = ("convert", "bench.defaults", "calibration", "advice", "tune", "targets")


def unexplained_overrides(config: Path = ROOT / "config.yaml") -> list[str]:
    """Each setting of SETTINGS whose value in `config` differs from the schema's default without a comment on its
    line (a flow mapping's line speaks for its keys)."""
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    values, lines = yaml.safe_load(config.read_text()), config.read_text().splitlines()
    out = []
    for section in SETTINGS:
        node, props = values, schema
        for part in section.split("."):
            node, props = (node or {}).get(part, {}), props.get("properties", {}).get(part, {})
        start = _line_of(lines, section.split("."), 0)
        whole = props.get("default") if isinstance(props.get("default"), dict) else {}
        for key, value in (node or {}).items():
            spec = {"default": whole[key]} if key in whole else props.get("properties", {}).get(key, {})
            if "default" not in spec or spec["default"] == value:
                continue
            at = _line_of(lines, [key], start)
            if at is None or "#" not in lines[at]:
                where = f"{config.name}:{(at or start or 0) + 1}"
                out.append(f"{where}: {section}.{key} is {value!r} against the schema's {spec['default']!r}; "
                           "say why on its line, or leave it to the default")  # fmt: skip
    return out


def _line_of(lines: list[str], keys: list[str], start: int | None) -> int | None:
    """The line index of the key path `keys` (each found after the last), from line `start` on."""
    at = start or 0
    for key in keys:
        pattern = re.compile(rf"(^|[{{,\s]){re.escape(key)}:")
        at = next((i for i in range(at, len(lines)) if pattern.search(lines[i].split("#")[0])), None)
        if at is None:
            return None
    return at


def main() -> None:
    found = problems() + unexplained_overrides()
    for line in found:
        print(line)
    if found:
        sys.exit(f"{len(found)} problem(s): mend the docs, the name or config.yaml")


if __name__ == "__main__":
    main()
