"""ShopSimRL experiment YAML → a shopsim-wh config (the table is docs/config_import.md).

:func:`is_original` tells the two shapes apart; :func:`convert` maps every key of the original
(``experiment``, ``tasks``, ``environment``, ``runtime``, ``prompt``, ``skills``, ``model``) onto ours,
writing the original's own default for every key the file leaves out, so the converted config runs the
same jobs with the same settings. Keys with no counterpart here are explained in ``notes``; unknown
keys are errors. Paths are resolved against the original file's directory, as that runtime does.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .splits import load_split_manifest

log = logging.getLogger(__name__)
REQUIRED = object()

# Every key of the original shape (and nothing else).
ORIGINAL_KEYS: dict[str, tuple[str, ...]] = {
    "experiment": ("name", "output_dir", "dotenv", "seed", "concurrency", "resume"),
    "tasks": ("split_file", "split", "sample_size", "repeats"),
    "environment": ("base_url", "timeout", "persona"),
    "runtime": ("max_steps",),
    "prompt": ("system_prompt", "system_prompt_file"),
    "skills": ("path", "max_skills"),
    "model": ("id", "name", "base_url", "api_key_env", "temperature", "max_tokens", "top_p", "timeout",
              "max_retries", "retry_backoff_seconds", "trust_env", "stream", "send_seed", "tool_choice",
              "extra_body", "checkpoint_id"),
}

# original key → (our key, the original's default when the key is absent). None as a default = leave ours.
DIRECT: dict[str, tuple[str, Any]] = {
    "experiment.seed": ("experiment.seed", 20260828),
    "experiment.concurrency": ("runtime.concurrency", 1),
    "tasks.split": ("tasks.split", REQUIRED),
    "tasks.sample_size": ("tasks.sample_size", None),
    "tasks.repeats": ("tasks.repeats", 1),
    "environment.base_url": ("environment.url", "http://127.0.0.1:5700"),
    "environment.timeout": ("environment.timeout_s", 30.0),
    "runtime.max_steps": ("runtime.max_steps", 30),
    "skills.max_skills": ("skills.max_skills", None),
    "model.name": ("model.name", REQUIRED),
    "model.base_url": ("model.base_url", REQUIRED),
    "model.api_key_env": ("model.api_key_env", "OPENAI_API_KEY"),
    "model.temperature": ("model.sampling.temperature", 0.0),
    "model.max_tokens": ("model.sampling.max_tokens", 512),
    "model.top_p": ("model.sampling.top_p", None),
    "model.timeout": ("model.timeout_s", 180.0),
    "model.max_retries": ("model.max_retries", 5),
    "model.retry_backoff_seconds": ("model.retry_backoff_s", 1.0),
    "model.trust_env": ("model.trust_env", True),
    "model.send_seed": ("model.send_seed", True),
    "model.tool_choice": ("model.tool_choice", "auto"),
    "model.extra_body": ("model.extra_body", {}),
    "model.checkpoint_id": ("model.checkpoint_id", None),
}
# The keys handled one by one below (with where they go).
SPECIAL: dict[str, str | None] = {
    "experiment.name": "experiment.name",
    "experiment.output_dir": None,
    "experiment.dotenv": "experiment.dotenv",
    "experiment.resume": None,
    "tasks.split_file": "tasks.split_manifest",
    "environment.persona": "environment.persona",
    "prompt.system_prompt": "prompt_template",
    "prompt.system_prompt_file": "prompt_template",
    "skills.path": "skills.path",
    "model.id": None,
    "model.stream": None,
}
CONSTANT: dict[str, Any] = {"environment.dialect": "shop_env", "environment.trust_env": False}

# Keys only the original shape has: one of them (outside a section both shapes share the name of) marks it.
_MARKERS = ("tasks.split_file", "environment.base_url", "environment.timeout", "prompt", "model.id",
            "model.temperature", "model.max_tokens", "model.top_p", "model.timeout", "model.retry_backoff_seconds",
            "model.stream", "experiment.output_dir", "experiment.concurrency", "experiment.resume")
_OURS = ("tasks.split_manifest", "environment.url", "model.sampling", "output", "prompt_template")


@dataclass
class Imported:
    config: dict                      # our shape, paths absolute
    notes: list[str] = field(default_factory=list)
    origin: dict[str, str] = field(default_factory=dict)  # our key → the original key it came from


def _has(raw: dict, dotted: str) -> bool:
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def is_original(raw: dict) -> bool:
    """True for a ShopSimRL experiment YAML; an error for a file that mixes both shapes."""
    theirs = [k for k in _MARKERS if _has(raw, k)]
    ours = [k for k in _OURS if _has(raw, k)]
    if theirs and ours:
        raise ConfigError(f"this config mixes ShopSimRL keys ({', '.join(theirs)}) with shopsim-wh keys "
                          f"({', '.join(ours)}); use one shape (`shopsim-wh config import` converts a ShopSimRL file)")
    return bool(theirs)


def safe_name(value: str) -> str:
    """The original's run-name rule: runs of other characters become '-', leading/trailing '-' '.' dropped."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", value.strip()).strip("-.")
    if not cleaned:
        raise ConfigError(f"experiment.name {value!r} has no letters or digits left to name the run")
    return cleaned


def _set(out: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = out
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def _resolve(base: Path, value: object, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key} must be a path (a non-empty string)")
    p = Path(value)
    return str((p if p.is_absolute() else base / p).resolve())


def prompt_cache_dir() -> Path:
    root = os.environ.get("SHOPSIM_WH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "shopsim-wh")
    return Path(root) / "prompts"


def cache_prompt(text: str) -> str:
    """An inline system prompt as a content-addressed file (prompts are not secrets), so a path can name it."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    path = prompt_cache_dir() / f"system-{digest[:24]}.txt"
    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return str(path)


def _section(raw: dict, name: str) -> dict:
    value = raw.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a mapping")
    return value


def convert(raw: dict, base: Path, *, source_name: str = "config", prompt_sink=cache_prompt) -> Imported:
    """Map an original experiment mapping onto ours. ``base`` = the directory its relative paths start from."""
    unknown = [f"{k}" for k in raw if k not in ORIGINAL_KEYS]
    secs = {name: _section(raw, name) for name in ORIGINAL_KEYS}
    unknown += [f"{s}.{k}" for s, sec in secs.items() for k in sec if k not in ORIGINAL_KEYS[s]]
    if unknown:
        known = ", ".join(f"{s}.{{{', '.join(keys)}}}" for s, keys in ORIGINAL_KEYS.items())
        raise ConfigError(f"unknown ShopSimRL config key(s): {', '.join(unknown)}; that runtime's keys are {known}")

    def get(dotted: str, default: Any = None) -> Any:
        s, k = dotted.split(".")
        return secs[s].get(k, default)

    imp = Imported({})
    out, notes = imp.config, imp.notes

    def put(ours: str, value: Any, theirs: str) -> None:
        _set(out, ours, value)
        imp.origin[ours] = theirs

    for s, k in (("tasks", "split_file"), ("tasks", "split"), ("model", "name"), ("model", "base_url")):
        if not secs[s].get(k):
            raise ConfigError(f"{s}.{k} is required in a ShopSimRL config (tasks.split_file, tasks.split, "
                              "model.name and model.base_url always are)")

    name = get("experiment.name", source_name)
    cleaned = safe_name(str(name))
    if cleaned != str(name):
        notes.append(f"experiment.name {name!r} became {cleaned!r} (the original's run-name rule)")
    put("experiment.name", cleaned, "experiment.name")

    for theirs, (ours, default) in DIRECT.items():
        s, k = theirs.split(".")
        value = secs[s].get(k, default)
        if value is REQUIRED:
            continue
        if value is None and default is None:
            if theirs == "model.top_p":
                notes.append("model.top_p: null or absent (the original sends no top_p) -> this build's "
                             "model.sampling.top_p default is used")
            continue
        put(ours, copy.deepcopy(value), theirs)
    for ours, value in CONSTANT.items():
        put(ours, value, "(fixed in ShopSimRL's environment client)")

    split_file = _resolve(base, get("tasks.split_file"), "tasks.split_file")
    put("tasks.split_manifest", split_file, "tasks.split_file")
    persona = get("environment.persona")
    if persona not in (True, False, None):
        raise ConfigError("environment.persona must be true, false or null")
    try:
        manifest = load_split_manifest(split_file)
    except ConfigError as exc:  # name the key as the file spells it
        raise ConfigError(str(exc).replace("tasks.split_manifest", "tasks.split_file")) from None
    split = str(get("tasks.split"))
    manifest.task_ids(split)  # an unknown split name is an error that lists the file's split names
    flag = manifest.persona.get(split)
    if persona is None:  # the original takes the split's own flag, and refuses a mixed split
        if flag is None:
            raise ConfigError(f"environment.persona must be set: split {split!r} of {split_file} does not say "
                              "whether its tasks have personas")
        persona = flag
    elif flag is not None and flag != persona:
        raise ConfigError(f"environment.persona={persona} conflicts with split {split!r} persona={flag}; "
                          "remove environment.persona or choose a matching split")
    put("environment.persona", persona, "environment.persona")

    dotenv = get("experiment.dotenv")
    if dotenv is not None:
        put("experiment.dotenv", _resolve(base, dotenv, "experiment.dotenv"), "experiment.dotenv")
    prompt, prompt_file = get("prompt.system_prompt"), get("prompt.system_prompt_file")
    if prompt is not None and prompt_file is not None:
        raise ConfigError("set only one of prompt.system_prompt / prompt.system_prompt_file")
    if prompt_file is not None:
        put("prompt_template", _resolve(base, prompt_file, "prompt.system_prompt_file"), "prompt.system_prompt_file")
    elif prompt is not None:
        if not isinstance(prompt, str):
            raise ConfigError("prompt.system_prompt must be a string")
        put("prompt_template", prompt_sink(prompt), "prompt.system_prompt")
    else:
        notes.append("prompt: none set -> shopsim-wh's built-in system prompt (the original's built-in prompt "
                     "is not shipped here; set prompt.system_prompt_file to compare runs with it)")
    skills = get("skills.path")
    put("skills.path", None if skills is None else _resolve(base, skills, "skills.path"), "skills.path")

    if get("experiment.output_dir") is not None:
        notes.append(f"experiment.output_dir {get('experiment.output_dir')!r} is not used: shopsim-wh writes into "
                     "one warehouse (--warehouse, $SHOPSIM_WH_HOME, else ./warehouse) so runs stay comparable in SQL; "
                     "`shopsim-wh dump` writes an episode back as a ShopSimRL trace")
    if get("experiment.resume", True) is False:
        notes.append("experiment.resume: false is not applied: shopsim-wh always resumes (completed episodes are "
                     "kept); choose a new experiment.name to run every episode again")
    elif not isinstance(get("experiment.resume", True), bool):
        raise ConfigError("experiment.resume must be true or false")
    if get("model.id") is not None:
        notes.append(f"model.id {get('model.id')!r} (a label of the original's plan) is not kept: the run is named "
                     "by experiment.name and the model by model.name / model.checkpoint_id")
    stream = get("model.stream", False)
    if not isinstance(stream, bool):
        raise ConfigError("model.stream must be true or false")
    if stream:
        notes.append("model.stream: true is not applied: shopsim-wh makes non-streaming requests (the same "
                     "messages, delivered in one answer)")
    return imp


def _get(out: dict, dotted: str) -> Any:
    node: Any = out
    for part in dotted.split("."):
        node = node[part]
    return node


# The top-level keys of shopsim_wh.core.config.Config in its order (a converted file is written in it). Config imports
# this module, so the order is spelt here; tests/test_import_graph.py holds the two equal.
CONFIG_KEYS = ("experiment", "tasks", "model", "environment", "skills", "runtime", "output", "prompt_template")
PATH_KEYS = ("tasks.split_manifest", "skills.path", "prompt_template", "experiment.dotenv")


def read_yaml_mapping(path: Path) -> dict:
    """A YAML file whose top level is a mapping, or a ConfigError that says what is wrong with it."""
    import yaml

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return raw


def import_file(path: str | os.PathLike, out: str | os.PathLike | None = None) -> tuple[str, list[str]]:
    """Convert an original YAML file; returns (the new config as YAML text, notes). Writes ``out`` if given.

    With ``out``, paths are written relative to its directory and an inline system prompt goes to
    ``<out stem>.system_prompt.txt`` beside it.
    """
    import yaml

    src = Path(path)
    raw = read_yaml_mapping(src)
    if not is_original(raw):
        raise ConfigError(f"{src} is not a ShopSimRL experiment config (it has none of {', '.join(_MARKERS)}); "
                          "a shopsim-wh config needs no import")
    target = Path(out).resolve() if out is not None else None

    def sink(text: str) -> str:
        if target is None:
            return cache_prompt(text)
        side = target.with_name(target.stem + ".system_prompt.txt")
        side.parent.mkdir(parents=True, exist_ok=True)
        side.write_text(text, encoding="utf-8")
        return str(side)

    try:
        imp = convert(raw, src.resolve().parent, source_name=src.stem, prompt_sink=sink)
    except ConfigError as exc:
        raise ConfigError(f"{src} (ShopSimRL format): {exc}") from None
    if target is not None:
        for key in PATH_KEYS:
            if _has(imp.config, key) and isinstance(_get(imp.config, key), str):
                _set(imp.config, key, os.path.relpath(_get(imp.config, key), target.parent))
    order = list(CONFIG_KEYS)
    imp.config = {k: imp.config[k] for k in sorted(imp.config, key=lambda k: order.index(k) if k in order else len(order))}
    header = [f"# Converted from ShopSimRL config {src.name} by `shopsim-wh config import` (docs/config_import.md)."]
    header += [f"# note: {n}" for n in imp.notes]
    text = "\n".join(header) + "\n" + yaml.safe_dump(imp.config, sort_keys=False, allow_unicode=True)
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return text, imp.notes
