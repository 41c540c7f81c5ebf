-- episode_labels_versions: each labels version of each re-scored run (`shopsim-wh reverify`), against the stored
-- episodes: how many episodes it replayed, how many of its figures differ from the stored ones, its mean reward.
-- grain: one row per (run, labels version). key: (run_id, labels_version)
-- created_at = when the version was stored; diverged = replayed episodes whose replay did not walk the stored
-- trajectory (actions_diverged > 0); *_changed = episodes whose value differs from the stored episode's under the
-- same labelling code (episode_labels' flags); mean_reward = the mean re-scored reward (the component
-- primary_reward names), stored_mean_reward = the mean of episodes.reward over the same episodes.
-- Portable SQL except CREATE OR REPLACE.
CREATE OR REPLACE VIEW episode_labels_versions AS
WITH final AS (
    SELECT
        run_id,
        labels_version,
        min(labels_tag) AS labels_tag,
        min(primary_reward) AS primary_reward,
        min(created_at) AS created_at,
        count(*) AS episodes,
        sum(CASE WHEN replayable THEN 1 ELSE 0 END) AS replayed,
        sum(CASE WHEN actions_diverged > 0 THEN 1 ELSE 0 END) AS diverged,
        sum(CASE WHEN reward_changed THEN 1 ELSE 0 END) AS reward_changed,
        sum(CASE WHEN components_changed THEN 1 ELSE 0 END) AS components_changed,
        sum(CASE WHEN success_changed THEN 1 ELSE 0 END) AS success_changed,
        sum(CASE WHEN termination_changed THEN 1 ELSE 0 END) AS termination_changed,
        sum(CASE WHEN label_changed THEN 1 ELSE 0 END) AS label_changed,
        avg(reward) AS mean_reward,
        avg(stored_reward) AS stored_mean_reward,
        avg(CASE WHEN success THEN 1.0 WHEN NOT success THEN 0.0 END) AS success_rate
    FROM episode_labels
    GROUP BY run_id, labels_version
)

SELECT * FROM final;
