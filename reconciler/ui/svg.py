"""Line charts as inline SVG, drawn on the server: no script, no library, nothing from the internet."""

from __future__ import annotations

from html import escape

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 460, 150, 46, 10, 22, 22
COLORS = ("#2563eb", "#d97706", "#dc2626", "#059669", "#7c3aed", "#db2777")


def _fmt(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def line_chart(title: str, series: dict[str, list[tuple[float, float | None]]], t0: float, t1: float,
               unit: str = "") -> str:
    """``series``: label -> [(time, value or None)]. The x axis is [t0, t1] (the last hour)."""
    pts = [v for s in series.values() for _, v in s if v is not None]
    top = max(pts) if pts else 1.0
    top = top * 1.1 if top > 0 else 1.0
    span = max(t1 - t0, 1.0)
    iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def x(t: float) -> float:
        return PAD_L + (t - t0) / span * iw

    def y(v: float) -> float:
        return PAD_T + ih - v / top * ih

    out = [f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {W} {H}" '
           f'xmlns="http://www.w3.org/2000/svg">',
           f'<text x="{PAD_L}" y="14" class="ct">{escape(title)}{" (" + escape(unit) + ")" if unit else ""}</text>']
    for frac in (0.0, 0.5, 1.0):
        yy = PAD_T + ih - frac * ih
        out.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{yy:.1f}" y2="{yy:.1f}" class="grid"/>'
                   f'<text x="{PAD_L - 4}" y="{yy + 4:.1f}" class="ax" text-anchor="end">{_fmt(frac * top)}</text>')
    for i, back in enumerate((span, span / 2, 0.0)):
        out.append(f'<text x="{x(t1 - back):.1f}" y="{H - 6}" class="ax" text-anchor="'
                   f'{("start", "middle", "end")[i]}">{"now" if back == 0 else f"-{back / 60:.0f}m"}</text>')
    if not pts:
        out.append(f'<text x="{PAD_L + iw / 2}" y="{PAD_T + ih / 2}" class="empty" text-anchor="middle">'
                   'no data yet</text>')
    lx = PAD_L + 6
    for i, (label, s) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        segs, cur = [], []
        for t, v in s:
            if v is None:
                if cur:
                    segs.append(cur)
                cur = []
            else:
                cur.append(f"{x(t):.1f},{y(v):.1f}")
        if cur:
            segs.append(cur)
        for seg in segs:
            if len(seg) == 1:
                cx, cy = seg[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{color}"/>')
            else:
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{" ".join(seg)}"/>')
        out.append(f'<text x="{lx}" y="{PAD_T + 10}" class="lg" fill="{color}">{escape(label)}</text>')
        lx += 8 + 6.5 * len(label)
    out.append("</svg>")
    return "".join(out)


def plots(samples: list[dict], now: float, window: float = 3600.0) -> dict[str, str]:
    """The four charts of one deployment from its history samples."""
    # the last hour, or less while the history is younger (at least 5 minutes): data is not a sliver at "now"
    first = samples[0]["t"] if samples else now
    t0 = max(now - window, min(first, now - 300.0))

    def col(key: str) -> list[tuple[float, float | None]]:
        return [(s["t"], s.get(key)) for s in samples]

    roles = sorted({r for s in samples for r in s.get("workers", {})})
    workers = {r: [(s["t"], s.get("workers", {}).get(r)) for s in samples] for r in roles}
    return {
        "requests": line_chart("Request rate", {"req/s": col("rps")}, t0, now, "req/s"),
        "ttft": line_chart("Time to first token", {q: col(f"ttft_{q}") for q in ("p50", "p90", "p99")}, t0, now, "ms"),
        "itl": line_chart("Inter-token latency", {q: col(f"itl_{q}") for q in ("p50", "p90", "p99")}, t0, now, "ms"),
        "workers": line_chart("Ready workers", workers, t0, now),
    }
