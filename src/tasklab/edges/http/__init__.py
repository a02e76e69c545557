"""The HTTP API, SSE streams and the dashboard's endpoints."""
