"""The open connections of this Relay: by connection id, by executor, by application.

Written by the endpoint (a socket accepted, registered, gone), read by the dispatcher (where
to send a recovery or a retention message) and by the calls of the REST operations (which
executors may take one). Used on the event loop only.
"""

from __future__ import annotations

from relay_es.adapters.hub.connection import Connection

ExecutorKey = tuple[str, str, str]  # (org, app, executor id)


class Registry:
    def __init__(self) -> None:
        self.connections: dict[str, Connection] = {}  # every accepted socket, registered or not
        self.by_executor: dict[ExecutorKey, Connection] = {}  # the connection each executor id registered last
        self._by_app: dict[tuple[str, str], dict[str, Connection]] = {}  # (org, app) -> accepted sockets
        self.admitted = 0  # executor sockets admitted since start (the settle window's pace after a restart)

    def __len__(self) -> int:
        return len(self.connections)

    def add(self, conn: Connection) -> None:
        self.connections[conn.id] = conn
        self.admitted += 1
        self._by_app.setdefault((conn.org, conn.app), {})[conn.id] = conn

    def remove(self, conn: Connection) -> None:
        """Forgets the socket; its executor's entry too, unless a newer connection holds it."""
        self.connections.pop(conn.id, None)
        app = self._by_app.get((conn.org, conn.app))
        if app is not None:
            app.pop(conn.id, None)
            if not app:
                del self._by_app[(conn.org, conn.app)]
        if conn.executor_id is not None:
            key = (conn.org, conn.app, conn.executor_id)
            if self.by_executor.get(key) is conn:
                del self.by_executor[key]

    def claim(self, key: ExecutorKey, conn: Connection) -> Connection | None:
        """``conn`` is now the executor's connection; returns the one it replaces, if any."""
        old = self.by_executor.get(key)
        self.by_executor[key] = conn
        return old

    def executor(self, key: ExecutorKey) -> Connection | None:
        return self.by_executor.get(key)

    def registered(self, org: str, app: str) -> list[Connection]:
        """The application's registered, open connections: the executors a call may go to."""
        return [c for c in self._by_app.get((org, app), {}).values() if c.registered]

    def newest(self, org: str, app: str) -> Connection | None:
        """The application's most recently accepted connection that is registered and open."""
        return max(self.registered(org, app), key=lambda c: c.connected_at, default=None)
