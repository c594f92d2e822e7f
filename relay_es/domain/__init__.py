"""The vocabulary every layer shares. Pure: imports nothing of Relay's outside this
package, does no I/O, reads no clock.

* :mod:`~relay_es.domain.errors` -- the exception hierarchy;
* :mod:`~relay_es.domain.units` -- seconds, milliseconds, rows and timestamps at the boundary;
* :mod:`~relay_es.domain.text` -- strings the stores can hold, bounded; escaping for terminals and logs;
* :mod:`~relay_es.domain.clock` -- the ``Clock`` interface, and ``FakeClock`` for tests;
* :mod:`~relay_es.domain.defaults` -- the timing defaults, each stated once;
* :mod:`~relay_es.domain.ids` -- random ids (UUID version 4) without a system call for each one;
* :mod:`~relay_es.domain.roles` -- Conductor's eight permissions, the built-in roles, and the checks
  of a permission list and a role name;
* :mod:`~relay_es.domain.autoscaling` -- an autoscaling policy and its bounds;
* :mod:`~relay_es.domain.alerting` -- alerting rules: their types, parameters and webhooks;
* :mod:`~relay_es.domain.sealing` -- values sealed under a key kept outside the log, erased to forget them.
"""
