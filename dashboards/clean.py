"""What grafanalib 0.7.1 writes that no Grafana since 9 reads, taken out of the JSON.

- Explicit nulls (`"interval": null`, `"maxPerRow": null`...): Grafana takes a
  missing key for its default, and grafana-foundation-sdk's dashboard model refuses
  a null where it expects an object (`"datasource": null` on a row). The one null
  that means something stays: a threshold's base step, `{"value": null}` (from -inf).
- A target's `query`, `step`, `metric` and `target`: pre-7 copies of `expr` and its
  resolution; the Prometheus data source reads `expr`, `interval` and `intervalFactor`.
- The pre-Grafana-9 heatmap config beside the new `options` (`cards`, `color`,
  `xAxis`...): Grafana migrates from it only when `options` is empty
  (public/app/plugins/panel/heatmap/migrations.ts), so it is dead weight here.
"""

from __future__ import annotations

from typing import Any

DEAD_TARGET_KEYS = frozenset({"query", "step", "metric", "target"})
LEGACY_HEATMAP_KEYS = frozenset({
    "cards", "color", "dataFormat", "heatmap", "hideZeroBuckets", "highlightCards",
    "legend", "reverseYBuckets", "tooltip", "xAxis", "xBucketNumber", "xBucketSize",
    "yAxis", "yBucketBound", "yBucketNumber", "yBucketSize",
})


def clean(dashboard: dict[str, Any]) -> dict[str, Any]:
    """The dashboard without nulls (but threshold bases), dead target keys and the
    legacy heatmap config."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "heatmap":
            for key in LEGACY_HEATMAP_KEYS:
                panel.pop(key, None)
        for target in panel.get("targets", []):
            for key in DEAD_TARGET_KEYS:
                target.pop(key, None)
    return _without_nulls(dashboard)


def _without_nulls(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v, k) for k, v in value.items()
                if v is not None or (k == "value" and key == "steps")}
    if isinstance(value, list):
        return [_without_nulls(v, key) for v in value]
    return value
