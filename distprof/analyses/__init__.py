"""Pure functions over event tables and per-rank results: no I/O here."""
