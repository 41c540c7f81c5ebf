"""Helpers shared by the coding-agent readers (Claude Code, agent_multi_turn, OpenAI messages, ATIF)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ._io import READ_BLOCK, TooLarge, iter_lines, open_binary, split_lines
from ._json import RecordError, parse_record
from ._rows import jdump
from .core import UnitContext

REJECTED = object()  # yielded by read_json_document in place of a rejected element/line


def accepted_documents(ctx, docs, unit_prefix: str, check):
    """The (idx, doc) pairs of ``docs`` that parsed and pass ``check(doc) -> (error_class, message) | None``.

    A rejected document (its error row already written by read_json_document) or one that fails the check
    (its error row written here) is accounted as one dropped fidelity unit ``<unit_prefix>-<idx>``.
    """
    for idx, doc in docs:
        err = None if doc is REJECTED else check(doc)
        if err:
            ctx.error(idx, None, *err)
        if doc is REJECTED or err:
            ctx.fidelity(f"{unit_prefix}-{idx}", 1, 0, 0, 1)
            continue
        yield idx, doc

AGENT_TOOLS = {"Task", "Agent", "delegate_subtask", "dispatch_agent"}
PLANNING_TOOLS = {"TodoWrite", "todo_write", "ExitPlanMode", "EnterPlanMode", "update_plan", "write_todos",
                  "TaskCreate", "TaskUpdate", "TaskList", "TaskGet"}


def tool_type(name: str | None) -> str:
    if name in AGENT_TOOLS:
        return "agent"
    if name in PLANNING_TOOLS:
        return "planning"
    return "execution"


def render_action(name: str | None, args) -> str:
    """Compact one-line rendering of a coding-tool call, e.g. ``Bash(ls -la)``."""
    if isinstance(args, dict) and args:
        first = next(iter(args.values()))
        s = first if isinstance(first, str) else jdump(first) or ""
    elif isinstance(args, str):
        s = args
    else:
        s = ""
    s = s.replace("\n", " ")
    if len(s) > 200:
        s = s[:199] + "…"
    return f"{name}({s})"


def args_text(args) -> str | None:
    if args is None:
        return None
    return args if isinstance(args, str) else jdump(args)


def text_of(content) -> str | None:
    """Plain text of a message/tool-result content (string or list of blocks)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, str):
                parts.append(b)
            elif isinstance(b, dict):
                if b.get("type") == "text" or "text" in b:
                    parts.append(str(b.get("text", "")))
                elif b.get("type") == "image":
                    parts.append("[image]")
                else:
                    parts.append(jdump(b))
        return "\n".join(parts)
    return jdump(content)


def read_jsonl_records(ctx: UnitContext, path: Path, source_file: str) -> tuple[list[tuple[int, int, object]], int]:
    """All parseable records of a (small) JSONL file as ``(line, offset, record)``; errors become rows.

    Returns ``(records, lines_seen)``; rejected lines are already counted in ``ctx.rejected``.
    """
    out = []
    n = 0
    with ctx.watch(open_binary(path)) as f:
        for line_no, offset, line, terminated in iter_lines(f, ctx.on_bytes if path == ctx.path else None,
                                                            ctx.max_record_bytes):
            n += 1
            if type(line) is TooLarge:
                ctx.too_large(line_no, offset, line, terminated, source_file=source_file)
                continue
            try:
                rec, bom = parse_record(line, ctx.max_field_bytes)
            except RecordError as e:
                if not terminated:
                    ctx.error(line_no, offset, "torn_line", f"last line has no newline and does not parse "
                              f"({e.error_class}): a torn write, not a record", source_file=source_file)
                else:
                    ctx.error(line_no, offset + (e.at or 0), e.error_class, e.message, source_file=source_file)
                continue
            if bom:
                ctx.error(line_no, offset, "bom", "UTF-8 byte order mark before the record; stripped, record kept",
                          source_file=source_file, rejected=False)
            if not isinstance(rec, dict):
                ctx.error(line_no, offset, "wrong_type", f"a record must be a JSON object, got {type(rec).__name__}",
                          source_file=source_file)
                continue
            out.append((line_no, offset, rec))
    if n == 0:
        ctx.error(None, 0, "empty_file", "the file holds no records", source_file=source_file)
    return out, n


def read_json_document(ctx: UnitContext, path: Path) -> Iterator[tuple[int | None, object]]:
    """Records of a JSON document: a JSON array (elements, ``line`` = 0-based index), one JSON object,
    or JSONL (one object per line). Yields ``(line_or_index, record)``; errors become rows.

    The input is held whole only up to ``ctx.max_record_bytes``: a larger one is read as JSONL (streamed, each
    line capped) when its first line is a whole JSON object, else it is one ``record_too_large`` row."""
    cap = ctx.max_record_bytes
    with ctx.watch(open_binary(path)) as f:
        data = b""
        while len(data) <= cap and (more := f.read(cap + 1 - len(data))):
            data += more
            if ctx.on_bytes:
                ctx.on_bytes(len(more))
        if len(data) > cap:
            yield from _large_document(ctx, f, data)
            return
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    if len(data) != len(body):
        ctx.error(1, 0, "bom", "UTF-8 byte order mark at file start; stripped, file kept", rejected=False)
    if not body.strip():
        ctx.error(None, 0, "empty_file", "the file holds no records")
        return
    s = body.lstrip()
    lead = len(body) - len(s) + (len(data) - len(body))
    if s[:1] == b"[":
        yield from _array_elements(ctx, s, lead)
        return
    # one object over several lines, or JSONL
    try:
        doc, _ = parse_record(s, ctx.max_field_bytes)
        yield 1, doc
        return
    except RecordError as whole:
        first_nl = s.find(b"\n")
        if first_nl < 0 or s[:first_nl].strip().endswith(b"{") or s[:first_nl].strip() in (b"{",):
            cut = whole.error_class == "invalid_json" and ctx.truncation() is not None  # one document, cut short
            ctx.error(None, lead + (whole.at or 0), "truncated_file" if cut else whole.error_class, whole.message)
            return
    yield from _jsonl(ctx, split_lines(body, ctx.max_record_bytes))


def _jsonl(ctx: UnitContext, lines) -> Iterator[tuple[int, object]]:
    """The records of JSONL ``lines`` (as :func:`split_lines` yields them) read as one document's lines."""
    for i, offset, raw, terminated in lines:
        if type(raw) is TooLarge:
            ctx.too_large(i, offset, raw, terminated)
            yield i, REJECTED
            continue
        try:
            rec, _ = parse_record(raw, ctx.max_field_bytes)
        except RecordError as e:
            ctx.error(i, offset + (e.at or 0), "torn_line" if not terminated else e.error_class,
                      ("last line has no newline and does not parse: a torn write, not a record") if not terminated
                      else e.message)
            yield i, REJECTED
        else:
            yield i, rec


def _large_document(ctx: UnitContext, f, head: bytes) -> Iterator[tuple[int | None, object]]:
    """An input larger than the maximum record size: JSONL (read line by line, each capped) unless it is one JSON
    document as :func:`read_json_document` tells them apart (an array; an object whose first line opens it over
    several lines), which is too large to hold: one ``record_too_large`` row."""
    start = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    lead = len(head) - len(start.lstrip())
    first = start.lstrip()
    nl = first.find(b"\n")
    if not (first[:1] == b"[" or nl < 0 or first[:nl].strip().endswith(b"{")):
        if len(head) != len(start):
            ctx.error(1, 0, "bom", "UTF-8 byte order mark at file start; stripped, file kept", rejected=False)
        yield from _jsonl(ctx, iter_lines(_Prefixed(start, f, ctx.on_bytes), None, ctx.max_record_bytes))
        return
    size = len(head)
    while block := f.read(READ_BLOCK):
        size += len(block)
        if ctx.on_bytes:
            ctx.on_bytes(len(block))
    kind = "JSON array" if first[:1] == b"[" else "JSON document"
    ctx.error(None, lead, "record_too_large", TooLarge(size).message(ctx.max_record_bytes, f"{kind} (read whole by "
              f"the {ctx.source_format} reader)") + "; or write it as JSONL, one record per line")


class _Prefixed:
    """``head`` (bytes already read and counted), then the rest of stream ``f``; the first read hands ``head``
    back whole (at most the maximum record size + 1)."""

    def __init__(self, head: bytes, f, on_bytes=None):
        self.head, self.f, self.on_bytes = head, f, on_bytes

    def read(self, n: int) -> bytes:
        if self.head:
            b, self.head = self.head, b""
            return b
        b = self.f.read(n)
        if self.on_bytes is not None and b:
            self.on_bytes(len(b))
        return b


def _array_elements(ctx: UnitContext, s: bytes, lead: int):
    """Elements of a JSON array, each parsed strictly on its own so one bad element is one error row."""
    import json

    from ._json import _const, _Dup, _float, _int, _pairs
    try:
        text = s.decode("utf-8")
    except UnicodeDecodeError as u:
        ctx.error(None, lead + u.start, "invalid_utf8", f"invalid UTF-8 at byte {lead + u.start}: {u.reason}")
        return
    strict = json.JSONDecoder(object_pairs_hook=_pairs, parse_int=_int, parse_float=_float, parse_constant=_const)
    lenient = json.JSONDecoder()
    n, pos, i = len(text), 1, 0
    ws = " \t\r\n"
    while True:
        while pos < n and text[pos] in ws:
            pos += 1
        if pos >= n:
            ctx.error(None, lead + len(text[:pos].encode()), "torn_line", "the JSON array is not closed: truncated file")
            return
        if text[pos] == "]":
            return
        try:
            el, end = strict.raw_decode(text, pos)
        except (RecordError, _Dup, RecursionError, ValueError) as e:  # noqa: B014
            if isinstance(e, _Dup):
                e = RecordError("duplicate_key", f"duplicate key {str(e.args[0])[:80]!r} in one object")
            elif isinstance(e, RecursionError):
                e = RecordError("too_deep", "nesting too deep to parse (RecursionError)")
            elif not isinstance(e, RecordError):
                e = RecordError("invalid_json", f"invalid JSON: {e}")
            ctx.error(i, lead + len(text[:pos].encode()), e.error_class, e.message)
            yield i, REJECTED
            try:
                _, end = lenient.raw_decode(text, pos)
            except (ValueError, RecursionError):
                return  # cannot find where the element ends: the rest of the array is unreadable
        else:
            yield i, el
        i += 1
        pos = end
        while pos < n and text[pos] in ws:
            pos += 1
        if pos < n and text[pos] == ",":
            pos += 1
        elif pos < n and text[pos] == "]":
            return
        else:
            ctx.error(None, lead + len(text[:pos].encode()), "torn_line", "the JSON array is not closed: truncated file")
            return
