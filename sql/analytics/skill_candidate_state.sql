-- skill_candidate_state: every skill candidate with its gold-firewall findings and its latest review
-- (docs/skills.md): what `skills list` shows and what `skills snapshot` reads.
-- grain: one row per candidate of a round. key: (run_id, candidate_id); run_id = the round.
-- findings = the sorted names of its `skill_firewall` rows (empty list: none); review_* = its latest
-- `skill_reviews` row (NULL: not reviewed); state = 'blocked' (a firewall finding: never snapshotted, whatever the
-- review), else 'accepted' / 'rejected' by the latest review, else 'pending'.
-- DuckDB-specific: list(... ORDER BY ...), QUALIFY.
CREATE OR REPLACE VIEW skill_candidate_state AS
WITH f AS (
    SELECT run_id, candidate_id, list(finding ORDER BY finding) AS findings
    FROM skill_firewall
    GROUP BY run_id, candidate_id
),
r AS (
    SELECT run_id, candidate_id, review_id, decision, reason, reviewer, reviewed_at
    FROM skill_reviews
    QUALIFY row_number() OVER (PARTITION BY run_id, candidate_id ORDER BY reviewed_at DESC, review_id DESC) = 1
)
SELECT c.run_id, c.candidate_id, c.operation, c.target_chunk_id, c.title, c.mechanism, c.content, c.positive_refs,
       c.negative_refs, c.builder, c.created_at, c.load_id,
       coalesce(f.findings, CAST([] AS VARCHAR[])) AS findings,
       r.review_id, r.decision AS review_decision, r.reason AS review_reason, r.reviewer, r.reviewed_at,
       CASE WHEN f.findings IS NOT NULL THEN 'blocked'
            WHEN r.decision = 'accept' THEN 'accepted'
            WHEN r.decision = 'reject' THEN 'rejected'
            ELSE 'pending' END AS state
FROM skill_candidates AS c
LEFT JOIN f ON f.run_id = c.run_id AND f.candidate_id = c.candidate_id
LEFT JOIN r ON r.run_id = c.run_id AND r.candidate_id = c.candidate_id;
