-- paired_deltas(bare_run, treatment_run): the pairs of the paired bare-vs-skill gate (seed 000 §3).
-- grain: one row per job (task_id, sample_id) completed in both runs. key: (task_id, sample_id)
-- R_i = the treatment episode's reward, B_i = the bare episode's reward, delta = R_i - B_i;
-- skills = the skill ids selected for the treatment episode (skills_selected; [] when none), sorted.
-- split = the treatment episode's split (ShopSimRL's masks hash it); R_<m> / B_<m> = the two episodes'
-- reward components (r_type, r_att, r_option, r_price, r_loose, r_strict, r_success; NULL where the source
-- has none), fitted one by one by the strictly-positive-top-k gate (shopsim_wh.analytics.contributions).
-- The gate's default covariates C_i are indicators list_contains(skills, '<skill id>'); shopsim_wh.analytics.gate
-- sums X'X and X'y over these rows in SQL. Failed episodes are never paired (a failure is not a reward of 0).
-- DuckDB-specific: table macro, list(... ORDER BY ...).
CREATE OR REPLACE MACRO paired_deltas(bare_run, treatment_run) AS TABLE
WITH bare AS (
    SELECT task_id, sample_id, episode_id, split, reward, r_type, r_att, r_option, r_price, r_loose, r_strict, r_success
    FROM episodes
    WHERE run_id = bare_run AND status = 'completed' AND task_id IS NOT NULL AND reward IS NOT NULL
),

treated AS (
    SELECT task_id, sample_id, episode_id, split, reward, r_type, r_att, r_option, r_price, r_loose, r_strict, r_success
    FROM episodes
    WHERE run_id = treatment_run AND status = 'completed' AND task_id IS NOT NULL AND reward IS NOT NULL
),

selected AS (
    SELECT episode_id, list(skill_id ORDER BY skill_id) AS skills
    FROM skills_selected
    WHERE run_id = treatment_run
    GROUP BY episode_id
),

final AS (
    SELECT
        t.task_id,
        t.sample_id,
        b.episode_id AS bare_episode_id,
        t.episode_id AS treatment_episode_id,
        t.reward AS R_i,
        b.reward AS B_i,
        t.reward - b.reward AS delta,
        coalesce(s.skills, CAST([] AS VARCHAR[])) AS skills,
        t.split,
        b.split AS bare_split,
        t.r_type AS R_r_type, b.r_type AS B_r_type,
        t.r_att AS R_r_att, b.r_att AS B_r_att,
        t.r_option AS R_r_option, b.r_option AS B_r_option,
        t.r_price AS R_r_price, b.r_price AS B_r_price,
        t.r_loose AS R_r_loose, b.r_loose AS B_r_loose,
        t.r_strict AS R_r_strict, b.r_strict AS B_r_strict,
        t.r_success AS R_r_success, b.r_success AS B_r_success
    FROM treated AS t
    JOIN bare AS b ON b.task_id = t.task_id AND b.sample_id = t.sample_id
    LEFT JOIN selected AS s ON s.episode_id = t.episode_id
)

SELECT * FROM final;
