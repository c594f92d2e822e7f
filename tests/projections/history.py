"""Helpers for read-model tests: a busy history, and every read-model table's rows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from relay_es.aggregates import SettingsPatch
from relay_es.engine.action_commands import Actor
from tests.support import World


def tables(world: World) -> dict[str, list[Any]]:
    out = {}
    with world.db.read() as cur:
        for t, key in (("relay_executors", "stream_id"), ("relay_audit", "seq"), ("relay_apps", "stream_id"),
                       ("relay_tokens", "stream_id"), ("relay_audit_streams", "stream_id"),
                       ("relay_actions", "stream_id")):
            cur.execute(f"SELECT * FROM {t} ORDER BY {key}")
            out[t] = [tuple(r) for r in cur.fetchall()]
    return out


def busy_history(world: World) -> None:
    """A bit of everything: deaths, recoveries, retries, reconnects, settings, tokens, operator actions."""
    for name in ("A", "B", "C", "D"):
        world.connect(name)
    world.connect("E", "v2")
    world.drop("A")
    world.drop("D")
    world.advance(5)
    world.connect("D")  # back within grace
    world.advance(5)
    first = world.dispatcher.last()
    world.answer(first, ok=False, reason="boom")
    world.advance(1)
    world.answer(world.dispatcher.last())
    world.drop("E")
    world.advance(10)  # E (v2) dead, no candidate: waiting
    world.relay.update_app("local", "app", SettingsPatch(gc_rows_threshold=1000, global_timeout=timedelta(hours=1)))
    world.relay.register_app("local", "other", private_mode=True)
    world.relay.create_token("local", "ci", app_names=["app"])
    world.relay.revoke_token("local", "ci")
    world.relay.delete_app("local", "other")
    done = world.relay.record_action_requested("local", "app", request_id="busy-1", operation="cancelWorkflow",
                                               actor=Actor.token("ci"), source="10.0.0.1", target_type="workflow",
                                               target_ids=["wf-1"], parameters={"n": 1})
    world.relay.record_action_completed(done, outcome="succeeded", executor_id="B", result={"count": 1})
    world.relay.record_action_requested("local", None, request_id="busy-2", operation="createToken",
                                        actor=Actor.development(), source=None, target_type="token",
                                        target_ids=["ci"])  # never completed
    world.relay.record_action_refused("local", "app", request_id="busy-3", operation="deleteApp",
                                      actor=Actor.anonymous(), source="10.0.0.2", target_type="application",
                                      target_ids=["app"], status=401, detail="unknown or revoked token")
    world.sync()
