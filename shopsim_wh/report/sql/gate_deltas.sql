-- gate_deltas: the paired gate's deltas (treatment reward - bare reward, paired_deltas) per task, averaged over
-- the task's paired samples; bare / treatment = the two mean rewards.
-- grain: one row per task_id paired in both runs. key: task_id
SELECT
    task_id,
    count(*) AS pairs,
    avg(delta) AS delta,
    avg(B_i) AS bare,
    avg(R_i) AS treatment
FROM paired_deltas($bare, $treatment)
GROUP BY task_id
ORDER BY delta DESC, task_id;
