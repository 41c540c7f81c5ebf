-- export: slime-samples
-- grain: one row per trainer sample (training_samples with its training_tokens): slime's own Sample.to_dict() object, one per JSONL line
-- trl: -
-- sample: run_id, episode_id, agent_id, sample_idx
-- filters: status, success, split, source_format, experiment, task_id, source, sample_status, remove_sample, rollout_step, group_index, total_length, trainable_tokens, tokenizer_id
-- description: slime's sample JSON back out: each line one Sample.to_dict() object (tokens, response_length, loss_mask, rollout_log_probs, reward, status, metadata, rollout_id, ...) that slime's Sample.from_dict accepts; --format jsonl writes the objects alone
-- params: export_include_persona, export_include_reasoning
-- batch: all
-- line: sample
--
-- Columns (docs/export_rl.md, "slime-samples")
--   sample         JSON, slime's `Sample.to_dict()` (slime/utils/types.py), in its field order: group_index, index
--                  (sample_index), prompt (a JSON list of messages stays a list, other text a string), tokens,
--                  multimodal_inputs, multimodal_train_inputs, response, response_length, label, reward (as it was
--                  written: ShopSimRL's {reward, r_*} object, or a number; `rewards`), loss_mask, weight_versions,
--                  rollout_log_probs, rollout_routed_experts, remove_sample, teacher_log_probs (ref_logprobs),
--                  mopd_teacher_log_probs, status, metadata (the sample's own, whole: shopsim_* keys included),
--                  generate_function_path, train_metadata, session_id, non_generation_time, spec_info,
--                  prefix_cache_info; then the attributes set outside the dataclass: rollout_id and advantage when
--                  recorded, and every other field the slime ingest kept (for `source = 'slime'`,
--                  training_samples.metadata holds the sample's `metadata` under `metadata` and each field no
--                  column holds under its own name: they come back with their values; a runner sample's metadata
--                  is its `metadata`); a dataclass field not kept takes slime's default.
--                  --format jsonl writes this object alone per line.
--   lineage        sample_id, run_id, episode_id, task_id, agent_id, sample_idx, rollout_step, rollout_id,
--                  group_index, sample_index, split, source, source_format, experiment
--   tokenizer_id, total_length, trainable_tokens, sample_status, remove_sample; status, success (the episode's)
-- Every row by default: slime's dump holds its remove_sample placeholders, so does this. Samples whose tokens
-- carry a persona or reasoning only with --include-persona / --include-reasoning (export_training_samples).
-- DuckDB-specific: to_json, struct_pack, json_extract, json_keys, lambdas, md5.
CREATE OR REPLACE VIEW export_slime_samples AS
WITH s AS (  -- kept: the slime ingest's metadata layout; a runner sample's metadata is the sample's own
    SELECT
        *,
        CASE WHEN NOT (json_valid(metadata) AND json_type(CAST(metadata AS JSON)) = 'OBJECT') THEN CAST('{}' AS JSON)
             WHEN source = 'slime' THEN CAST(metadata AS JSON)
             ELSE CAST(to_json(struct_pack(metadata := CAST(metadata AS JSON))) AS JSON) END AS kept
    FROM export_training_samples
),

objects AS (
    SELECT
        *,
        CAST(to_json(struct_pack(
            group_index := group_index,
            "index" := sample_index,
            prompt := CASE WHEN json_valid(prompt) AND json_type(CAST(prompt AS JSON)) = 'ARRAY'
                           THEN CAST(prompt AS JSON) ELSE CAST(to_json(coalesce(prompt, '')) AS JSON) END,
            tokens := token_ids,
            multimodal_inputs := json_extract(kept, '$.multimodal_inputs'),
            multimodal_train_inputs := json_extract(kept, '$.multimodal_train_inputs'),
            response := coalesce(response, ''),
            response_length := response_length,
            label := label,
            reward := CASE WHEN json_valid(rewards) THEN CAST(rewards AS JSON) ELSE CAST(to_json(reward) AS JSON) END,
            loss_mask := loss_mask,
            weight_versions := CASE WHEN json_valid(weight_versions) THEN CAST(weight_versions AS JSON)
                                    ELSE CAST('[]' AS JSON) END,
            rollout_log_probs := rollout_logprobs,
            rollout_routed_experts := json_extract(kept, '$.rollout_routed_experts'),
            remove_sample := coalesce(remove_sample, false),
            teacher_log_probs := coalesce(CAST(to_json(ref_logprobs) AS JSON), json_extract(kept, '$.teacher_log_probs')),
            mopd_teacher_log_probs := json_extract(kept, '$.mopd_teacher_log_probs'),
            status := coalesce(sample_status, 'pending'),
            metadata := coalesce(json_extract(kept, '$.metadata'), CAST('{}' AS JSON)),
            generate_function_path := json_extract(kept, '$.generate_function_path'),
            train_metadata := json_extract(kept, '$.train_metadata'),
            session_id := json_extract(kept, '$.session_id'),
            non_generation_time := coalesce(json_extract(kept, '$.non_generation_time'), CAST('0.0' AS JSON)),
            spec_info := coalesce(json_extract(kept, '$.spec_info'), CAST('{"spec_accept_token_num":0,'
                || '"spec_draft_token_num":0,"spec_verify_ct":0,"completion_token_num":0}' AS JSON)),
            prefix_cache_info := coalesce(json_extract(kept, '$.prefix_cache_info'),
                                          CAST('{"cached_tokens":0,"total_prompt_tokens":0}' AS JSON))
        )) AS VARCHAR) AS fields,
        -- the kept fields that are no dataclass field of Sample (attributes set on it), `"key":value` as kept
        array_to_string(list_transform(
            list_filter(json_keys(kept), lambda k: NOT list_contains(['metadata', 'multimodal_inputs',
                'multimodal_train_inputs', 'rollout_routed_experts', 'teacher_log_probs', 'mopd_teacher_log_probs',
                'generate_function_path', 'train_metadata', 'session_id', 'non_generation_time', 'spec_info',
                'prefix_cache_info', 'rollout_id', 'advantage'], k)),
            lambda k: CAST(to_json(k) AS VARCHAR) || ':'
                || CAST(json_extract(kept, '$."' || replace(k, '"', '\"') || '"') AS VARCHAR)), ',') AS attributes
    FROM s
)

SELECT
    md5('slime-samples/' || run_id || '/' || episode_id || '/' || agent_id || '/' || CAST(sample_idx AS VARCHAR))
        AS sample_id,
    run_id,
    episode_id,
    task_id,
    agent_id,
    sample_idx,
    rollout_step,
    rollout_id,
    group_index,
    sample_index,
    split,
    source,
    source_format,
    experiment,
    tokenizer_id,
    total_length,
    trainable_tokens,
    sample_status,
    coalesce(remove_sample, false) AS remove_sample,
    status,
    success,
    CAST(left(fields, length(fields) - 1)
         || coalesce(',"rollout_id":' || CAST(rollout_id AS VARCHAR), '')
         || coalesce(',"advantage":' || CAST(to_json(advantage) AS VARCHAR), '')
         || CASE WHEN coalesce(attributes, '') = '' THEN '' ELSE ',' || attributes END
         || '}' AS JSON) AS sample
FROM objects;
