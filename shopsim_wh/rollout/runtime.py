"""AgentRuntime: one episode, one model client, one environment lease.

The agent protocol is ShopSimRL's ``openai-function-tools-repair-v3`` (docs/conventions.md, "The agent protocol"):

* tools are built from the page's ``observation_state`` each turn (:func:`prompts.tools_for`);
* a turn must be exactly one tool call and no visible text. A turn that is not — a model-side
  code from :func:`model.parse_response` (``invalid_arguments_json``, ``missing_function``,
  ``unavailable_tool``, ``empty_response``, ...), or the runtime's own ``tool_call_count``,
  ``mixed_content``, ``invalid_tool_arguments`` (all of them constants of :mod:`protocol_codes`, which gives each
  its error-taxonomy label) — sends nothing to the environment: the assistant
  message (when it has calls) and one ``tool`` message per parsed call carrying the feedback
  ``{type: tool_protocol_error, code, message, instruction, available_tools}`` go into the
  conversation (with no parsed call: the assistant text if any, then one ``user`` feedback
  message); the turn counts;
* ``finish_reason = length`` without exactly one valid call is a policy failure: the step records
  ``policy_failure = generation_length`` and the environment is told to terminate with that reason;
* ``max_steps`` model turns, then the environment is told to terminate with ``action_limit``;
* the step seed is ``episode seed + step_index - 1`` (step_index 1-based), sent only with ``send_seed``;
* the environment alone decides validity, ``done``, the reward and the termination reason;
* the lease is released on every path (exceptions and cancellation included).

The episode is recorded as rows of the warehouse tables (docs/conventions.md) as it happens;
``step_idx`` is 0-based (``step_index - 1``). With ``model.record_tokens`` each turn's token ids become a
``model_turn_tokens`` row; an answer without them (:class:`~.model.TokenIdsMissing`) stops the run, as a refused
request does.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..core import protocol_codes as pc
from ..core.errors import ModelHTTPError
from .environment import EnvStep
from .jobs import EpisodeJob
from .model import ChatModel, ModelOutput, TokenIdsMissing, ToolCall
from .prompts import PromptBuilder, tool_schema_hash, tool_set_hash_of, tools_for
from .skills import SkillProvider

AGENT = "main"
ACTION_PROTOCOL = "openai-function-tools-repair-v3"
FEEDBACK_INSTRUCTION = "上一轮没有执行任何环境动作。请针对同一页面重新回答：只调用一个当前提供的函数工具，不要输出可见文字。"


def _now() -> datetime:
    return datetime.now(UTC)


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


@dataclass
class EpisodeRecord:
    """Rows of one episode attempt, without run_id / attempt / load_id (the runner adds them)."""

    job: EpisodeJob
    episode: dict = field(default_factory=dict)
    steps: list[dict] = field(default_factory=list)
    actions: list[dict] = field(default_factory=list)
    observations: list[dict] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)
    tools: dict[str, dict] = field(default_factory=dict)
    skills: list[dict] = field(default_factory=list)
    turn_tokens: list[dict] = field(default_factory=list)  # model_turn_tokens rows (model.record_tokens)
    failure: dict | None = None
    fatal: BaseException | None = None  # a config problem that should stop the whole run
    error: BaseException | None = field(default=None, repr=False)  # what failed the attempt (not stored)

    @property
    def completed(self) -> bool:
        return self.episode.get("status") == "completed"


def environment_action(call: ToolCall) -> str:
    """``search[q]`` / ``click[v]`` from one call; a ValueError is the ``invalid_tool_arguments`` message."""
    args = call.args if isinstance(call.args, dict) else {}
    key = {"search": "query", "click": "value"}.get(call.name or "")
    if key is None:
        raise ValueError(f"unsupported action tool: {call.name}")
    if set(args) != {key}:
        raise ValueError(f"{call.name} takes exactly one argument, {key!r}; got {sorted(args)}")
    value = args[key]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{call.name} {key} must be a non-empty string")
    return f"{call.name}[{value.strip()}]"


def check_turn(out: ModelOutput) -> tuple[dict | None, str | None]:
    """(protocol_error, action) for an output the model client accepted or rejected."""
    if out.protocol_error is not None:
        return out.protocol_error, None
    if len(out.tool_calls) != 1:
        return {"code": pc.TOOL_CALL_COUNT,
                "message": f"model must return exactly one tool call, got {len(out.tool_calls)}"}, None
    if out.content and out.content.strip():
        return {"code": pc.MIXED_CONTENT,
                "message": "model must not mix natural-language content with an action tool call"}, None
    try:
        return None, environment_action(out.tool_calls[0])
    except ValueError as exc:
        return {"code": pc.INVALID_TOOL_ARGUMENTS, "message": str(exc)}, None


def protocol_feedback(error: dict, tools: list[dict]) -> dict:
    return {"type": "tool_protocol_error", "code": error["code"], "message": error["message"],
            "instruction": FEEDBACK_INSTRUCTION, "available_tools": [t["function"]["name"] for t in tools]}


def reward_facts(detail: dict | None, reward: float | None, primary: str) -> tuple[float | None, float | None, float | None, bool]:
    """(r_loose, r_strict, r_success, derived): the server's figures, derived by the formulas only when it gave none."""
    d = detail or {}

    def num(k):
        v = d.get(k)
        return float(v) if isinstance(v, (int, float)) else None

    given = (num("r_loose"), num("r_strict"), num("r_success"))
    if any(v is not None for v in given):
        return (*given, False)
    rt, ra, ro, rp = num("r_type"), num("r_att"), num("r_option"), num("r_price")
    if None in (rt, ra, rp):
        if reward is None:
            return None, None, None, False
        # nothing to derive from: the top-level reward is the primary figure
        return (reward if primary == "r_loose" else None, reward if primary == "r_strict" else None, None, True)
    ro1 = 1.0 if ro is None else ro
    strict = rt * ra * ro1 * rp
    loose = reward if primary == "r_loose" else None
    return loose, strict, 1.0 if (rt, ra, ro1, rp) == (1.0, 1.0, 1.0, 1.0) else 0.0, True


class AgentRuntime:
    def __init__(self, model: ChatModel, env, prompts: PromptBuilder, skills: SkillProvider, max_steps: int = 30,
                 primary_reward: str = "r_strict"):
        if max_steps < 1:
            raise ValueError("max_steps must be positive")
        self.model = model
        self.env = env
        self.prompts = prompts
        self.skills = skills
        self.max_steps = max_steps
        self.primary_reward = primary_reward

    async def run(self, job: EpisodeJob) -> EpisodeRecord:
        rec = EpisodeRecord(job)
        started, t0 = _now(), time.perf_counter()
        stage = "reset"
        counters = {"model_steps": 0, "protocol_errors": 0, "total_actions": 0, "invalid_actions": 0,
                    "tokens_in": 0, "tokens_out": 0}
        reset: EnvStep | None = None
        try:
            reset = await self.env.reset(job.task_id)
            rec.episode["reset_payload"] = _dumps(reset.payload)
            stage = "runtime"
            selected = self.skills.select({"task_id": job.task_id, "sample_id": job.sample_id, "split": job.split,
                                           "instruction": reset.task_instruction, "persona": reset.persona,
                                           "state": reset.state}, job.seed)
            rec.skills = [{"skill_id": s.id, "skill_version": s.version, "scope": s.scope, "content_hash": s.content_hash,
                           "content": s.content, "metadata": _dumps(s.metadata)} for s in selected]
            view = {"task_instruction": reset.task_instruction, "observation": reset.observation,
                    "user_persona": reset.persona}
            messages: list[dict] = []
            for m in self.prompts.messages_start(view, selected):
                self._say(rec, messages, m)
            rec.episode["prompt_hash"] = self.prompts.prompt_hash
            final = await self._loop(rec, messages, job, reset, counters)
            stage = "runtime"
            if not final.done:
                raise RuntimeError("the episode did not reach a terminal environment state")
            self._finish(rec, reset, final, counters, started, t0)
        except Exception as exc:  # infrastructure failure: recorded, never a reward of 0
            self._fail(rec, reset, getattr(exc, "_stage", stage), exc, counters, started, t0)
        finally:
            try:
                await self.env.close()
            except Exception as exc:  # the episode's outcome stands; note the leak risk
                note = f"lease release failed: {type(exc).__name__}: {exc}"
                if rec.failure is None:
                    rec.episode["error_stage"], rec.episode["error_message"] = "cleanup", note
                else:
                    rec.failure["message"] += f"\n(cleanup) {note}"
        return rec

    async def _loop(self, rec: EpisodeRecord, messages: list[dict], job: EpisodeJob, reset: EnvStep, counters: dict) -> EnvStep:
        state = reset.state
        for step_index in range(1, self.max_steps + 1):
            step_idx = step_index - 1
            tools = tools_for(state)
            hashes = self._record_tools(rec, tools)
            seed = job.seed + step_index - 1
            step_started, n_prompt = _now(), len(messages)
            try:
                out = await self.model.generate(messages, tools, seed)
            except Exception as exc:
                exc._stage = "model"  # type: ignore[attr-defined]
                raise
            counters["model_steps"] += 1
            if out.tokens is not None:
                t = out.tokens
                rec.turn_tokens.append({"agent_id": AGENT, "step_idx": step_idx, "prompt_token_ids": t.prompt_ids,
                                        "completion_token_ids": t.completion_ids, "completion_logprobs": t.logprobs,
                                        "finish_reason": out.finish_reason})
            counters["tokens_in"] += out.prompt_tokens or 0
            counters["tokens_out"] += out.completion_tokens or 0
            step = self._step_row(step_idx, state, n_prompt, hashes, out, seed if self.model.send_seed else None, step_started)
            rec.steps.append(step)
            if out.policy_failure is not None:
                step.update(policy_failure=out.policy_failure["code"], raw_response=_dumps(out.raw))
                return await self._terminate(rec, step_idx, out.policy_failure["code"])
            error, action = check_turn(out)
            if error is not None:
                counters["protocol_errors"] += 1
                feedback = protocol_feedback(error, tools)
                step.update(protocol_error=error["code"], protocol_feedback=_dumps(feedback), raw_response=_dumps(out.raw))
                self._record_protocol_error(rec, messages, step_idx, out, error, feedback)
                await asyncio.sleep(0)  # yield: in-process transports never suspend on their own
                continue
            call = out.tool_calls[0]
            self._say(rec, messages, out.assistant_message())
            try:
                res = await self.env.step(action)
            except Exception as exc:
                exc._stage = "step"  # type: ignore[attr-defined]
                raise
            counters["total_actions"] += 1
            counters["invalid_actions"] += 0 if res.valid else 1
            self._record_env_action(rec, messages, step_idx, call, action, res)
            if res.done:
                return res
            state = res.state
            await asyncio.sleep(0)
        return await self._terminate(rec, self.max_steps - 1, "action_limit")

    # -- recording helpers -----------------------------------------------------------------------
    @staticmethod
    def _say(rec: EpisodeRecord, messages: list[dict], msg: dict) -> None:
        """Append one message to the conversation and its row (the row is exactly what the model is sent)."""
        messages.append(msg)
        rec.messages.append({"msg_idx": len(rec.messages), "role": msg["role"], "content": msg.get("content"),
                             "tool_calls": _dumps(msg["tool_calls"]) if msg.get("tool_calls") else None,
                             "tool_call_id": msg.get("tool_call_id")})

    @staticmethod
    def _record_tools(rec: EpisodeRecord, tools: list[dict]) -> list[str]:
        """The offered tools' schema hashes (one tools row per new schema)."""
        hashes = [tool_schema_hash(t) for t in tools]
        for h, t in zip(hashes, tools, strict=True):
            if h not in rec.tools:
                fn = t["function"]
                rec.tools[h] = {"agent_id": AGENT, "name": fn["name"], "description": fn.get("description"),
                                "parameters": _dumps(fn.get("parameters")), "tool_type": "execution", "schema_hash": h}
        return hashes

    def _step_row(self, step_idx, state, n_msgs, hashes: list[str], out: ModelOutput, seed, started) -> dict:
        meta = {k: v for k, v in (("usage", out.usage), ("response_metadata", out.metadata)) if v}
        return {
            "agent_id": AGENT, "step_idx": step_idx, "seq": step_idx, "page": state.get("page_type"),
            "observation_state": _dumps(state), "prompt_msg_count": n_msgs, "tools_hash": tool_set_hash_of(hashes),
            "tool_schema_hashes": _dumps(hashes),
            "reasoning": out.reasoning, "content": out.content, "finish_reason": out.finish_reason,
            "response_id": out.response_id, "model": out.model, "step_seed": seed,
            "tokens_in": out.prompt_tokens, "tokens_out": out.completion_tokens, "latency_ms": out.latency_ms,
            "started_at": started, "metadata": _dumps(meta) if meta else None,
        }

    def _record_protocol_error(self, rec, messages, step_idx, out: ModelOutput, error: dict, feedback: dict) -> None:
        text = _dumps(feedback)
        if not out.tool_calls:
            if out.content and out.content.strip():
                self._say(rec, messages, {"role": "assistant", "content": out.content})
            self._say(rec, messages, {"role": "user", "content": text})
            rec.observations.append({"agent_id": AGENT, "step_idx": step_idx, "call_id": None, "observation_type": "error",
                                     "content": text, "is_error": True, "done": False})
            return
        self._say(rec, messages, out.assistant_message())
        for i, c in enumerate(out.tool_calls):
            rec.actions.append({"agent_id": AGENT, "step_idx": step_idx, "call_idx": i, "call_id": c.id, "tool_name": c.name,
                                "arguments": c.arguments, "action": None, "action_type": "tool_use", "tool_type": "execution",
                                "action_valid": False, "feedback_code": error["code"], "feedback_message": error["message"]})
            rec.observations.append({"agent_id": AGENT, "step_idx": step_idx, "call_id": c.id, "observation_type": "error",
                                     "content": text, "is_error": True, "done": False})
            self._say(rec, messages, {"role": "tool", "tool_call_id": c.id, "content": text})

    def _observation_row(self, step_idx: int, call_id: str | None, res: EnvStep) -> dict:
        return {"agent_id": AGENT, "step_idx": step_idx, "call_id": call_id, "observation_type": "environment",
                "content": res.observation, "observation_state": _dumps(res.state), "page": res.state.get("page_type"),
                "is_error": not res.valid, "reward": res.reward if res.done else None, "done": res.done,
                "payload": _dumps(res.payload)}

    def _record_env_action(self, rec, messages, step_idx, call: ToolCall, action: str, res: EnvStep) -> None:
        rec.actions.append({"agent_id": AGENT, "step_idx": step_idx, "call_idx": 0, "call_id": call.id, "tool_name": call.name,
                            "arguments": call.arguments, "action": action, "action_type": "tool_use", "tool_type": "execution",
                            "action_valid": res.valid, "feedback_code": res.feedback_code, "feedback_message": res.feedback_message})
        rec.observations.append(self._observation_row(step_idx, call.id, res))
        self._say(rec, messages, {"role": "tool", "tool_call_id": call.id, "content": res.observation})

    async def _terminate(self, rec: EpisodeRecord, step_idx: int, reason: str) -> EnvStep:
        try:
            res = await self.env.terminate(reason)
        except Exception as exc:
            exc._stage = "terminate"  # type: ignore[attr-defined]
            raise
        call_idx = sum(1 for a in rec.actions if a["step_idx"] == step_idx)
        rec.actions.append({"agent_id": AGENT, "step_idx": step_idx, "call_idx": call_idx, "call_id": None, "tool_name": None,
                            "arguments": _dumps({"termination_reason": reason}), "action": f"terminate[{reason}]",
                            "action_type": "terminate", "tool_type": None, "action_valid": True})
        rec.observations.append(self._observation_row(step_idx, None, res))
        return res

    def _base_episode(self, rec: EpisodeRecord, reset: EnvStep | None, counters, started, t0) -> None:
        job = rec.job
        persona = reset.persona if reset is not None else None
        rec.episode.update(
            task_id=job.task_id, sample_id=job.sample_id, seed=job.seed, split=job.split,
            instruction=reset.task_instruction if reset is not None else None,
            persona=None if persona is None else persona if isinstance(persona, str) else
            json.dumps(persona, ensure_ascii=False, sort_keys=True),
            skill_ids=_dumps([s["skill_id"] for s in rec.skills]),
            started_at=started, finished_at=_now(), duration_s=time.perf_counter() - t0, **counters,
        )

    def _finish(self, rec: EpisodeRecord, reset, final: EnvStep, counters, started, t0) -> None:
        detail = final.reward_detail
        loose, strict, success, derived = reward_facts(detail, final.reward, self.primary_reward)
        self._base_episode(rec, reset, counters, started, t0)
        d = detail or {}
        rec.episode.update(
            status="completed", done=final.done, reward=final.reward,
            reward_detail=_dumps(detail) if detail is not None else None,
            r_type=_f(d.get("r_type")), r_att=_f(d.get("r_att")), r_option=_f(d.get("r_option")), r_price=_f(d.get("r_price")),
            r_loose=loose, r_strict=strict, r_success=success, reward_derived=derived,
            right_product=final.right_product, purchase_asin=(final.purchase or {}).get("asin"),
            termination_reason=final.termination_reason,
        )

    def _fail(self, rec: EpisodeRecord, reset, stage, exc: Exception, counters, started, t0) -> None:
        self._base_episode(rec, reset, counters, started, t0)
        message = str(exc)[:4000]
        rec.episode.update(status="failed", done=False, error_stage=stage, error_type=type(exc).__name__, error_message=message)
        rec.error = exc
        rec.failure = {"stage": stage, "exception_type": type(exc).__name__, "message": message,
                       "traceback": "".join(traceback.format_exception(exc))[-20000:], "occurred_at": _now()}
        if isinstance(exc, ModelHTTPError | TokenIdsMissing):
            rec.fatal = exc


def _f(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) else None
