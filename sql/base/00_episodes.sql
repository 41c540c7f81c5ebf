-- grain: one row per episode attempt (every try of every episode, failed tries included)
-- key: (run_id, episode_id, attempt)
CREATE OR REPLACE VIEW episode_attempts AS
SELECT * FROM stg_episodes;

-- grain: one row per episode: its last attempt within the run
-- key: (run_id, episode_id)
-- adds the derived reward facts of spec §3: r_hard (product of the components, a missing r_option
-- counting as 1), r_success (every component equals 1) and r_loose (= reward).
CREATE OR REPLACE VIEW episodes AS
WITH ranked AS (
    SELECT
        e.*,
        row_number() OVER (PARTITION BY run_id, episode_id ORDER BY attempt DESC) AS attempt_rank
    FROM stg_episodes AS e
),
final AS (
    SELECT
        * EXCLUDE (attempt_rank),
        r_type * r_att * coalesce(r_option, CAST(1 AS DOUBLE)) * r_price AS r_hard,
        CASE
            WHEN reward IS NULL THEN NULL
            WHEN r_type = 1 AND r_att = 1 AND coalesce(r_option, CAST(1 AS DOUBLE)) = 1 AND r_price = 1 THEN CAST(1 AS DOUBLE)
            ELSE CAST(0 AS DOUBLE)
        END AS r_success,
        reward AS r_loose
    FROM ranked
    WHERE attempt_rank = 1
)
SELECT * FROM final;

-- grain: one row per episode: the (run_id, episode_id, attempt) that the `episodes` view keeps
CREATE OR REPLACE VIEW final_attempts AS
SELECT run_id, episode_id, max(attempt) AS attempt
FROM stg_episodes
GROUP BY run_id, episode_id;
