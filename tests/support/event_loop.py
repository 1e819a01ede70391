"""The Python arguments that start a real exporter on a chosen event loop, for the tests
and benches that compare uvloop with asyncio's own loop (exporter/process/event_loop.py).
"""

from __future__ import annotations

from exporter.process.launch import EXPORTER_MODULE

# `import uvloop` fails where sys.modules holds None for it: asyncio's loop serves.
WITHOUT_UVLOOP = ("-c", "import sys; sys.modules['uvloop'] = None; import runpy;"
                        " runpy.run_module('exporter', run_name='__main__')")


def exporter_python(uvloop: bool) -> tuple[str, ...]:
    """The exporter as installed (uvloop where it is), or on asyncio's loop regardless."""
    return EXPORTER_MODULE if uvloop else WITHOUT_UVLOOP
