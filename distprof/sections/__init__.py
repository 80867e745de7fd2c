"""summary.json's sections as frozen types (distprof.typed.Record): one module per section kind."""
