-- export: offline-rl
-- grain: one row per decision (model turn) of a main agent: the transition (s_t, a_t, r_t, s_{t+1}, done)
-- trl: -
-- sample: state, action, observation, next_state, tools, episode_id
-- filters: status, reward, r_success, r_strict, r_loose, import_fidelity, source_format, agent_role, est_tokens, done, labels
-- default-where: status = 'completed' AND reward IS NOT NULL
-- description: offline-RL transitions of the main agent with the sparse terminal reward, its r_* components, discounted return-to-go (--gamma) and the step's taxonomy labels
-- params: export_gamma, export_window, export_max_tokens
--
-- Columns
--   state        JSON[] the context the decision was made in (export_decisions.prompt: prefix + last --window
--                turns within --max-tokens); action JSON[] the assistant message; observation JSON[] what
--                answered it; next_state JSON[] the state of the next decision (NULL when done); tools JSON[]
--   t, n_steps   0-based position of the decision among the main agent's turns, and their number T
--   r_t          the sparse terminal reward: episodes.reward at the last turn (t = T - 1), 0 before it (NULL when
--                the episode has no reward: reward-less traces); terminal_reward = episodes.reward
--   return_to_go sum_{k >= t} gamma^(k - t) r_k = terminal_reward * gamma^(T - 1 - t), gamma = export_gamma
--                (default 1.0), recorded in `gamma`
--   done         the main agent's last turn (termination_reason says why the episode ended)
--   reward, r_loose, r_strict, r_success  the episode's reward and its components (episodes)
--   labels       the step's error-taxonomy codes (error_labels at this step, episode-scope outcome codes
--                included at the last step, except `wrong_product`, which derives from the private goal),
--                ordered by precedence; [] when none
-- Sub-agent turns are not transitions of the main MDP: they are left out (sft-subagent exports them).
-- Every transition is a sample of its own: episode_id is part of the dedupe key, so identical transitions
-- of two rollouts both stay (their frequency is data).
-- DuckDB-specific: getvariable, lead() over JSON[], list(... ORDER BY ...).
CREATE OR REPLACE VIEW export_offline_rl AS
WITH main_turns AS (
    SELECT
        d.*,
        CAST(row_number() OVER w - 1 AS INTEGER) AS t,
        CAST(count(*) OVER (PARTITION BY d.run_id, d.episode_id) AS INTEGER) AS n_steps,
        lead(d.prompt) OVER w AS next_state
    FROM export_decisions AS d
    WHERE d.agent_id = 'main'
    WINDOW w AS (PARTITION BY d.run_id, d.episode_id ORDER BY d.step_idx)
),

step_labels AS (
    SELECT run_id, episode_id, step_idx, list(code ORDER BY precedence, code) AS labels
    FROM error_labels
    WHERE agent_id = 'main' AND run_id IN (SELECT run_id FROM export_scope)
      AND code <> 'wrong_product'  -- derived from the private goal (right_product): never exported
    GROUP BY run_id, episode_id, step_idx
),

params AS (
    SELECT CAST(coalesce(getvariable('export_gamma'), 1.0) AS DOUBLE) AS gamma
),

final AS (
    SELECT
        md5('offline-rl/' || m.decision_id) AS sample_id,
        m.run_id,
        m.episode_id,
        m.task_id,
        m.agent_id,
        m.agent_role,
        m.step_idx,
        m.t,
        m.n_steps,
        m.prompt AS state,
        m.completion AS action,
        m.observation,
        m.next_state,
        m.tools,
        CASE WHEN m.reward IS NULL THEN NULL WHEN m.t = m.n_steps - 1 THEN m.reward ELSE CAST(0 AS DOUBLE) END AS r_t,
        m.t = m.n_steps - 1 AS done,
        m.reward AS terminal_reward,
        m.reward * pow(p.gamma, m.n_steps - 1 - m.t) AS return_to_go,
        p.gamma,
        coalesce(l.labels, CAST([] AS VARCHAR[])) AS labels,
        e.termination_reason,
        m.status,
        m.reward,
        e.r_loose,
        m.r_strict,
        m.r_success,
        m.import_fidelity,
        m.source_format,
        m.split,
        m.est_tokens
    FROM main_turns AS m
    CROSS JOIN params AS p
    JOIN export_episodes AS e ON e.run_id = m.run_id AND e.episode_id = m.episode_id
    LEFT JOIN step_labels AS l ON l.run_id = m.run_id AND l.episode_id = m.episode_id AND l.step_idx = m.step_idx
)

SELECT * FROM final;
