"""Serving: the aiohttp application and its routes (`app`), the listener that guards
connections (`listener`), basic authentication (`auth`) and the `--web.config.file`
settings, TLS and users (`security`). It answers requests and nothing else; the
process around it is `exporter.process`."""
