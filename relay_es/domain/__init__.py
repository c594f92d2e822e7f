"""The vocabulary every layer shares: errors, units, bounded text and the clock interface.

Pure: imports nothing of Relay's outside this package, does no I/O, reads no clock.
"""
