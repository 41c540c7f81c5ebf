-- run_metrics: the per-run evaluation report of seed 000 §8.3.
-- grain: one row per run. key: run_id
--
-- The figures ShopSimRL's summary.json (shopsimrl-eval-summary-v2) also has are computed by its rules
-- (shopsimrl/evaluation.py summarize_traces); eval_summary.sql renames them to its names.
-- completed  an episode whose final attempt is episode_completed(status, done): status 'completed' and the
--            environment did not say it is not done (the original: status completed and final.done true);
--            every other final attempt is failed
-- coverage   planned (runs.planned_episodes), episodes (jobs with a final attempt), completed, failed,
--            missing = planned - completed - failed, coverage = completed / planned
-- reward     `reward` is the server's top-level reward, its meaning is runs.primary_reward (r_strict for
--            shop_env). reward_mean and reward_sem = sample stddev (n - 1) / sqrt(n), NULL below 2 rewards,
--            over completed episodes with a reward (scored); a failed episode is never a reward of 0.
--            success_rate = mean r_success over the completed episodes whose source reported one (not
--            reward_derived) = the original's primary.success_rate. r_strict_mean, r_loose_mean,
--            r_success_mean: over every completed episode, derived values included (sources without
--            reward_detail); right_product_rate and the component means r_type / r_att / r_option / r_price
--            (each over the episodes that have it)
-- pass@k     repeats = most completed samples of any task; pass_at_1 = mean over tasks of c/n;
--            pass_at_k = mean over tasks of the unbiased estimator at k = repeats (pass_at_k_estimate), NULL
--            when repeats = 1 (success = r_success = 1; any k: run_pass_at_k(k)); pass_hat_k = tau-bench's pass^k at
--            the same k (all k samples succeed: mean over tasks with >= k samples of C(c, k) / C(n, k))
-- behaviour  over completed episodes: mean_steps (environment actions), mean_model_steps (the original's
--            steps_mean: steps per episode), the totals model_steps_total, protocol_errors_total,
--            total_actions_total, invalid_actions_total, protocol_error_rate = protocol errors / model steps,
--            invalid_action_rate = invalid / environment actions (NULL without any)
-- endings    share_* over all episodes: purchase, action_limit, generation_length, protocol_budget, error
--            (failed), other (any other completed ending); the six sum to 1
-- cost       tokens_in_mean / tokens_out_mean and wall_time_mean_s over completed episodes; totals over every
--            attempt (retries cost too); cost_per_episode = mean cost of a completed episode and cost_total over
--            every attempt, priced by model_prices at the run's model_name (NULL when unpriced)
-- One pass over the episode attempts: a query on this view costs mostly planning and per-operator setup, not
-- rows, so it reads the episode files once (plus the small retried_episodes lookup) and keeps few operators.
-- `attempts` is every attempt with the columns used here, is_final = the attempt the episodes view keeps (its
-- rule: LEFT JOIN retried_episodes, attempt = coalesce(last_attempt, 1)) and r_strict / r_success from the
-- stored columns or the r_strict_of / r_success_of macros the episodes view uses; one GROUP BY run_id gives the per-run figures
-- (CASE on is_final / final_completed) and the attempt totals; per_task is task_success_counts' definition
-- over the same rows. tests/test_analytics_plan.py holds these to the episodes, episode_attempts and
-- task_success_counts views.
-- Portable SQL except CREATE OR REPLACE, the MATERIALIZED hint and the macros (pass_at_k_estimate, r_*_of,
-- episode_completed).

-- episode_completed(status, done): the one definition of a completed episode (run_metrics, eval_summary).
-- grain: scalar macro (one value per call).
CREATE OR REPLACE MACRO episode_completed(status, done) AS status = 'completed' AND done IS NOT FALSE;

CREATE OR REPLACE VIEW run_metrics AS
WITH attempts AS MATERIALIZED (  -- read once by per_run and per_task; a run_id filter is pushed into it
    SELECT
        e.run_id, e.task_id, e.status, e.reward, e.right_product, e.r_type, e.r_att, e.r_option, e.r_price,
        e.termination_reason, e.model_steps, e.total_actions, e.protocol_errors, e.invalid_actions,
        e.tokens_in, e.tokens_out, e.duration_s,
        e.attempt = coalesce(r.last_attempt, 1) AS is_final,
        e.attempt = coalesce(r.last_attempt, 1) AND episode_completed(e.status, e.done) AS final_completed,
        CASE WHEN e.reward_derived IS NOT TRUE THEN e.r_success END AS r_success_reported,
        e.r_loose,
        coalesce(e.r_strict, r_strict_of(e.r_type, e.r_att, e.r_option, e.r_price, e.reward)) AS r_strict,
        coalesce(e.r_success, r_success_of(e.r_type, e.r_att, e.r_option, e.r_price, e.reward)) AS r_success
    FROM episode_attempts AS e
    LEFT JOIN retried_episodes AS r ON r.run_id = e.run_id AND r.episode_id = e.episode_id
),

per_run AS (
    SELECT
        run_id,
        count(CASE WHEN is_final THEN 1 END) AS episodes,
        count(CASE WHEN final_completed THEN 1 END) AS completed,
        count(CASE WHEN is_final AND NOT final_completed THEN 1 END) AS failed,
        count(CASE WHEN final_completed THEN reward END) AS scored,
        avg(CASE WHEN final_completed THEN reward END) AS reward_mean,
        stddev_samp(CASE WHEN final_completed THEN reward END)
            / sqrt(count(CASE WHEN final_completed THEN reward END)) AS reward_sem,
        avg(CASE WHEN final_completed THEN r_success_reported END) AS success_rate,
        avg(CASE WHEN final_completed THEN r_strict END) AS r_strict_mean,
        avg(CASE WHEN final_completed THEN r_loose END) AS r_loose_mean,
        avg(CASE WHEN final_completed THEN r_success END) AS r_success_mean,
        avg(CASE WHEN final_completed THEN CASE WHEN right_product THEN 1.0 WHEN NOT right_product THEN 0.0 END END)
            AS right_product_rate,
        avg(CASE WHEN final_completed THEN r_type END) AS r_type_mean,
        avg(CASE WHEN final_completed THEN r_att END) AS r_att_mean,
        avg(CASE WHEN final_completed THEN r_option END) AS r_option_mean,
        avg(CASE WHEN final_completed THEN r_price END) AS r_price_mean,
        avg(CASE WHEN final_completed THEN total_actions END) AS mean_steps,
        avg(CASE WHEN final_completed THEN model_steps END) AS mean_model_steps,
        sum(CASE WHEN final_completed THEN model_steps END) AS model_steps_total,
        sum(CASE WHEN final_completed THEN protocol_errors END) AS protocol_errors_total,
        sum(CASE WHEN final_completed THEN total_actions END) AS total_actions_total,
        sum(CASE WHEN final_completed THEN invalid_actions END) AS invalid_actions_total,
        count(CASE WHEN final_completed AND termination_reason = 'purchase' THEN 1 END) AS n_purchase,
        count(CASE WHEN final_completed AND termination_reason = 'action_limit' THEN 1 END) AS n_action_limit,
        count(CASE WHEN final_completed AND termination_reason = 'generation_length' THEN 1 END)
            AS n_generation_length,
        count(CASE WHEN final_completed AND termination_reason = 'protocol_budget' THEN 1 END) AS n_protocol_budget,
        count(CASE WHEN final_completed AND coalesce(termination_reason, '') NOT IN (
            'purchase', 'action_limit', 'generation_length', 'protocol_budget') THEN 1 END) AS n_other,
        avg(CASE WHEN final_completed THEN tokens_in END) AS tokens_in_mean,
        avg(CASE WHEN final_completed THEN tokens_out END) AS tokens_out_mean,
        avg(CASE WHEN final_completed THEN duration_s END) AS wall_time_mean_s,
        count(*) AS attempts,  -- every attempt spent tokens and time, retried ones included
        sum(tokens_in) AS tokens_in_total,
        sum(tokens_out) AS tokens_out_total,
        sum(duration_s) AS wall_time_total_s
    FROM attempts
    GROUP BY run_id
),

per_task AS (  -- = task_success_counts (the definition pass_at_k shares), over the rows read above
    SELECT
        run_id, task_id,
        count(*) AS n,
        sum(CASE WHEN r_success = 1 THEN 1 ELSE 0 END) AS c
    FROM attempts
    WHERE final_completed AND task_id IS NOT NULL
    GROUP BY run_id, task_id
),

pass AS (  -- repeats = the run's most samples of a task (a window, so no second pass over per_task)
    SELECT
        run_id,
        max(repeats) AS repeats,
        count(*) AS tasks,
        avg(CAST(c AS DOUBLE) / n) AS pass_at_1,
        CASE WHEN max(repeats) > 1 THEN avg(pass_at_k_estimate(n, c, repeats)) END AS pass_at_k,
        CASE WHEN max(repeats) > 1 THEN avg(pass_hat_k_estimate(n, c, repeats)) END AS pass_hat_k
    FROM (SELECT run_id, n, c, max(n) OVER (PARTITION BY run_id) AS repeats FROM per_task) AS t
    GROUP BY run_id
),

final AS (
    SELECT
        r.run_id,
        r.experiment,
        r.model_name,
        r.checkpoint_id,
        r.split,
        r.source_format,
        r.primary_reward,
        r.planned_episodes AS planned,
        coalesce(m.episodes, 0) AS episodes,
        coalesce(m.completed, 0) AS completed,
        coalesce(m.failed, 0) AS failed,
        r.planned_episodes - coalesce(m.completed, 0) - coalesce(m.failed, 0) AS missing,
        CAST(coalesce(m.completed, 0) AS DOUBLE) / nullif(r.planned_episodes, 0) AS coverage,
        m.scored,
        m.reward_mean,
        m.reward_sem,
        m.success_rate,
        m.r_strict_mean,
        m.r_loose_mean,
        m.r_success_mean,
        m.right_product_rate,
        m.r_type_mean,
        m.r_att_mean,
        m.r_option_mean,
        m.r_price_mean,
        p.repeats,
        p.tasks,
        p.pass_at_1,
        p.pass_at_k,
        p.pass_hat_k,
        m.mean_steps,
        m.mean_model_steps,
        m.model_steps_total,
        m.protocol_errors_total,
        m.total_actions_total,
        m.invalid_actions_total,
        CAST(m.protocol_errors_total AS DOUBLE) / nullif(m.model_steps_total, 0) AS protocol_error_rate,
        CAST(m.invalid_actions_total AS DOUBLE) / nullif(m.total_actions_total, 0) AS invalid_action_rate,
        CAST(m.n_purchase AS DOUBLE) / m.episodes AS share_purchase,
        CAST(m.n_action_limit AS DOUBLE) / m.episodes AS share_action_limit,
        CAST(m.n_generation_length AS DOUBLE) / m.episodes AS share_generation_length,
        CAST(m.n_protocol_budget AS DOUBLE) / m.episodes AS share_protocol_budget,
        CAST(m.failed AS DOUBLE) / m.episodes AS share_error,
        CAST(m.n_other AS DOUBLE) / m.episodes AS share_other,
        m.tokens_in_mean,
        m.tokens_out_mean,
        m.attempts,
        m.tokens_in_total,
        m.tokens_out_total,
        m.wall_time_mean_s,
        m.wall_time_total_s,
        (m.tokens_in_mean * pr.usd_per_mtok_in + m.tokens_out_mean * pr.usd_per_mtok_out) / 1e6 AS cost_per_episode,
        (m.tokens_in_total * pr.usd_per_mtok_in + m.tokens_out_total * pr.usd_per_mtok_out) / 1e6 AS cost_total
    FROM runs AS r
    LEFT JOIN per_run AS m ON m.run_id = r.run_id
    LEFT JOIN pass AS p ON p.run_id = r.run_id
    LEFT JOIN model_prices AS pr ON pr.model_name = r.model_name
)

SELECT * FROM final;
