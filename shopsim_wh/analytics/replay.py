"""Replay of a stored episode in the embedded environment: its stored actions, in order, against the current page
and reward rules, without the policy (``shopsim-wh reverify``, docs/reverify.md).

A run is replayable when the runner played it on the embedded simulator (``runs.source_format`` =
``shopsim-wh-runner``, ``environment.url: embedded`` in ``runs.config``, ``runs.environment_mode`` =
``embedded(seed=N)``): the task table and the catalog are a pure function of that seed, so a fresh
:class:`~shopsim_wh.sim.engine.Episode` (reset with the episode's task) receives each stored action as the server
received it (``actions.action`` of the main agent's ``tool_use`` calls that reached the environment, ``interact``;
a runtime termination ``terminate[reason]``, ``terminate``). Anything else (an ingested trace, a remote
``shop_env``, a synthetic demo run) is not replayable: :func:`replay_target` says why.

Each replayed answer is checked against the stored observation (validity, feedback code, the page it led to):
``diverged`` counts the answers that differ, i.e. the current environment code would not have walked the stored
trajectory. The private goal stays inside the replay: only ``right_product`` (a derived fact) leaves it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..rollout.environment import right_product
from ..rollout.runtime import reward_facts
from ..sim.engine import Episode, EpisodeDone, extract_action
from ..sim.tasks import generate_tasks

RUNNER = "shopsim-wh-runner"
_TERMINATE = re.compile(r"terminate\[(.*)\]", re.DOTALL)


@dataclass(frozen=True)
class EmbeddedEnv:
    """What a replay needs of a run's environment: the catalog seed and the reset's persona flag."""

    seed: int
    persona: bool = False


@dataclass
class Replay:
    """The recomputed outcome of one episode (``done`` False: the stored actions did not end it)."""

    done: bool = False
    reward_detail: dict | None = None
    termination_reason: str | None = None
    right_product: bool | None = None
    purchase_asin: str | None = None
    replayed: int = 0
    diverged: int = 0
    notes: list[str] = field(default_factory=list)
    # per replayed action: (step_idx, call_idx) -> (valid, feedback_code, feedback_message)
    answers: dict[tuple[int, int], tuple[bool, str | None, str | None]] = field(default_factory=dict)

    def facts(self, primary: str) -> dict:
        """The episode columns the replay recomputes (the runtime's own rule for r_loose / r_strict / r_success)."""
        d = self.reward_detail or {}
        loose, strict, success, _ = reward_facts(self.reward_detail, None, primary)

        def num(k):
            v = d.get(k)
            return float(v) if isinstance(v, (int, float)) else None

        return {"r_type": num("r_type"), "r_att": num("r_att"), "r_option": num("r_option"), "r_price": num("r_price"),
                "r_loose": loose, "r_strict": strict, "r_success": success,
                "termination_reason": self.termination_reason, "right_product": self.right_product,
                "purchase_asin": self.purchase_asin}


def replay_target(run: dict) -> tuple[EmbeddedEnv | None, str | None]:
    """(the environment to replay a run in, None) or (None, why it cannot be replayed). ``run``: its ``runs`` row."""
    if run.get("source_format") != RUNNER:
        return None, (f"ingested trace ({run.get('source_format')}): its environment is not here to replay it; "
                      "reward and components are the stored ones, rule labels are recomputed from the stored steps")
    try:
        config = json.loads(run.get("config") or "{}")
    except ValueError:
        config = {}
    env = config.get("environment") if isinstance(config, dict) else None
    if not isinstance(env, dict) or env.get("url") != "embedded":
        return None, (f"environment {run.get('environment_mode') or 'unknown'} is not the embedded simulator (a remote "
                      "shop_env keeps the task's private goal to itself); reward and components are the stored ones, "
                      "rule labels are recomputed from the stored steps")
    seed = env.get("seed", 0)
    if not isinstance(seed, int) or run.get("environment_mode") != f"embedded(seed={seed})":
        return None, (f"environment_mode {run.get('environment_mode')!r} does not name the embedded catalog seed "
                      "(a synthetic or edited run); rule labels are recomputed from the stored steps")
    return EmbeddedEnv(seed=seed, persona=bool(env.get("persona", False))), None


def replay(env: EmbeddedEnv, task_id: int, actions: list[dict]) -> Replay:
    """Replay ``actions`` (rows with ``step_idx``, ``call_idx``, ``action``, ``action_type`` and, to check against,
    ``action_valid``, ``feedback_code``, ``page``), in order, on a fresh session of ``task_id``."""
    out = Replay()
    task = generate_tasks(env.seed).by_id.get(int(task_id))
    if task is None:
        out.notes.append(f"task {task_id} is not in the embedded task set of seed {env.seed}")
        return out
    session = Episode(task, env.seed, 0, "single_turn", if_persona=env.persona)
    status: dict = {}
    for a in actions:
        key = (int(a["step_idx"]), int(a["call_idx"] or 0))
        try:
            if a["action_type"] == "terminate":
                m = _TERMINATE.fullmatch(a["action"] or "")
                status = session.terminate(m.group(1) if m else "action_limit")
                valid, code, message = True, None, None
            else:
                status = session.step(extract_action(a["action"]))
                fb = status["action_feedback"]
                valid = fb["valid"] is not False
                code, message = (None, None) if valid else (fb.get("reason"), fb.get("message"))
        except (EpisodeDone, ValueError) as exc:
            out.diverged += 1
            out.notes.append(f"step {key[0]}: the replay could not apply {a['action']!r} ({exc})")
            continue
        out.replayed += 1
        out.answers[key] = (valid, code, message)
        page = session.state().get("page_type")
        stored = (a.get("action_valid") is not False, a.get("feedback_code"), a.get("page"))
        if a["action_type"] == "terminate":
            stored = (True, None, a.get("page"))
        if (valid, code, page) != stored:
            out.diverged += 1
            if len(out.notes) < 3:
                out.notes.append(f"step {key[0]}: {a['action']!r} answered valid={valid} {code or ''} page {page}, "
                                 f"stored valid={stored[0]} {stored[1] or ''} page {stored[2]}")
    if not session.done:
        out.notes.append("the stored actions do not end the episode in the replay")
        return out
    purchase = status.get("purchase") or None
    out.done, out.reward_detail = True, session.reward_detail
    out.termination_reason = status.get("termination_reason")
    out.right_product = right_product(status.get("goal"), purchase, session.reward_detail)
    out.purchase_asin = (purchase or {}).get("asin")
    return out
