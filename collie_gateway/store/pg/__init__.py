"""The PostgreSQL engine (``database.py``) and what only a store several workers share has:
the shared log (``events.py``) and the leases (``leases.py``), handed to the workers as
``protocols.SharedStore`` (``shared.py``) (docs/postgresql.md)."""
