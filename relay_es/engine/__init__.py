"""The application layer: the command service, the process manager, its timers, the alert manager
(``alerting``) and the queries.

Decides; does no I/O of its own. The stores, sockets and clocks it uses are handed to it.
"""
