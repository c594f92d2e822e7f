"""Moved to :mod:`relay_es.adapters.hub.admission`."""

from relay_es.adapters.hub.admission import AuthGate, Gate, Refused  # compat: issue-12 alias, remove when tests/adapters/test_authz.py is updated

__all__ = ["AuthGate", "Gate", "Refused"]
