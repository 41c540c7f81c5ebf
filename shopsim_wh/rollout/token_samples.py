"""Recorded token ids -> the training namespace (``model.record_tokens``; docs/usage.md "Recording token ids").

Per model turn the runtime keeps the ids the server returned (one ``model_turn_tokens`` row each); when the episode
is committed, :func:`training_rows` assembles the main agent's turns into token-contiguous trainer samples the way
slime's OpenAIAdapter with ``fork_threshold_tokens=0`` does in ShopSimRL's slime runtime:

* a sample starts as turn 1's prompt ids (span ``prompt``) and its completion ids (span ``model``, mask 1, the
  server's logprobs);
* each next turn whose prompt ids start with the sample so far adds the prompt's new suffix (span ``inserted``,
  mask 0, logprob 0.0: the chat template's glue and the tool answer) and its completion;
* a turn whose prompt ids do not start with the sample so far (the server rendered the conversation differently:
  prefix drift, e.g. other tool schemas in the system prompt) forks a new sample, which starts with that prompt.

Every sample of an episode shares ``rollout_id`` = the job's index in the run's job list; ``group_index`` = the task
id, ``sample_index`` = the sample id. ``status`` is ``truncated`` when the episode ended by ``generation_length``, else
``completed``; reward and ``r_*`` are the episode's. A failed episode gets slime's placeholder (ShopSimRL's
``_abort_sample``): tokens ``[0, 0]``, response_length 1, loss mask ``[0]``, logprobs ``[0.0]``, ``remove_sample``,
status ``aborted``, zero rewards, no spans. Logprobs are stored only when every model turn of the sample has them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core import tokenizer as tk
from ..core.config import EMBEDDED, Config

SOURCE = "runner"
HOW = "recorded"


@dataclass(frozen=True)
class TokenRecording:
    """What the committer needs to write the training rows of a run with ``model.record_tokens``."""

    tokenizer_id: str
    tokenizer_hash: str | None
    rollout_ids: Mapping[str, int] = field(default_factory=dict)  # episode_id -> index of its job in the run

    @classmethod
    def from_config(cls, cfg: Config, jobs: list) -> TokenRecording | None:
        """None when the config does not record tokens. ``model.tokenizer``: ``builtin`` or the built-in's id, a path
        to a Hugging Face tokenizer's files (hashed; a bad one is a ConfigError now), or any other name (kept as
        given, hash unknown); null = the built-in on the embedded policy, else ``model.name``."""
        m = cfg.model
        if not m.record_tokens:
            return None
        spec = (m.tokenizer or "").strip() or (tk.BUILTIN_ID if m.base_url == EMBEDDED else m.name)
        if spec in ("builtin", tk.BUILTIN_ID):
            tid, digest = tk.BUILTIN_ID, tk.builtin().sha256
        elif Path(spec).expanduser().exists():
            tid, digest = str(Path(spec).expanduser().resolve()), tk.locate(spec).sha256()
        else:
            tid, digest = spec, None
        return cls(tid, digest, {j.episode_id: i for i, j in enumerate(jobs)})


@dataclass
class _Sample:
    tokens: list[int]
    prompt_length: int
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    spans: list[dict] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)

    def add(self, ids: list[int], kind: str, logprobs: list[float] | None, where: tuple[int | None, int | None]) -> None:
        if not ids:
            return
        start = len(self.tokens)
        self.tokens.extend(ids)
        trainable = kind == "model"
        self.mask.extend([1 if trainable else 0] * len(ids))
        if self.logprobs is not None:
            self.logprobs = None if (trainable and logprobs is None) else \
                self.logprobs + (logprobs if trainable else [0.0] * len(ids))
        self.spans.append({"token_start": start, "token_end": len(self.tokens), "kind": kind,
                           "trainable": trainable, "step_idx": where[0], "message_idx": where[1]})


def _assistant_idx(messages: list[dict], n_prompt: int) -> int | None:
    """The assistant message a turn appended (it comes right after the request's messages), if it appended one."""
    return n_prompt if n_prompt < len(messages) and messages[n_prompt]["role"] == "assistant" else None


def assemble(turns: list[dict], steps: list[dict], messages: list[dict]) -> list[_Sample]:
    """The main agent's recorded turns (in step order) as token-contiguous samples (see the module's docstring)."""
    n_prompt = {s["step_idx"]: s["prompt_msg_count"] for s in steps if s.get("agent_id", "main") == "main"}
    samples: list[_Sample] = []
    cur: _Sample | None = None
    prev: tuple[int, int] | None = None  # (step_idx, index of the first message after its assistant message)
    for t in turns:
        step, prompt, n = t["step_idx"], t["prompt_token_ids"], n_prompt.get(t["step_idx"], 0)
        if cur is None or prompt[:len(cur.tokens)] != cur.tokens:
            cur = _Sample(list(prompt), len(prompt))
            cur.spans.append({"token_start": 0, "token_end": len(prompt), "kind": "prompt", "trainable": False,
                              "step_idx": None, "message_idx": None})
            samples.append(cur)
        else:
            first = prev[1] if prev and prev[1] < n else None
            cur.add(prompt[len(cur.tokens):], "inserted", None, (prev[0] if prev else None, first))
        a = _assistant_idx(messages, n)
        cur.add(t["completion_token_ids"], "model", t.get("completion_logprobs"), (step, a))
        cur.steps.append(step)
        prev = (step, n + (1 if a is not None else 0))
    return samples


def _rewards(ep: dict) -> tuple[dict, bool]:
    """ShopSimRL's reward object of a finished episode: ``{reward, every r_* of reward_detail}`` (zeros, unscored,
    when it did not end with ``done``)."""
    if not ep.get("done") or not isinstance(ep.get("reward"), int | float):
        return {"reward": 0.0, "r_strict": 0.0, "r_success": 0.0}, False
    out = {"reward": float(ep["reward"])}
    detail = json.loads(ep["reward_detail"]) if ep.get("reward_detail") else {}
    out.update({k: float(v) for k, v in (detail if isinstance(detail, dict) else {}).items()
                if k.startswith("r_") and isinstance(v, int | float) and not isinstance(v, bool)})
    for k in ("r_loose", "r_strict", "r_success"):  # derived figures when the server gave none
        if k not in out and isinstance(ep.get(k), int | float):
            out[k] = float(ep[k])
    return out, True


def training_rows(rec, recording: TokenRecording) -> dict[str, list[dict]]:
    """The rows of the training namespace for one episode attempt (an ``EpisodeRecord``), without the episode key
    (``episode_id``, ``attempt``, ``load_id``: the committer adds them)."""
    job, ep = rec.job, rec.episode
    turns = [{**t, "tokenizer_id": recording.tokenizer_id} for t in rec.turn_tokens]
    base = {"agent_id": "main", "source": SOURCE, "rollout_id": recording.rollout_ids.get(job.episode_id),
            "group_index": job.task_id, "sample_index": job.sample_id, "tokenizer_id": recording.tokenizer_id,
            "tokenizer_hash": recording.tokenizer_hash, "prompt": str(job.task_id)}
    meta = {"shopsim_task_id": job.task_id, "shopsim_group_index": job.task_id, "split": job.split}
    out: dict[str, list[dict]] = {"model_turn_tokens": turns, "training_samples": [], "training_tokens": [],
                                  "training_spans": []}
    if not rec.completed:  # slime's zero-loss placeholder keeps the group whole; the trainer drops it
        rewards = {"reward": 0.0, "r_strict": 0.0, "r_success": 0.0}
        reason = (rec.failure or {}).get("exception_type") or ep.get("error_type")
        out["training_samples"].append({
            **base, "sample_idx": 0, "prompt_length": 1, "response_length": 1, "total_length": 2,
            "trainable_tokens": 0, "status": "aborted", "remove_sample": True, "reward": 0.0, "r_strict": 0.0,
            "r_success": 0.0, "rewards": json.dumps(rewards), "response": "",
            "metadata": json.dumps({**meta, "shopsim_abort_reason": reason, "shopsim_scored": False,
                                    "shopsim_reward": rewards}, sort_keys=True)})
        out["training_tokens"].append({"agent_id": "main", "sample_idx": 0, "token_ids": [0, 0], "loss_mask": [0],
                                       "rollout_logprobs": [0.0]})
        return out
    rewards, scored = _rewards(ep)
    status = "truncated" if ep.get("termination_reason") == "generation_length" else "completed"
    decoder = tk.builtin() if recording.tokenizer_id == tk.BUILTIN_ID else None
    main = [t for t in turns if t.get("agent_id", "main") == "main"]
    for i, s in enumerate(assemble(main, rec.steps, rec.messages)):
        response = s.tokens[s.prompt_length:]
        out["training_samples"].append({
            **base, "sample_idx": i, "prompt_length": s.prompt_length, "response_length": len(response),
            "total_length": len(s.tokens), "trainable_tokens": sum(s.mask), "status": status, "remove_sample": False,
            "reward": rewards["reward"] if scored else 0.0, "r_loose": ep.get("r_loose"),
            "r_strict": ep.get("r_strict") if scored else 0.0, "r_success": ep.get("r_success") if scored else 0.0,
            "rewards": json.dumps(rewards, sort_keys=True),
            "response": decoder.decode(response) if decoder else None,
            "metadata": json.dumps({**meta, "shopsim_reward": rewards, "shopsim_scored": scored, "steps": s.steps,
                                    "fork": "first" if i == 0 else "prefix_drift",
                                    "termination_reason": ep.get("termination_reason")}, sort_keys=True)})
        out["training_tokens"].append({"agent_id": "main", "sample_idx": i, "token_ids": s.tokens,
                                       "loss_mask": s.mask, "rollout_logprobs": s.logprobs})
        out["training_spans"] += [{"agent_id": "main", "sample_idx": i, "span_idx": k, "how": HOW, **span}
                                  for k, span in enumerate(s.spans)]
    return out
