"""The Conductor API 2.0.0 bodies of the workflow, queue, schedule and version operations
(:mod:`.models`) and their pure mapping to and from the executor messages of
:mod:`relay_es.protocol.catalogue` (:mod:`.mapping`). No routes: the REST operations that use
them are built on top."""
