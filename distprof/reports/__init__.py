"""Renderers of a summary: text tables, JSON/CSV, HTML, Perfetto trace."""
