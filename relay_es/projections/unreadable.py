"""A stored event that cannot be decoded, in its place in the notification log."""

from __future__ import annotations

from uuid import UUID


class Unreadable:
    """A stored event that cannot be decoded: its class is gone (an unknown topic), its
    state is not what the class reads, or its stream id is not a UUID (a row a tool or a
    hand wrote on SQLite, whose ids are text: ``originator_id`` is then that text, escaped
    and cut). Returned in its place to a reader that asked for them (the projection runner,
    which skips and reports it: ADR 16); other readers get the decoding error, as before."""

    __slots__ = ("originator_id", "originator_version", "topic", "error")

    def __init__(self, originator_id: UUID | str, originator_version: int, topic: str, error: BaseException) -> None:
        self.originator_id = originator_id
        self.originator_version = originator_version
        self.topic = topic
        self.error = error

    def __repr__(self) -> str:
        return f"Unreadable({self.topic!r} v{self.originator_version} of {self.originator_id}: {self.error!r})"
