"""Sources: each reads one thing and returns plain data (see base.py for the contract)."""
