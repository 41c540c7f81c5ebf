"""Describe the kinds: grain, columns (DuckDB types) and one example row, read from a warehouse.

``describe_kinds(warehouse)`` serves ``shopsim-wh export --list`` and docs/export.md. Without a warehouse
holding runs it describes the kinds over a tiny one built from the ingest fixtures shipped in tests/ (source
checkouts) or from an embedded-simulator demo run (installed packages).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from .registry import OWN_COLUMNS, list_kinds

EXAMPLE_CHARS = 160  # a string value of the example row is cut to this many characters


def _short(value):
    if isinstance(value, str):
        try:
            parsed = json.loads(value) if value[:1] in "[{" else None
        except ValueError:
            parsed = None
        if parsed is not None:
            return _short(parsed)
        return value if len(value) <= EXAMPLE_CHARS else value[:EXAMPLE_CHARS] + "…"
    if isinstance(value, list):
        return [_short(v) for v in value[:3]] + (["…"] if len(value) > 3 else [])
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    return value


def tiny_warehouse(root: Path) -> Path:
    """A small warehouse for examples: the repository's ingest fixtures (Claude Code with sub-agents and a
    summary, agent_multi_turn, ATIF, a ShopSimRL v4 run directory for the shop-task kinds, a slime rollout dump
    with its ShopSimRL traces for the token kinds) when present, else two embedded-simulator episodes with their
    token ids recorded (``model.record_tokens``)."""
    repo = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
    paths = [repo / "ingest" / "agent_multi_turn", repo / "third_party" / "claude_code_session-share",
             repo / "third_party" / "atif_login-trace", repo / "ingest" / "shopsimrl_v4"]
    if all(p.exists() for p in paths):
        from ..ingest import IngestOptions, ingest

        ingest(paths, root, IngestOptions(parallel=False))
        slime = repo / "slime" / "train"
        if slime.is_dir():
            ingest([slime], root, IngestOptions(format="slime", parallel=False))
        return root
    from ..core.config import load_config
    from ..rollout import runner

    cfg_path = root.parent / "demo.yaml"
    cfg_path.write_text(json.dumps({
        "experiment": {"name": "export-demo", "seed": 1}, "tasks": {"split": "train", "sample_size": 2},
        "model": {"name": "scripted-strong", "base_url": "embedded", "record_tokens": True},
        "environment": {"url": "embedded"},
        "runtime": {"max_steps": 20, "concurrency": 2}}))
    runner.run(load_config(cfg_path), str(root))
    return root


def describe_kinds(warehouse=None) -> list[dict]:
    """[{name, grain, trl, description, sample, filters, default_where, columns: [[name, type]], example}]."""
    from ..engines.db import connect, install_exports

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(warehouse) if warehouse else None
        if root is None or not root.is_dir():
            root = tiny_warehouse(Path(tmp) / "wh")
        from .core import MATERIALIZED, _materialize

        con = connect(root)
        install_exports(con)
        con.execute("SET enable_progress_bar = false")
        con.execute("CREATE OR REPLACE TEMP TABLE export_scope AS SELECT run_id FROM runs")
        _materialize(con, MATERIALIZED)
        out = []
        for k in list_kinds():
            # a record kind's view may assemble the record itself (shopsimrl-v4): listed once, as below
            cols = [c for c in con.execute(f"DESCRIBE SELECT * FROM {k.view}").fetchall() if c[0] not in OWN_COLUMNS]
            names = [c[0] for c in cols]
            row = con.execute(f"SELECT {', '.join(names)} FROM {k.view} ORDER BY sample_id LIMIT 1").fetchone()
            out.append({"name": k.name, "grain": k.grain, "trl": k.trl, "description": k.description,
                        "sample": list(k.sample), "filters": list(k.filters), "default_where": k.default_where,
                        "record": k.record, "shapes": list(k.shape_names),
                        "columns": [[c[0], c[1]] for c in cols] + ([["record", "JSON"]] if k.record else []),
                        "example": None if row is None else {n: _short(v) for n, v in zip(names, row, strict=True)}})
        con.close()
    return out


def export_doc() -> str:
    """docs/export.md: the guide below, then every kind described over the tiny fixture warehouse."""
    return INTRO + "\n" + export_md(describe_kinds())


def export_md(kinds: list[dict]) -> str:
    """docs/export.md's generated reference section."""
    lines = ["## Kinds", ""]
    for k in kinds:
        lines += [f"### `{k['name']}`", "", k["description"], "",
                  f"- grain: {k['grain']}", f"- TRL dataset type: {k['trl']}",
                  f"- sample columns (dedupe key, privacy scan): {', '.join(k['sample'])}",
                  f"- filter columns (`--where`): {', '.join(k['filters'])}",
                  f"- default selection: `{k['default_where']}`" if k["default_where"] else "- default selection: every row",
                  *([f"- shapes: `{k['shapes'][0]}` (default; the columns below), "
                     + ", ".join(f"`{s}`" for s in k["shapes"][1:]) + f" (`--{k['name']}-shape`, docs/export_rl.md)"]
                    if k.get("shapes") else []),
                  "", "| column | type |", "| --- | --- |"]
        lines += [f"| `{n}` | {t} |" for n, t in k["columns"]]
        lines += ["", "Example row (strings cut at 160 characters, lists at 3 items):", "", "```json",
                  json.dumps(k["example"], ensure_ascii=False, indent=1, sort_keys=False, default=str), "```", ""]
    return "\n".join(lines)


INTRO = r"""# Exporting training data: `shopsim-wh export`

<!-- generated by `python -m shopsim_wh.docs` from sql/exports/*.sql headers and shopsim_wh/export/describe.py;
     do not edit by hand -->

`shopsim-wh export KIND --out DIR` writes one kind of training data from the warehouse as deterministic shards
plus `manifest.json`; `shopsim-wh export --list` prints every kind with its grain, columns and one example row.
The library call is the same: `shopsim_wh.export.export(kind, warehouse, out, ...)`, its options an
`ExportOptions` value or its fields as keyword arguments; `shopsim_wh.export.explain(kind, warehouse, ...)` returns
the plan.

```text
shopsim-wh export sft-action --out data/sft-action                      # default selection of the kind
shopsim-wh export sft-action --out d --runs RUN_A --runs RUN_B --window 4 --max-tokens 8000
shopsim-wh export ntp --out d --where "source_format = 'claude-code'" --format jsonl
shopsim-wh export sft-trajectory --out d --summary-format json --quiet  # one JSON object on stdout
shopsim-wh export shopsimrl-v4 --explain                                # the plan; nothing is written
```

## Options

| option | meaning |
| --- | --- |
| `--runs ID` (repeat), `--experiment NAME` | the runs read (default: every run) |
| `--where SQL` | one boolean expression over the kind's filter columns (checked on DuckDB's parse tree: no `;`, no subquery, no other column); it replaces the kind's default selection (`--where true` keeps every row) |
| `--format parquet\|jsonl` | shard format; message and tool columns are Parquet's JSON logical type (`datasets` decodes each message to a dict whose `tool_calls[].function.arguments` is an object) |
| `--shard-rows N` | shards = ceil(rows / N); a row goes to shard `floor(h * shards / 2^32)`, `h` the first 8 hex digits of `md5(episode_id)` (an episode never spans shards), rows ordered by `sample_id` within a shard |
| `--window K`, `--max-tokens N` | context reconstruction: the global prefix (always kept) plus the last K turns, then whole turns dropped oldest first until the estimated tokens fit N (estimate: ceil(chars / 4) + 4 per message, the rule of `ir_context`) |
| `--allow-test` | read runs holding test-split episodes (refused otherwise) |
| `--include-reasoning`, `--include-persona` | include reasoning content / the user persona (excluded by default) |
| `--gamma` | discount for return-to-go (offline-rl) |
| `--prm-shape steps\|trl-stepwise` | prm: its own stepwise schema (default) or TRL <= 1.13's `prompt` / `completions` / `labels` ([export_rl.md](export_rl.md#prm)) |
| `--summary-format text\|json` | how the result is printed (`--format` is the shard format) |
| `--progress/--quiet` | progress bar on stderr |
| `--explain` | print the plan (below) and write nothing; with `--summary-format json`, as one object |

## How an export runs: the plan (`--explain`)

An export is planned once, before a row is computed (`shopsim_wh/export/plan.py`): the runs in scope, the filter
and the part of it applied to the planned episodes, the building blocks, the batches, the shards when they are known
up front, and the **strategy**, with the reason it was chosen. The executors take that plan; `--explain` prints it:

```text
$ shopsim-wh export shopsimrl-v4 --explain
export shopsimrl-v4 (one row per episode: the episode's shopsimrl-episode-v4 record ...)
  runs: 1 (demo)
  where: (none)
  planned on: every episode in scope -> 10000 episode(s)
  strategy: file-groups
  why: record kind shopsimrl-v4: one row per episode and no filter cut the plan, so the shards are known up front; the warehouse's files fall into 5 batches of whole file groups, each read alone
  batches: 5 of <= 2000 episodes, 2 at a time
  shards: 1 (target 100000 rows each), format parquet
  building blocks: export_episodes, export_messages, export_agent_tools, export_step_tools
```

| strategy | kinds | warehouse shape | how |
| --- | --- | --- | --- |
| `records` | record kinds (`shopsimrl-v4`, `atif`) when the shard count is known before the rows (no `--where`, one applied whole to the plan, or every planned episode fits one shard) | one batch (read in place), a connection passed in, or a **compacted** warehouse (its files hold too many episodes each for a batch) | batches are ranges of the writer's order, computed two at a time and written once each as they come; with more than one batch the base rows are first copied into one folder per batch |
| `file-groups` | the same | a warehouse **as the runner and ingest write it** (each commit's files hold a few whole episodes) | each batch reads its own files, nothing copied; the batches' sorted runs are merged in the writer's order |
| `spill` | every other kind (rows per step, per pair, per task), and a record kind whose `--where` leaves its row count unknown | any | rows computed per batch into hash buckets, counted (which sizes the shards and finds exact duplicates), then sharded in `sample_id` order |

All three give the same bytes for the same rows (tested); `bench/bench_export_strategies.py` measures them against
each other ([performance.md](performance.md#export-strategies)).

## Guarantees

- **Deterministic**: the same snapshot and command give byte-identical shards (fixed row groups, sorted rows);
  shards are written under `.tmp-` names and renamed, `manifest.json` last.
- **Manifest**: kind, sha256 of the kind's SQL, exporter version, warehouse snapshot, source runs with their
  fingerprints, filters and parameters, rows selected / written / duplicates removed, rows, bytes and sha256 per
  shard, the privacy policy applied and the decontamination record.
- **Privacy by default**: no reasoning (`reasoning_content`, v4 `reasoning`, ATIF `reasoning_content`), no persona
  (the `用户个人文档：` section of system prompts, `user_persona` / `persona` fields) unless a flag includes them;
  nothing derived from the private goal exists in any export (it is never stored; goal-derived columns such as
  `right_product` are not exported).
- **No test leakage**: runs holding test-split episodes are refused without `--allow-test`. The manifest's
  `decontamination` says which splits were exported, whether the export is train-only, and lists any val/test
  task (of each shop run's split manifest, matched by hash) found in it; `clean` is true for a train-only
  export with none.
- **Exact duplicates** of the kind's sample columns are removed across the whole export (the row with the
  smallest `sample_id` stays) and counted.
- **Bounded memory, one evaluation**: the kind is computed once, per batch of about 500 episodes (4,000 for
  `preference`, whose view stack costs ~0.5 CPU s to plan per batch, 2,000 for the record kinds `shopsimrl-v4`
  and `atif`, ~0.15 CPU s: the kind header's `-- batch-episodes:`; `SHOPSIM_WH_EXPORT_BATCH_EPISODES` overrides
  them; episodes by md5 of their id, or whole tasks for the kinds
  that compare the rollouts of a task: `preference`, `prm`), two batches at a time (`SHOPSIM_WH_EXPORT_THREADS`, each on its
  own DuckDB cursor: one batch's queries are too small for DuckDB to spread over cores). Each batch's rows are
  routed by a hash of their episode to spill buckets (one Parquet file per hash range, about 128 MB of rows
  each: `SHOPSIM_WH_EXPORT_BUCKET_BYTES`) in a private temporary directory (removed afterwards). The rows are
  then counted (which sizes the shards; duplicates are found by the 128-bit md5 of the sample columns, held as
  two 64-bit numbers, so the count keeps 16 bytes and a count per row however wide the samples are) and read back
  shard by shard (a shard is a range of the same hash: the buckets it overlaps), each shard sorted by
  `sample_id`, so one shard is open at a time: every row is written and read once, so the cost grows linearly with the warehouse and the memory does not grow with the shards.
  The shards do not depend on the batch size, the bucket size or the order batches finish in (tested), and
  peak memory follows the batch and the bucket, not the warehouse. `SHOPSIM_WH_EXPORT_MEMORY` (e.g. `2GB`)
  caps DuckDB's memory. The record kinds (`shopsimrl-v4`, `atif`: one row per episode, its `sample_id` the md5
  of the episode) skip the spill: their batches are ranges of (shard, `sample_id`), computed two at a time but handed to
  the shard writer in order, so each row is written once, as it comes (at most three batches held); a `--where`
  with a condition beyond the episode facts (below), selecting from more episodes than one shard holds, takes the
  spill (the shard count is known only after it).
- **Record kinds read the warehouse's own files** (`export/groups.py`). A batch of the other kinds reads a copy
  of its base rows (one pass over the warehouse routes every row to its batch's folder). The runner and ingest
  write each episode whole into the files of a commit, so a record kind's batches are instead whole **file
  groups** (the files that share an episode, closed over every table and attempt): each batch's base views are
  rebuilt over its own files, and nothing is copied. Its sorted rows go to a run file in the private temporary
  directory; the runs are then merged in the writer's order (for JSONL, each line read into reused buffers,
  hashed and written on two threads). Same bytes as the copy (tested). A warehouse whose groups hold more than
  twice a batch's episodes (one compacted into a few large files) takes the copy. 100,000 runner episodes:
  ~132 against ~150 CPU s. The price is temporary disk: until merged, the runs hold about the output's bytes
  (4.65 GB there), where the Snappy copy held about a quarter of that.
- **Episode-level `--where` terms go first.** The top-level `AND` terms of a `--where` (or of the kind's default
  selection) that name only episode facts (`status`, `reward`, `r_success`, `r_strict`, `r_loose`, `success`,
  `source_format`, `split`, `experiment`, `task_id`) are applied to the episodes before any row is built, so the
  batches hold only episodes that can give a row (kinds whose rows compare a task's rollouts, `preference` and
  `prm`, take the whole warehouse). The whole expression is still applied to the rows: the output is the same,
  only cheaper (a 10% `task_id % 10 = 0` selection of a 10,000-episode `sft-action` export: 20.0 -> 6.1 CPU s).

## Selection rules

- `success` (every kind's filter column): a source with a reward (shop runs, tau-bench, ATIF with a final
  reward) succeeds iff `r_success = 1` (reward_detail's, or reward >= 1 for a task reward only); a reward-less
  trace (Claude Code sessions, agent_multi_turn without a reward) is taken as a demonstration: success iff the
  episode completed.
- SFT kinds select `status = 'completed' AND success` by default; decision-level kinds also leave out turns that
  broke the tool protocol or hit the length limit (`protocol_error` / `policy_failure`).
- Roles: OpenAI's `developer` is written as `system`; any other non-standard role (agent_multi_turn's
  `observation` notes) as `user`, where the model read it.

## Tool lists

Every kind with a `tools` column lists each tool name **once per row** (a chat template renders one definition
per schema: four `click`s with one name is a malformed tool list a model would learn). ShopSimRL offers one
`click` schema per page (its `value` enum lists the page's clickables), so a trajectory is offered several
schemas under one name. The rule, by what the row trains:

- **Per-step kinds** (`sft-action`, `sft-observation`, `sft-outcome`, `sft-subagent`, `sft-reasoning`, `kto`,
  `offline-rl`, `reasoning-requests`, `preference` at step level): the schemas offered at the step being trained
  on, in the order offered (`export_step_tools`): the model chose from exactly those values. A step's list that
  names a tool twice keeps the first schema.
- **Trajectory-level kinds** (`sft-trajectory`, `prm`, `preference` at trajectory level, and the `## tools`
  section of `ntp`): one schema per name, by name (`export_agent_tools`): the first-offered schema (earliest
  step, then position in the step's list; by `schema_hash` for a source without per-step lists) with each
  top-level property's string `enum` replaced by the union of that property's string enums over every schema of
  the name, values in order of first offer. One tool list serves every turn of the row, so it must admit every
  value any turn could pick; other differences between the schemas keep the first-offered schema's. A trajectory
  `preference` pair lists the chosen rollout's tools (the rejected rollout's own page values are not added).
  A source that records no per-step list gets the same merged list at every step.
- **Record kinds** (`shopsimrl-v4`, `atif`) have no `tools` column: a record keeps the per-step tools of its
  format as they were offered, so it stays byte-equal to what `shopsim-wh dump` writes and the original
  format's readers expect.

The merge is deterministic (fixed orders, no hash-dependent grouping), so exports stay byte-reproducible; the
union is patched into the stored parameters text, so the rest of the schema keeps its bytes.

## ntp trace format

One document per agent trajectory (main agents and sub-agents separately), sections separated by a blank line:

```text
<trace source="shopsim-wh-runner" episode="task-000042__sample-000" agent="main" role="main">
## tools
- search: ...description...
  parameters: {...json schema...}
## system
...system prompt (persona section removed unless --include-persona)...
## user
...task and first page...
## turn 0
...assistant text...
thinking: ...only with --include-reasoning...
call search {"query": "..."}
## tool
...what answered the call...
## outcome
status=completed reward=1.0 success=true
</trace>
```

## Record kinds

`shopsimrl-v4` and `atif` write one whole episode per row (column `record`) or JSONL line. Their views assemble
every record of a batch at once in SQL (sql/exports/shopsimrl-v4.sql, atif.sql: messages, steps, tool calls,
tools, observations, rewards, sub-agent trajectories as JSON text with the dump writers' key order); Python
streams the rows, re-spells the few numbers and escapes DuckDB writes differently from orjson, applies the
privacy policy, and builds with the dump writer the rare episodes a view leaves to it (column `record_fallback`:
residuals of ingested records kept in `episodes.source_extra`, conflicting payload keys, `model_extra`, lenient
JSON texts, sub-agents that spawn sub-agents). With both `--include-reasoning` and `--include-persona` the record
equals byte for byte what `shopsim-wh dump` writes for the episode; `shopsim-wh dump` stays for single episodes
and ShopSimRL run directories.

## Building blocks (`sql/exports/00_*.sql`)

`export_scope` (the runs read), `export_episodes` (outcome and selection facts), `export_messages` (every agent's
conversation as OpenAI message JSON, privacy applied), `export_agent_tools` (one merged schema per tool name of
an agent), `export_step_tools` (tools offered per decision) and
`export_decisions` (one row per decision with its reconstructed `prompt`, `completion`, `observation`, `tools`
and token estimates). A kind is one `sql/exports/<kind>.sql` whose header (`-- export:`, `grain:`, `trl:`,
`sample:`, `filters:`, `default-where:`, `description:`, optional `params:`, `materialize:`, `record:`,
`batch:` (`task` keeps a task's episodes in one batch; `all`: one batch, the token kinds), `batch-episodes:` (the kind's batch size), `decisions:`
(a view listing the only decisions whose context `export_decisions` computes for the kind: `preference` needs
its pairs' decisions only), `shape:` and `shape-<name>: view=...; trl=...; sample=...` (the kind's default shape
and its others: the same rows in other columns, from another view of the file, `--prm-shape`)) the registry reads. `connect()` does not install this layer (only exports read it);
`shopsim_wh.engines.db.install_exports(con)` adds it to a connection for queries by hand.
"""
