"""Fixtures of the end-to-end tests: ``grounds`` (tests/e2e/ground.py)."""

from tests.e2e.ground import grounds  # noqa: F401  (a fixture, offered to every e2e test module)
