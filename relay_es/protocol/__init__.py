"""The executor wire protocol, Sans-I/O: message types and the per-connection session."""
