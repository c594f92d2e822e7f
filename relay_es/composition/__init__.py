"""The composition root: settings, the command line, and the runtime that wires the layers together.

The only package that may import every other one.

* :mod:`~relay_es.composition.settings` -- the settings of ``relay serve``: flags, environment
  variables, defaults;
* :mod:`~relay_es.composition.cli` -- the ``relay`` command: ``relay serve``, ``relay projections``,
  ``relay admin``;
* :mod:`~relay_es.composition.client_cli` -- the other subcommands, which talk to a running server
  over its REST API;
* :mod:`~relay_es.composition.runtime` -- one Relay process: its store, its workers and its hub;
* :mod:`~relay_es.composition.asgi` -- one ASGI application serving the REST API and the hub.
"""
