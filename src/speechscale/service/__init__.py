"""The network service: HTTP and WebSocket routes, the WebSocket transport with its connection limits, draining on a
stop signal, allowed hosts and origins."""
