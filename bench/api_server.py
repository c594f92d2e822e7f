"""``relay serve`` with one more path, for section 8 until Relay serves ``listWorkflows`` itself.

``python -m bench.api_server [serve options]`` is ``relay serve`` exactly (the same settings,
uvicorn configuration and runtime), plus ``GET /bench/v2/orgs/{org}/apps/{app}/workflows``
(query ``limit``, ``offset``, ``sortDesc``, ``loadInput``, ``loadOutput``), answered the way
a Conductor route of Relay answers (:mod:`relay_es.adapters.rest.calling`): the application
must exist, one executor answers through :meth:`Calls.call <relay_es.adapters.hub.calls.Calls.call>`,
the answer is mapped to Conductor's ``Workflow`` list and encoded with msgspec. It adds no
authorization (development mode only). Section 8 uses Relay's own
``GET /v2/orgs/{org}/apps/{app}/workflows`` instead as soon as that route answers.
"""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import parse_qs

PREFIX = "/bench/v2/orgs/"


def _flag(q: dict[str, list[str]], name: str) -> bool | None:
    v = q.get(name)
    return None if not v else v[-1].lower() in ("1", "true", "yes")


def _int(q: dict[str, list[str]], name: str) -> int | None:
    v = q.get(name)
    return None if not v else int(v[-1])


def main(argv: list[str]) -> int:
    import msgspec

    from relay_es.adapters.rest.calling import ask
    from relay_es.adapters.rest.conductor import mapping
    from relay_es.composition import asgi
    from relay_es.composition.cli import main as relay_main
    from relay_es.engine.calls import CallFailed

    class BenchASGI(asgi.RelayASGI):
        def __init__(self, runtime: Any) -> None:
            super().__init__(runtime)
            self.ctx = asgi.rest_context(runtime)

        async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
                await super().__call__(scope, receive, send)
                return
            parts = scope["path"][len(PREFIX):].split("/")  # {org} apps {app} workflows
            q = parse_qs(scope.get("query_string", b"").decode())
            status, body = 404, b'{"title": "not found"}'
            if len(parts) == 4 and parts[1] == "apps" and parts[3] == "workflows":
                org, app = parts[0], parts[2]
                try:
                    answer = await ask(self.ctx, org, app, lambda rid: mapping.list_workflows_request(
                        request_id=rid, limit=_int(q, "limit"), offset=_int(q, "offset"),
                        sort_desc=_flag(q, "sortDesc"), load_input=_flag(q, "loadInput"),
                        load_output=_flag(q, "loadOutput")))
                    status, body = 200, msgspec.json.encode(mapping.workflows_out(answer))
                except CallFailed as e:
                    status, body = e.status, msgspec.json.encode({"title": e.title, "detail": e.detail})
                except Exception as e:  # unknown application, a refused reply...
                    status, body = 500, msgspec.json.encode({"title": type(e).__name__, "detail": str(e)})
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

    asgi.RelayASGI = BenchASGI  # type: ignore[misc]  # what ``relay serve`` builds its server on
    return relay_main(["serve", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
