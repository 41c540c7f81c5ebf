-- export: sft-outcome
-- grain: one row per main-agent trajectory (episode)
-- trl: conversational prompt-completion
-- sample: prompt, completion, tools
-- filters: status, reward, r_success, r_strict, success, import_fidelity, source_format, est_tokens, n_evidence, split, experiment, task_id
-- default-where: status = 'completed' AND success
-- params: export_include_reasoning, export_include_persona
-- materialize: export_decisions
-- description: evidence -> final answer: the global prefix plus one user message listing every observation (tool results, sub-agent summaries) the main agent received, -> its final message
-- Evidence = the content of each tool / user message that answered an earlier main-agent turn, in order, each
-- as "[evidence N]" + text; the completion is the main agent's last turn (its answer or final action).
-- DuckDB-specific: JSON[] columns, string_agg(... ORDER BY ...).
CREATE OR REPLACE VIEW export_sft_outcome AS
WITH final_turn AS (
    SELECT * FROM export_decisions WHERE agent_id = 'main' AND is_last_turn AND policy_failure IS NULL
),

prefix AS (
    SELECT run_id, episode_id, list(message ORDER BY ord) AS messages, sum(est_tokens) AS n
    FROM export_messages
    WHERE agent_id = 'main' AND part = 'prefix'
    GROUP BY run_id, episode_id
),

evidence AS (
    SELECT
        m.run_id, m.episode_id,
        count(*) AS n_evidence,
        string_agg('[evidence ' || CAST(m.rn AS VARCHAR) || ']' || chr(10) || coalesce(m.message ->> 'content', ''),
                   chr(10) || chr(10) ORDER BY m.ord) AS text
    FROM (
        SELECT h.*, row_number() OVER (PARTITION BY h.run_id, h.episode_id ORDER BY h.ord) AS rn
        FROM export_messages AS h
        JOIN final_turn AS f ON f.run_id = h.run_id AND f.episode_id = h.episode_id
        WHERE h.agent_id = 'main' AND h.part = 'history' AND h.role <> 'assistant' AND h.from_step < f.step_idx
    ) AS m
    GROUP BY m.run_id, m.episode_id
)

SELECT
    md5(f.decision_id || ':sft-outcome') AS sample_id,
    list_concat(coalesce(p.messages, CAST([] AS JSON[])),
                CASE WHEN v.text IS NOT NULL THEN [export_message('user', v.text, NULL, NULL, NULL, NULL)]
                     ELSE CAST([] AS JSON[]) END) AS prompt,
    f.completion,
    f.tools,
    f.run_id, f.episode_id, f.task_id, f.agent_id,
    f.status, f.reward, f.r_success, f.r_strict, f.success, f.import_fidelity, f.source_format, f.split, f.experiment,
    coalesce(v.n_evidence, 0) AS n_evidence,
    CAST(coalesce(p.n, 0) + est_tokens_of(v.text, NULL, NULL) + f.completion_tokens AS BIGINT) AS est_tokens
FROM final_turn AS f
LEFT JOIN prefix AS p ON p.run_id = f.run_id AND p.episode_id = f.episode_id
LEFT JOIN evidence AS v ON v.run_id = f.run_id AND v.episode_id = f.episode_id;
