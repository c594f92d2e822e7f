"""What the REST API is given: :class:`RestContext`, built by the composition root.

The routes never see the runtime. They see the command service, the read
models, the credential checker, the hub's two callbacks, the metrics (Relay's,
and the executors' series) and the few settings they use, each named here; a handler asks for the whole context
by declaring ``ctx: Context``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from litestar.di import NamedDependency
from litestar.params import SkipValidation

from relay_es.domain.defaults import METRICS_RETENTION

if TYPE_CHECKING:
    from relay_es.adapters.authz import Credentials
    from relay_es.adapters.hub.calls import Calls
    from relay_es.adapters.metrics import Metrics
    from relay_es.adapters.oidc import OidcUsers
    from relay_es.adapters.series import MetricSeries
    from relay_es.engine.service import Relay


@dataclass
class Tally:
    """A count that moves inside the frozen :class:`RestContext`."""

    value: int = 0


@dataclass(frozen=True)
class RestContext:
    relay: Relay
    """The command service: every write, and the event streams the expensive reads replay."""
    db: Any
    """The read models' database (``relay_es.adapters.stores.Database``)."""
    credentials: Credentials | None
    """The one credential checker (shared with admission); None in development mode."""
    read_your_writes: Callable[[], None]
    """Blocks until the read models hold every event recorded so far (at most a few seconds)."""
    app_deleted: Callable[[str, str], None]
    """``(org, app)``: an application was deleted; the hub closes its executors' sockets."""
    token_revoked: Callable[[str, str], None]
    """``(org, token)``: a token was revoked; admission forgets it and the hub closes its sockets."""
    urgent: Callable[[], bool]
    """Whether the process manager has urgent work (deadlines due or firing): expensive reads let it go first."""
    metrics: Metrics
    faults: Callable[[], list[str]]
    """What makes this instance unhealthy now (a bug the process manager met), empty when healthy."""
    auth: bool
    """Auth mode (tokens required) or development mode (this machine, org ``local``)."""
    host: str
    """The address Relay was told to listen on: development mode answers a ``Host`` naming it."""
    instance: str
    """This instance's name, told by ``/healthz`` to operators."""
    store_kind: str
    """``sqlite`` or ``postgres``, told by ``/healthz`` to operators."""
    default_executor_timeout: timedelta
    """An application's ``executorTimeoutSecs`` when it sets none."""
    on_startup: Callable[[], Any]
    """Called on the server's event loop once it runs (starts the workers and the hub)."""
    on_shutdown: Callable[[], Awaitable[None]]
    """Awaited when the server stops."""
    calls: Calls | None = None
    """How an operation asks one executor of an application something (on the loop: ``await
    calls.call(org, app, make_request, timeout=...)``), or None where no hub runs (tests of
    the routes alone)."""
    executor_here: Callable[[str, str, str], bool] = lambda org, app, executor_id: False
    """Whether ``(org, app, executor_id)`` has a registered socket here now, or transitions on their way
    to the store (the dispatcher's ``is_connected``): the read models may still say otherwise."""
    call_timeout: timedelta = timedelta(seconds=20)
    """How long an executor has to answer one operation (``RELAY_CALL_TIMEOUT_SECS``)."""
    latest_versions: dict[tuple[str, str], tuple[str | None, float]] = field(default_factory=dict)
    """(org, app) -> the version a user made latest, as the executors' registry said it, and when (monotonic
    seconds): :func:`relay_es.adapters.rest.calling.latest_version`'s memory."""
    latest_changes: dict[tuple[str, str], int] = field(default_factory=dict)
    """(org, app) -> how many times this process made a version latest (:func:`~relay_es.adapters.rest.calling.latest_changed`)."""
    apps_gone: Tally = field(default_factory=lambda: Tally())
    """How many applications this process deleted (:func:`~relay_es.adapters.rest.calling.app_gone`): a
    latest-version answer asked for before one was is not kept."""
    series: MetricSeries | None = None
    """The executors' metrics as collected (``listMetrics``), or None where nothing collects."""
    metrics_interval: int = 300
    """The length of one metrics bucket, seconds (``RELAY_METRICS_INTERVAL_SECS``)."""
    metrics_retention: int = int(METRICS_RETENTION.total_seconds())
    """How long the collected series are kept, seconds (``RELAY_METRICS_RETENTION_SECS``): ``listMetrics``
    answers no sample older, pruned yet or not."""
    readiness: Callable[[], str | None] = lambda: None
    """Why this instance should not be sent traffic now (``starting``, ``catching_up``, ``unhealthy``,
    ``shutting_down``), or None: ready (``/readyz``)."""
    oidc: OidcUsers | None = None
    """Users signing in with OIDC bearer JWTs (``--oidc-issuer``), or None: tokens only, and the
    operations Conductor serves only with OAuth answer 404."""


# How a handler asks for the context: injected by name (``ctx``), passed as is
# (no validation: it is Relay's own object, not the caller's input).
Context = NamedDependency[SkipValidation[RestContext]]
