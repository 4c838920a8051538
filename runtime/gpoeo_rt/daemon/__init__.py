"""`gpoeo-rt start` and friends: the long-running service that drives one controller per GPU (`daemon.py`), its
settings (`config.py`), its local control channel (`control.py`), the lock and state files that let any later
process give the clocks back (`safety.py`), and what it saved (`accounting.py`, `report.py`).

This package imports nothing on its own: `gpoeo-rt status` loads only `config` and `control` (no numpy), so it
answers quickly; `start` loads the rest.
"""
