"""Which release of each DBOS SDK first reads each request Relay sends, and so what a request needs
of the executor it goes to (ADR 0019). :func:`needs_of` is applied to every request
:func:`~relay_es.adapters.rest.calling.ask` sends; no route has to remember it.

An SDK older than a request fails it in one of two ways, and each is met differently:

* **A message type it does not know** (:data:`MESSAGES`): it answers "Unknown message type", which
  is a 501. Harmless, but in an application whose executors run mixed releases the answer would
  depend on which one the round-robin reached. So an executor whose ``executor_info`` names a release
  known to predate the message is passed over; one that names no language, a language without an
  entry here, or no readable version (Go's "(devel)") is asked, and answers for itself.
* **A field it does not know**, in a message it does (:data:`FIELDS`): every SDK drops it without
  a word -- Python's ``from_json`` keeps only its dataclass's fields and reads each body with
  ``.get``; TypeScript reads the keys it knows -- and answers as if it had not been given. A search
  by ``hasParent`` on dbos 2.15.0 lists every workflow with 200, and a search that picks the
  workflows of a bulk cancel would cancel them all. So a field that is set goes only to an executor
  *known* to read it: its language named here and its release at least the first that reads it.
  An executor naming none, or a language or version Relay cannot place, is not trusted with it.
  Not the loading flags (``load_input``, ``load_output``, ``load_context``): an SDK without them
  loads more than asked, never other workflows; nor ``select_count``: every SDK counts when no
  ``select_*`` flag is given.

When executors are connected and none can take the request, nothing is sent: a 501 naming what
they run, the message or the fields, and the releases that have them
(:class:`~relay_es.adapters.hub.calls.NoCapableExecutor`).

Where the releases come from (each checked by reading the code of that release, not its notes):
Python from the ``dbos`` wheels on PyPI, every minor release from 2.0.0 to 3.2.0 and 0.27.2, 1.0.0,
1.5.0, 1.10.0, 1.14.0 (``dbos/_conductor/conductor.py``: the ``MessageType`` cases it dispatches and
the ``body.get(...)`` keys each reads; ``protocol.py``: each request's dataclass fields, which
``from_json`` keeps). Python names its ``language`` and ``dbos_version`` from 2.6.0 on (2.5.0 sends
neither). TypeScript from the ``@dbos-inc/dbos-sdk`` tarballs on npm, whose registry keeps one release
of each minor (4.0.2 ... 4.27.6, 5.0.2, 5.1.10, 5.2.11; there is no 4.2 or 4.8)
(``dist/src/conductor/conductor.js``: its ``case protocol.MessageType.*`` and the keys of each body
it reads); it names both from 4.0.2 on. 5.3.0 has no conductor client. Go and Java: only the bulk
form is placed (:data:`BULK_SINCE`); their other fields are not trusted to them, their messages
answer for themselves.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from msgspec import UNSET

from relay_es.adapters.hub.calls import Needs
from relay_es.protocol import messages as wire

Release = tuple[int, int]  # major, minor

RELEASE = re.compile(r"v?(\d{1,9})\.(\d{1,9})(?![\d])")  # a dbos_version's major and minor ("2.15.0", "v0.15.0")

NAMES = {"python": "Python dbos", "typescript": "@dbos-inc/dbos-sdk", "go": "Go dbos-transact-golang",
         "java": "Java dev.dbos:transact"}


def release(dbos_version: str | None) -> Release | None:
    """The major and minor release of an SDK's ``dbos_version``; None for none, or one that names no
    release (Go's "(devel)" or "unknown")."""
    match = RELEASE.match(dbos_version or "")
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def _py(major: int, minor: int) -> tuple[str, Release]:
    return "python", (major, minor)


def _ts(major: int, minor: int) -> tuple[str, Release]:
    return "typescript", (major, minor)


def named(since: Mapping[str, Release]) -> str:
    """``since`` as the 501 tells it: "Python dbos 2.20, @dbos-inc/dbos-sdk 4.17"."""
    return ", ".join(f"{NAMES[lang]} {'.'.join(map(str, first))}" for lang, first in since.items())


# --- messages ------------------------------------------------------------------------------

# The first release of each SDK that answers each type (of those newer than the oldest release of
# each SDK read here: Python 0.27.2, TypeScript 4.0.2). A language without an entry answers for itself.
MESSAGES: dict[str, dict[str, Release]] = {
    "fork_workflow": dict([_py(1, 0)]),
    "retention": dict([_py(1, 5)]),
    "get_metrics": dict([_py(2, 6), _ts(4, 5)]),
    **{t: dict([_py(2, 9), _ts(4, 7)]) for t in ("delete", "export_workflow", "import_workflow")},
    "alert": dict([_py(2, 10), _ts(4, 9)]),
    **{t: dict([_py(2, 13), _ts(4, 9)]) for t in (
        "list_schedules", "get_schedule", "pause_schedule", "resume_schedule", "backfill_schedule",
        "trigger_schedule")},
    **{t: dict([_py(2, 14), _ts(4, 10)]) for t in ("list_application_versions", "set_latest_application_version")},
    **{t: dict([_py(2, 15), _ts(4, 11)]) for t in (
        "get_workflow_events", "get_workflow_notifications", "get_workflow_streams")},
    **{t: dict([_py(2, 16), _ts(4, 12)]) for t in ("fork_from_failure", "get_workflow_aggregates")},
    **{t: dict([_py(2, 20), _ts(4, 17)]) for t in ("list_queues", "get_queue")},
    "get_step_aggregates": dict([_py(2, 23), _ts(4, 19)]),
    "rewind_workflow": dict([_py(3, 1), _ts(5, 1)]),
}


def answers(kind: str, language: str | None, dbos_version: str | None) -> bool:
    """Whether an executor that said ``language`` and ``dbos_version`` may be sent a message of type
    ``kind``: not when its release is known to predate it (:data:`MESSAGES`); otherwise it answers,
    for itself if Relay cannot place it."""
    first = MESSAGES.get(kind, {}).get((language or "").lower())
    version = release(dbos_version)
    return first is None or version is None or version >= first


# --- fields --------------------------------------------------------------------------------


def given(value: Any) -> bool:
    """A field is set: not null, not left out, not false, empty or zero (which every SDK, knowing the
    field or not, reads as not given)."""
    return value is not UNSET and value is not None and bool(value)


def either(value: Any) -> bool:
    """A tri-state filter is set: true and false both filter (left out: either)."""
    return value is not UNSET and value is not None


def several(value: Any) -> bool:
    """The bulk form carries more than one workflow: an SDK without it acts on ``workflow_id`` alone,
    the first one, which is all a bulk of one asks."""
    return isinstance(value, list) and len(set(value)) > 1


@dataclass(frozen=True)
class Field:
    """A field of a request that an SDK without it ignores. ``path``: where it is (``("body",
    "has_parent")``); ``name``: what a client calls it; ``since``: the first release of each SDK that
    reads it (a language without one is not trusted with it); ``used``: whether a value asks for
    something an SDK ignoring it would not do; ``lacking``: the 501's words, for a field whose
    failure needs its own (else it is named with the others)."""

    path: tuple[str, ...]
    name: str
    since: Mapping[str, Release]
    used: Callable[[Any], bool] = given
    lacking: str | None = None

    def value(self, request: Any) -> Any:
        for key in self.path:
            request = getattr(request, key, None)
        return request

    def known_to(self, language: str | None, dbos_version: str | None) -> bool:
        lang = (language or "").lower()
        first = self.since.get(lang)
        if first is None and lang in LATER_SDKS:
            return True
        version = release(dbos_version)
        return first is not None and version is not None and version >= first


# SDKs whose Conductor client came after these fields did, and whose first releases of each are not
# known here: trusted with a field that names no release of theirs (as Relay trusted them before the
# table), so that a search by queue or executor on Go or Java executors is not a 501. A field that
# names one (the bulk form) holds them to it.
LATER_SDKS = ("go", "java")


# The first release of each SDK whose cancel, resume and delete act on every id of ``workflow_ids``
# (protocol sections 5.4 and 8): an older one reads ``workflow_id`` alone and acts on the first id
# only, answering success. Python: 2.15 (protocol.py's CancelRequest gains workflow_ids). TypeScript:
# 4.11 (4.10.15 reads workflow_id alone). Go: v0.15.0 ("Bulk cancels"; earlier releases name theirs
# too). Java: the form came in March 2026 and its HEAD of July 2026 (tags up to 1.0.0) has it; which
# 0.x release first did is not known here, so 1.0 is required.
BULK_SINCE: dict[str, Release] = {"python": (2, 15), "typescript": (4, 11), "go": (0, 15), "java": (1, 0)}

BULK_LACKING = (
    "their DBOS SDK predates bulk actions on several workflows (it would act on the first one only); "
    f"upgrade it ({named(BULK_SINCE)} or later), or act on one workflow at a time")


def bulk_capable(language: str | None, dbos_version: str | None) -> bool:
    """Whether an executor that said ``language`` and ``dbos_version`` acts on every workflow of a
    bulk cancel, resume or delete (:data:`BULK_SINCE`). An SDK Relay does not know, or a version it
    cannot read, is not trusted with it: it would act on the first workflow and answer success."""
    return _BULK.known_to(language, dbos_version)


_BULK = Field(("workflow_ids",), "workflowIds (several)", BULK_SINCE, several, BULK_LACKING)


def _fields(path: tuple[str, ...], since: Mapping[str, Release], *names: tuple[str, str],
            used: Callable[[Any], bool] = given) -> list[Field]:
    """A :class:`Field` for each ``(wire key, client's name)`` under ``path``, all with one ``since``."""
    return [Field((*path, key), name, since, used) for key, name in names]


B = ("body",)
# The application's name in a request's body, read from Python 2.30 and TypeScript 4.26 on.
_APP_NAME = _fields(B, dict([_py(2, 30), _ts(4, 26)]), ("application_name", "applicationName"))
# Searches: the fields past Python 0.27.2's and TypeScript 4.0.2's list_workflows (workflow_uuids,
# workflow_name, authenticated_user, start_time, end_time, status, application_version, limit,
# offset, sort_desc). list_queued_workflows reads the same keys as list_workflows from Python 2.9 and
# TypeScript 4.7 on; before, only workflow_name, start_time, end_time, status, queue_name, limit,
# offset and sort_desc (and it lists queued workflows whatever ``queues_only`` says).
_SEARCH = [
    *_fields(B, dict([_py(2, 4), _ts(4, 4)]), ("forked_from", "forkedFrom")),
    *_fields(B, dict([_py(2, 9), _ts(4, 7)]), ("executor_id", "executorId"),
             ("workflow_id_prefix", "workflowIdPrefix")),
    *_fields(B, dict([_py(2, 11), _ts(4, 9)]), ("parent_workflow_id", "parentWorkflowId")),
    *_fields(B, dict([_py(2, 16), _ts(4, 12)]), ("was_forked_from", "wasForkedFrom"), used=either),
    *_fields(B, dict([_py(2, 18), _ts(4, 14)]), ("has_parent", "hasParent"), used=either),
    *_fields(B, dict([_py(2, 23), _ts(4, 19)]), ("completed_after", "completedAfter"),
             ("completed_before", "completedBefore"), ("dequeued_after", "dequeuedAfter"),
             ("dequeued_before", "dequeuedBefore")),
    *_fields(B, dict([_py(2, 25), _ts(4, 21)]), ("schedule_name", "scheduleName"), ("attributes", "attributes")),
    *_APP_NAME,
]

FIELDS: dict[str, list[Field]] = {
    "list_workflows": [*_SEARCH, *_fields(B, dict([_py(2, 9), _ts(4, 7)]), ("queue_name", "queueName"),
                                          ("queues_only", "queuesOnly"))],
    "list_queued_workflows": [*_SEARCH, *_fields(B, dict([_py(2, 9), _ts(4, 7)]), ("workflow_uuids", "workflowIds"),
                                                 ("application_version", "appVersion"),
                                                 ("authenticated_user", "user"))],
    # Python 2.16 and TypeScript 4.12 read the group_by flags but application name's, and status, name,
    # app_version, executor_id, queue_name, workflow_id_prefix, start_time and end_time.
    "get_workflow_aggregates": [
        *_fields(B, dict([_py(2, 22), _ts(4, 19)]), ("time_bucket_size_ms", "timeBucketSizeMs")),
        *_fields(B, dict([_py(2, 23), _ts(4, 19)]), ("select_min_created_at", "selectMinCreatedAt"),
                 ("select_max_queue_wait_ms", "selectMaxQueueWaitMs"),
                 ("select_max_total_latency_ms", "selectMaxTotalLatencyMs"), ("completed_after", "completedAfter"),
                 ("completed_before", "completedBefore"), ("dequeued_after", "dequeuedAfter"),
                 ("dequeued_before", "dequeuedBefore")),
        *_fields(B, dict([_py(2, 26), _ts(4, 23)]), ("forked_from", "forkedFrom"),
                 ("parent_workflow_id", "parentWorkflowId"), ("schedule_name", "scheduleName"),
                 ("attributes", "attributes")),
        *_fields(B, dict([_py(2, 26), _ts(4, 23)]), ("was_forked_from", "wasForkedFrom"),
                 ("has_parent", "hasParent"), used=either),
        # TypeScript 4.23 to 4.27 read these as workflow_uuids and authenticated_user; 5.0 as sent
        *_fields(B, dict([_py(2, 26), _ts(5, 0)]), ("workflow_ids", "workflowIds"), ("user", "user")),
        *_fields(B, dict([_py(2, 30), _ts(4, 26)]), ("application_name", "applicationName"),
                 ("group_by_application_name", "groupByApplicationName")),
    ],
    "get_step_aggregates": _APP_NAME,  # the rest since the message (Python 2.23, TypeScript 4.19)
    "list_schedules": _APP_NAME,
    "list_queues": _APP_NAME,
    "get_metrics": [Field(("application_name",), "applicationName", dict([_py(2, 30), _ts(4, 26)]))],
    "list_steps": _fields((), dict([_py(2, 18), _ts(4, 14)]), ("limit", "limit"), ("offset", "offset")),
    "cancel": [_BULK, *_fields((), dict([_py(2, 24), _ts(4, 20)]), ("cancel_children", "cancelChildren"))],
    "resume": [_BULK, *_fields((), dict([_py(2, 15), _ts(4, 11)]), ("queue_name", "queueName"))],
    "delete": [_BULK],
    "fork_workflow": _fields(B, dict([_py(2, 15), _ts(4, 11)]), ("queue_name", "queueName"),
                             ("queue_partition_key", "queuePartitionKey")),
}


# --- what a request needs ------------------------------------------------------------------


def needs_of(request: Any) -> Needs | None:
    """What ``request`` (a catalogue request) needs of its executor: its message type
    (:data:`MESSAGES`) and every field it sets (:data:`FIELDS`); None when any executor takes it."""
    if not isinstance(request, wire.Request):
        return None
    kind = request.type
    first = MESSAGES.get(kind)
    used = [f for f in FIELDS.get(kind, ()) if f.used(f.value(request))]
    if first is None and not used:
        return None
    texts = []
    if first is not None:
        texts.append(f"their DBOS SDK predates {kind} (it answers \"Unknown message type\"); upgrade it "
                     f"({named(first)} or later)")
    texts += dict.fromkeys(f.lacking for f in used if f.lacking is not None)
    plain = [f for f in used if f.lacking is None]
    if plain:
        texts.append(f"their DBOS SDK does not read {_listed(plain)} of {kind} and would answer as if "
                     f"{'it were' if len(plain) == 1 else 'they were'} not given; upgrade it, or leave "
                     f"{'it' if len(plain) == 1 else 'them'} out")

    def able(language: str | None, dbos_version: str | None) -> bool:
        return ((first is None or answers(kind, language, dbos_version))
                and all(f.known_to(language, dbos_version) for f in used))

    return Needs(able, "; ".join(texts))


def _listed(fields: Iterable[Field]) -> str:
    return ", ".join(f"{f.name} ({named(f.since)} or later)" for f in fields)


def both(*needs: Needs | None) -> Needs | None:
    """What a request needs when it needs each of ``needs`` (a route's own, :func:`needs_of`'s):
    an executor able for all of them; the 501 says each lack once."""
    given_ = [n for n in needs if n is not None]
    if len(given_) <= 1:
        return given_[0] if given_ else None
    texts: list[str] = []
    for text in sorted((n.lacking for n in given_), key=len, reverse=True):
        if not any(text in kept for kept in texts):  # a route's BULK is said in needs_of's too
            texts.append(text)
    return Needs(lambda language, version: all(n.able(language, version) for n in given_), "; ".join(texts))


def first_releases(kind: str) -> str:
    """The releases that first answer ``kind``, as the 501 for an executor's "Unknown message type"
    says them; "a newer SDK" for a type not in :data:`MESSAGES`."""
    first = MESSAGES.get(kind)
    return "a newer SDK" if first is None else f"{named(first)} or later"
