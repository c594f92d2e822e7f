"""Errors as RFC 7807 ``application/problem+json`` documents.

Every refusal and failure of the REST API leaves through here: :func:`problem`
builds the document (``type``, ``title``, ``status``, ``detail``, and for a
422 the ``errors`` naming each field and what was wrong), and
:data:`EXCEPTION_HANDLERS` maps each exception to its status: validation and
invalid settings 422, unknown org/app/executor/token 404, a command the state
refuses 409, a signed-in member removed or given another role after their request was let
in 401 (:class:`~relay_es.domain.errors.MembershipChanged`: they sign in again), Litestar's own
HTTP errors their status (headers kept; a 413 names the body cap the request passed), a change that
kept meeting other writers' changes to the same object through all its retries 503
with ``Retry-After`` (:meth:`~relay_es.engine.store.RelayStore.retrying`), a store
that is away or failing (a connection it cut, a pool with none to give, a locked file:
:func:`~relay_es.adapters.failures.is_store_error`) 503 with ``Retry-After`` and one
warning line (at most one per :data:`STORE_WARNING_WINDOW`, counting the rest), anything
else 500 with its traceback in the log and nothing of it in the answer -- also a store
error that comes from the data (:func:`~relay_es.adapters.failures.is_data_error`: a
retry fails the same way). A request's action whose record the store failed to write is
told alike, in its own line per window (:func:`store_warning`).
"""

from __future__ import annotations

import logging
from typing import Any

from eventsourcing.persistence import IntegrityError
from litestar import Request, Response
from litestar.exceptions import HTTPException, NotFoundException, ValidationException

from relay_es.adapters.failures import is_data_error, is_store_error
from relay_es.adapters.hub.throttle import Throttle
from relay_es.domain.errors import (
    DomainError,
    IllegalTransition,
    InvalidSetting,
    MembershipChanged,
    UnknownAlertingRule,
    UnknownApplication,
    UnknownExecutor,
    UnknownMember,
    UnknownRole,
    UnknownToken,
)
from relay_es.domain.text import bytes_said, first_line

log = logging.getLogger(__name__)

PROBLEM = "application/problem+json"

STORE_RETRY_AFTER = "5"  # seconds a caller is asked to wait when the store is away: its outages last seconds
STORE_WARNING_WINDOW = 10.0  # seconds: one warning per window for the requests the store failed, the rest counted
# The requests the store failed, and the records of their actions it failed (see store_warning), a key each: a
# storm of callers during an outage logs a line of each per window.
store_warnings = Throttle(STORE_WARNING_WINDOW, max_keys=2)

TITLES = {400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found", 405: "Method not allowed",
          413: "Request entity too large", 503: "Service unavailable"}


def problem(status: int, title: str, detail: str, errors: list[dict[str, Any]] | None = None) -> Response[Any]:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    return Response(content=body, status_code=status, media_type=PROBLEM)


def _validation(_: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    errors = []
    for item in exc.extra or []:
        if isinstance(item, dict):
            errors.append({"location": item.get("key") or item.get("source") or "body", "message": item.get("message", "")})
    detail = "; ".join(f"{e['location']}: {e['message']}" for e in errors) or str(exc.detail)
    return problem(422, "Unprocessable entity", detail, errors)


def _invalid_setting(_: Request[Any, Any, Any], exc: InvalidSetting) -> Response[Any]:
    return problem(422, "Unprocessable entity", str(exc), [{"location": exc.field, "message": exc.message}])


def _not_found(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    return problem(404, "Not found", str(exc) if not isinstance(exc, HTTPException) else exc.detail)


def _conflict(_: Request[Any, Any, Any], exc: DomainError) -> Response[Any]:
    return problem(409, "Conflict", str(exc))


def _membership_changed(_: Request[Any, Any, Any], exc: MembershipChanged) -> Response[Any]:
    resp = problem(401, "Unauthorized", "your membership changed since this request was let in (you were removed, "
                                        "or given another role); sign in again")
    resp.headers["WWW-Authenticate"] = "Bearer"
    return resp


def _http(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    detail = _too_large(request, exc.detail) if exc.status_code == 413 else exc.detail
    resp = problem(exc.status_code, TITLES.get(exc.status_code, "Error"), detail)
    if exc.headers:
        resp.headers.update(exc.headers)
    return resp


def _too_large(request: Request[Any, Any, Any], detail: str) -> str:
    """A 413's detail: the body cap of the route it passed (``request_max_body_size``, its own or the
    app's) and the route's operation, where Litestar says only "Request Entity Too Large"."""
    handler = request.scope.get("route_handler")
    limit = handler.resolve_request_max_body_size() if handler is not None else None
    if not limit:
        return detail
    operation = handler.operation_id if isinstance(handler.operation_id, str) else "this route"
    return f"the request body is larger than {bytes_said(limit)}, the most {operation} takes"


def _too_deep(_: Request[Any, Any, Any], exc: RecursionError) -> Response[Any]:
    return problem(422, "Unprocessable entity", "body: JSON is nested too deeply",
                   [{"location": "body", "message": "JSON is nested too deeply"}])


def _busy(_: Request[Any, Any, Any], exc: IntegrityError) -> Response[Any]:
    log.warning("a change gave up after its retries: other writers kept changing the same object first")
    resp = problem(503, "Service unavailable", "other changes to the same object kept coming first; retry shortly")
    resp.headers["Retry-After"] = "1"
    return resp


def _internal(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if is_store_error(exc) and not _from_data(exc):
        return _store_away(request, exc)
    log.exception("unhandled error", exc_info=exc)
    return problem(500, "Internal server error", "Relay failed to handle this request; see its log")


def _from_data(exc: BaseException) -> bool:
    """Whether a store error comes from the data, also where the event store wrapped the driver's."""
    return is_data_error(exc) or (exc.__cause__ is not None and is_data_error(exc.__cause__))


def _store_away(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    hit = store_warnings.hit("store")
    if hit.passed:
        more = f"; {hit.suppressed} more since the last warning" if hit.suppressed else ""
        log.warning("the store failed a request (%s: %s): 503, retry after %s s%s", type(exc).__name__,
                    first_line(exc), STORE_RETRY_AFTER, more)
    resp = problem(503, "Service unavailable", "the store is unavailable; retry shortly")
    resp.headers["Retry-After"] = STORE_RETRY_AFTER
    return resp


def store_warning(exc: BaseException, what: str) -> bool:
    """Tells that the store failed ``what`` (an action's record: "recording how updateApp ended"), when
    it is away (:func:`~relay_es.adapters.failures.is_store_error`, not from the data): one warning line
    per :data:`STORE_WARNING_WINDOW` without a traceback, counting the rest, as the requests' 503s (an
    outage's 80 refused writes logged 9,202 lines, 320 tracebacks). False, telling nothing, for anything
    else: a bug, which the caller logs with its traceback."""
    if not is_store_error(exc) or _from_data(exc):
        return False
    hit = store_warnings.hit("record")
    if hit.passed:
        more = f"; {hit.suppressed} more not recorded since the last warning" if hit.suppressed else ""
        log.warning("the store failed %s (%s: %s): it is not in the audit log%s", what, type(exc).__name__,
                    first_line(exc), more)
    return True


EXCEPTION_HANDLERS: dict[type[Exception], Any] = {
    ValidationException: _validation,
    InvalidSetting: _invalid_setting,
    UnknownApplication: _not_found,
    UnknownExecutor: _not_found,
    UnknownToken: _not_found,
    UnknownAlertingRule: _not_found,
    UnknownRole: _not_found,
    UnknownMember: _not_found,
    MembershipChanged: _membership_changed,
    NotFoundException: _not_found,
    IllegalTransition: _conflict,
    DomainError: _conflict,
    HTTPException: _http,
    RecursionError: _too_deep,
    IntegrityError: _busy,
    Exception: _internal,
}
