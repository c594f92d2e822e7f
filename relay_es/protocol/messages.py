"""Message types of the Conductor <-> executor protocol, as msgspec Structs.

Every frame is one JSON object with ``type`` and ``request_id``. Relay sends
requests; executors answer with the same ``type`` and ``request_id``.

Conventions (see section 4 of the protocol reference,
``../shared/docs/conductor-protocol.md``, outside this repository):

* Outgoing requests are encoded with **every** field present, ``null`` for
  "not set" (``omit_defaults=False``): the Python SDK indexes keys directly
  and a missing one makes it drop the connection; a malformed frame can crash
  the TypeScript SDK.
* Incoming responses tolerate both SDK styles: Python sends ``null``,
  TypeScript omits the key. Every optional response field has a default, and
  unknown fields are ignored (msgspec's default).
* ``error_message`` not null means failure, even when ``success`` is absent.

Core types live here; the workflow-management catalogue lives in
:mod:`relay_es.protocol.catalogue`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec


class Request(msgspec.Struct, kw_only=True, omit_defaults=False):
    """A Relay -> executor request. ``TYPE`` is the wire ``type`` string."""

    TYPE: ClassVar[str]
    type: str
    request_id: str


class Response(msgspec.Struct, kw_only=True):
    """An executor -> Relay response."""

    type: str
    request_id: str
    error_message: str | None = None

    @property
    def failed(self) -> bool:
        return self.error_message is not None


class Envelope(msgspec.Struct):
    """Just enough to route a frame: the rest is decoded by its type."""

    type: str
    request_id: str


# --- executor_info ---------------------------------------------------------


class ExecutorInfoRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "executor_info"
    type: str = "executor_info"


class ExecutorInfoResponse(Response, kw_only=True):
    executor_id: str
    application_version: str
    hostname: str | None = None
    language: str | None = None
    dbos_version: str | None = None
    executor_metadata: Any = None


# --- recovery --------------------------------------------------------------


class RecoveryRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "recovery"
    type: str = "recovery"
    executor_ids: list[str]


class SuccessResponse(Response, kw_only=True):
    """Every response whose payload is just ``success``."""

    success: bool | None = None

    @property
    def failed(self) -> bool:
        return self.error_message is not None or self.success is not True


# --- exist_pending_workflows -----------------------------------------------


class ExistPendingWorkflowsRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "exist_pending_workflows"
    type: str = "exist_pending_workflows"
    executor_id: str
    application_version: str


class ExistPendingWorkflowsResponse(Response, kw_only=True):
    exist: bool | None = None

    @property
    def failed(self) -> bool:
        return self.error_message is not None or self.exist is None


# --- retention -------------------------------------------------------------


class RetentionBody(msgspec.Struct, kw_only=True, omit_defaults=False):
    gc_cutoff_epoch_ms: int | None = None
    gc_rows_threshold: int | None = None
    gc_batch_size: int | None = None
    timeout_cutoff_epoch_ms: int | None = None


class RetentionRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "retention"
    type: str = "retention"
    body: RetentionBody


class UnknownTypeResponse(Response, kw_only=True):
    """What every SDK answers to a type it does not know."""


# Response type by request type, for the types Relay's engine sends itself.
CORE_RESPONSES: dict[str, type[Response]] = {
    "executor_info": ExecutorInfoResponse,
    "recovery": SuccessResponse,
    "exist_pending_workflows": ExistPendingWorkflowsResponse,
    "retention": SuccessResponse,
}

_encoder = msgspec.json.Encoder()
_envelope = msgspec.json.Decoder(Envelope)


def encode(message: msgspec.Struct) -> str:
    return _encoder.encode(message).decode()


def decode_envelope(data: str | bytes) -> Envelope:
    """Raises ``msgspec.DecodeError`` (a ``ValueError``) on anything but a JSON
    object with string ``type`` and ``request_id``."""
    try:
        return _envelope.decode(data)
    except RecursionError:  # msgspec recurses; a hostile frame nests 10,000 deep
        raise msgspec.DecodeError("JSON is nested too deeply") from None


def decode_response(data: str | bytes, cls: type[Response]) -> Response:
    try:
        return msgspec.json.decode(data, type=cls)
    except RecursionError:
        raise msgspec.DecodeError("JSON is nested too deeply") from None
