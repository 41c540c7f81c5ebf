"""AgentRuntime: one episode, one model client, one environment lease (seed 000 §5-§6).

The state machine:

* tools are exposed per page from ``observation_state`` (``search`` when search is available,
  ``click`` with an enum of the page's clickables);
* a response with no tool call, several calls, an unknown tool or unparsable arguments is a
  *protocol error*: it consumes one action of budget, is recorded with the raw response and the
  feedback sent back, and the model retries on the same page;
* a syntactically valid click outside the enum goes to the environment, which judges it;
* ``finish_reason = "length"`` without a valid call is a *policy failure*: the environment is asked
  to terminate with ``generation_length`` (a zero-score terminal, not an infrastructure error);
* when protocol errors exhaust the budget the runtime terminates with ``protocol_budget``;
* the environment alone decides validity, ``done`` and the reward;
* the lease is released on every path (exceptions and cancellation included).

The episode is recorded as rows of the warehouse tables (docs/conventions.md) as it happens.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .environment import EnvStep
from .errors import ModelHTTPError
from .jobs import EpisodeJob
from .model import ChatModel, ModelOutput, ToolCall
from .prompts import PromptBuilder, tool_schema_hash, tool_set_hash, tools_for
from .skills import SkillProvider

AGENT = "main"
MAX_TEXT = 1_000_000


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
    failure: dict | None = None
    fatal: BaseException | None = None  # a config problem that should stop the whole run

    @property
    def completed(self) -> bool:
        return self.episode.get("status") == "completed"


def classify(out: ModelOutput, offered: dict[str, dict]) -> tuple[str | None, str | None, dict | None]:
    """Return (protocol_error, feedback, parsed_arguments) for one model output."""
    calls = out.tool_calls
    if not calls:
        return "no_tool_call", "Your reply contained no tool call. Call exactly one of the offered tools.", None
    if len(calls) > 1:
        return "multiple_tool_calls", f"Your reply contained {len(calls)} tool calls. Call exactly one tool per turn.", None
    call = calls[0]
    if call.name not in offered:
        return "unknown_tool", f"There is no tool named {call.name!r} on this page; offered: {', '.join(offered)}.", None
    try:
        args = json.loads(call.arguments or "")
    except (json.JSONDecodeError, TypeError):
        return "invalid_arguments", "The tool arguments are not valid JSON. Send a JSON object.", None
    params = offered[call.name]["function"]["parameters"]
    required = params.get("required", [])
    if not isinstance(args, dict) or any(not isinstance(args.get(k), str) for k in required):
        return "invalid_arguments", f"The arguments must be a JSON object with string field(s) {required}.", None
    return None, None, args


def canonical_action(name: str, args: dict) -> str:
    return f"search[{args['query']}]" if name == "search" else f"click[{args['value']}]"


class AgentRuntime:
    def __init__(self, model: ChatModel, env, prompts: PromptBuilder, skills: SkillProvider, action_limit: int):
        self.model = model
        self.env = env
        self.prompts = prompts
        self.skills = skills
        self.action_limit = action_limit

    async def run(self, job: EpisodeJob) -> EpisodeRecord:
        rec = EpisodeRecord(job)
        started, t0 = _now(), time.perf_counter()
        stage = "reset"
        counters = {"model_steps": 0, "protocol_errors": 0, "total_actions": 0, "invalid_actions": 0,
                    "tokens_in": 0, "tokens_out": 0}
        final: EnvStep | None = None
        task: dict = {}
        try:
            first = await self.env.reset(job.task_id)
            task = first.task
            selected = self.skills.select({"task_id": job.task_id, "instruction": task.get("instruction"),
                                           "persona": task.get("persona"), "state": first.state}, job.seed)
            rec.skills = [{"skill_id": s.id, "skill_version": s.version, "scope": s.scope, "content_hash": s.content_hash,
                           "content": s.content, "metadata": _dumps(s.metadata)} for s in selected]
            messages = self.prompts.messages_start(selected, task, first.observation)
            rec.messages = [{"msg_idx": i, "role": m["role"], "content": m["content"]} for i, m in enumerate(messages)]
            rec.episode["prompt_hash"] = self.prompts.prompt_hash
            state, used, step_idx = first.state, 0, 0
            while final is None:
                if used >= self.action_limit:
                    stage = "terminate"
                    final = await self._terminate(rec, step_idx - 1, "protocol_budget")
                    break
                tools = tools_for(state)
                offered = {t["function"]["name"]: t for t in tools}
                self._record_tools(rec, tools)
                stage = "model"
                step_started = _now()
                out = await self.model.generate(messages, tools, job.step_seed(step_idx))
                counters["model_steps"] += 1
                counters["tokens_in"] += out.prompt_tokens or 0
                counters["tokens_out"] += out.completion_tokens or 0
                error, feedback, args = classify(out, offered)
                step = self._step_row(step_idx, state, len(messages), tools, out, job.step_seed(step_idx), step_started)
                rec.steps.append(step)
                calls = [ToolCall(c.id or f"call_{step_idx}_{i}", c.name, c.arguments) for i, c in enumerate(out.tool_calls)]
                if error and out.finish_reason == "length":
                    step["policy_failure"] = "generation_length"
                    step["raw_response"] = _dumps(out.raw)
                    messages.append(self._assistant(rec, out, calls))
                    stage = "terminate"
                    final = await self._terminate(rec, step_idx, "generation_length")
                    break
                messages.append(self._assistant(rec, out, calls))
                if error:
                    counters["protocol_errors"] += 1
                    used += 1
                    step.update(protocol_error=error, protocol_feedback=feedback, raw_response=_dumps(out.raw))
                    self._record_protocol_error(rec, messages, step_idx, calls, error, feedback)
                else:
                    call = calls[0]
                    action = canonical_action(call.name, args)
                    stage = "step"
                    res = await self.env.step(action)
                    used += 1
                    counters["total_actions"] += 1
                    counters["invalid_actions"] += 0 if res.valid else 1
                    self._record_env_action(rec, messages, step_idx, call, action, res)
                    state = res.state
                    if res.done:
                        final = res
                step_idx += 1
                await asyncio.sleep(0)  # yield: in-process transports never suspend on their own
            self._finish(rec, job, task, final, counters, started, t0)
        except Exception as exc:  # infrastructure failure: recorded, never a reward of 0
            self._fail(rec, job, task, stage, exc, counters, started, t0)
        finally:
            try:
                await self.env.close()
            except Exception as exc:  # the episode's outcome stands; note the leak risk
                if rec.failure is None:
                    rec.episode["error_message"] = f"lease release failed: {exc}"
        return rec

    # -- recording helpers -----------------------------------------------------------------------
    def _record_tools(self, rec: EpisodeRecord, tools: list[dict]) -> None:
        for t in tools:
            h = tool_schema_hash(t)
            if h not in rec.tools:
                fn = t["function"]
                rec.tools[h] = {"agent_id": AGENT, "name": fn["name"], "description": fn.get("description"),
                                "parameters": _dumps(fn.get("parameters")), "tool_type": "execution", "schema_hash": h}

    def _step_row(self, step_idx, state, n_msgs, tools, out: ModelOutput, seed, started) -> dict:
        return {
            "agent_id": AGENT, "step_idx": step_idx, "seq": step_idx, "page": state.get("page"),
            "observation_state": _dumps(state), "prompt_msg_count": n_msgs, "tools_hash": tool_set_hash(tools),
            "tool_schema_hashes": _dumps([tool_schema_hash(t) for t in tools]),
            "reasoning": out.reasoning, "content": out.content, "finish_reason": out.finish_reason,
            "response_id": out.response_id, "model": out.model, "step_seed": seed,
            "tokens_in": out.prompt_tokens, "tokens_out": out.completion_tokens, "latency_ms": out.latency_ms,
            "started_at": started,
        }

    def _assistant(self, rec: EpisodeRecord, out: ModelOutput, calls: list[ToolCall]) -> dict:
        msg: dict = {"role": "assistant", "content": out.content}
        if calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in calls]
        rec.messages.append({"msg_idx": len(rec.messages), "role": "assistant", "content": out.content,
                             "tool_calls": _dumps(msg["tool_calls"]) if calls else None})
        return msg

    def _tool_message(self, rec: EpisodeRecord, messages: list[dict], call_id: str, content: str) -> None:
        messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        rec.messages.append({"msg_idx": len(rec.messages), "role": "tool", "content": content, "tool_call_id": call_id})

    def _record_protocol_error(self, rec, messages, step_idx, calls, error, feedback) -> None:
        if not calls:
            messages.append({"role": "user", "content": feedback})
            rec.messages.append({"msg_idx": len(rec.messages), "role": "user", "content": feedback})
            rec.observations.append({"agent_id": AGENT, "step_idx": step_idx, "call_id": None, "observation_type": "error",
                                     "content": feedback, "is_error": True, "done": False})
            return
        for i, c in enumerate(calls):
            rec.actions.append({"agent_id": AGENT, "step_idx": step_idx, "call_idx": i, "call_id": c.id, "tool_name": c.name,
                                "arguments": c.arguments, "action": None, "action_type": "tool_use", "tool_type": "execution",
                                "action_valid": False, "feedback_code": error, "feedback_message": feedback})
            rec.observations.append({"agent_id": AGENT, "step_idx": step_idx, "call_id": c.id, "observation_type": "error",
                                     "content": feedback, "is_error": True, "done": False})
            self._tool_message(rec, messages, c.id, feedback)

    def _record_env_action(self, rec, messages, step_idx, call: ToolCall, action: str, res: EnvStep) -> None:
        rec.actions.append({"agent_id": AGENT, "step_idx": step_idx, "call_idx": 0, "call_id": call.id, "tool_name": call.name,
                            "arguments": call.arguments, "action": action, "action_type": "tool_use", "tool_type": "execution",
                            "action_valid": res.valid, "feedback_code": res.feedback_code, "feedback_message": res.feedback_message})
        rec.observations.append({"agent_id": AGENT, "step_idx": step_idx, "call_id": call.id, "observation_type": "environment",
                                 "content": res.observation, "observation_state": _dumps(res.state), "page": res.state.get("page"),
                                 "is_error": not res.valid, "reward": res.reward if res.done else None, "done": res.done})
        self._tool_message(rec, messages, call.id, res.observation)

    async def _terminate(self, rec: EpisodeRecord, step_idx: int, reason: str) -> EnvStep:
        res = await self.env.terminate(reason)
        step_idx = max(step_idx, 0)
        call_idx = sum(1 for a in rec.actions if a["step_idx"] == step_idx)
        rec.actions.append({"agent_id": AGENT, "step_idx": step_idx, "call_idx": call_idx, "call_id": None, "tool_name": None,
                            "arguments": _dumps({"reason": reason}), "action": f"terminate[{reason}]", "action_type": "terminate",
                            "tool_type": None, "action_valid": True})
        rec.observations.append({"agent_id": AGENT, "step_idx": step_idx, "call_id": None, "observation_type": "environment",
                                 "content": res.observation, "observation_state": _dumps(res.state), "page": res.state.get("page"),
                                 "is_error": False, "reward": res.reward, "done": True})
        return res

    def _base_episode(self, rec, job, task, counters, started, t0) -> None:
        rec.episode.update(
            task_id=job.task_id, sample_id=job.sample_id, seed=job.seed, split=job.split,
            instruction=task.get("instruction"), persona=task.get("persona"),
            skill_ids=_dumps([s["skill_id"] for s in rec.skills]),
            started_at=started, finished_at=_now(), duration_s=time.perf_counter() - t0, **counters,
        )

    def _finish(self, rec, job, task, final: EnvStep, counters, started, t0) -> None:
        detail = dict(final.reward_detail or {})
        detail.pop("goal", None)
        self._base_episode(rec, job, task, counters, started, t0)
        rec.episode.update(
            status="completed", done=final.done, reward=final.reward, reward_detail=_dumps(detail),
            r_type=detail.get("r_type"), r_att=detail.get("r_att"), r_option=detail.get("r_option"), r_price=detail.get("r_price"),
            right_product=final.right_product, purchase_asin=(final.purchase or {}).get("asin"),
            termination_reason=final.termination_reason,
        )

    def _fail(self, rec, job, task, stage, exc: Exception, counters, started, t0) -> None:
        self._base_episode(rec, job, task, counters, started, t0)
        message = str(exc)[:4000]
        rec.episode.update(status="failed", done=False, error_stage=stage, error_type=type(exc).__name__, error_message=message)
        rec.failure = {"stage": stage, "exception_type": type(exc).__name__, "message": message,
                       "traceback": "".join(traceback.format_exception(exc))[-20000:], "occurred_at": _now()}
        if isinstance(exc, ModelHTTPError):
            rec.fatal = exc
