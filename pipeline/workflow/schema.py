"""The study config's schema (config/schema.yaml and config/schema/<section>.yaml): the names it takes
from the registries, validation with short messages naming the key, what was given and what was
expected (a failing `oneOf` described by the branch the value meant, not by the whole schema), and
the defaults it declares, filled in once. pipeline/workflow/config.py checks what a schema cannot
express."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from snakemake.exceptions import WorkflowError

from pipeline.data.corpus import EMBEDDED_SOURCES
from pipeline.data.tasks import EMBEDDED_TASKS, TASK_NAMES
from pipeline.evaluate.benchmark_registry import SUITE
from pipeline.models.presets import SIZE_PRESETS
from pipeline.multimodal.config import VLM_TASKS
from pipeline.sweeps.lr_grids import FINETUNE_LR_GRIDS

MAX_ERRORS = 10  # schema errors reported at once
TYPE_NAMES = {
    "array": "a list",
    "object": "a mapping",
    "number": "a number",
    "integer": "an integer",
    "string": "a string",
    "boolean": "true or false",
    "null": "null",
}
PLURALS = {"number": "numbers", "integer": "integers", "string": "strings", "object": "mappings"}


class ConfigError(WorkflowError):
    """An invalid study config; the message says which key, what was given, what was expected."""


def registry_enums() -> dict[str, list[str]]:
    """The names the schema takes from the registries (`x-registry: <name>` in config/schema.yaml):
    tasks, benchmarks, size presets and embedded corpora are declared once, in pipeline/data/tasks.py
    (and pipeline/multimodal/config.py's LLaVA tasks), pipeline/evaluate/benchmark_registry.py,
    pipeline/models/presets.py and pipeline/data/corpus.py."""
    return {
        "tasks": list(TASK_NAMES),
        "finetune_tasks": [*TASK_NAMES, *VLM_TASKS],
        "tokenizer_texts": ["python_stdlib", *EMBEDDED_TASKS],
        "corpora": list(EMBEDDED_SOURCES),
        "benchmarks": list(SUITE),
        "presets": list(SIZE_PRESETS),
        "lr_grids": list(FINETUNE_LR_GRIDS),
    }


def load_schema(path: str | Path, registries: bool = True) -> dict:
    """The config schema as one dict: each `$ref` to a file (config/schema/<section>.yaml) replaced by
    that file, and (registries) each `x-registry` marker by the registry's names as an `enum`."""
    path = Path(path)
    schema = _inline(yaml.safe_load(path.read_text()), path.parent, "")
    return _fill_registries(schema, registry_enums()) if registries else schema


def _inline(node: Any, base: Path, root: str, at: str = "") -> Any:
    """`node` (at JSON pointer `at` of the whole schema, in a file in folder `base` that lands at
    `root`) with each file `$ref` replaced by that file and each local ref (#/a/b) re-rooted (#<root>/a/b)."""
    if isinstance(node, list):
        return [_inline(v, base, root, f"{at}/{i}") for i, v in enumerate(node)]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and not ref.startswith("#"):
        if len(node) != 1:
            raise ValueError(f"schema: a file $ref ({ref}) takes no sibling keys")
        file = base / ref
        return _inline(yaml.safe_load(file.read_text()), file.parent, at, at)
    if isinstance(ref, str) and ref.startswith("#/"):
        node = {**node, "$ref": f"#{root}{ref[1:]}"}
    return {k: _inline(v, base, root, f"{at}/{k}") if k != "$ref" else v for k, v in node.items()}


def _fill_registries(node: Any, enums: dict[str, list[str]]) -> Any:
    if isinstance(node, dict):
        out = {k: _fill_registries(v, enums) for k, v in node.items() if k != "x-registry"}
        if "x-registry" in node:
            out["enum"] = enums[node["x-registry"]]
        return out
    if isinstance(node, list):
        return [_fill_registries(v, enums) for v in node]
    return node


def validate_config(config: dict, schema: dict) -> None:
    """Check `config` against the schema, then add the defaults it declares and put it in canonical
    form (in place). Raises ConfigError with one or two lines per error."""
    validator = jsonschema.Draft202012Validator(schema)
    problems = schema_errors(validator, config)
    if not problems:
        fill_defaults(validator, config, schema)
        problems = schema_errors(validator, config)  # a default the schema injects must validate too
    if problems:
        more = f"\n  ... and {len(problems) - MAX_ERRORS} more" if len(problems) > MAX_ERRORS else ""
        raise ConfigError("invalid config:\n" + "\n".join(problems[:MAX_ERRORS]) + more)
    in_canonical_form(validator, config, schema)


def schema_errors(validator: jsonschema.protocols.Validator, config: dict) -> list[str]:
    """One readable line (or two) per schema error, in key order."""
    errors = [leaf for e in validator.iter_errors(config) for leaf in _leaves(e)]
    errors.sort(key=lambda e: [str(p) for p in e.absolute_path])
    return [f"  {_key(e.absolute_path)}: {_describe(e)}" for e in errors]


def _leaves(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """A failed oneOf / anyOf as the errors of the branch the value was meant for (at most two),
    when there is one; any other error as itself."""
    meant = _meant_branch(error) if error.validator in ("oneOf", "anyOf") else None
    if meant is None:
        return [error]
    meant.sort(key=lambda e: [str(p) for p in e.relative_path])
    return [leaf for e in meant[:2] for leaf in _leaves(e)]


def _key(path: Iterable) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "(top level)"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(error: jsonschema.ValidationError) -> str:
    """What was given and what was expected, for one error."""
    kind, schema, value = error.validator, error.schema, error.instance
    if kind == "additionalProperties" and isinstance(value, dict):
        known = sorted(schema.get("properties", {}))
        keys = ", ".join(repr(k) for k in sorted(set(value) - set(known)))
        return f"unknown key {keys}" + (f"; expected one of {', '.join(known)}" if known else "")
    if kind == "required":
        return error.message.replace("is a required property", "is required (missing)")
    if kind in ("oneOf", "anyOf"):
        options = " | ".join(_expectation(b) for b in schema[kind])
        return f"got {_short(value)}; expected {options}"
    return f"got {_short(value)}; expected {_expectation({kind: error.validator_value}, schema)}"


def _meant_branch(error: jsonschema.ValidationError) -> list | None:
    """The errors of the one branch of a oneOf/anyOf the value was meant for: the only branch
    whose type and `const` discriminators (e.g. a spectrum's `kind`) the value matches."""
    by_branch: dict[int, list] = {}
    for sub in error.context:
        by_branch.setdefault(sub.relative_schema_path[0], []).append(sub)
    meant = [
        errs
        for errs in by_branch.values()
        if not any(e.validator == "const" or (e.validator == "type" and not e.relative_path) for e in errs)
    ]
    return meant[0] if len(meant) == 1 else None


def _bounds(schema: dict) -> str:
    """' >= 0 and < 1' for a schema's numeric bounds ('' without)."""
    ops = (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))
    bounds = [f"{op} {schema[k]}" for k, op in ops if k in schema]
    return " " + " and ".join(bounds) if bounds else ""


def _yaml(value: Any) -> str:
    """A scalar as YAML writes it (null, true, false)."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _expectation(rule: dict, schema: dict | None = None) -> str:
    """A short phrase for what a (sub)schema accepts; `rule` is the failed keyword (or a whole
    schema), `schema` the schema it belongs to."""
    schema = schema or rule
    if "$ref" in rule:
        return "a valid entry (see config/schema.yaml)"
    if "enum" in rule:
        return "one of " + ", ".join(_yaml(v) for v in rule["enum"])
    if "const" in rule:
        return repr(rule["const"])
    if "type" in rule:
        types = rule["type"] if isinstance(rule["type"], list) else [rule["type"]]
        text = " or ".join(TYPE_NAMES.get(t, t) for t in types)
        items, props = schema.get("items"), schema.get("properties", {})
        if "array" in types and isinstance(items, dict) and isinstance(items.get("type"), str):
            text += f" of {PLURALS.get(items['type'], items['type'])}{_bounds(items)}"
        discriminators = [f"{k}: {v['const']}" for k, v in props.items() if "const" in v]
        if "object" in types and discriminators:
            text += " with " + ", ".join(discriminators)
        return text + _bounds(schema)
    if _bounds(schema):
        return "a value" + _bounds(schema)
    if "minItems" in rule:
        return f"at least {rule['minItems']} items"
    if "maxItems" in rule:
        return f"at most {rule['maxItems']} items"
    if "uniqueItems" in rule:
        return "no repeated items"
    if "minProperties" in rule:
        return f"at least {rule['minProperties']} entries"
    if "pattern" in rule:
        return f"a string matching {rule['pattern']}"
    if "propertyNames" in rule:
        return f"keys that are {_expectation(rule['propertyNames'])}"
    return f"a value satisfying {next(iter(rule))}: {_short(next(iter(rule.values())))}"


def fill_defaults(validator: jsonschema.protocols.Validator, instance: Any, schema: dict) -> None:
    """Add the `default:` of every absent property, following only the branches of oneOf / anyOf /
    if-then-else that `instance` validates against (a default declared in one branch of a oneOf
    never lands in a value another branch describes)."""
    if "$ref" in schema:
        schema = _resolve(validator, schema)
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        for key, sub in props.items():
            if key not in instance and "default" in sub:
                instance[key] = copy.deepcopy(sub["default"])
            if key in instance:
                fill_defaults(validator, instance[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in set(instance) - set(props):
                fill_defaults(validator, instance[key], extra)
    if isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for item in instance:
            fill_defaults(validator, item, schema["items"])
    for branch in schema.get("allOf", []):
        fill_defaults(validator, instance, branch)
    for key in ("oneOf", "anyOf"):
        valid = [b for b in schema.get(key, []) if validator.evolve(schema=b).is_valid(instance)]
        if valid:
            fill_defaults(validator, instance, valid[0])
    if "if" in schema:
        then = "then" if validator.evolve(schema=schema["if"]).is_valid(instance) else "else"
        fill_defaults(validator, instance, schema.get(then, {}))


def in_canonical_form(validator: jsonschema.protocols.Validator, instance: Any, schema: dict) -> Any:
    """`instance` by meaning, not by how it was written (in place; returned): every mapping's keys in
    the schema's order (its `properties`, then those of the branches it takes), keys the schema does
    not name (e.g. finetune.methods' names) sorted after them, and a whole float where the schema
    wants an integer as that integer. Snakemake reruns a job when the text of its params changes:
    params taken from a config in canonical form are the same for a reordered but equal config, and
    a config written in the schema's order (config.yaml) keeps the text it had."""
    branches = list(_branches(validator, instance, schema))
    if isinstance(instance, dict):
        named = {k: b["properties"][k] for b in reversed(branches) for k in b.get("properties", {})}
        extra = next(
            (b["additionalProperties"] for b in branches if isinstance(b.get("additionalProperties"), dict)),
            {},
        )
        order = [k for b in branches for k in b.get("properties", {}) if k in instance]
        keys = list(dict.fromkeys(order)) + sorted((k for k in instance if k not in named), key=str)
        items = [(k, in_canonical_form(validator, instance[k], named.get(k, extra))) for k in keys]
        instance.clear()
        instance.update(items)
    elif isinstance(instance, list):
        items = next((b["items"] for b in branches if isinstance(b.get("items"), dict)), {})
        instance[:] = [in_canonical_form(validator, v, items) for v in instance]
    elif isinstance(instance, float) and instance.is_integer():
        types = {
            t for b in branches for t in (b["type"] if isinstance(b.get("type"), list) else [b.get("type")])
        }
        return int(instance) if "integer" in types and "number" not in types else instance
    return instance


def _branches(validator: jsonschema.protocols.Validator, instance: Any, schema: dict) -> Iterable[dict]:
    """`schema` and the subschemas that describe `instance` with it: allOf, the first oneOf / anyOf
    branch it validates against, if's then or else (as fill_defaults follows them; $refs resolved)."""
    if "$ref" in schema:
        schema = _resolve(validator, schema)
    yield schema
    subs = list(schema.get("allOf", []))
    for key in ("oneOf", "anyOf"):
        subs += [b for b in schema.get(key, []) if validator.evolve(schema=b).is_valid(instance)][:1]
    if "if" in schema:
        subs.append(
            schema.get("then" if validator.evolve(schema=schema["if"]).is_valid(instance) else "else", {})
        )
    for sub in subs:
        yield from _branches(validator, instance, sub)


def _resolve(validator: jsonschema.protocols.Validator, schema: dict) -> dict:
    """The subschema a local `$ref` (#/a/b) points to."""
    node = validator.schema
    for part in schema["$ref"].removeprefix("#/").split("/"):
        node = node[part]
    return node
