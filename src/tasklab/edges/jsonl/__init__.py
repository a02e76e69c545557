"""The JSON-lines TCP protocol: one request line, one response line, close."""
