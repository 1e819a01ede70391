"""Generate the Grafana dashboards' JSON from `dashboards/*.dashboard.py`.

    python -m dashboards.generate                       # rewrite the committed JSON
                                                        # (an installed copy: into .)
    python -m dashboards.generate --check               # exit 1 if any JSON is stale
    python -m dashboards.generate --config rig.toml --out DIR
                                                        # the rig's own [thresholds]

Exit status: 0 done, 1 stale (`--check`), 2 a bad config file or no grafanalib
(the `dashboards` extra: `pip install 'rig-telemetry[dashboards]'`).

Each `<name>.dashboard.py` defines `build(thresholds) -> Dashboard` (and, for
grafanalib's own `generate-dashboards`, `dashboard = build(Thresholds())`); its
JSON is written beside it as `<name>.json` in a checkout, else into the current
directory (or into `--out`), with the serialisation grafanalib's
`_gen.write_dashboard` uses (sorted keys, indent 2), so the output is stable,
less what no current Grafana reads (dashboards/clean.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

try:
    from grafanalib._gen import DashboardEncoder
except ImportError:  # an install without the `dashboards` extra: main() says so
    DashboardEncoder = None

from dashboards.clean import clean
from exporter.process.source_tree import in_checkout
from exporter.thresholds import Thresholds, thresholds_from_config

DASHBOARDS_DIR = Path(__file__).parent
SUFFIX = ".dashboard.py"


def sources() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob(f"*{SUFFIX}"))


def json_path(source: Path, out: Path = DASHBOARDS_DIR) -> Path:
    return out / (source.name.removesuffix(SUFFIX) + ".json")


def _load(source: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"dashboards.{source.stem}", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(source: Path, t: Thresholds) -> dict[str, Any]:
    """The dashboard of one source file as Grafana JSON (plain dicts and lists)."""
    data = json.loads(json.dumps(_load(source).build(t).to_json_data(), cls=DashboardEncoder))
    return clean(data)


def render(source: Path, t: Thresholds) -> str:
    return json.dumps(build(source, t), sort_keys=True, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if any JSON is stale")
    parser.add_argument("--config", metavar="PATH",
                        help="take [thresholds] from this rig config file")
    parser.add_argument("--out", metavar="DIR", type=Path,
                        help="where to write the JSON (default: beside the sources in a"
                             " checkout, the current directory in an installed copy)")
    args = parser.parse_args(argv)
    if DashboardEncoder is None:
        print("dashboards.generate: needs grafanalib: pip install "
              "'rig-telemetry[dashboards]'", file=sys.stderr)
        return 2
    try:
        t = thresholds_from_config(args.config) if args.config else Thresholds()
    except ValueError as exc:
        print(f"dashboards.generate: {exc}", file=sys.stderr)
        return 2
    out = args.out or (DASHBOARDS_DIR if in_checkout() else Path("."))
    stale = []
    for source in sources():
        path = json_path(source, out)
        text = render(source, t)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
            continue
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in stale:
        print(f"{path} is stale: run python -m dashboards.generate", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
