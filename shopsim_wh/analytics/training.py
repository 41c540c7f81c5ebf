"""``shopsim-wh training summary``: what the training namespace holds (docs/training.md).

Per (run, source, tokenizer) of ``training_samples``: samples, episodes, tokens, trainable tokens (loss mask 1) and
aborted placeholders; and per (run, checking tokenizer) of ``training_retokenization`` (the latest check of each
sample): samples checked, identical, drifted and not renderable.
"""

from __future__ import annotations

import duckdb

from .retokenize import select_runs

NONE = ("no trainer samples yet: they come from `shopsim-wh ingest` of slime rollout dumps or from a run with "
        "`model.record_tokens: true` (docs/training.md)")

SAMPLES_SQL = """
SELECT run_id, source, coalesce(tokenizer_id, '(unknown)') AS tokenizer_id,
       count(*) AS samples, count(DISTINCT episode_id) AS episodes,
       CAST(coalesce(sum(total_length), 0) AS BIGINT) AS tokens,
       CAST(coalesce(sum(trainable_tokens), 0) AS BIGINT) AS trainable_tokens,
       count(*) FILTER (WHERE remove_sample) AS placeholders
FROM training_samples WHERE list_contains($runs, run_id)
GROUP BY ALL ORDER BY run_id, source, tokenizer_id"""

CHECKS_SQL = """
SELECT run_id, tokenizer_id, tokenizer_hash, count(*) AS checked,
       count(*) FILTER (WHERE first_mismatch IS NULL AND detail IS NULL) AS identical,
       count(*) FILTER (WHERE first_mismatch IS NOT NULL AND detail IS NULL) AS drifted,
       count(*) FILTER (WHERE detail IS NOT NULL) AS not_renderable, max(checked_at) AS last_checked
FROM training_retokenization WHERE list_contains($runs, run_id)
GROUP BY ALL ORDER BY run_id, tokenizer_id, tokenizer_hash"""


def _rows(con: duckdb.DuckDBPyConnection, query: str, params: dict) -> list[dict]:
    cur = con.execute(query, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def summary(con: duckdb.DuckDBPyConnection, runs: tuple[str, ...] = ()) -> dict:
    """{"samples": [...], "checks": [...], "totals": {...}} over ``runs`` (default every run with samples)."""
    if not runs and not con.execute("SELECT count(*) FROM training_samples").fetchone()[0]:
        return {"runs": [], "samples": [], "checks": [], "totals": dict.fromkeys(
            ("samples", "episodes", "tokens", "trainable_tokens", "placeholders"), 0), "note": NONE}
    selected = select_runs(con, runs)
    samples = _rows(con, SAMPLES_SQL, {"runs": selected})
    checks = _rows(con, CHECKS_SQL, {"runs": selected})
    totals = {k: sum(r[k] for r in samples) for k in ("samples", "episodes", "tokens", "trainable_tokens",
                                                        "placeholders")}
    return {"runs": selected, "samples": samples, "checks": checks, "totals": totals}
