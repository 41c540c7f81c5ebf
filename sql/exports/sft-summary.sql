-- export: sft-summary
-- grain: one row per compaction / session summary a source recorded (Claude Code `summary` records)
-- trl: conversational prompt-completion
-- sample: prompt, completion
-- filters: status, source_format, import_fidelity, est_tokens, split, experiment, task_id, agent_role
-- params: export_window, export_max_tokens, export_include_reasoning, export_include_persona
-- materialize: export_decisions
-- description: long history -> state summary: the conversation up to the summary's leaf turn, then a fixed instruction, -> the recorded summary
-- Summaries are read from runs.provenance.claude_code.summaries ({summary, leafUuid}); the leaf is the main-agent
-- turn whose record uuids (steps.metadata.uuids) hold leafUuid, else the main agent's last turn. The prompt is
-- that turn's context, its assistant message and what answered it, then the user instruction
-- "Summarize the conversation so far." (constant, docs/export.md); the completion is the summary text.
-- DuckDB-specific: JSON path operators, unnest, JSON[] columns.
CREATE OR REPLACE VIEW export_sft_summary AS
WITH summaries AS (
    SELECT run_id, s ->> 'summary' AS summary, s ->> 'leafUuid' AS leaf_uuid, CAST(s ->> 'line' AS BIGINT) AS line
    FROM (
        SELECT run_id, unnest(CAST(json(provenance) -> '$.claude_code.summaries' AS JSON[])) AS s
        FROM runs
        WHERE run_id IN (SELECT run_id FROM export_scope) AND json_valid(provenance)
            AND json_type(json(provenance) -> '$.claude_code.summaries') = 'ARRAY'
    )
    WHERE s ->> 'summary' IS NOT NULL
),

leaf_match AS (
    SELECT s.run_id, s.line, max(st.step_idx) AS step_idx, any_value(st.episode_id) AS episode_id
    FROM summaries AS s
    JOIN steps AS st
        ON st.run_id = s.run_id AND st.agent_id = 'main' AND json_valid(st.metadata)
        AND list_contains(CAST(json(st.metadata) -> '$.uuids' AS VARCHAR[]), s.leaf_uuid)
    GROUP BY s.run_id, s.line
),

chosen AS (
    SELECT s.*, coalesce(m.step_idx, l.step_idx) AS step_idx, coalesce(m.episode_id, l.episode_id) AS episode_id
    FROM summaries AS s
    LEFT JOIN leaf_match AS m ON m.run_id = s.run_id AND m.line = s.line
    LEFT JOIN (SELECT run_id, episode_id, step_idx FROM export_decisions WHERE agent_id = 'main' AND is_last_turn) AS l
        ON l.run_id = s.run_id AND m.step_idx IS NULL
)

SELECT
    md5(d.decision_id || ':sft-summary:' || CAST(c.line AS VARCHAR)) AS sample_id,
    list_concat(d.prompt, d.completion, d.observation,
                [export_message('user', 'Summarize the conversation so far.', NULL, NULL, NULL, NULL)]) AS prompt,
    [export_message('assistant', c.summary, NULL, NULL, NULL, NULL)] AS completion,
    d.run_id, d.episode_id, d.task_id, d.agent_id, d.agent_role, d.step_idx AS leaf_step,
    d.status, d.source_format, d.import_fidelity, d.split, d.experiment,
    CAST(d.est_tokens + est_tokens_of(c.summary, NULL, NULL) AS BIGINT) AS est_tokens
FROM chosen AS c
JOIN export_decisions AS d ON d.run_id = c.run_id AND d.episode_id = c.episode_id AND d.agent_id = 'main'
    AND d.step_idx = c.step_idx;
