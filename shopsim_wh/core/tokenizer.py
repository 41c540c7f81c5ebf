"""The tokenizer seam: token ids for the training namespace (issue 31, docs/export_rl.md).

One small protocol, :class:`Tokenizer`, two kinds behind it:

* ``builtin:shopsim-bytes-v1`` (:class:`BytesTokenizer`): one id per UTF-8 byte plus four ChatML specials, and a
  ChatML chat template with a ``<tool_call>`` block. No files, no dependencies: the embedded policy server emits its
  ids so the token path (record, store, export, retokenize) is tested without a GPU or a model download.
* a Hugging Face tokenizer given by path (:class:`HFTokenizer`: a directory with ``tokenizer.json`` and
  ``tokenizer_config.json``, whose ``chat_template`` (or a ``chat_template.jinja`` beside it) renders the messages,
  or a ``tokenizer.json`` file with those beside it). The chat template is rendered by transformers'
  ``apply_chat_template`` (Hugging Face's own semantics: sandboxed Jinja, its ``tojson``, the special tokens of the
  config), the text tokenized by the ``tokenizers`` library. Needs the ``tokens`` extra; both are imported only
  when such a tokenizer is loaded.

:func:`load` turns a spec (``builtin``, ``builtin:shopsim-bytes-v1`` or a path) into one of them; every bad spec is
a :class:`~.errors.ConfigError` saying what to give instead. ``render`` turns OpenAI-style messages (and the tool
schemas) into the prompt text; ``chat_ids`` tokenizes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .errors import ConfigError

BUILTIN_ID = "builtin:shopsim-bytes-v1"


class Tokenizer(Protocol):
    id: str  # what `training_samples.tokenizer_id` records
    sha256: str  # identity of the vocabulary and the chat template (`tokenizer_hash`)

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def render(self, messages: list[dict], tools: list[dict] | None = None,
               add_generation_prompt: bool = False) -> str: ...

    def chat_ids(self, messages: list[dict], tools: list[dict] | None = None,
                 add_generation_prompt: bool = False) -> list[int]: ...


def tool_call_text(call: dict) -> str:
    """The text of one assistant tool call in the built-in template (what the embedded policy samples)."""
    fn = call.get("function") or call
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = json.dumps(args if args is not None else {}, ensure_ascii=False, sort_keys=True)
    return f'<tool_call>\n{{"name": {json.dumps(fn.get("name"), ensure_ascii=False)}, "arguments": {args}}}\n</tool_call>'


class BytesTokenizer:
    """Byte-level ids (``16 + byte``) and ChatML specials; deterministic and dependency-free."""

    SPECIALS = ("<|pad|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>")
    OFFSET = 16
    TEMPLATE_VERSION = "chatml-tools-v1"

    def __init__(self) -> None:
        self.id = BUILTIN_ID
        self.eos = "<|im_end|>"
        self._special = {s: i for i, s in enumerate(self.SPECIALS)}
        self._split = re.compile("(" + "|".join(re.escape(s) for s in self.SPECIALS) + ")")
        self.sha256 = hashlib.sha256(
            json.dumps({"id": self.id, "specials": self.SPECIALS, "offset": self.OFFSET,
                        "template": self.TEMPLATE_VERSION}, sort_keys=True).encode()).hexdigest()

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for part in self._split.split(text):
            if part in self._special:
                ids.append(self._special[part])
            elif part:
                ids.extend(self.OFFSET + b for b in part.encode("utf-8"))
        return ids

    def decode(self, ids: list[int]) -> str:
        out, buf = [], bytearray()
        for i in ids:
            if i >= self.OFFSET:
                buf.append(i - self.OFFSET)
                continue
            out.append(buf.decode("utf-8", errors="replace"))
            buf = bytearray()
            out.append(self.SPECIALS[i] if 0 <= i < len(self.SPECIALS) else "")
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def render(self, messages: list[dict], tools: list[dict] | None = None,
               add_generation_prompt: bool = False) -> str:
        parts = []
        for i, m in enumerate(messages):
            role, content = m.get("role"), m.get("content")
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False) if content else ""
            if i == 0 and role == "system" and tools:
                text += "\n\n# Tools\n<tools>\n" + "\n".join(
                    json.dumps(t, ensure_ascii=False, sort_keys=True) for t in tools) + "\n</tools>"
            if role == "assistant":
                text += "".join(tool_call_text(c) for c in m.get("tool_calls") or [])
            parts.append(f"<|im_start|>{role}\n{text}<|im_end|>\n")
        if add_generation_prompt:
            parts.append("<|im_start|>assistant\n")
        return "".join(parts)

    def chat_ids(self, messages: list[dict], tools: list[dict] | None = None,
                 add_generation_prompt: bool = False) -> list[int]:
        return self.encode(self.render(messages, tools, add_generation_prompt))


def builtin() -> BytesTokenizer:
    return BytesTokenizer()


# --- Hugging Face tokenizers given by path ----------------------------------------------------------------------
TOKENS_EXTRA = "pip install 'shopsim-wh[tokens]'"
SPEC_HELP = ("give `builtin` (the built-in byte tokenizer, builtin:shopsim-bytes-v1) or the path of a Hugging Face "
             "tokenizer: a directory holding tokenizer.json and tokenizer_config.json with a `chat_template`, or a "
             "tokenizer.json file with those beside it")
# the files that make a tokenizer's identity, in the order its sha256 reads them
HASHED = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
_SPECIALS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class TemplateError(ValueError):
    """A chat template that could not render these messages (its own ``raise_exception``, a Jinja error)."""


@dataclass(frozen=True)
class TokenizerFiles:
    """Where a Hugging Face tokenizer's files are: ``tokenizer.json``, the config (may be absent) and the template
    (the text of ``chat_template.jinja`` or the config's ``chat_template``, which may be a list of named ones)."""

    tokenizer_json: Path
    config_path: Path | None
    template_path: Path | None
    config: dict
    template: Any

    def sha256(self) -> str:
        """sha256 over the files' bytes, each as its name, its length and its bytes, in the order of HASHED."""
        h = hashlib.sha256()
        for name, path in zip(HASHED, (self.tokenizer_json, self.config_path, self.template_path), strict=True):
            if path is None:
                continue
            data = _read_bytes(path)
            h.update(f"{name}\0{len(data)}\0".encode())
            h.update(data)
        return h.hexdigest()


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"tokenizer file {path} cannot be read ({exc.strerror or exc}); check its permissions") from exc


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(_read_bytes(path))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"tokenizer file {path} is not valid JSON ({exc}); save the tokenizer again with "
                          "transformers' save_pretrained") from exc
    if not isinstance(doc, dict):
        raise ConfigError(f"tokenizer file {path} holds a JSON {type(doc).__name__}, not an object")
    return doc


def locate(spec: str) -> TokenizerFiles:
    """The files of the Hugging Face tokenizer at path ``spec`` (a directory or its tokenizer.json), checked."""
    path = Path(spec).expanduser()
    if not path.exists():
        hint = (" (a Hugging Face Hub name? download the tokenizer files first: `hf download NAME --include "
                "'tokenizer*' 'chat_template*' --local-dir DIR`, then give DIR)" if "/" in spec and not
                spec.startswith(("/", ".", "~")) else "")
        raise ConfigError(f"tokenizer {spec!r}: no such file or directory{hint}; {SPEC_HELP}")
    if path.is_dir():
        folder, tokenizer_json = path, path / "tokenizer.json"
        if not tokenizer_json.is_file():
            raise ConfigError(f"tokenizer directory {path} holds no tokenizer.json (a slow-only tokenizer? "
                              "`AutoTokenizer.from_pretrained(...).save_pretrained(DIR)` writes one); " + SPEC_HELP)
    else:
        folder, tokenizer_json = path.parent, path
    config_path = folder / "tokenizer_config.json"
    config_path = config_path if config_path.is_file() else None
    config = _read_json(config_path) if config_path else {}
    template_path = folder / "chat_template.jinja"
    template_path = template_path if template_path.is_file() else None
    if template_path is not None:
        try:
            template: Any = _read_bytes(template_path).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"chat template {template_path} is not UTF-8 text ({exc})") from exc
    else:
        template = config.get("chat_template")
    if not template:
        raise ConfigError(f"tokenizer {path} has no chat template: neither a chat_template.jinja beside "
                          f"{tokenizer_json.name} nor a `chat_template` in "
                          f"{config_path or folder / 'tokenizer_config.json'}; add the model's template there "
                          "(the retokenization renders messages through it)")
    return TokenizerFiles(tokenizer_json, config_path, template_path, config, template)


def _import(module: str):
    import importlib

    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")  # "PyTorch was not found": not needed here
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"a Hugging Face tokenizer needs the Python package {module!r}, which is not installed: "
                          f"{TOKENS_EXTRA}") from exc


def _arguments(value) -> dict:
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def as_served(messages: list[dict]) -> list[dict]:
    """The messages as vLLM hands them to a Hugging Face chat template (its chat preprocessing, which templates
    expect): an assistant message's empty ``tool_calls`` dropped, each call's ``arguments`` JSON text parsed into an
    object (``{}`` when empty, not JSON, or not an object). Copies; the input is not changed."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if m.get("role") != "assistant" or not isinstance(calls, list):
            out.append(m)
            continue
        m = {k: v for k, v in m.items() if k != "tool_calls"}
        if calls:
            m["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": _arguments(c["function"].get("arguments"))}}
                if isinstance(c, dict) and isinstance(c.get("function"), dict) else c for c in calls]
        out.append(m)
    return out


def _special(value) -> str | None:
    """A special token of tokenizer_config.json: a string or an AddedToken object ({"content": ...})."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class HFTokenizer:
    """A Hugging Face tokenizer from its files: ids by ``tokenizers``, the chat template by transformers."""

    def __init__(self, files: TokenizerFiles, tokenizer_id: str):
        tokenizers = _import("tokenizers")
        self.id = tokenizer_id
        self.files = files
        self.sha256 = files.sha256()
        try:
            self._tok = tokenizers.Tokenizer.from_file(str(files.tokenizer_json))
        except Exception as exc:  # the Rust loader's error (bad JSON, unknown model type)
            raise ConfigError(f"{files.tokenizer_json} is not a tokenizer the `tokenizers` library reads: "
                              f"{str(exc)[:300]}") from exc
        transformers = _import("transformers")  # ~1.5 s: only once the files are known to be good
        specials = {k: v for k in _SPECIALS if (v := _special(files.config.get(k))) is not None}
        self._chat = transformers.PreTrainedTokenizerFast(tokenizer_object=self._tok, **specials)
        self._chat.chat_template = files.template
        try:  # a template that does not even compile is the user's to fix now, not one error per sample
            self.render([{"role": "user", "content": "ping"}])
        except TemplateError as exc:
            if type(exc.__cause__).__name__ == "TemplateSyntaxError":
                raise ConfigError(f"the chat template of {tokenizer_id} does not compile: {exc}") from exc

    def encode(self, text: str) -> list[int]:
        # the rendered text carries its own special tokens: add none (as apply_chat_template(tokenize=True))
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def render(self, messages: list[dict], tools: list[dict] | None = None,
               add_generation_prompt: bool = False) -> str:
        """The template over the messages as an OpenAI-compatible server hands them to it (:func:`as_served`)."""
        try:
            return self._chat.apply_chat_template(as_served(messages), tools=tools or None, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)
        except Exception as exc:  # jinja2's TemplateError (the template's raise_exception), KeyError, TypeError...
            raise TemplateError(f"{type(exc).__name__}: {str(exc)[:300]}") from exc

    def chat_ids(self, messages: list[dict], tools: list[dict] | None = None,
                 add_generation_prompt: bool = False) -> list[int]:
        return self.encode(self.render(messages, tools, add_generation_prompt))


def load(spec: str) -> Tokenizer:
    """The tokenizer a spec names: ``builtin`` / ``builtin:shopsim-bytes-v1``, or a Hugging Face tokenizer's path
    (a directory, or its tokenizer.json); a bad spec is a ConfigError that says what to give."""
    spec = (spec or "").strip()
    if spec in ("builtin", BUILTIN_ID):
        return builtin()
    if not spec:
        raise ConfigError(f"no tokenizer given; {SPEC_HELP}")
    if spec.startswith("builtin:"):
        raise ConfigError(f"unknown built-in tokenizer {spec!r}: the one built in is {BUILTIN_ID}")
    files = locate(spec)
    where = Path(spec).expanduser().resolve()
    return HFTokenizer(files, str(where))
