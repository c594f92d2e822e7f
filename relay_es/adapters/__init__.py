"""All of Relay's I/O: stores, clock, HTTP, WebSocket hub.

Three packages:

* :mod:`~relay_es.adapters.hub` -- the executors' WebSocket connections (its docstring names its modules);
* :mod:`~relay_es.adapters.rest` -- the REST API, one module per resource (likewise);
* :mod:`~relay_es.adapters.readmodels` -- the read models' tables and their SQL (likewise).

And one module per job:

* :mod:`~relay_es.adapters.stores` -- where events and read models live, chosen by one database URL;
* :mod:`~relay_es.adapters.library` -- every reach into the ``eventsourcing`` library's internals;
* :mod:`~relay_es.adapters.pgfactory` -- the event store's Postgres factory, connecting with the
  store's one connection string;
* :mod:`~relay_es.adapters.failures` -- the store's failures told from bugs and from bad data;
* :mod:`~relay_es.adapters.lease` -- the leader lease: who may fire timers, run projections and
  dispatch;
* :mod:`~relay_es.adapters.sealing` -- the keys of sealed values, in the event store's database;
* :mod:`~relay_es.adapters.series` -- the executors' metrics as collected, in the read models'
  database;
* :mod:`~relay_es.adapters.authz` -- who may call what: the authorization table and the callers'
  credentials (ADR 14);
* :mod:`~relay_es.adapters.oidc` -- OIDC sign-in: bearer JWTs verified against the issuer's JWKS;
* :mod:`~relay_es.adapters.webhooks` -- alert webhooks: each format's request, its signature, one POST;
* :mod:`~relay_es.adapters.deadline` -- one deadline over a whole HTTP exchange (OIDC fetches,
  the client CLI);
* :mod:`~relay_es.adapters.uvicorn_ws` -- uvicorn's WebSocket and HTTP protocols as Relay runs
  them (keepalive, frame caps);
* :mod:`~relay_es.adapters.metrics` -- every Prometheus series Relay exposes;
* :mod:`~relay_es.adapters.logs` -- logging set-up, keys and secrets scrubbed from every record;
* :mod:`~relay_es.adapters.collector` -- when the cyclic garbage collector runs (ADR 13);
* :mod:`~relay_es.adapters.clock` -- the system clock;
* :mod:`~relay_es.adapters.faults` -- crash points for the fault suite, off unless
  ``RELAY_FAULT_CRASH_AT`` names one.
"""
