"""Path prefixes the controllers share (Conductor API v2's shape).

An org's resources live under :data:`ORG`, an application's under :data:`APP`:
a controller of an application's resource (executors; issue 13's workflows,
queues, schedules, versions) sets ``path = APP + "/<resource>"``.
"""

ORG = "/v2/orgs/{org:str}"
APP = ORG + "/apps/{app:str}"
