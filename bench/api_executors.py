"""Executors that answer ``list_workflows``, in a process of their own: ``python -m bench.api_executors``.

Each is a plain ``websockets`` asyncio connection speaking the executor protocol like
``tests/fake_executor.py`` (Python style: nulls sent): it answers ``executor_info``,
``exist_pending_workflows``, ``recovery`` and ``retention``, and ``list_workflows`` from a
list of workflows made once at connect (``workflows`` of them, ``Input``/``Output`` of
``field_bytes`` characters each, epoch-ms strings as the SDK sends), cut by the request's
``offset``/``limit``. Each answer is encoded afresh (``json.dumps``, as the SDK does), and
the executor's **own time** for it is kept: from the request frame received to the reply
handed to the socket (decode, slice, encode, send), with the reply's size.

Driven over stdin/stdout, one JSON command per line, one JSON answer per line:

``connect`` {url, app, n, workflows, field_bytes, key?, version?, timeout?}: ``n`` executors of
            ``app`` (``url`` is Relay's ``ws://host:port``; with ``raw: true``, the full URL of a bare
            server, which asks nothing first); answers when all are registered (bare: open),
            or gave up.
``own``     {reset?}: every ``list_workflows`` answered since the last reset, as
            ``[app, bytes, seconds]``.
``quit``
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from typing import Any

import websockets
from websockets.asyncio.client import connect

CREATED_MS = 1796040658645  # 2026-11-30, an epoch-ms string like the SDK's


def make_workflows(n: int, field_bytes: int, app: str) -> list[dict[str, Any]]:
    """``n`` workflows as dbos 3.2.0 sends them (``WorkflowsOutput``, PascalCase, strings)."""
    pad = "x" * max(0, field_bytes - 12)
    out = []
    for i in range(n):
        ms = CREATED_MS + i * 1000
        out.append({
            "WorkflowUUID": f"{app}-wf-{i:07d}", "Status": ("SUCCESS", "PENDING", "ERROR")[i % 3],
            "WorkflowName": "bench_workflow", "WorkflowClassName": None, "WorkflowConfigName": None,
            "AuthenticatedUser": None, "AssumedRole": None, "AuthenticatedRoles": None,
            "Input": f"(({i:09d},), {{}}){pad}"[:field_bytes], "Output": f"'{i:010d}'{pad}"[:field_bytes],
            "Error": None, "CreatedAt": str(ms), "UpdatedAt": str(ms + 500), "DequeuedAt": None,
            "CompletedAt": str(ms + 500), "QueueName": None, "QueuePartitionKey": None, "DeduplicationID": None,
            "Priority": "0", "ApplicationVersion": "v1", "ExecutorID": "bench", "ApplicationName": app,
            "WorkflowTimeoutMS": None, "WorkflowDeadlineEpochMS": None, "DelayUntilEpochMS": None,
            "ForkedFrom": None, "ParentWorkflowID": None, "WasForkedFrom": False, "Attributes": None,
            "ScheduleName": None,
        })
    return out


def answer_list(workflows: list[dict[str, Any]], msg: dict[str, Any]) -> str:
    """The reply to one ``list_workflows`` request: its page of ``workflows``, encoded."""
    body = msg.get("body") or {}
    offset = int(body.get("offset") or 0)
    limit = body.get("limit")
    page = workflows[offset:] if limit is None else workflows[offset:offset + int(limit)]
    if not body.get("load_input", True) or not body.get("load_output", True):
        drop = [k for k, wanted in (("Input", body.get("load_input", True)), ("Output", body.get("load_output", True)))
                if not wanted]
        page = [{**w, **{k: None for k in drop}} for w in page]
    if body.get("sort_desc"):
        page = page[::-1]
    return json.dumps({"type": "list_workflows", "request_id": msg["request_id"], "output": page,
                       "error_message": None})


class Executor:
    def __init__(self, st: State, url: str, app: str, workflows: list[dict[str, Any]], version: str,
                 bare: bool) -> None:
        self.st, self.url, self.app, self.workflows, self.version = st, url, app, workflows, version
        self.bare = bare  # connected to a bare server, which asks no executor_info: ready once open
        self.executor_id = str(uuid.uuid4())
        self.registered = asyncio.Event()
        self.task = asyncio.ensure_future(self.run())

    async def run(self) -> None:
        try:
            async with connect(self.url, ping_interval=20, ping_timeout=20, max_size=None, open_timeout=60,
                               close_timeout=5) as ws:
                self.st.sockets.append(ws)
                if self.bare:
                    self.registered.set()
                async for raw in ws:
                    t0 = time.perf_counter()
                    msg = json.loads(raw)
                    t = msg.get("type")
                    if t == "list_workflows":
                        reply = answer_list(self.workflows, msg)
                        await ws.send(reply)
                        self.st.own.append([self.app, len(reply), time.perf_counter() - t0])
                        continue
                    out: dict[str, Any] = {"type": t, "request_id": msg.get("request_id")}
                    if t == "executor_info":
                        out.update(executor_id=self.executor_id, application_version=self.version,
                                   hostname="benchhost", language="python", dbos_version="3.2.0",
                                   executor_metadata={"bench": True})
                    elif t == "exist_pending_workflows":
                        out["exist"] = False
                    elif t in ("recovery", "retention"):
                        out["success"] = True
                    else:
                        out["error_message"] = "Unknown message type"
                    out.setdefault("error_message", None)
                    await ws.send(json.dumps(out))
                    if t == "executor_info":
                        self.registered.set()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # refused, reset, closed...
            name = type(e).__name__
            self.st.errors[name] = self.st.errors.get(name, 0) + 1
        finally:
            self.registered.set()


class State:
    def __init__(self) -> None:
        self.executors: list[Executor] = []
        self.sockets: list[Any] = []
        self.own: list[list[Any]] = []
        self.errors: dict[str, int] = {}


async def main() -> None:
    st = State()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def answer(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    while True:
        line = await reader.readline()
        if not line:
            break
        cmd = json.loads(line)
        kind = cmd.get("cmd")
        try:
            if kind == "connect":
                app = cmd["app"]
                url = cmd["url"] if cmd.get("raw") else f"{cmd['url']}/websocket/{app}/{cmd.get('key', 'dev-key')}"
                workflows = make_workflows(int(cmd["workflows"]), int(cmd["field_bytes"]), app)
                new = [Executor(st, url, app, workflows, cmd.get("version", "v1"), bool(cmd.get("raw")))
                       for _ in range(int(cmd["n"]))]
                st.executors.extend(new)
                try:
                    await asyncio.wait_for(asyncio.gather(*(e.registered.wait() for e in new)),
                                           float(cmd.get("timeout", 120)))
                except TimeoutError:
                    pass
                ok = sum(1 for e in new if not e.task.done())
                answer({"connected": ok, "failed": len(new) - ok, "errors": st.errors,
                        "ids": [e.executor_id for e in new]})
            elif kind == "own":
                answer({"own": st.own})
                if cmd.get("reset"):
                    st.own = []
            elif kind == "quit":
                for ws in st.sockets:
                    ws.transport.abort()
                answer({"bye": True})
                break
            else:
                answer({"error": f"unknown command {kind!r}"})
        except Exception as e:  # report, keep serving
            answer({"error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except (KeyboardInterrupt, websockets.ConnectionClosed):
        pass
    sys.exit(0)
