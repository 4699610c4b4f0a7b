from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from matplotlib import image

from gateway.bench.chart import write_chart
from tests.bench.factories import stats


def _levels(target: str, tps: float, hourly: bool) -> list:
    out = []
    for level in (1, 4, 16, 64):
        per_user = tps / (1 + 0.0092 * (level - 1))
        aggregate = per_user * level * 0.8
        cost = 36.0 / (aggregate * 3600) * 1e6 if hourly else 9.6
        out.append(stats(target=target, level=level, decode_tps_p50=per_user, aggregate_tps=aggregate,
                         cost_per_1m_output=cost))
    return out


def _check_png(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(raw) > 10_000
    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 300 and pixels.shape[1] > 600
    # One integer per pixel (RGB packed) makes counting distinct colours a 1-D np.unique.
    rgb = (pixels[..., :3] * 255).astype(np.uint32)
    packed = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
    assert len(np.unique(packed)) > 50  # lines, text, legend: far from one colour
    return pixels


def test_chart_is_a_real_chart(tmp_path: Path) -> None:
    data = _levels("ultra", 400.0, False) + _levels("dedicated", 150.0, True)
    path = write_chart(tmp_path / "chart.png", data)
    pixels = _check_png(path)
    # The two series are drawn in distinct, saturated colours (matplotlib's C0 blue and C1 orange).
    rgb = pixels[..., :3]
    blue = (rgb[..., 2] > 0.6) & (rgb[..., 0] < 0.3)
    orange = (rgb[..., 0] > 0.9) & (rgb[..., 1] > 0.4) & (rgb[..., 1] < 0.6) & (rgb[..., 2] < 0.2)
    assert blue.sum() > 200 and orange.sum() > 200


def test_chart_without_prices_falls_back_to_concurrency(tmp_path: Path) -> None:
    unpriced = [replace(s, cost_per_1m_output=None, pricing="") for s in _levels("a", 100.0, False)]
    _check_png(write_chart(tmp_path / "chart.png", unpriced))


def test_chart_survives_a_target_with_no_data(tmp_path: Path) -> None:
    failed = [replace(s, decode_tps_p50=None, aggregate_tps=0.0, cost_per_1m_output=None, error_rate=1.0)
              for s in _levels("gone", 100.0, False)]
    _check_png(write_chart(tmp_path / "chart.png", _levels("ok", 100.0, False) + failed))
