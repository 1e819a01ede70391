"""The daemon's floor: `rig-exporter`, the program that reads the rig and serves it.

Its rooms read (`sources`, `engines`, `tap`), turn readings into answers
(`collector`, `health`) and serve them (`web`). `snapshot` is the contract every
source keeps, `runtime` the one place that puts the rooms together, `cli` the flags
over the config, and `lifecycle` the process that serves until it is stopped. It
stands on the spine (`exporter/`) alone: docs/design.md#where-things-live."""
