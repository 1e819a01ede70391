"""`rigctl report`'s room: querying Prometheus (query), the rules read from the
generator (rules), replaying them over a range (evaluate), the queries that fill a
report (build), the report itself (model), and its renderers (text, html). The
subcommand is exporter/rigctl/commands/report.py; the schema is report.schema.json."""
