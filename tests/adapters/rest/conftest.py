"""The REST tests' servers (``tests/adapters/rest/servers.py``) as fixtures of this directory."""

from tests.adapters.rest.servers import auth_server, server  # noqa: F401
