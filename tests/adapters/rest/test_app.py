"""The REST API as assembled (``relay_es/adapters/rest/app.py``).

From a context of fakes (no runtime, no store): the writes call the service,
then the hub's callback, then wait for the read models, in that order; the
server's lifespan starts and stops what the context says; errors are problem
documents that never leak an exception's text. Then the whole API of a real
``relay serve``, explored from its own OpenAPI document: no 5xx."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient

from relay_es.adapters.rest import build_app
from relay_es.adapters.rest.app import MAX_BODY
from relay_es.domain.errors import DomainError, UnknownApplication
from tests.adapters.rest.fakes import ActionRecords, Calls, fake_context
from tests.rest_client import rest as call
from tests.server import RelayServer


class FakeRelay(ActionRecords):
    def __init__(self, calls: Calls, fail: Exception | None = None) -> None:
        self.delete_app = self._call(calls("delete_app"), fail)
        self.revoke_token = self._call(calls("revoke_token"), fail)
        self.update_app = self._call(calls("update_app"), fail)

    @staticmethod
    def _call(record: Any, fail: Exception | None) -> Any:
        def call(*args: Any, **_checks: Any) -> None:  # the callbacks that may refuse (may_revoke...): none here
            record(*args)
            if fail is not None:
                raise fail

        return call


def client_for(calls: Calls, fail: Exception | None = None, **given: Any) -> TestClient:
    ctx = fake_context(relay=FakeRelay(calls, fail), app_deleted=calls("app_deleted"),
                       token_revoked=calls("token_revoked"), read_your_writes=calls("read_your_writes"), **given)
    return TestClient(build_app(ctx), base_url="http://127.0.0.1")


def test_a_write_is_recorded_then_the_hub_told_then_the_read_models_awaited() -> None:
    calls = Calls()
    relay = FakeRelay(calls)
    ctx = fake_context(relay=relay, app_deleted=calls("app_deleted"), token_revoked=calls("token_revoked"),
                       read_your_writes=calls("read_your_writes"))
    ctx.latest_versions[("local", "orders")] = ("v2", 0.0)
    ctx.latest_changes[("local", "orders")] = 1
    with TestClient(build_app(ctx), base_url="http://127.0.0.1") as client:
        assert client.delete("/v2/orgs/local/apps/orders").status_code == 204
        assert not ctx.latest_versions and not ctx.latest_changes  # nothing kept of a deleted application
        assert client.delete("/v2/orgs/local/tokens/ci").status_code == 204
    assert calls.made == [("delete_app", "local", "orders"), ("app_deleted", "local", "orders"), ("read_your_writes",),
                          ("revoke_token", "local", "ci"), ("token_revoked", "local", "ci"), ("read_your_writes",)]
    # each an operator's action on record, around it
    assert relay.records == [("requested", "deleteApp"), ("completed", "succeeded"),
                             ("requested", "deleteToken"), ("completed", "succeeded")]


def test_the_lifespan_starts_and_stops_what_the_context_says() -> None:
    calls = Calls()

    async def stop() -> None:
        calls("stop")()

    with client_for(calls, on_startup=lambda: calls("start")(), on_shutdown=stop):
        assert calls.made == [("start",)]
    assert calls.made == [("start",), ("stop",)]


def test_healthz_answers_503_once_the_process_manager_met_a_bug() -> None:
    """A bug (not a store error) keeps the instance serving but makes it unhealthy: a load
    balancer or supervisor sees 503; only an operator sees what the fault was."""
    faults: list[str] = []
    ok = TestClient(build_app(fake_context(faults=lambda: faults)), base_url="http://127.0.0.1")
    assert ok.get("/healthz").status_code == 200
    faults.append("process manager: dispatch: AttributeError: boom")
    r = ok.get("/healthz")
    assert r.status_code == 503
    assert r.json()["status"] == "unhealthy" and r.json()["faults"] == faults

    async def anonymous(ctx: Any, headers: Any) -> bool:
        return False

    import relay_es.adapters.rest.health as health
    original, health.is_operator = health.is_operator, anonymous  # auth mode, no token
    try:
        auth = TestClient(build_app(fake_context(faults=lambda: faults, auth=True, credentials=object())), base_url="http://127.0.0.1")
        r = auth.get("/healthz")
        assert r.status_code == 503 and r.json() == {"status": "unhealthy"}
    finally:
        health.is_operator = original


def test_errors_are_problem_documents() -> None:
    from eventsourcing.persistence import IntegrityError

    for fail, status in ((UnknownApplication("local", "orders"), 404), (DomainError("not now"), 409),
                         (RuntimeError("a secret in the traceback"), 500),
                         # other writers' changes to the object kept coming first, through every retry
                         (IntegrityError("duplicate key value: a secret"), 503)):
        with client_for(Calls(), fail) as client:
            r = client.delete("/v2/orgs/local/apps/orders")
        assert r.status_code == status, r.text
        assert r.headers["content-type"] == "application/problem+json"
        body = r.json()
        assert body["type"] == "about:blank" and body["status"] == status and body["title"]
        assert "secret" not in r.text
        assert (r.headers.get("retry-after") == "1") == (status == 503)


def test_settings_are_decoded_strictly_and_bodies_capped() -> None:
    calls = Calls()
    with client_for(calls) as client:
        r = client.patch("/v2/orgs/local/apps/orders", json={"executorTimeoutSecs": "60"})
        assert r.status_code == 422 and r.json()["errors"][0]["location"] == "executorTimeoutSecs"
        r = client.patch("/v2/orgs/local/apps/orders", content=b"[" * 100_000 + b"]" * 100_000,
                         headers={"content-type": "application/json"})
        assert r.status_code == 413  # over the cap before it is decoded at all
        r = client.patch("/v2/orgs/local/apps/orders", content=b"{" + b" " * MAX_BODY + b"}",
                         headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert client.patch("/v2/orgs/local/apps/orders", json={"executorTimeoutSecs": 60}).status_code == 204
    assert [c[0] for c in calls.made] == ["update_app", "read_your_writes"]


def test_schemathesis_finds_no_server_error(tmp_path) -> None:
    """A property-based run of the API from its own OpenAPI document: no 5xx."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    s = RelayServer(tmp_path).start()
    try:
        call(s, "PUT", "/v2/orgs/local/apps/orders")
        schema = schemathesis.openapi.from_url(s.http + "/openapi.json")
        failures: list[str] = []
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 12
        for operation in operations:

            @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            @given(case=operation.as_strategy())
            def run(case: Any) -> None:
                response = case.call(base_url=s.http)
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: "
                                    f"{response.text[:200]}")

            run()
        assert not failures, "\n".join(failures[:10])
    finally:
        s.stop()
