"""The read models followed in a process of their own (``relay serve``, ADR 8).

A server runs three consumers of every event on one interpreter: the hub
recording it, the process manager following it, and the read models folding
and writing it. They share one GIL, so in a storm the read models' share (a
quarter of the CPU, bench section 2) is taken from the sockets and the
deadlines. :class:`ProjectionProcess` moves the folding to a child process
with its own GIL; on a machine with a core to spare the read models no longer
take the event loop's time.

Nothing about the read models changes: the child runs the same
:class:`~relay_es.projections.runner.ProjectionRunner`, whose positions are
tracked in the store and moved with its rows in one transaction, so two
runners on one store each apply an event once (a batch whose position moved
under it is read again). That is what lets the server's own runner go on
folding whenever the child is not following -- before its first report, after
it exited and until it is started again -- without a gap.

Between the two processes, one pipe:

* the server wakes the child when it has recorded events, and when a request
  waits for the read models (the event may be another process's); one wake is
  outstanding at a time (the child answers each pass, so the server's side never
  fills), and one asked for meanwhile, or while the child starts, is sent with
  its answer. The child also reads the log once a second for writers elsewhere;
* the child reports each projection's position after every batch it commits,
  every event a read model skipped (:class:`~relay_es.projections.runner.Poison`)
  and every pass that failed; a reader thread in the server takes them in
  (:meth:`ProjectionRunner.reached_elsewhere`, :meth:`~ProjectionRunner.poisoned_elsewhere`):
  /metrics shows the lag, the skips and the failures, and a request waiting to
  read its own write (``wait_for``) is woken. A report it cannot read ends the
  child: one nobody reads from would fill the pipe and stall.

The child runs at a lower CPU priority (``nice`` :data:`NICE`): where the cores
are short, the sockets and the deadlines go first. That is all of the in-process
runner's giving way that crosses the process boundary: on SQLite the child's
write of a batch still holds the store's one write lock while it lasts, as the
server's own runner does. It ignores SIGINT and SIGTERM (a Ctrl-C or a
supervisor signals the whole group; the server stops it, at the interpreter's
exit too) and dies with the server (Linux ``PR_SET_PDEATHSIG``; elsewhere when
the pipe closes), so a killed server leaves no writer behind. A child that exits is started again after a backoff: 1 s,
doubled at each exit up to :data:`RESTART_BACKOFF_MAX`, back to 1 s once one
has run for :data:`WORKED_SECS`.

A child alive but stuck -- stopped (SIGSTOP), waiting on a lock or on I/O, in a deadlock -- reports
nothing, and nothing else would show it: the server's runner rests while it follows. So it owes a
report: the answer to a wake from the moment it is sent, and the end of its next unwoken pass
``poll_secs`` after its last report (every pass ends with one; a report of any kind, a batch, a skip,
a failed pass, shows it working). One that has owed a report for :data:`LATE_SECS` is late: a wait
for the read models stops waiting for it (:attr:`ProjectionProcess.late`). At :data:`STALL_SECS` it
is stuck: killed (SIGKILL; it may answer nothing else), counted and logged as a failure, and started
again after the backoff like a child that exited, the server folding meanwhile. A batch waiting
longer than that on the store (SQLite's 30 s lock wait, the Postgres pool's 30 s) ends the child
too: the server's runner then waits on the same store in its place.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from relay_es.adapters.readmodels.children import die_with_parent
from relay_es.adapters.stores import StoreConfig
from relay_es.domain.text import first_line
from relay_es.projections.runner import Poison

log = logging.getLogger(__name__)

NICE = 5  # the child's niceness above the server's
RESTART_BACKOFF_MAX = 30.0  # seconds between starts of a child that keeps exiting
WORKED_SECS = 60.0  # a child that ran this long before it exited is started again after 1 s, not its doubled backoff
POLL_SECS = 1.0  # the child reads the log at least this often (writers in other processes)
READER_SECS = 1.0  # how long a stop waits for the last reports of a child that ended
STOP_SECS = 5.0  # how long a stop waits for the child before killing it
LATE_SECS = 2.0  # a child that has owed a report this long is late: waits for the read models stop waiting
STALL_SECS = 10.0  # a child that has owed a report this long is stuck: killed and started again
IDLE_SESSION_TIMEOUT = "57P05"  # the SQLSTATE of a session Postgres ended for its idle_session_timeout


class ProjectionProcess:
    """The server's side of the child process that follows the log into the read models.

    ``reached``: called (from a reader thread) with each projection's position whenever the child
    committed a batch; ``poisoned``: with each :class:`Poison` it skipped. ``log_level``: the
    server's, for the child's log. ``monotonic``: the clock of the restarts' backoff. ``poll_secs``:
    how often the child reads the log unwoken. ``store_away``: whether the server finds the store
    unreachable now; a child that ends or is killed meanwhile is logged as a warning (it waited on
    the store, or could not reach it as it started: what an outage does), not as an error."""

    def __init__(self, store: StoreConfig, *, reached: Callable[[dict[str, int]], None],
                 poisoned: Callable[[Poison], None], log_level: str = "INFO",
                 monotonic: Callable[[], float] = time.monotonic, poll_secs: float = POLL_SECS,
                 store_away: Callable[[], bool] = lambda: False) -> None:
        self.store = store
        self.store_away = store_away
        self.monotonic = monotonic
        self.poll_secs = poll_secs
        self._reached = reached
        self._poisoned = poisoned
        self.log_level = log_level
        self._lock = threading.Lock()
        self._process: Any = None
        self._conn: Any = None  # the reader thread owns it: it closes it once the child's reports end
        self._reader: threading.Thread | None = None
        self._ready = False  # the running child has reported: it follows the log
        self._asked = False  # a wake is outstanding (the child answers each pass)
        self._pending = False  # woken again while one was outstanding: sent when the child answers
        self._heard_at = 0.0  # when the running child last reported (or was started)
        self._wanted_at: float | None = None  # when the wake it has not answered yet was sent
        self._stopping = False
        self._next_start = 0.0
        self._started_at = 0.0
        self._backoff = 1.0
        self.starts = 0
        self.exits = 0  # children that exited without being asked
        self.stalls = 0  # children killed for owing a report for STALL_SECS (see the module)
        # Failures, each logged: a child that exited unasked or could not be started, and every pass a
        # child reported failed (the store away, a bug). The runtime adds them to
        # relay_worker_failures_total{worker="projections"}, as the worker's own failures in a thread.
        self.failures = 0
        self._at_exit = False  # stop() registered to run at the interpreter's exit (see _start)

    def follow(self, wake: bool = True) -> bool:
        """Starts the child if it is not running (and its restart is due), and wakes it if ``wake`` (this
        process recorded events since the last call; the child reads the log unwoken every
        ``poll_secs``). True when it follows the log (it has reported since it started): the server's own
        runner may rest. A child stuck for :data:`STALL_SECS` is killed here (the runtime's projection worker
        calls this at least once a second, and touches no store while the child follows)."""
        with self._lock:
            if self._stopping:
                return False
            if self.following and self._overdue() >= STALL_SECS:
                self._end_stuck()
            if self._process is None or not self._process.is_alive():
                self._reap()
                if self.monotonic() < self._next_start:
                    return False
                try:
                    self._start()
                except Exception as e:  # noqa: BLE001 -- no process (EAGAIN, EMFILE, ENOMEM): fold here, try later
                    self.failures += 1
                    self._put_off(f"the read models' process could not be started ({type(e).__name__}: {e})")
                return False
            if wake:
                if self._asked or not self._ready:
                    self._pending = True  # sent when it answers (its first answer, if it is starting)
                else:
                    self._wake()
            return self._ready

    def _wake(self) -> None:
        try:
            self._conn.send("wake")
            self._asked = True
            if self._wanted_at is None:
                self._wanted_at = self.monotonic()  # it owes the answer from now
        except (OSError, ValueError):
            pass  # it is exiting: the reader thread sees the pipe close

    @property
    def following(self) -> bool:
        """The child runs and has reported since it started."""
        return self._ready and self._process is not None and self._process.is_alive()

    @property
    def late(self) -> bool:
        """The child follows the log but has owed a report for :data:`LATE_SECS`: probably stuck (killed at
        :data:`STALL_SECS`). Nobody folds meanwhile: a wait for the read models need not go on."""
        with self._lock:
            return self.following and self._overdue() >= LATE_SECS

    def _overdue(self) -> float:
        """How long the running child has owed a report (negative: not yet); see the module."""
        owed = self._heard_at + self.poll_secs  # the end of its next unwoken pass
        if self._wanted_at is not None:
            owed = min(owed, max(self._heard_at, self._wanted_at))  # the answer to a wake, or a report since
        return self.monotonic() - owed

    def _end_stuck(self) -> None:
        """Kills the running child, stuck (see the module); its reader thread sees the pipe close."""
        process, overdue = self._process, self._overdue()
        process.kill()  # a stopped or stuck child answers no stop (and ignores SIGTERM)
        self._reap(f"the read models' process {process.pid} has owed a report for {overdue:.0f} s (stopped, "
                   "or stuck on a lock, on I/O); killed it")
        self.stalls += 1  # after the failure it is one of: a reader of both never sees the stall alone

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe(duplex=True)
        try:
            process = ctx.Process(target=follow_in_child,
                                  args=(self.store, theirs, self.log_level, self.poll_secs, os.getpid()),
                                  name="relay-projections", daemon=True)
            process.start()
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        if not self._at_exit:
            # At the interpreter's exit (uvicorn skips the shutdown on a second Ctrl-C), before
            # multiprocessing's own handler -- registered when the first process started, so run after
            # this one -- which would SIGTERM the child (ignored, see follow_in_child) and join it for ever.
            atexit.register(self.stop)
            self._at_exit = True
        self._process, self._conn = process, ours
        self._ready = self._asked = self._pending = False
        self._started_at = self._heard_at = self.monotonic()
        self._wanted_at = None
        self.starts += 1
        self._reader = threading.Thread(target=self._read, args=(process, ours), name="relay-projections-reader",
                                        daemon=True)
        try:
            self._reader.start()
        except BaseException:
            process.kill()  # nobody would read it
            raise
        log.info("read models: following the log in process %d", process.pid)

    def _reap(self, killed: str | None = None) -> None:
        """The child exited (it was running), or was ``killed`` for what that says: counted, logged, its
        restart put off. Its reader thread takes its last reports and closes the pipe."""
        if self._process is None:
            return
        code = self._process.exitcode
        self._process.join(0)
        self._process = self._conn = None
        self._ready = False
        self._wanted_at = None
        if not self._stopping:
            if killed is None:
                self.exits += 1
            self.failures += 1
            now = self.monotonic()
            if now - self._started_at >= WORKED_SECS:
                self._backoff = 1.0  # it had worked: not a child that cannot start
            self._put_off(killed or f"the read models' process exited (code {code})", now)

    def _put_off(self, what: str, now: float | None = None) -> None:
        """The next start, after the backoff (doubled for the one after)."""
        self._next_start = (self.monotonic() if now is None else now) + self._backoff
        if self.store_away():
            log.warning("%s, the store being unreachable; it is started again in %.0f s", what, self._backoff)
        else:
            log.error("%s; this process folds the log until it is started again in %.0f s", what, self._backoff)
        self._backoff = min(RESTART_BACKOFF_MAX, self._backoff * 2)

    def _read(self, process: Any, conn: Any) -> None:
        """The reader thread of one child: its reports, until its pipe closes (it then closes it). A
        report it cannot read ends the child: a child nobody reads from would fill the pipe and stall."""
        try:
            while True:
                try:
                    kind, value = conn.recv()
                except (EOFError, OSError):
                    return
                except Exception:  # noqa: BLE001 -- the child is not trusted blindly
                    log.exception("unreadable report from the read models' process; ending it")
                    process.kill()
                    return
                self._took(process, kind, value)
        finally:
            with self._lock:
                if self._process is process:
                    self._ready = False  # the server folds until it is reaped and started again
            try:
                conn.close()
            except OSError:
                pass

    def _took(self, process: Any, kind: str, value: Any) -> None:
        """One report of ``process``. Any report shows it working (see the module)."""
        with self._lock:
            if self._process is process:
                self._heard_at = self.monotonic()
        if kind == "poison":
            self._poisoned(value)
            return
        if kind == "failed":
            with self._lock:
                self.failures += 1
            return
        self._reached(value)
        with self._lock:
            if self._process is process:
                self._ready = True
                if kind == "idle":  # the end of a pass: any wake sent before it is answered
                    self._asked = False
                    self._wanted_at = None
                    if self._pending:  # events came while it was busy: one more pass
                        self._pending = False
                        self._wake()

    def stop(self) -> None:
        """Asks the child to stop after its batch; kills it after :data:`STOP_SECS`."""
        with self._lock:
            self._stopping = True
            process, conn, reader = self._process, self._conn, self._reader
            if process is not None:
                try:
                    conn.send("stop")
                except (OSError, ValueError):
                    pass
        if process is None:
            return
        process.join(STOP_SECS)
        if process.is_alive():
            log.warning("the read models' process did not stop within %.0f s; killing it", STOP_SECS)
            process.kill()
            process.join(1.0)
        if reader is not None:
            reader.join(READER_SECS)  # its last reports (a skip it counted) before we go


# ------------------------------------------------------------------ the child


class PassFailures:
    """How the child takes a pass that failed. A store away fails every pass until it is back: told as
    :class:`~relay_es.adapters.failures.OutageLog` says (a line as it starts, one a minute, the error's
    first line only: Postgres' has the statement and a caret under it on the lines after), a bug with
    its traceback each time. A connection Postgres ended for idling (:func:`ended_idle`) is no outage:
    the pass runs again at once, once, unsaid."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        from relay_es.adapters.failures import OutageLog

        self.outage = OutageLog(log, "the read models' process", monotonic=monotonic)
        self._retried = False  # a pass was run again at once since the last one went through

    def again_at_once(self, e: Exception) -> bool:
        """The pass failed with ``e``: whether to run it again at once (else told, and after a pause)."""
        if not self._retried and ended_idle(e):
            self._retried = True  # the pool dropped that connection: it hands out another
            return True
        if not self.outage.store_failed("failed", e):
            log.exception("the read models' process failed; retrying", exc_info=e)
        return False

    def worked(self) -> None:
        """A pass went through."""
        self._retried = False
        self.outage.worked()


def ended_idle(e: BaseException) -> bool:
    """``e`` (or what it was raised from) says Postgres ended the session of a connection left idle
    longer than its ``idle_session_timeout`` (a role's setting, say): a pass run again at once gets
    another connection. A child whose batches come seconds apart met it at every first one."""
    seen: BaseException | None = e
    for _ in range(4):  # the library's error, raised from the driver's
        if seen is None:
            return False
        if getattr(seen, "sqlstate", None) == IDLE_SESSION_TIMEOUT:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def follow_in_child(store: StoreConfig, conn: Any, log_level: str, poll_secs: float, server: int) -> None:
    """The child: folds the log into the read models until told to stop or the server is gone.
    ``server``: the server's process id."""
    die_with_parent()  # SIGKILL when the server (the thread that started this process) ends
    if os.getppid() != server:
        return  # the server ended before the line above took effect
    # A Ctrl-C reaches the whole process group, and so may a supervisor's SIGTERM: the server stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.nice(NICE)
    except OSError:
        pass
    from relay_es.adapters import logs

    logs.configure(log_level)
    from relay_es.adapters.clock import SystemClock
    from relay_es.adapters.failures import is_store_error
    from relay_es.adapters.stores import event_store_env, open_database
    from relay_es.engine.service import Relay
    from relay_es.projections import all_projections
    from relay_es.projections.runner import PositionMoved, ProjectionRunner

    relay: Relay | None = None
    db: Any = None
    try:
        relay = Relay({**event_store_env(store), "CREATE_TABLE": "false"}, clock=SystemClock())
        db = open_database(store)
        # The server created the tables (and rebuilt outdated ones) before it started this process.
        runner = ProjectionRunner(relay, db, all_projections(), schema=False)
        runner.on_poison.append(lambda p: conn.send(("poison", p)))
        sent: dict[str, int] = {}
        failures = PassFailures()

        def stop_asked() -> bool:
            """Reads what the server sent (wakes, a stop) without waiting."""
            while conn.poll():
                if conn.recv() == "stop":
                    return True
            return False

        while True:
            if stop_asked():
                return
            try:
                while True:
                    if stop_asked():
                        return
                    try:
                        n = runner.run_batch()
                    except PositionMoved:
                        continue  # the server's runner moved it: read again
                    if runner.reached != sent:
                        sent = dict(runner.reached)
                        conn.send(("reached", sent))
                    if n == 0:
                        break
                if not sent:
                    sent = runner.positions()  # a read of the store: away, it fails as a batch does
            except (EOFError, BrokenPipeError, ConnectionResetError):
                raise  # the server is gone
            except Exception as e:  # the store away: the same batch later
                if failures.again_at_once(e):
                    continue
                conn.send(("failed", type(e).__name__))
                time.sleep(0.5)
                continue
            failures.worked()
            conn.send(("idle", sent))
            conn.poll(poll_secs)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the server is gone
    except Exception as e:
        if not is_store_error(e):
            raise
        # The store away, or not the store it was (a new cluster: no tables) as the process starts (its
        # first connection made): one line, not multiprocessing's traceback; the server starts another
        # while it runs (a lost store stops it).
        log.warning("the read models' process stopped (%s: %s)", type(e).__name__, first_line(e))
    finally:
        if db is not None:
            db.close()
        if relay is not None:
            relay.close()
