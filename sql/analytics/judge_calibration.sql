-- judge_comparisons: every judge label set beside another rater's label of the same item (docs/judge.md).
-- grain: one row per (comparison, rater, other_rater, question, judged item (run_id, episode_id, step_idx)).
-- key: (comparison, rater, other_rater, question, run_id, episode_id, step_idx)
--   comparison 'rules'  the judge against the rule taxonomy, for questions with `taxonomy:` (judge_labels.taxonomy):
--                       episode grain: episode_primary_failure.primary_failure ('none' for a strict success or an
--                       unlabelled episode) or its taxonomy category; step grain: the step's step-scope label of
--                       error_labels on agent main with the lowest precedence (or its category), else 'none';
--                       other_rater = 'rules:primary_failure' / 'rules:category'
--              'judge'  two judges (another rubric file or another judge model) on the same item and question;
--                       each pair once, rater < other_rater
--              'human'  the judge against the human labels (`labels` view) whose label name is the question;
--                       other_rater = 'human:' || labeler
--   rater      the judge: rubric_id@rubric_version#<rubric sha256, 8 hex>/<judge fingerprint, 8 hex>
-- Unanswered questions (a parse error) have no judge_labels row and are not compared.
-- Portable SQL.
CREATE OR REPLACE VIEW judge_comparisons AS
WITH judged AS (
    SELECT
        run_id, episode_id, step_idx, rubric_id, rubric_version, rubric_sha256, judge_fingerprint, question, taxonomy,
        label,
        rubric_id || '@' || rubric_version || '#' || substr(rubric_sha256, 1, 8) || '/'
        || substr(judge_fingerprint, 1, 8) AS rater
    FROM judge_labels
    WHERE label IS NOT NULL
),

step_rules AS (
    SELECT run_id, episode_id, step_idx, code, category
    FROM (
        SELECT
            run_id, episode_id, step_idx, code, category,
            row_number() OVER (PARTITION BY run_id, episode_id, step_idx ORDER BY precedence, code) AS rnk
        FROM error_labels
        WHERE agent_id = 'main' AND scope = 'step'
    ) AS ranked
    WHERE rnk = 1
),

episode_rules AS (
    SELECT f.run_id, f.episode_id, f.primary_failure AS code, t.category
    FROM episode_primary_failure AS f
    LEFT JOIN taxonomy AS t ON t.code = f.primary_failure
),

rules AS (
    SELECT
        'rules' AS comparison, j.question, j.rater, j.rubric_id, j.rubric_version, j.rubric_sha256,
        j.judge_fingerprint, 'rules:' || j.taxonomy AS other_rater, j.run_id, j.episode_id, j.step_idx,
        j.label AS judge_label,
        CASE WHEN j.taxonomy = 'category' THEN coalesce(e.category, 'none') ELSE coalesce(e.code, 'none') END
            AS other_label
    FROM judged AS j
    JOIN episode_rules AS e ON e.run_id = j.run_id AND e.episode_id = j.episode_id
    WHERE j.taxonomy IS NOT NULL AND j.step_idx IS NULL
    UNION ALL
    SELECT
        'rules' AS comparison, j.question, j.rater, j.rubric_id, j.rubric_version, j.rubric_sha256,
        j.judge_fingerprint, 'rules:' || j.taxonomy AS other_rater, j.run_id, j.episode_id, j.step_idx,
        j.label AS judge_label,
        CASE WHEN j.taxonomy = 'category' THEN coalesce(s.category, 'none') ELSE coalesce(s.code, 'none') END
            AS other_label
    FROM judged AS j
    LEFT JOIN step_rules AS s ON s.run_id = j.run_id AND s.episode_id = j.episode_id AND s.step_idx = j.step_idx
    WHERE j.taxonomy IS NOT NULL AND j.step_idx IS NOT NULL
),

judges AS (
    SELECT
        'judge' AS comparison, a.question, a.rater, a.rubric_id, a.rubric_version, a.rubric_sha256,
        a.judge_fingerprint, b.rater AS other_rater, a.run_id, a.episode_id, a.step_idx,
        a.label AS judge_label, b.label AS other_label
    FROM judged AS a
    JOIN judged AS b
        ON b.run_id = a.run_id AND b.episode_id = a.episode_id
        AND coalesce(b.step_idx, -1) = coalesce(a.step_idx, -1) AND b.question = a.question AND a.rater < b.rater
),

humans AS (
    SELECT
        'human' AS comparison, j.question, j.rater, j.rubric_id, j.rubric_version, j.rubric_sha256,
        j.judge_fingerprint, 'human:' || h.labeler AS other_rater, j.run_id, j.episode_id, j.step_idx,
        j.label AS judge_label, h.value AS other_label
    FROM judged AS j
    JOIN labels AS h
        ON h.run_id = j.run_id AND h.episode_id = j.episode_id
        AND coalesce(h.step_idx, -1) = coalesce(j.step_idx, -1) AND h.label = j.question
)

SELECT * FROM rules
UNION ALL
SELECT * FROM judges
UNION ALL
SELECT * FROM humans;

-- judge_confusion: the confusion matrix of each comparison of judge_comparisons.
-- grain: one row per (comparison, rater, other_rater, question, judge_label, other_label) that occurs.
-- key: (comparison, rater, other_rater, question, judge_label, other_label); n = items with that pair of labels
-- Portable SQL.
CREATE OR REPLACE VIEW judge_confusion AS
SELECT
    comparison, question, rater, rubric_id, rubric_version, rubric_sha256, judge_fingerprint, other_rater,
    judge_label, other_label, count(*) AS n
FROM judge_comparisons
GROUP BY comparison, question, rater, rubric_id, rubric_version, rubric_sha256, judge_fingerprint, other_rater,
    judge_label, other_label;

-- judge_agreement: agreement and Cohen's kappa of each comparison, from the confusion counts.
-- grain: one row per (comparison, rater, other_rater, question). key: the same
--   n                   items compared; agreed = items with equal labels; agreement = agreed / n (p_o)
--   expected_agreement  p_e = sum over labels of (judge's share of the label) x (other rater's share of it)
--   kappa               (p_o - p_e) / (1 - p_e); NULL when p_e = 1 (both raters gave one and the same label)
-- Portable SQL.
CREATE OR REPLACE VIEW judge_agreement AS
-- judge_confusion is read once (each reference to a view binds its whole stack again when a connection creates
-- this view): every confusion cell is seen from both raters' sides, one row per side, then summed per label
WITH sides AS (
    SELECT
        c.comparison, c.question, c.rater, c.rubric_id, c.rubric_version, c.rubric_sha256, c.judge_fingerprint,
        c.other_rater, s.side, CASE WHEN s.side = 1 THEN c.judge_label ELSE c.other_label END AS label, c.n,
        CASE WHEN s.side = 1 AND c.judge_label = c.other_label THEN c.n ELSE 0 END AS agreed
    FROM judge_confusion AS c
    CROSS JOIN (VALUES (1), (2)) AS s (side)
),

margins AS (
    SELECT
        comparison, question, rater, rubric_id, rubric_version, rubric_sha256, judge_fingerprint, other_rater, label,
        sum(CASE WHEN side = 1 THEN n ELSE 0 END) AS judge_n, sum(CASE WHEN side = 2 THEN n ELSE 0 END) AS other_n,
        sum(agreed) AS agreed
    FROM sides
    GROUP BY comparison, question, rater, rubric_id, rubric_version, rubric_sha256, judge_fingerprint, other_rater, label
),

rates AS (
    SELECT
        comparison, question, rater, rubric_id, rubric_version, rubric_sha256, judge_fingerprint, other_rater,
        sum(judge_n) AS n, sum(agreed) AS agreed,
        CAST(sum(agreed) AS DOUBLE) / sum(judge_n) AS agreement,
        sum(CAST(judge_n AS DOUBLE) * other_n) / (CAST(sum(judge_n) AS DOUBLE) * sum(judge_n)) AS expected_agreement
    FROM margins
    GROUP BY comparison, question, rater, rubric_id, rubric_version, rubric_sha256, judge_fingerprint, other_rater
)

SELECT
    comparison, question, rater, rubric_id, rubric_version, rubric_sha256, judge_fingerprint, other_rater, n, agreed,
    agreement, expected_agreement,
    CASE WHEN expected_agreement >= 1 THEN NULL
         ELSE (agreement - expected_agreement) / (1 - expected_agreement) END AS kappa
FROM rates;
