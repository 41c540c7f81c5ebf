"""``shopsim-wh reverify``: re-score a run's stored episodes with the current reward and labelling code, without
running the policy again, stored as a new labels version in table ``episode_labels`` (docs/reverify.md).

Per completed episode (final attempt) of the run:

* **replayable** runs (the embedded simulator, :func:`.replay.replay_target`): the stored actions are replayed in a
  fresh session of the episode's task (:func:`.replay.replay`), so the reward, every ``r_*`` component, the
  termination reason and ``right_product`` come from the current page and reward rules; the replayed actions'
  validity replaces the stored one for the step labels;
* **not replayable** runs (ingested traces, a remote ``shop_env``): the reward and its components are the stored
  ones (the reward re-read as the component ``--primary-reward`` names, when the rows hold it);
* in both cases the rule labels (``error_labels`` and ``episode_primary_failure``, the taxonomy SQL as shipped now)
  are recomputed over the episode as re-scored, and once more over the stored episode, so that every flag says
  whether the new value differs from the stored one under the same labelling code.

The labels version is a sha256 over the code that decides the figures (the embedded environment's reward and page
rules, the taxonomy SQL), the primary reward and the user's tag (:func:`labels_code`); a version already stored for
the run is skipped, so ``reverify`` is idempotent. Views ``episode_labels_versions`` and ``episode_labels_compare``
compare versions on the same trajectories.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from .. import __version__
from ..core.errors import ShopsimError
from ..engines.db import connect, fetch_arrow, sql_dir
from ..sim import engine as sim_engine
from ..sim import reward as sim_reward
from .gate import resolve_run
from .replay import EmbeddedEnv, replay, replay_target

REVERIFY_VERSION = "reverify-v1"  # the rules of this module (what a row holds); part of every labels version
COMPONENTS = ("r_type", "r_att", "r_option", "r_price", "r_loose", "r_strict", "r_success")
PRIMARY_CHOICES = ("r_strict", "r_loose", "r_success")
LABEL_SQL = ("analytics/protocol_codes.sql", "analytics/taxonomy.sql", "analytics/error_labels.sql",
             "analytics/episode_primary_failure.sql")
REPLAYED = ("r_type", "r_att", "r_option", "r_price", "r_loose", "r_strict", "r_success", "reward",
            "termination_reason", "right_product", "purchase_asin")
_FACT_TYPES = {"termination_reason": pa.string(), "purchase_asin": pa.string(), "right_product": pa.bool_()}
EPS = 1e-9


class ReverifyError(ShopsimError):
    """Bad input to ``reverify``: an unknown run, a run without completed episodes, an unknown primary reward."""


@dataclass(frozen=True)
class ReverifyOptions:
    """``primary_reward``: the component ``reward`` means in the new version (None: the run's own
    ``runs.primary_reward``); ``tag``: a name of the user's, part of the version."""

    primary_reward: str | None = None
    tag: str | None = None


@dataclass
class ReverifyResult:
    run_id: str
    labels_version: str
    primary_reward: str
    tag: str | None
    skipped: bool = False
    episodes: int = 0
    replayed: int = 0
    not_replayable: int = 0
    diverged_episodes: int = 0
    reward_changed: int = 0
    components_changed: int = 0
    success_changed: int = 0
    termination_changed: int = 0
    label_changed: int = 0
    mean_reward: float | None = None
    stored_mean_reward: float | None = None
    load_id: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def labels_code(primary_reward: str, tag: str | None) -> dict:
    """What a labels version covers: this module's rule version, the sha256 of each file that decides the figures,
    the primary reward and the tag."""
    files = {f"shopsim_wh/sim/{Path(m.__file__).name}": _sha(Path(m.__file__).read_bytes())
             for m in (sim_reward, sim_engine)}
    files.update({f"sql/{name}": _sha((sql_dir() / name).read_bytes()) for name in LABEL_SQL})
    return {"reverify": REVERIFY_VERSION, "files": files, "primary_reward": primary_reward, "tag": tag}


def labels_version(code: dict) -> str:
    return _sha(json.dumps(code, sort_keys=True, separators=(",", ":")).encode())


def _rows(con: duckdb.DuckDBPyConnection, query: str, params: dict) -> list[dict]:
    cur = con.execute(query, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _differs(a, b) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    if isinstance(a, float) or isinstance(b, float):
        return not math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=EPS)
    return a != b


def _success(r_success, reward) -> bool | None:
    if r_success is not None:
        return float(r_success) == 1.0
    return None if reward is None else float(reward) >= 1.0


def _reward_of(facts: dict, primary: str, stored_reward):
    return facts.get(primary) if primary in COMPONENTS else stored_reward


class _Labeller:
    """The shipped taxonomy SQL over one run's rows in a scratch DuckDB, once as stored, once as re-scored."""

    def __init__(self, con: duckdb.DuckDBPyConnection, run_id: str):
        self.db = duckdb.connect()
        for name in ("episodes", "steps", "actions", "observations", "failures"):
            self.db.register(f"stored_{name}", fetch_arrow(con, f"SELECT * FROM {name} WHERE run_id = $run",
                                                           {"run": run_id}))
        for name in ("steps", "observations", "failures"):
            self.db.execute(f"CREATE VIEW {name} AS SELECT * FROM stored_{name}")
        self.use_stored()
        for name in LABEL_SQL:
            self.db.execute((sql_dir() / name).read_text())

    def use_stored(self) -> None:
        self.db.execute("CREATE OR REPLACE VIEW episodes AS SELECT * FROM stored_episodes")
        self.db.execute("CREATE OR REPLACE VIEW actions AS SELECT * FROM stored_actions")

    def use_rescored(self, facts: pa.Table, answers: pa.Table) -> None:
        self.db.register("new_facts", facts)
        self.db.register("new_answers", answers)
        swap = ", ".join(f"CASE WHEN n.episode_id IS NULL THEN e.{c} ELSE n.{c} END AS {c}" for c in REPLAYED)
        self.db.execute(f"CREATE OR REPLACE VIEW episodes AS SELECT e.* REPLACE ({swap}) FROM stored_episodes AS e "
                        "LEFT JOIN new_facts AS n ON n.episode_id = e.episode_id")
        swap = ", ".join(f"CASE WHEN n.episode_id IS NULL THEN a.{c} ELSE n.{c} END AS {c}"
                         for c in ("action_valid", "feedback_code", "feedback_message"))
        self.db.execute(f"CREATE OR REPLACE VIEW actions AS SELECT a.* REPLACE ({swap}) FROM stored_actions AS a "
                        "LEFT JOIN new_answers AS n ON n.episode_id = a.episode_id AND a.agent_id = 'main' "
                        "AND n.step_idx = a.step_idx AND n.call_idx = a.call_idx")

    def labels(self) -> dict[str, tuple[str | None, list[str]]]:
        """episode_id -> (primary failure, sorted distinct label codes)."""
        codes: dict[str, list[str]] = {}
        for ep, code in self.db.execute("SELECT DISTINCT episode_id, code FROM error_labels ORDER BY 1, 2").fetchall():
            codes.setdefault(ep, []).append(code)
        return {ep: (pf, codes.get(ep, [])) for ep, pf in
                self.db.execute("SELECT episode_id, primary_failure FROM episode_primary_failure").fetchall()}


def _stored_version(root, run_id: str, version: str) -> bool:
    from ..store.warehouse import Warehouse

    t = Warehouse(root).read("episode_labels", ["labels_version"], run_id=run_id)
    return version in set(t.column("labels_version").to_pylist())


def _check(con, run_id: str, options: ReverifyOptions) -> tuple[dict, str]:
    runs = _rows(con, "SELECT * FROM runs WHERE run_id = $run", {"run": run_id})
    if not runs:
        known = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 5").fetchall()]
        raise ReverifyError(f"no run {run_id!r} in the warehouse; recent runs: {', '.join(known) or '(none)'} "
                            "(`shopsim-wh runs list` lists them all)")
    if options.primary_reward is not None and options.primary_reward not in PRIMARY_CHOICES:
        raise ReverifyError(f"--primary-reward {options.primary_reward!r}: use one of {', '.join(PRIMARY_CHOICES)} "
                            "(docs/usage.md, 'Which reward is which')")
    return runs[0], options.primary_reward or runs[0].get("primary_reward") or "task_reward"


def _replay_all(con, run_id: str, env: EmbeddedEnv, episodes: list[dict]) -> dict:
    acts: dict[str, list[dict]] = {}
    for a in _rows(con, """
            SELECT a.episode_id, a.step_idx, a.call_idx, a.action, a.action_type, a.action_valid, a.feedback_code,
                   o.page
            FROM actions AS a
            LEFT JOIN observations AS o
                ON o.run_id = a.run_id AND o.episode_id = a.episode_id AND o.agent_id = a.agent_id
                AND o.step_idx = a.step_idx AND o.call_id IS NOT DISTINCT FROM a.call_id
                AND o.observation_type = 'environment'
            WHERE a.run_id = $run AND a.agent_id = 'main'
              AND (a.action_type = 'terminate' OR (a.action_type = 'tool_use' AND a.action IS NOT NULL))
            ORDER BY a.episode_id, a.step_idx, a.call_idx""", {"run": run_id}):
        acts.setdefault(a["episode_id"], []).append(a)
    return {e["episode_id"]: replay(env, e["task_id"], acts.get(e["episode_id"], [])) for e in episodes}


def _facts_table(facts: dict[str, dict]) -> pa.Table:
    cols = {"episode_id": list(facts)}
    cols.update({c: [f.get(c) for f in facts.values()] for c in REPLAYED})
    schema = pa.schema([("episode_id", pa.string())] + [(c, _FACT_TYPES.get(c, pa.float64())) for c in REPLAYED])
    return pa.table(cols, schema=schema)


def _answers_table(replays: dict) -> pa.Table:
    rows = [(ep, s, c, *ans) for ep, r in replays.items() for (s, c), ans in r.answers.items()]
    schema = pa.schema([("episode_id", pa.string()), ("step_idx", pa.int32()), ("call_idx", pa.int16()),
                        ("action_valid", pa.bool_()), ("feedback_code", pa.string()), ("feedback_message", pa.string())])
    return pa.table([list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in schema], schema=schema)


def rescore(con, run_id: str, options: ReverifyOptions = ReverifyOptions()) -> tuple[ReverifyResult, list[dict]]:
    """Re-score a run (nothing written): the result summary and the ``episode_labels`` rows."""
    run_id = resolve_run(con, run_id)
    run, primary = _check(con, run_id, options)
    code = labels_code(primary, options.tag)
    version = labels_version(code)
    res = ReverifyResult(run_id=run_id, labels_version=version, primary_reward=primary, tag=options.tag)
    episodes = _rows(con, "SELECT * FROM episodes WHERE run_id = $run AND status = 'completed' ORDER BY episode_id",
                     {"run": run_id})
    if not episodes:
        raise ReverifyError(f"run {run_id!r} has no completed episode to re-score (`shopsim-wh summarize` shows its "
                            "failures; run the same config again to retry them)")
    env, why = replay_target(run)
    replays = _replay_all(con, run_id, env, episodes) if env is not None else {}
    facts: dict[str, dict] = {}
    for e in episodes:
        r = replays.get(e["episode_id"])
        f = r.facts(primary) if r is not None else {c: e[c] for c in REPLAYED if c != "reward"}
        f["reward"] = _reward_of(f, primary, e["reward"])
        facts[e["episode_id"]] = f
    labeller = _Labeller(con, run_id)
    stored_labels = labeller.labels()
    labeller.use_rescored(_facts_table(facts), _answers_table(replays))
    new_labels = labeller.labels()
    now, rows = datetime.now(UTC), []
    for e in episodes:
        ep, f, r = e["episode_id"], facts[e["episode_id"]], replays.get(e["episode_id"])
        pf, label_codes = new_labels.get(ep, (None, []))
        spf, scodes = stored_labels.get(ep, (None, []))
        success, stored_success = _success(f["r_success"], f["reward"]), _success(e["r_success"], e["reward"])
        row = {
            "episode_id": ep, "attempt": e["attempt"], "labels_version": version, "labels_tag": options.tag,
            "labels_code": json.dumps(code, sort_keys=True), "primary_reward": primary, "replayable": r is not None,
            "replay_note": why if r is None else ("; ".join(r.notes) or None),
            "actions_replayed": r.replayed if r is not None else 0, "actions_diverged": r.diverged if r else 0,
            **{c: f[c] for c in COMPONENTS}, "reward": f["reward"], "success": success,
            "right_product": f["right_product"], "termination_reason": f["termination_reason"],
            "primary_failure": pf, "label_codes": json.dumps(label_codes),
            "stored_reward": e["reward"], "stored_primary_failure": spf,
            "reward_changed": _differs(f["reward"], e["reward"]),
            "components_changed": any(_differs(f[c], e[c]) for c in COMPONENTS),
            "success_changed": _differs(success, stored_success),
            "termination_changed": _differs(f["termination_reason"], e["termination_reason"]),
            "label_changed": (pf, label_codes) != (spf, scodes), "created_at": now,
        }
        rows.append(row)
    _summarise(res, rows, episodes, why)
    return res, rows


def _summarise(res: ReverifyResult, rows: list[dict], episodes: list[dict], why: str | None) -> None:
    res.episodes = len(rows)
    res.replayed = sum(r["replayable"] for r in rows)
    res.not_replayable = res.episodes - res.replayed
    res.diverged_episodes = sum(1 for r in rows if r["actions_diverged"] or (r["replayable"] and r["replay_note"]))
    for flag in ("reward_changed", "components_changed", "success_changed", "termination_changed", "label_changed"):
        setattr(res, flag, sum(bool(r[flag]) for r in rows))

    def mean(values):
        vals = [float(v) for v in values if v is not None]
        return sum(vals) / len(vals) if vals else None

    res.mean_reward = mean(r["reward"] for r in rows)
    res.stored_mean_reward = mean(e["reward"] for e in episodes)
    if why:
        res.notes.append(why)


def reverify(root: str | os.PathLike, run_id: str, options: ReverifyOptions = ReverifyOptions()) -> ReverifyResult:
    """Re-score ``run_id`` and store the rows as a new labels version; a version the run already has is skipped."""
    from ..core.schema import to_arrow
    from ..store.warehouse import Warehouse

    con = connect(root)
    run_id = resolve_run(con, run_id)
    run, primary = _check(con, run_id, options)
    version = labels_version(labels_code(primary, options.tag))
    if con.execute("SELECT count(*) FROM episode_labels WHERE run_id = $run AND labels_version = $v",
                   {"run": run_id, "v": version}).fetchone()[0]:
        return _skipped(con, run_id, version, primary, options.tag)
    started = datetime.now(UTC)
    res, rows = rescore(con, run_id, options)
    load_id = uuid.uuid4().hex
    for row in rows:
        row["load_id"] = load_id
    load = {"command": "reverify", "started_at": started, "finished_at": datetime.now(UTC), "episodes_written": 0,
            "status": "complete", "tool_version": __version__, "load_id": load_id}
    with Warehouse(root).writer() as w:
        if _stored_version(root, run_id, version):  # another reverify stored it meanwhile
            return _skipped(connect(root), run_id, version, primary, options.tag)
        w.commit([("episode_labels", run_id, to_arrow("episode_labels", rows)),
                  ("loads", run_id, to_arrow("loads", [load]))])
    res.load_id = load_id
    return res


def _skipped(con, run_id: str, version: str, primary: str, tag: str | None) -> ReverifyResult:
    row = con.execute("SELECT count(*), avg(reward), any_value(load_id) FROM episode_labels "
                      "WHERE run_id = $run AND labels_version = $v", {"run": run_id, "v": version}).fetchone()
    return ReverifyResult(run_id=run_id, labels_version=version, primary_reward=primary, tag=tag, skipped=True,
                          episodes=row[0], mean_reward=row[1], load_id=row[2],
                          notes=[f"labels version {version[:16]} is already stored for run {run_id}: nothing to do"])
