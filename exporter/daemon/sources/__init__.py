"""Sources: each reads one thing and returns plain data (the contract is
`exporter.daemon.snapshot`: `Source`, `SourceError`, `SourceResult`)."""
