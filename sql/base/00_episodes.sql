-- grain: one row per episode attempt (every try of every episode, failed tries included)
-- key: (run_id, episode_id, attempt)
CREATE OR REPLACE VIEW episode_attempts AS
SELECT * FROM stg_episodes;

-- grain: one row per episode that was tried more than once, with its last attempt
-- key: (run_id, episode_id). Attempts are numbered 1, 2, ... so every other episode's last attempt is 1;
-- the views below join to this (small) view instead of ranking every episode.
CREATE OR REPLACE VIEW retried_episodes AS
SELECT run_id, episode_id, max(attempt) AS last_attempt
FROM stg_episodes
WHERE attempt > 1
GROUP BY run_id, episode_id;

-- r_strict_of / r_success_of: the reward facts for rows whose source stored none (schema-2 files, sources
-- without reward_detail). Writers store r_loose / r_strict / r_success from the server's reward_detail and
-- derive them only where it has none (then episodes.reward_derived is true); these macros are the fallback
-- for older files. Components present: r_strict = r_type * r_att * r_option * r_price (a missing r_option
-- counts as 1), success = every component equals 1. Task reward only (tau-bench, coding traces: all four
-- components NULL): r_strict = reward and success = (reward >= 1).
-- grain: scalar macros (one value per call). DuckDB-specific (a macro); Spark would declare SQL functions.
CREATE OR REPLACE MACRO r_strict_of(r_type, r_att, r_option, r_price, reward) AS
    CASE
        WHEN r_type IS NULL AND r_att IS NULL AND r_option IS NULL AND r_price IS NULL THEN CAST(reward AS DOUBLE)
        ELSE r_type * r_att * coalesce(r_option, CAST(1 AS DOUBLE)) * r_price
    END;

CREATE OR REPLACE MACRO r_success_of(r_type, r_att, r_option, r_price, reward) AS
    CASE
        WHEN reward IS NULL THEN NULL
        WHEN r_type IS NULL AND r_att IS NULL AND r_option IS NULL AND r_price IS NULL
            THEN CASE WHEN reward >= 1 THEN CAST(1 AS DOUBLE) ELSE CAST(0 AS DOUBLE) END
        WHEN r_type = 1 AND r_att = 1 AND coalesce(r_option, CAST(1 AS DOUBLE)) = 1 AND r_price = 1 THEN CAST(1 AS DOUBLE)
        ELSE CAST(0 AS DOUBLE)
    END;

-- grain: one row per episode: its last attempt within the run
-- key: (run_id, episode_id)
-- r_strict / r_success as stored, else from the fallback macros above (older files).
CREATE OR REPLACE VIEW episodes AS
WITH final_attempt AS (
    SELECT e.*
    FROM stg_episodes AS e
    LEFT JOIN retried_episodes AS r ON r.run_id = e.run_id AND r.episode_id = e.episode_id
    WHERE e.attempt = coalesce(r.last_attempt, 1)
)
SELECT * REPLACE (
    coalesce(r_strict, r_strict_of(r_type, r_att, r_option, r_price, reward)) AS r_strict,
    coalesce(r_success, r_success_of(r_type, r_att, r_option, r_price, reward)) AS r_success
)
FROM final_attempt;

-- grain: one row per episode: the (run_id, episode_id, attempt) that the `episodes` view keeps
CREATE OR REPLACE VIEW final_attempts AS
SELECT run_id, episode_id, attempt FROM episodes;
