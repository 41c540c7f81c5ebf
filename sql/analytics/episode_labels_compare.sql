-- episode_labels_compare: two labels versions of the same run compared on the same trajectories: a changed reward
-- rule or rubric (`shopsim-wh reverify --primary-reward`, a new taxonomy) against the earlier one, episode by episode.
-- grain: one row per (run, ordered version pair), version_a stored before version_b (ties: the smaller version id
-- first). key: (run_id, version_a, version_b)
-- episodes = episodes both versions scored; reward_changed = |reward_a - reward_b| > 1e-9 (or one NULL);
-- success_changed, termination_changed as values; label_changed = primary_failure or label_codes differ;
-- mean_reward_a / _b = mean reward of those episodes under each version.
-- Portable SQL except CREATE OR REPLACE.
CREATE OR REPLACE VIEW episode_labels_compare AS
WITH versions AS (
    SELECT run_id, labels_version, min(created_at) AS created_at
    FROM episode_labels
    GROUP BY run_id, labels_version
),

pairs AS (
    SELECT a.run_id, a.labels_version AS version_a, b.labels_version AS version_b
    FROM versions AS a
    JOIN versions AS b
        ON b.run_id = a.run_id
        AND (a.created_at < b.created_at OR (a.created_at = b.created_at AND a.labels_version < b.labels_version))
),

matched AS (
    SELECT
        p.run_id, p.version_a, p.version_b,
        a.labels_tag AS tag_a, b.labels_tag AS tag_b,
        a.primary_reward AS primary_reward_a, b.primary_reward AS primary_reward_b,
        a.reward AS reward_a, b.reward AS reward_b,
        CASE
            WHEN a.reward IS NULL OR b.reward IS NULL THEN (a.reward IS NULL) <> (b.reward IS NULL)
            ELSE abs(a.reward - b.reward) > 1e-9
        END AS reward_changed,
        a.success IS DISTINCT FROM b.success AS success_changed,
        a.termination_reason IS DISTINCT FROM b.termination_reason AS termination_changed,
        (a.primary_failure IS DISTINCT FROM b.primary_failure OR a.label_codes IS DISTINCT FROM b.label_codes)
            AS label_changed
    FROM pairs AS p
    JOIN episode_labels AS a
        ON a.run_id = p.run_id AND a.labels_version = p.version_a
    JOIN episode_labels AS b
        ON b.run_id = p.run_id AND b.labels_version = p.version_b
        AND b.episode_id = a.episode_id AND b.attempt = a.attempt
),

final AS (
    SELECT
        run_id,
        version_a,
        version_b,
        min(tag_a) AS tag_a,
        min(tag_b) AS tag_b,
        min(primary_reward_a) AS primary_reward_a,
        min(primary_reward_b) AS primary_reward_b,
        count(*) AS episodes,
        sum(CASE WHEN reward_changed THEN 1 ELSE 0 END) AS reward_changed,
        sum(CASE WHEN success_changed THEN 1 ELSE 0 END) AS success_changed,
        sum(CASE WHEN termination_changed THEN 1 ELSE 0 END) AS termination_changed,
        sum(CASE WHEN label_changed THEN 1 ELSE 0 END) AS label_changed,
        avg(reward_a) AS mean_reward_a,
        avg(reward_b) AS mean_reward_b,
        avg(reward_b) - avg(reward_a) AS mean_reward_delta
    FROM matched
    GROUP BY run_id, version_a, version_b
)

SELECT * FROM final;
