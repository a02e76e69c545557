"""The store roles written once for both SQL dialects (see sqlstore.py)."""
