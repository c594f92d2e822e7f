"""The REST API: a subset of Conductor API v2, plus Relay's own queries.

Bodies are msgspec Structs with camelCase names; errors are RFC 7807
``application/problem+json`` documents naming the field and what was wrong.
Every mutating call waits until the read models have caught up with it, so a
following read sees the change. Who may call what is decided in one guard
from the table in ``relay_es/adapters/authz.py`` (ADR 14): the route matched,
the path's org and application, and the caller's token -- never the query string.

One module per resource, each a Litestar controller or handlers:

* ``applications`` -- ``/v2/orgs/{org}/apps[/{app}]``
* ``executors`` -- ``/v2/orgs/{org}/apps/{app}/executors[/{executor_id}/history]``
* ``tokens`` -- ``/v2/orgs/{org}/tokens[/{token_name}]``
* ``roles`` -- ``/v2/orgs/{org}/roles[/{role_name}]``, ``/v2/orgs/{org}/permissions``
* ``org`` -- the operations Conductor serves only with OAuth (``getOrg``, ``listMembers``,
  ``grantRole``, ``getCurrentUser``...), served with OIDC sign-in
* ``workflows``, ``workflow_actions``, ``queues``, ``schedules``, ``versions``, ``stranded`` --
  ``/v2/orgs/{org}/apps/{app}/...``, each carried to an executor through ``calling``
* ``app_metrics``, ``autoscaling``, ``alerting`` -- ``/v2/orgs/{org}/apps/{app}/metrics``, the autoscaling
  policy and recommendation, the alerting rules
* ``audit`` -- ``/v2/orgs/{org}/audit-logs`` (who did what through the API, Conductor's shape)
* ``executor_events`` -- ``/v2/orgs/{org}/executor-events`` (the lifecycle feed)
* ``health`` -- ``/healthz``, ``/readyz``, ``/metrics``
* ``openapi`` -- ``/openapi.json``, completed with the bodies handlers decode themselves

and what they share: ``context`` (:class:`RestContext`, what the API is given,
injected as ``ctx``), ``paths`` (the org and application prefixes), ``guard``
(authorization), ``problems`` (errors), ``bodies`` (strict decoding), ``slashes``
(a workflow id, queue or schedule name holding ``/``, sent as ``%2F``), ``calling``
(how a route asks an executor), ``releases`` (which SDK release takes which request and
field), ``recording`` (how a change to Relay's own state and every refusal go on record, for the
audit log), ``conductor`` (Conductor's bodies and their mapping to executor messages), and
``app`` (:func:`build_app`, which assembles them).
"""

from relay_es.adapters.rest.app import build_app
from relay_es.adapters.rest.context import RestContext

__all__ = ["RestContext", "build_app"]
