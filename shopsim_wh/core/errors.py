"""The exception tree, in one place.

    ShopsimError                      base: every error the library raises on purpose
    ├── ConfigError                   bad YAML / config values; message says which key and how to fix
    │   ├── FingerprintMismatch       same experiment name, different semantics (carries a field diff)
    │   └── TestSplitGuard            test split without --allow-test, or test split with skills
    ├── WarehouseError                on-disk warehouse problems (unknown table, bad run id, newer schema)
    │   ├── WarehouseLockedError      another writer holds the lock
    │   ├── WarehouseFullError        the file system (or file-size limit) is full; says what was committed
    │   ├── IntegrityError            `shopsim-wh check` found lost, duplicated or unexpected episodes
    │   └── NameRefused               a run id / source name that breaks the one naming rule (shopsim_wh.core.names)
    ├── ModelError                    chat-completions server problems
    │   ├── ModelHTTPError            non-retryable HTTP status (400/401/403/404/422): fix the request/config
    │   └── ModelUnavailable          retries exhausted (connection errors, 408/429/5xx)
    ├── EnvironmentError_             shop environment server problems
    │   ├── EnvProtocolError          server answered something the protocol does not allow
    │   ├── ObservationVersionError   observation_version this client does not know
    │   ├── EnvUnreachable            (also a ServerUnreachable) the environment server refused the connection
    │   └── EnvUnavailable            no usable answer (connection lost, timeout, 429/5xx, garbled body) and
    │                                 retrying could apply the action twice: the episode fails, re-runs from reset
    ├── ServerUnreachable             a configured server could not be reached (the CLI exits 3)
    ├── IngestError                   a whole input could not be read (record-level problems become rows)
    ├── QueryRefused                  SQL the sandbox does not run (shopsim_wh.engines.sandbox: not one SELECT, files outside)
    ├── QueryLimitExceeded            a user query ran past its time limit or memory cap (shopsim_wh.engines.sandbox.Limits)
    ├── QueryFailed                   the engine could not run a user query (a Spark SQL error): its first line
    └── GateError                     (shopsim_wh.analytics.gate) the paired gate cannot produce a result
        ├── GateRefused               the runs must not be paired (fingerprints differ beyond skills, no checkpoint id)
        └── GateDataError             the pairs cannot be fitted (no pairs, empty/collinear covariates, equal deltas)
"""

from __future__ import annotations


class ShopsimError(Exception):
    """Base class."""


class ConfigError(ShopsimError):
    pass


class FingerprintMismatch(ConfigError):
    def __init__(self, experiment: str, diff: dict[str, tuple[object, object]]):
        self.experiment = experiment
        self.diff = diff
        lines = [f"  {k}: stored={a!r} new={b!r}" for k, (a, b) in sorted(diff.items())]
        super().__init__(
            f"experiment {experiment!r} already exists in this warehouse with a different fingerprint:\n"
            + "\n".join(lines)
            + "\nUse a new experiment.name for a different setup (concurrency and output location may change freely)."
        )


class TestSplitGuard(ConfigError):
    __test__ = False  # not a pytest class


class WarehouseError(ShopsimError):
    pass


class WarehouseLockedError(WarehouseError):
    pass


class WarehouseFullError(WarehouseError):
    pass


class IntegrityError(WarehouseError):
    pass


class NameRefused(WarehouseError):
    """A name that would become a path component breaks the rule of :mod:`shopsim_wh.core.names`."""


class ModelError(ShopsimError):
    pass


class ModelHTTPError(ModelError):
    def __init__(self, status: int, message: str, hint: str):
        self.status = status
        super().__init__(f"model server answered HTTP {status}: {message}\n{hint}")


class ModelUnavailable(ModelError):
    pass


class EnvironmentError_(ShopsimError):
    pass


class EnvProtocolError(EnvironmentError_):
    pass


class ObservationVersionError(EnvironmentError_):
    pass


class ServerUnreachable(ShopsimError):
    """A configured server refused the connection or never answered; ``url`` names it."""

    def __init__(self, message: str, url: str | None = None):
        self.url = url
        super().__init__(message)


class EnvUnreachable(EnvProtocolError, ServerUnreachable):
    pass


class EnvUnavailable(EnvironmentError_):
    """The environment gave no usable answer; ``applied_maybe`` when the request may have been processed."""

    def __init__(self, message: str, applied_maybe: bool = True):
        self.applied_maybe = applied_maybe
        super().__init__(message)


class IngestError(ShopsimError):
    pass


class QueryRefused(ShopsimError):
    """Untrusted SQL the sandbox does not run; the message says what is allowed."""


class QueryFailed(ShopsimError):
    """The engine could not run a user query (Spark's analyser or runtime); the message is the engine's first line."""


class QueryLimitExceeded(ShopsimError):
    """A user query was stopped at its time limit or memory cap; the message names the limit and how to raise it."""
