-- run_metrics: the per-run evaluation report of seed 000 §8.3.
-- grain: one row per run. key: run_id
--
-- coverage   planned (runs.planned_episodes), episodes (jobs with a final attempt), completed, failed,
--            missing = planned - completed - failed, coverage = completed / planned
-- reward     reward_mean and reward_sem (stddev_samp / sqrt(n)) over completed episodes only (a failed episode
--            is never a reward of 0); r_hard_mean (= r_strict_mean), r_loose_mean, r_success_mean (strict
--            success rate), right_product_rate and the component means r_type / r_att / r_option / r_price
-- pass@k     repeats = most completed samples of any task; pass_at_1 = mean over tasks of c/n;
--            pass_at_k = mean over tasks of the unbiased estimator at k = repeats (pass_at_k_estimate), NULL
--            when repeats = 1 (success = r_success = 1; any k: run_pass_at_k(k))
-- behaviour  mean_steps (environment actions) and mean_model_steps over completed episodes;
--            protocol_error_rate = protocol errors / model steps; invalid_action_rate = invalid / actions
-- endings    share_* over all episodes: purchase, action_limit, generation_length, protocol_budget, error
--            (failed), other (any other completed ending); the six sum to 1
-- cost       tokens_in_mean / tokens_out_mean and wall_time_mean_s over completed episodes; totals over every
--            attempt (retries cost too); cost_per_episode = mean cost of a completed episode and cost_total over
--            every attempt, priced by model_prices at the run's model_name (NULL when unpriced)
-- Per-run aggregates come from the episodes view; per-task success counts from task_success_counts (the
-- definition pass_at_k shares). Portable SQL except CREATE OR REPLACE and the pass_at_k_estimate macro.
CREATE OR REPLACE VIEW run_metrics AS
WITH ep AS (
    SELECT
        run_id, task_id, status, reward, r_hard, r_success, right_product, r_type, r_att, r_option, r_price,
        termination_reason, model_steps, total_actions, protocol_errors, invalid_actions, tokens_in, tokens_out,
        duration_s
    FROM episodes
),

per_run AS (
    SELECT
        run_id,
        count(*) AS episodes,
        count(*) FILTER (WHERE status = 'completed') AS completed,
        count(*) FILTER (WHERE status = 'failed') AS failed,
        avg(reward) FILTER (WHERE status = 'completed') AS reward_mean,
        stddev_samp(reward) FILTER (WHERE status = 'completed')
            / sqrt(count(reward) FILTER (WHERE status = 'completed')) AS reward_sem,
        avg(r_hard) FILTER (WHERE status = 'completed') AS r_hard_mean,
        avg(r_success) FILTER (WHERE status = 'completed') AS r_success_mean,
        avg(CASE WHEN right_product THEN 1.0 WHEN NOT right_product THEN 0.0 END) FILTER (WHERE status = 'completed')
            AS right_product_rate,
        avg(r_type) FILTER (WHERE status = 'completed') AS r_type_mean,
        avg(r_att) FILTER (WHERE status = 'completed') AS r_att_mean,
        avg(r_option) FILTER (WHERE status = 'completed') AS r_option_mean,
        avg(r_price) FILTER (WHERE status = 'completed') AS r_price_mean,
        avg(total_actions) FILTER (WHERE status = 'completed') AS mean_steps,
        avg(model_steps) FILTER (WHERE status = 'completed') AS mean_model_steps,
        CAST(sum(protocol_errors) AS DOUBLE) / nullif(sum(model_steps), 0) AS protocol_error_rate,
        CAST(sum(invalid_actions) AS DOUBLE) / nullif(sum(total_actions), 0) AS invalid_action_rate,
        CAST(count(*) FILTER (WHERE status = 'completed' AND termination_reason = 'purchase') AS DOUBLE) / count(*)
            AS share_purchase,
        CAST(count(*) FILTER (WHERE status = 'completed' AND termination_reason = 'action_limit') AS DOUBLE) / count(*)
            AS share_action_limit,
        CAST(count(*) FILTER (WHERE status = 'completed' AND termination_reason = 'generation_length') AS DOUBLE)
            / count(*) AS share_generation_length,
        CAST(count(*) FILTER (WHERE status = 'completed' AND termination_reason = 'protocol_budget') AS DOUBLE)
            / count(*) AS share_protocol_budget,
        CAST(count(*) FILTER (WHERE status = 'failed') AS DOUBLE) / count(*) AS share_error,
        CAST(count(*) FILTER (
            WHERE status = 'completed' AND coalesce(termination_reason, '') NOT IN (
                'purchase', 'action_limit', 'generation_length', 'protocol_budget')
        ) AS DOUBLE) / count(*) AS share_other,
        avg(tokens_in) FILTER (WHERE status = 'completed') AS tokens_in_mean,
        avg(tokens_out) FILTER (WHERE status = 'completed') AS tokens_out_mean,
        avg(duration_s) FILTER (WHERE status = 'completed') AS wall_time_mean_s
    FROM ep
    GROUP BY run_id
),

per_task AS (
    SELECT * FROM task_success_counts
),

repeats AS (
    SELECT run_id, max(n) AS repeats, count(*) AS tasks FROM per_task GROUP BY run_id
),

pass AS (
    SELECT
        t.run_id,
        max(r.repeats) AS repeats,
        max(r.tasks) AS tasks,
        avg(CAST(t.c AS DOUBLE) / t.n) AS pass_at_1,
        CASE WHEN max(r.repeats) > 1 THEN avg(pass_at_k_estimate(t.n, t.c, r.repeats)) END AS pass_at_k
    FROM per_task AS t
    JOIN repeats AS r ON r.run_id = t.run_id
    GROUP BY t.run_id
),

attempts AS (  -- every attempt spent tokens and time, retried ones included
    SELECT
        run_id,
        count(*) AS attempts,
        sum(tokens_in) AS tokens_in_total,
        sum(tokens_out) AS tokens_out_total,
        sum(duration_s) AS wall_time_total_s
    FROM episode_attempts
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
        r.planned_episodes AS planned,
        coalesce(m.episodes, 0) AS episodes,
        coalesce(m.completed, 0) AS completed,
        coalesce(m.failed, 0) AS failed,
        r.planned_episodes - coalesce(m.completed, 0) - coalesce(m.failed, 0) AS missing,
        CAST(coalesce(m.completed, 0) AS DOUBLE) / nullif(r.planned_episodes, 0) AS coverage,
        m.reward_mean,
        m.reward_sem,
        m.r_hard_mean,
        m.r_hard_mean AS r_strict_mean,
        m.reward_mean AS r_loose_mean,
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
        m.mean_steps,
        m.mean_model_steps,
        m.protocol_error_rate,
        m.invalid_action_rate,
        m.share_purchase,
        m.share_action_limit,
        m.share_generation_length,
        m.share_protocol_budget,
        m.share_error,
        m.share_other,
        m.tokens_in_mean,
        m.tokens_out_mean,
        a.attempts,
        a.tokens_in_total,
        a.tokens_out_total,
        m.wall_time_mean_s,
        a.wall_time_total_s,
        (m.tokens_in_mean * pr.usd_per_mtok_in + m.tokens_out_mean * pr.usd_per_mtok_out) / 1e6 AS cost_per_episode,
        (a.tokens_in_total * pr.usd_per_mtok_in + a.tokens_out_total * pr.usd_per_mtok_out) / 1e6 AS cost_total
    FROM runs AS r
    LEFT JOIN per_run AS m ON m.run_id = r.run_id
    LEFT JOIN pass AS p ON p.run_id = r.run_id
    LEFT JOIN attempts AS a ON a.run_id = r.run_id
    LEFT JOIN model_prices AS pr ON pr.model_name = r.model_name
)

SELECT * FROM final;
