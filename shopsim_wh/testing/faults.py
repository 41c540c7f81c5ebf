"""Process faults for durability tests and the soak: crash at a named point, SIGKILL at random, power loss.

Used by tests/test_durability_*.py (a few cases) and bench/bench_durability.py (many); the soak command
can call :func:`crash_matrix` and :func:`kill_storm` directly. Everything runs the real runner on the
embedded servers, in real child processes (``os.fork`` of an interpreter that has already imported the
library, so a case costs the job, not the imports), and ends with :func:`shopsim_wh.ops.check.check`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..core import crash
from ..ops.check import CheckReport, check

TINY_JOB = {
    "experiment": {"name": "durability", "seed": 5},
    "tasks": {"split": "val", "sample_size": 2, "repeats": 1},
    "model": {"name": "scripted-strong", "base_url": "embedded", "checkpoint_id": "ck1",
              "sampling": {"temperature": 0.6, "top_p": 1.0, "max_tokens": 4096}, "send_seed": True},
    "environment": {"url": "embedded", "dialect": "shop_env"},
    "skills": {"path": None},
    "runtime": {"max_steps": 30, "concurrency": 1},
}
RUNNER_POINTS = [p for p in crash.POINTS if not p.startswith("ingest.")]


@contextmanager
def scratch(fallback: Path) -> Iterator[Path]:
    """A scratch directory on a RAM file system (/dev/shm) when there is one, else ``fallback``: the faults are
    emulated (crash points, the power-loss recorder), so a disk's fsync latency only slows the cases down."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield fallback
        return
    d = Path(tempfile.mkdtemp(prefix="shopsim-wh-", dir=shm))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def write_job(path: str | os.PathLike, name: str = "durability", episodes: int = 2, concurrency: int = 1,
              latency_ms: int = 0, repeats: int = 1) -> Path:
    """A runner config for the embedded servers (scripted policy, deterministic per seed): ``episodes`` tasks of
    the val split, ``repeats`` samples each. ``latency_ms`` makes every model answer take that long (the scripted
    policy's latency knob), so a test can act mid-run."""
    doc = json.loads(json.dumps(TINY_JOB))
    doc["experiment"]["name"] = name
    doc["tasks"]["sample_size"] = episodes
    doc["tasks"]["repeats"] = repeats
    doc["runtime"]["concurrency"] = concurrency
    if latency_ms:
        doc["model"]["extra_body"] = {"scripted_policy": {"latency_ms": latency_ms}}
    Path(path).write_text(yaml.safe_dump(doc))
    return Path(path)


def warm(config: str | os.PathLike | None = None) -> None:
    """Build in this process what every job needs once (the embedded catalog and tasks, cached per seed; the
    CLI's imports), so forked children inherit it instead of each paying for it (seconds per child)."""
    from ..cli import main as _cli_main  # noqa: F401 - imported for the children
    from ..core.config import load_config
    from ..rollout.runner import plan
    from ..sim.server import create_app

    seed = load_config(config).environment.seed if config is not None else 0
    if config is not None:
        plan(load_config(config))
    create_app(seed=seed)


def run_job(config: str | os.PathLike, warehouse: str | os.PathLike):
    from ..core.config import load_config
    from ..rollout.runner import run

    return run(load_config(config), str(warehouse))


def fork_start(fn: Callable[[], object], env: dict | None = None, output: str | os.PathLike | None = None) -> int:
    """Start ``fn`` in a forked child (``env`` added to its environment, crash points re-armed, stdout and stderr
    to ``output`` when given); returns its pid. The child exits with ``fn``'s SystemExit code, 0, or 99 and a
    traceback on stderr."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller
        code = 0
        try:
            if output is not None:
                fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                import sys  # a test runner may have replaced the streams with its own capture objects

                sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
            os.environ.update(env or {})
            crash.arm()
            fn()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - reported on stderr, exit 99
            traceback.print_exc()
            code = 99
        finally:
            crash.write_counts()  # os._exit skips atexit
            os._exit(code)
    return pid


def wait(pid: int, kill_after_s: float | None = None) -> int:
    """The child's exit code as ``subprocess`` reports it (-9 for SIGKILL); SIGKILL it after ``kill_after_s``."""
    if kill_after_s is not None:
        deadline = time.monotonic() + kill_after_s
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.002)
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def fork_call(fn: Callable[[], object], env: dict | None = None, kill_after_s: float | None = None) -> int:
    """:func:`fork_start` then :func:`wait`."""
    return wait(fork_start(fn, env), kill_after_s)


def cli(*argv: str) -> Callable[[], None]:
    """A callable running ``shopsim-wh ARGV...`` in this interpreter (for :func:`fork_start`)."""
    def go() -> None:
        import sys

        from ..cli.main import main

        sys.argv = ["shopsim-wh", *argv]
        main()
    return go


def point_counts(config: Path, warehouse: Path, work: Path, env: dict | None = None) -> dict[str, int]:
    """How often the job reaches each crash point when nothing goes wrong (run in a child, like the cases)."""
    counts = work / "counts.json"
    code = fork_call(lambda: run_job(config, warehouse), {**(env or {}), "SHOPSIM_WH_CRASH_COUNTS": str(counts)})
    if code != 0:
        raise RuntimeError(f"the uninterrupted job failed (exit {code}); see its traceback above")
    return json.loads(counts.read_text())


def occurrences(n: int) -> list[int]:
    """First, second and last (deduplicated)."""
    return sorted({1, min(2, n), n}) if n else []


@dataclass
class CaseResult:
    point: str
    occurrence: int
    exit_code: int
    at_crash: CheckReport  # the directory as the killed process left it
    after_resume: CheckReport  # the power-loss image (or the directory), resumed, checked against the reference
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == crash.CRASH_EXIT and self.at_crash.ok and self.after_resume.ok \
            and not self.after_resume.missing


@dataclass(frozen=True)
class CrashJob:
    """What the crash cases of one job share: the job, the warehouse it starts from, the reference it must reach."""

    base: Path  # the warehouse each case starts from (copied; need not exist)
    config: Path  # the job
    reference: Path  # an uninterrupted run of the same job on ``base``
    powerloss: bool = True  # resume on the power-loss image (else on the directory the crash left)
    env: dict | None = None  # extra environment of the crashing child


def crash_case(job: CrashJob, work: Path, point: str, occurrence: int, resume: Callable | None = None) -> CaseResult:
    """Copy ``job.base``, run the job crashing at ``point:occurrence``, check, resume (on the power-loss image
    when ``job.powerloss``; ``resume`` replaces the resume), check again against ``job.reference``."""
    base, config, reference, powerloss, env = job.base, job.config, job.reference, job.powerloss, job.env
    t0 = time.perf_counter()
    wh, image = work / "wh", work / "image"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(base, wh) if base.exists() else wh.mkdir(parents=True)
    armed = {**(env or {}), "SHOPSIM_WH_CRASH": f"{point}:{occurrence}"}
    if powerloss:
        armed["SHOPSIM_WH_POWERLOSS"] = str(image)
    code = fork_call(lambda: run_job(config, wh), armed)
    at_crash = check(wh)
    target = image if powerloss else wh
    if not target.exists():  # power lost before the writer opened: the disk holds what base held
        shutil.copytree(base, target) if base.exists() else target.mkdir(parents=True)
    (resume or (lambda: run_job(config, target)))()
    after = check(target, config, reference)
    return CaseResult(point, occurrence, code, at_crash, after, time.perf_counter() - t0)


def crash_matrix(base: Path, config: Path, work: Path, points: list[str] | None = None,
                 powerloss: bool = True, env: dict | None = None) -> list[CaseResult]:
    """Every point the job reaches, at its first, second and last occurrence. ``base`` must exist (a
    warehouse, possibly with earlier runs); the reference run is made here."""
    warm(config)
    reference = work / "reference"
    shutil.rmtree(reference, ignore_errors=True)
    shutil.copytree(base, reference)
    counts = point_counts(config, reference, work, env)
    job = CrashJob(base, config, reference, powerloss, env)
    out = []
    for p in points or RUNNER_POINTS:
        for k in occurrences(counts.get(p, 0)):
            out.append(crash_case(job, work / "case", p, k))
    return out


@dataclass
class StormResult:
    kills: int = 0
    resumes: int = 0
    finished: bool = False
    reports: list[CheckReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.finished and all(r.ok for r in self.reports) and not self.reports[-1].missing


def kill_storm(config: Path, warehouse: Path, kills: int, seed: int, max_delay_s: float | None = None,
               env: dict | None = None, progress: Callable[[StormResult], None] | None = None) -> StormResult:
    """Start the job, SIGKILL it after a seeded random delay, check, start it again (the resume is killed
    too), ``kills`` times; then let it finish and check against the plan. The delays are drawn from
    (0.02 s, ``max_delay_s``); by default 0.8 x the time one uninterrupted job takes here (measured first on a
    scratch copy), so kills land inside the run on a fast machine and a slow one alike."""
    warm(config)
    if max_delay_s is None:
        timing = warehouse.with_name(warehouse.name + "-timing")
        t = time.perf_counter()
        if fork_call(lambda: run_job(config, timing), env) != 0:
            raise RuntimeError("the uninterrupted job failed; see its traceback above")
        max_delay_s = 0.8 * (time.perf_counter() - t)
        shutil.rmtree(timing, ignore_errors=True)
    rng = random.Random(seed)
    res = StormResult()
    restarts = 0
    while res.kills < kills:
        code = fork_call(lambda: run_job(config, warehouse), env, kill_after_s=rng.uniform(0.02, max_delay_s))
        if code == -signal.SIGKILL:
            res.kills += 1
        elif code != 0:
            raise RuntimeError(f"the job failed (exit {code}) instead of being killed; see its traceback above")
        res.resumes += 1
        res.reports.append(check(warehouse, config))
        if progress:
            progress(res)
        if code == 0 and not res.kills and restarts < 8:
            # the job outran every kill (the machine sped up after the timing run): start over with half the
            # delays, so that kills land however the machine's speed moves (bounded: 8 restarts)
            shutil.rmtree(warehouse, ignore_errors=True)
            max_delay_s, restarts, res = max_delay_s / 2, restarts + 1, StormResult()
            continue
        if code == 0 and not res.reports[-1].missing:
            break  # the job finished before the next kill
    code = fork_call(lambda: run_job(config, warehouse), env)
    res.finished = code == 0
    res.reports.append(check(warehouse, config))
    return res
