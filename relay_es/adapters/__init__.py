"""All of Relay's I/O: stores, clock, HTTP, WebSocket hub."""
