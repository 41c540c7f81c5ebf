"""``shopsim-wh training retokenize``: do the stored token ids of the trainer samples still equal a retokenization of
their text through a tokenizer's chat template? (issue 31, docs/training.md)

Per trainer sample (view ``training_samples`` with its ids from ``training_tokens``):

* **the text**: the messages the sample covers, from the ``messages`` view of the sample's agent: every message up to
  the last one its spans name (``training_spans.message_idx``, and the tool answers after it when the last span is
  an ``inserted`` one; a sample's ids always start at the conversation's beginning, so it covers a prefix), else up
  to the last turn its spans name (``step_idx``, through ``steps.prompt_msg_count``: slime's ``mask-runs`` spans);
  the tools are the ones offered at the sample's first model turn (its prompt was rendered with them;
  ``steps.tool_schema_hashes`` into ``tools``). A sample whose last model turn appended no message (cut off by
  ``generation_length``) ends with that turn's sampled text (ShopSimRL's ``model.raw_output``, else the turn's
  reasoning and text) right after the generation prompt. A sample without spans falls back to its own ``prompt``
  (text, or a JSON message list rendered with the generation prompt) followed by its ``response``.
* **the ids**: the tokenizer's chat template over those messages and tools (:meth:`Tokenizer.chat_ids`), also with
  the generation prompt when the last message is not the assistant's (a sample may end on a prompt for a turn that
  never came). Where the rendering goes on past the length of the stored ids by whitespace only (ChatML's newline
  after the final ``<|im_end|>``, which no model samples), that tail is not counted.
* **the answer**: one ``training_retokenization`` row per (sample, tokenizer): the two lengths and the first
  position where they differ (NULL: identical; the shorter length when one is a prefix of the other), or ``detail``
  when the sample could not be rendered (no messages, a template error). Aborted placeholders (``remove_sample``,
  ids ``[0, 0]``) have no text and are not checked.

Each invocation adds a newer check (``checked_at``); the view ``training_retokenization`` keeps the latest per
``tokenizer_hash`` and ``training_token_drift`` lists the samples that differ or could not be rendered.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import duckdb
import numpy as np
import pyarrow as pa

from .. import __version__
from ..core.errors import ShopsimError
from ..core.tokenizer import TemplateError, Tokenizer
from ..engines.db import connect
from .gate import resolve_run

BATCH_SAMPLES = 512  # samples whose context is read in one set of queries
EXAMPLES = 5  # drifted samples the result shows with the text around the first mismatch
WINDOW = 12  # tokens either side of it
Progress = Callable[[int, int], None]


class RetokenizeError(ShopsimError):
    """Bad input to ``training retokenize``: an unknown run, no trainer samples to check."""


@dataclass(frozen=True)
class RetokenizeOptions:
    """``runs``: run ids or experiment names to check (empty: every run with trainer samples); ``limit``: check at
    most this many samples (in key order)."""

    runs: tuple[str, ...] = ()
    limit: int | None = None


@dataclass(frozen=True)
class Check:
    """One sample against one tokenizer."""

    stored_tokens: int
    retokenized_tokens: int | None = None
    first_mismatch: int | None = None
    detail: str | None = None
    retokenized: tuple[int, ...] = ()

    @property
    def identical(self) -> bool:
        return self.detail is None and self.first_mismatch is None


@dataclass
class RetokenizeResult:
    tokenizer_id: str
    tokenizer_hash: str
    runs: list[str] = field(default_factory=list)
    checked: int = 0
    identical: int = 0
    drifted: int = 0
    not_renderable: int = 0
    placeholders: int = 0
    other_tokenizer: int = 0  # checked samples whose ids were recorded with another tokenizer (tokenizer_hash)
    load_id: str | None = None
    seconds: float = 0.0
    examples: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


# --- the comparison (pure) ---------------------------------------------------------------------------------------
def first_mismatch(stored: list[int], other: list[int]) -> int | None:
    """The first position where the two differ; the shorter length when one is a prefix of the other; None when
    equal."""
    if stored == other:
        return None
    n = min(len(stored), len(other))
    differ = np.flatnonzero(np.asarray(stored[:n], dtype=np.int64) != np.asarray(other[:n], dtype=np.int64))
    return int(differ[0]) if differ.size else n


def _without_glue(stored: list[int], ids: list[int], tok: Tokenizer) -> list[int]:
    """``ids`` cut to the length of ``stored`` when they only go on by whitespace (the template's newline after the
    last turn, which no model samples)."""
    n = len(stored)
    if len(ids) > n and not tok.decode(ids[n:]).strip():
        return ids[:n]
    return ids


def compare(stored: list[int], candidates: Iterable[list[int]], tok: Tokenizer) -> Check:
    """The stored ids against each candidate rendering: the first identical one, else the one that agrees longest."""
    best: Check | None = None
    for ids in candidates:
        ids = _without_glue(stored, ids, tok)
        check = Check(len(stored), len(ids), first_mismatch(stored, ids), retokenized=tuple(ids))
        if check.first_mismatch is None:
            return check
        if best is None or check.first_mismatch > (best.first_mismatch or 0):
            best = check
    return best or Check(len(stored), detail="nothing to render")


@dataclass(frozen=True)
class SampleText:
    """What one sample's ids are compared with: its messages and tools, or (no spans) its prompt and response."""

    messages: list[dict] | None = None
    tools: list[dict] | None = None
    tail: str | None = None  # the sampled text of a last turn that appended no message, after the generation prompt
    prompt: str | None = None
    response: str | None = None
    detail: str | None = None  # why there is nothing to render


def check_sample(tok: Tokenizer, stored: list[int], text: SampleText) -> Check:
    """Render ``text`` through ``tok`` and compare with ``stored``."""
    if text.detail is not None:
        return Check(len(stored), detail=text.detail)
    try:
        if text.tail is not None:  # one rendering: the turn was sampled right after the generation prompt
            candidates = [tok.encode(tok.render(text.messages, text.tools, add_generation_prompt=True) + text.tail)]
        elif text.messages is not None:
            candidates = [tok.chat_ids(text.messages, text.tools)]
            if text.messages[-1].get("role") != "assistant":
                candidates.append(tok.chat_ids(text.messages, text.tools, add_generation_prompt=True))
        else:
            candidates = [tok.encode(_prompt_text(tok, text.prompt) + (text.response or ""))]
    except TemplateError as exc:
        return Check(len(stored), detail=f"the chat template cannot render the sample's messages: {exc}")
    return compare(stored, candidates, tok)


def _prompt_text(tok: Tokenizer, prompt: str | None) -> str:
    """A sample's prompt as text: itself, or (slime's list of messages, stored as JSON) rendered for generation."""
    msgs = _json(prompt) if prompt and prompt.lstrip().startswith("[") else None
    if isinstance(msgs, list) and msgs and all(isinstance(m, dict) and "role" in m for m in msgs):
        return tok.render(msgs, None, add_generation_prompt=True)
    return prompt or ""


# --- the context of a sample -------------------------------------------------------------------------------------
def _json(text: str | None):
    if text is None:
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None


def _message(row: dict) -> dict:
    """A ``messages`` row as the OpenAI message the model was sent."""
    msg: dict = {"role": row["role"], "content": row["content"]}
    if row.get("reasoning_content") is not None:
        msg["reasoning_content"] = row["reasoning_content"]
    calls = _json(row.get("tool_calls"))
    if calls:
        msg["tool_calls"] = calls
    for key in ("tool_call_id", "name"):
        if row.get(key) is not None:
            msg[key] = row[key]
    return msg


def _tool(row: dict) -> dict:
    """A ``tools`` row as the OpenAI function schema it was offered as."""
    params = _json(row["parameters"])
    fn: dict = {"name": row["name"]}
    if row.get("description") is not None:
        fn["description"] = row["description"]
    fn["parameters"] = params if params is not None else row["parameters"]
    return {"type": "function", "function": fn}


@dataclass
class AgentContext:
    """One agent's conversation, turns and tools (what every sample of that agent is rendered from)."""

    messages: list[dict] = field(default_factory=list)
    steps: dict[int, dict] = field(default_factory=dict)  # step_idx -> {prompt_msg_count, tool_schema_hashes}
    tools: dict[str, dict] = field(default_factory=dict)  # schema_hash -> OpenAI schema

    def covered_end(self, spans: list[dict]) -> int | None:
        """The last message index a sample's spans cover (None: the spans name neither a message nor a turn)."""
        named = [s["message_idx"] for s in spans if s["message_idx"] is not None]
        if named:
            end = max(named)
            if spans[-1]["kind"] == "inserted" and spans[-1]["message_idx"] == end:  # an inserted span names its
                while end + 1 < len(self.messages) and self.messages[end + 1]["role"] != "assistant":  # first one
                    end += 1
            return end
        turns = [s for s in spans if s["step_idx"] is not None]
        if not turns:
            return None
        last = max(s["step_idx"] for s in turns)
        if not any(s["step_idx"] == last and s["kind"] == "inserted" for s in turns):
            count = (self.steps.get(last) or {}).get("prompt_msg_count")
            return count if count is not None else None  # the turn's assistant message comes right after its prompt
        later = [st["prompt_msg_count"] for i, st in self.steps.items() if i > last and st["prompt_msg_count"] is not None]
        return (min(later) if later else len(self.messages)) - 1  # the answers up to the next turn's prompt

    def tools_at(self, spans: list[dict], end: int) -> list[dict] | None:
        """The tools offered at the sample's first turn (its prompt was rendered with them)."""
        turns = [s["step_idx"] for s in spans if s["step_idx"] is not None]
        if turns:
            step = min(turns)
        else:  # the last turn whose prompt the covered messages hold
            prior = [i for i, st in self.steps.items()
                     if st["prompt_msg_count"] is not None and st["prompt_msg_count"] <= end]
            step = max(prior) if prior else None
        hashes = _json((self.steps.get(step) or {}).get("tool_schema_hashes")) if step is not None else None
        if isinstance(hashes, list):
            listed = [self.tools[h] for h in hashes if h in self.tools]
            return listed or None
        by_name: dict[str, dict] = {}
        for schema in self.tools.values():  # no per-turn list recorded: one schema per name, by name
            by_name.setdefault(schema["function"]["name"], schema)
        return [by_name[n] for n in sorted(by_name)] or None

    def sampled_text(self, step: int) -> str | None:
        """What the model sampled at a turn that appended no message (a ``generation_length`` turn): ShopSimRL's
        ``model.raw_output`` (the decoded response tokens, ``steps.metadata.model_extra``), else the turn's
        reasoning and text (what the runner keeps of a cut-off answer); None when the step holds neither."""
        st = self.steps.get(step) or {}
        extra = (_json(st.get("metadata")) or {}).get("model_extra") if st.get("metadata") else None
        if isinstance(extra, dict) and isinstance(extra.get("raw_output"), str):
            return extra["raw_output"]
        if st.get("reasoning") is None and st.get("content") is None:
            return None
        return (st.get("reasoning") or "") + (st.get("content") or "")

    def _unmessaged_turn(self, spans: list[dict]) -> int | None:
        """The turn of the sample's last model span when that turn appended no assistant message, else None."""
        last = next((s for s in reversed(spans) if s["kind"] == "model"), None)
        if last is None or last["step_idx"] is None or last["message_idx"] is not None or spans[-1] is not last:
            return None
        n = (self.steps.get(last["step_idx"]) or {}).get("prompt_msg_count")
        if n is None or (n < len(self.messages) and self.messages[n]["role"] == "assistant"):
            return None
        return last["step_idx"]

    def text(self, sample: dict, spans: list[dict]) -> SampleText:
        turn = self._unmessaged_turn(spans) if self.messages else None
        if turn is not None:
            n, tail = self.steps[turn]["prompt_msg_count"], self.sampled_text(turn)
            if tail is None:
                return SampleText(detail=f"the sample ends with turn {turn}, which appended no message (a "
                                         "generation_length turn) and whose sampled text is not stored")
            return SampleText(messages=self.messages[:n], tools=self.tools_at(spans, n - 1), tail=tail)
        end = self.covered_end(spans)
        if end is None:
            if sample.get("prompt") is None and sample.get("response") is None:
                return SampleText(detail="the sample names no message or turn (no spans) and has no prompt or "
                                         "response text")
            return SampleText(prompt=sample.get("prompt"), response=sample.get("response"))
        if not self.messages:
            return SampleText(detail=f"no messages stored for agent {sample['agent_id']!r} of this episode (the "
                                     "spans name messages the warehouse does not hold)")
        msgs = [m for i, m in enumerate(self.messages) if i <= end]
        return SampleText(messages=msgs, tools=self.tools_at(spans, end))


# --- reading the warehouse in batches ----------------------------------------------------------------------------
def _rows(con: duckdb.DuckDBPyConnection, query: str, params: dict | None = None) -> list[dict]:
    cur = con.execute(query, params or {})
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def select_runs(con: duckdb.DuckDBPyConnection, names: tuple[str, ...]) -> list[str]:
    """The runs to check: each name resolved (a run id, or the one run of an experiment), each known and holding
    trainer samples; every run with samples when no name is given."""
    with_samples = [r[0] for r in con.execute(
        "SELECT DISTINCT run_id FROM training_samples ORDER BY run_id").fetchall()]
    if not names:
        if not with_samples:
            raise RetokenizeError("the warehouse holds no trainer samples: they come from `shopsim-wh ingest` of "
                                  "slime rollout dumps (--save-debug-rollout-data) or from a run with "
                                  "`model.record_tokens: true` (docs/training.md)")
        return with_samples
    runs = []
    for name in names:
        run = resolve_run(con, name)
        if not con.execute("SELECT 1 FROM runs WHERE run_id = $r", {"r": run}).fetchone():
            raise RetokenizeError(f"no run {name!r} in the warehouse; runs with trainer samples: "
                                  f"{', '.join(with_samples) or '(none)'} (`shopsim-wh runs list` lists every run)")
        if run not in with_samples:
            raise RetokenizeError(f"run {run!r} has no trainer samples; runs that have: "
                                  f"{', '.join(with_samples) or '(none)'} (docs/training.md says what writes them)")
        runs.append(run)
    return list(dict.fromkeys(runs))


def _sample_keys(con: duckdb.DuckDBPyConnection, runs: list[str], limit: int | None) -> pa.Table:
    query = ("SELECT run_id, episode_id, agent_id, sample_idx FROM training_samples WHERE list_contains($runs, run_id) "
             "ORDER BY run_id, episode_id, agent_id, sample_idx")
    params: dict = {"runs": runs}
    if limit is not None:
        query += " LIMIT $limit"
        params["limit"] = int(limit)
    rows = con.execute(query, params).fetchall()  # (execute: resolve_run may have left a result open)
    names = ("run_id", "episode_id", "agent_id", "sample_idx")
    return pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)},
                    schema=pa.schema([(n, pa.int32() if n == "sample_idx" else pa.string()) for n in names]))


@dataclass
class Batch:
    """A batch of samples with everything needed to render them."""

    samples: list[dict]
    spans: dict[tuple, list[dict]]
    agents: dict[tuple, AgentContext]


def read_batch(con: duckdb.DuckDBPyConnection, keys: pa.Table) -> Batch:
    """The samples of ``keys`` with their ids, spans, and their agents' messages, turns and tools."""
    con.register("retok_keys", keys)
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE retok_agents AS "
                    "SELECT DISTINCT run_id, episode_id, agent_id FROM retok_keys")
        samples = _rows(con, """
            SELECT s.run_id, s.episode_id, s.attempt, s.agent_id, s.sample_idx, s.prompt, s.response,
                   s.tokenizer_hash, coalesce(s.remove_sample, false) AS remove_sample, t.token_ids
            FROM training_samples AS s
            SEMI JOIN retok_keys AS k USING (run_id, episode_id, agent_id, sample_idx)
            LEFT JOIN training_tokens AS t USING (run_id, episode_id, attempt, agent_id, sample_idx)
            ORDER BY s.run_id, s.episode_id, s.agent_id, s.sample_idx""")
        spans: dict[tuple, list[dict]] = defaultdict(list)
        for s in _rows(con, """
                SELECT run_id, episode_id, agent_id, sample_idx, span_idx, kind, step_idx, message_idx
                FROM training_spans SEMI JOIN retok_keys USING (run_id, episode_id, agent_id, sample_idx)
                ORDER BY run_id, episode_id, agent_id, sample_idx, span_idx"""):
            spans[(s["run_id"], s["episode_id"], s["agent_id"], s["sample_idx"])].append(s)
        agents: dict[tuple, AgentContext] = defaultdict(AgentContext)
        for m in _rows(con, """
                SELECT run_id, episode_id, agent_id, msg_idx, role, content, reasoning_content, tool_calls,
                       tool_call_id, name
                FROM messages SEMI JOIN retok_agents USING (run_id, episode_id, agent_id)
                ORDER BY run_id, episode_id, agent_id, msg_idx"""):
            agents[(m["run_id"], m["episode_id"], m["agent_id"])].messages.append(_message(m))
        for st in _rows(con, """
                SELECT run_id, episode_id, agent_id, step_idx, prompt_msg_count, tool_schema_hashes, content,
                       reasoning, metadata
                FROM steps SEMI JOIN retok_agents USING (run_id, episode_id, agent_id)"""):
            agents[(st["run_id"], st["episode_id"], st["agent_id"])].steps[st["step_idx"]] = st
        for t in _rows(con, """
                SELECT run_id, episode_id, agent_id, schema_hash, name, description, parameters
                FROM tools SEMI JOIN retok_agents USING (run_id, episode_id, agent_id)
                ORDER BY run_id, episode_id, agent_id, schema_hash"""):
            agents[(t["run_id"], t["episode_id"], t["agent_id"])].tools.setdefault(t["schema_hash"], _tool(t))
    finally:
        con.unregister("retok_keys")
    return Batch(samples, spans, agents)


# --- the command -------------------------------------------------------------------------------------------------
def _example(sample: dict, check: Check, tok: Tokenizer) -> dict:
    """Where a drifted sample differs, as text (both sides decoded by the checking tokenizer)."""
    at, stored = check.first_mismatch or 0, sample["token_ids"]

    def window(ids) -> str | None:
        try:
            return tok.decode(list(ids[max(0, at - WINDOW):at + WINDOW]))
        except Exception:  # ids another tokenizer wrote may be outside this vocabulary
            return None

    return {"run_id": sample["run_id"], "episode_id": sample["episode_id"], "agent_id": sample["agent_id"],
            "sample_idx": sample["sample_idx"], "first_mismatch": check.first_mismatch,
            "stored_tokens": check.stored_tokens, "retokenized_tokens": check.retokenized_tokens,
            "stored_text": window(stored), "retokenized_text": window(check.retokenized)}


def check_batch(tok: Tokenizer, batch: Batch, res: RetokenizeResult) -> list[dict]:
    """The ``training_retokenization`` rows of a batch (without lineage); ``res`` counts them."""
    rows = []
    for s in batch.samples:
        if s["remove_sample"]:
            res.placeholders += 1
            continue
        key = (s["run_id"], s["episode_id"], s["agent_id"], s["sample_idx"])
        if s["token_ids"] is None:
            check = Check(0, detail="no token ids stored for the sample (no training_tokens row)")
        else:
            agent = batch.agents.get(key[:3]) or AgentContext()
            check = check_sample(tok, list(s["token_ids"]), agent.text(s, batch.spans.get(key, [])))
        res.checked += 1
        res.other_tokenizer += s["tokenizer_hash"] is not None and s["tokenizer_hash"] != tok.sha256
        if check.detail is not None:
            res.not_renderable += 1
        elif check.identical:
            res.identical += 1
        else:
            res.drifted += 1
            if len(res.examples) < EXAMPLES:
                res.examples.append(_example(s, check, tok))
        rows.append({"run_id": s["run_id"], "episode_id": s["episode_id"], "attempt": s["attempt"],
                     "agent_id": s["agent_id"], "sample_idx": s["sample_idx"], "tokenizer_id": tok.id,
                     "tokenizer_hash": tok.sha256, "stored_tokens": check.stored_tokens,
                     "retokenized_tokens": check.retokenized_tokens, "first_mismatch": check.first_mismatch,
                     "detail": check.detail})
    return rows


def _commit(root: str | os.PathLike, rows: list[dict], started: datetime) -> str:
    """One atomic commit: the rows of every run, and a ``loads`` row per run naming this invocation."""
    from ..core.schema import to_arrow
    from ..store.warehouse import Warehouse

    load_id, now = uuid.uuid4().hex, datetime.now(UTC)
    per_run: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        run = row.pop("run_id")
        per_run[run].append({**row, "checked_at": now, "load_id": load_id})
    batches = []
    for run, run_rows in sorted(per_run.items()):
        load = {"command": "retokenize", "started_at": started, "finished_at": now, "episodes_written": 0,
                "status": "complete", "tool_version": __version__, "load_id": load_id}
        batches += [("training_retokenization", run, to_arrow("training_retokenization", run_rows)),
                    ("loads", run, to_arrow("loads", [load]))]
    with Warehouse(root).writer() as w:
        w.commit(batches)
    return load_id


def retokenize(root: str | os.PathLike, tok: Tokenizer, options: RetokenizeOptions = RetokenizeOptions(),
               progress: Progress | None = None) -> RetokenizeResult:
    """Check the trainer samples of ``options.runs`` against ``tok`` and store one row per sample (one commit)."""
    t0, started = time.perf_counter(), datetime.now(UTC)
    con = connect(root)
    runs = select_runs(con, options.runs)
    keys = _sample_keys(con, runs, options.limit)
    res = RetokenizeResult(tokenizer_id=tok.id, tokenizer_hash=tok.sha256, runs=runs)
    rows: list[dict] = []
    for start in range(0, keys.num_rows, BATCH_SAMPLES):
        rows += check_batch(tok, read_batch(con, keys.slice(start, BATCH_SAMPLES)), res)
        if progress is not None:
            progress(min(start + BATCH_SAMPLES, keys.num_rows), keys.num_rows)
    con.close()
    if rows:
        res.load_id = _commit(root, rows, started)
    res.seconds = time.perf_counter() - t0
    return res
