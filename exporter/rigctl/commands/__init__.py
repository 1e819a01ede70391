"""rigctl's subcommands, one module each, every one with `add_parser(commands)` and
`run(args, out)`; `common` holds what they share (exit codes, flags, output)."""
