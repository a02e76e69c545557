"""The edges: CLI, HTTP, JSON-lines, dashboard. The core knows nothing of them."""
