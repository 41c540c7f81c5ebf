-- skill_firewall: the gold firewall over skill candidates (docs/skills.md "The gold firewall"): ShopSimRL's six
-- checks (`shopsimrl/trace2skill.py`, spec: mentions_asin, contains_long_identifier, contains_task_id,
-- copies_instance_product_title, copies_instance_brand, copies_gold_option) and, beyond ShopSimRL,
-- contains_heldout_task_id (a val/test task id of the round's split manifests, table skill_heldout_tasks).
-- grain: one row per (candidate, finding). key: (run_id, candidate_id, finding); run_id = the candidate's round.
-- A candidate without a row has no finding. Scanned text = title, mechanism and content joined by a newline.
-- finding   the check's name;  example = the smallest matching value (the identifier, title, brand, option or
--           task id found);  matches = how many distinct values matched.
-- Rules:
-- * mentions_asin: the word ASIN, any case; contains_long_identifier: a run of 10 or more digits;
--   contains_task_id: `task`, any case, then at most one of `-`, `_`, ` `, then digits. "Word-bounded" is ASCII
--   here (a letter, digit or `_` next to the match breaks it; a CJK character does not, where Python's Unicode \b
--   would), so DuckDB and Spark agree and the check flags at least what ShopSimRL's flags.
-- * the instance checks compare against the observations of the candidate's evidence episodes (positive_refs and
--   negative_refs): copies_instance_product_title = a product page's `product.title` (>= 6 characters after trim)
--   occurs in the text, case-sensitive; copies_instance_brand = a `product.brand` (>= 3); copies_gold_option = a
--   value of `available_options` (>= 6). The warehouse never holds the private goal, so the options the evidence
--   pages offered (a superset of the gold option) stand in for ShopSimRL's `final.goal.goal_options`.
-- * contains_heldout_task_id: a maximal digit run of the text whose integer value is a val or test task id.
-- DuckDB-specific: from_json, unnest, json_keys, regexp_extract_all.
CREATE OR REPLACE VIEW skill_firewall AS
WITH cand AS (
    SELECT run_id, candidate_id, positive_refs, negative_refs,
           concat_ws(chr(10), coalesce(title, ''), coalesce(mechanism, ''), coalesce(content, '')) AS text
    FROM skill_candidates
),
refs AS (
    SELECT run_id, candidate_id,
           unnest(from_json(positive_refs, '[{"run_id": "VARCHAR", "episode_id": "VARCHAR", "step_idx": "INTEGER"}]')) AS r
    FROM cand
    UNION ALL
    SELECT run_id, candidate_id,
           unnest(from_json(negative_refs, '[{"run_id": "VARCHAR", "episode_id": "VARCHAR", "step_idx": "INTEGER"}]')) AS r
    FROM cand
),
evidence AS (
    SELECT DISTINCT run_id, candidate_id, r.run_id AS ev_run_id, r.episode_id AS ev_episode_id FROM refs
),
pages AS (
    SELECT e.run_id, e.candidate_id, o.observation_state AS state
    FROM evidence AS e
    JOIN observations AS o ON o.run_id = e.ev_run_id AND o.episode_id = e.ev_episode_id
    WHERE o.observation_state IS NOT NULL AND json_extract_string(o.observation_state, '$.product.title') IS NOT NULL
),
axes AS (
    SELECT run_id, candidate_id, json_extract(state, '$.available_options') AS opts,
           unnest(json_keys(json_extract(state, '$.available_options'))) AS axis
    FROM pages
    WHERE json_extract(state, '$.available_options') IS NOT NULL
),
instance_values AS (
    SELECT DISTINCT run_id, candidate_id, 'copies_instance_product_title' AS finding,
           trim(json_extract_string(state, '$.product.title')) AS value, 6 AS min_len
    FROM pages
    UNION ALL
    SELECT DISTINCT run_id, candidate_id, 'copies_instance_brand' AS finding,
           trim(json_extract_string(state, '$.product.brand')) AS value, 3 AS min_len
    FROM pages
    UNION ALL
    SELECT DISTINCT run_id, candidate_id, 'copies_gold_option' AS finding, trim(value) AS value, 6 AS min_len
    FROM (SELECT run_id, candidate_id,
                 unnest(from_json(json_extract(opts, '$."' || axis || '"'), '["VARCHAR"]')) AS value
          FROM axes) AS v
),
instance_hits AS (
    SELECT c.run_id, c.candidate_id, i.finding, i.value AS example
    FROM cand AS c
    JOIN instance_values AS i ON i.run_id = c.run_id AND i.candidate_id = c.candidate_id
    WHERE i.value IS NOT NULL AND length(i.value) >= i.min_len AND strpos(c.text, i.value) > 0
),
numbers AS (
    SELECT run_id, candidate_id, unnest(regexp_extract_all(text, '[0-9]+')) AS digits FROM cand
),
heldout_hits AS (
    SELECT DISTINCT n.run_id, n.candidate_id, 'contains_heldout_task_id' AS finding,
           h.split || ' task ' || CAST(h.task_id AS VARCHAR) AS example
    FROM numbers AS n
    JOIN skill_heldout_tasks AS h
      ON h.run_id = n.run_id AND length(n.digits) <= 18 AND h.task_id = CAST(n.digits AS BIGINT)
),
text_hits AS (
    SELECT run_id, candidate_id, 'mentions_asin' AS finding,
           regexp_extract(text, '(?i)(^|[^0-9A-Za-z_])(asin)([^0-9A-Za-z_]|$)', 2) AS example
    FROM cand WHERE regexp_matches(text, '(?i)(^|[^0-9A-Za-z_])asin([^0-9A-Za-z_]|$)')
    UNION ALL
    SELECT run_id, candidate_id, 'contains_long_identifier' AS finding,
           regexp_extract(text, '(^|[^0-9A-Za-z_])([0-9]{10,})([^0-9A-Za-z_]|$)', 2) AS example
    FROM cand WHERE regexp_matches(text, '(^|[^0-9A-Za-z_])[0-9]{10,}([^0-9A-Za-z_]|$)')
    UNION ALL
    SELECT run_id, candidate_id, 'contains_task_id' AS finding,
           regexp_extract(text, '(?i)(^|[^0-9A-Za-z_])(task[-_ ]?[0-9]+)([^0-9A-Za-z_]|$)', 2) AS example
    FROM cand WHERE regexp_matches(text, '(?i)(^|[^0-9A-Za-z_])task[-_ ]?[0-9]+([^0-9A-Za-z_]|$)')
),
hits AS (
    SELECT * FROM text_hits
    UNION ALL SELECT * FROM instance_hits
    UNION ALL SELECT * FROM heldout_hits
)
SELECT run_id, candidate_id, finding, min(example) AS example, count(DISTINCT example) AS matches
FROM hits
GROUP BY run_id, candidate_id, finding;
