"""What every program of the project shares as a process: how it ends (`endings`) and
stops (`stopping`), its open-files budget (`open_files`), its event loop
(`event_loop`), its rate-limited log (`log_limits`), starting a real exporter for the
demo, tests and benches (`launch`), and whether it runs from a source tree
(`source_tree`)."""
