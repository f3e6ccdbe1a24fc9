"""Placing text on a chart where it overlaps no other text and stays inside the axes.

A label is tried at a list of candidate spots, in order; the first whose box (measured with the
figure's own renderer, padded by PAD_PX) is inside the axes and clear of every box already taken is
kept. A label that fits nowhere is not drawn, and the caller is told, so it can say so or fall back to
a legend. Call `for_axes` only after the figure's layout is final (charts draw once, then fix it):
boxes are in display pixels and move when the axes do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from matplotlib.transforms import Bbox

PAD_PX = 2.0


@dataclass(frozen=True)
class Spot:
    """Where to try a label: offset (points) from the anchor, and which corner of the text sits there."""

    dx: float
    dy: float
    ha: str
    va: str


def around(radii: Sequence[float] = (5, 12, 22, 36, 55, 80), directions: int = 12) -> list[Spot]:
    """Spots on rings around an anchor, nearest first; the text extends away from the anchor."""
    spots = []
    for r in radii:
        for k in range(directions):
            a = 2 * math.pi * k / directions + math.pi / 12      # start just above the right-hand side
            dx, dy = r * math.cos(a), r * math.sin(a)
            spots.append(Spot(dx, dy, "left" if dx >= 0 else "right", "bottom" if dy >= 0 else "top"))
    return spots


@dataclass
class Placer:
    """The boxes taken so far on one axes, and the renderer that measures text."""

    ax: Any
    renderer: Any
    taken: list[Bbox] = field(default_factory=list)

    @classmethod
    def for_axes(cls, ax: Any) -> "Placer":
        fig = ax.figure
        renderer = fig.canvas.get_renderer()
        placer = cls(ax, renderer)
        for text in texts_of(fig):       # titles, ticks, legends, labels: everything already drawn
            placer.taken.append(padded(text.get_window_extent(renderer)))
        legend = ax.get_legend()
        if legend is not None:
            placer.taken.append(padded(legend.get_window_extent(renderer)))
        return placer

    def block(self, bbox: Bbox) -> None:
        self.taken.append(padded(bbox))

    def block_markers(self, xs: Iterable[float], ys: Iterable[float], size_pt: float) -> None:
        """Keep labels off the data points (markers of `size_pt` points)."""
        half = size_pt * self.ax.figure.dpi / 72 / 2
        for x, y in zip(xs, ys):
            px, py = self.ax.transData.transform((x, y))
            self.taken.append(Bbox.from_extents(px - half, py - half, px + half, py + half))

    def place(self, text: str, xy: tuple[float, float], spots: Sequence[Spot], leader: bool = False,
              **style: Any) -> Any | None:
        """Annotate `text` at the first free spot around data point `xy`; None when none is free.

        leader: draw a thin line from the text back to `xy` when the text ended up away from it.
        """
        inside = padded(self.ax.get_window_extent(self.renderer), -PAD_PX)
        probe = self.ax.annotate(text, xy, xytext=(0, 0), textcoords="offset points", **style)
        try:
            for spot in spots:
                probe.set_position((spot.dx, spot.dy))
                probe.set_ha(spot.ha)
                probe.set_va(spot.va)
                box = padded(probe.get_window_extent(self.renderer))
                if _contains(inside, box) and not any(box.overlaps(t) for t in self.taken):
                    self.taken.append(box)
                    if leader and math.hypot(spot.dx, spot.dy) > 14:
                        self.ax.annotate("", xy, xytext=(spot.dx, spot.dy), textcoords="offset points",
                                         arrowprops={"arrowstyle": "-", "color": "gray", "lw": 0.5,
                                                     "alpha": 0.7, "shrinkA": 0, "shrinkB": 3})
                    placed, probe = probe, None
                    return placed
            return None
        finally:
            if probe is not None:
                probe.remove()


def padded(bbox: Bbox, pad: float = PAD_PX) -> Bbox:
    return Bbox.from_extents(bbox.x0 - pad, bbox.y0 - pad, bbox.x1 + pad, bbox.y1 + pad)


def _contains(outer: Bbox, inner: Bbox) -> bool:
    return outer.x0 <= inner.x0 and outer.y0 <= inner.y0 and inner.x1 <= outer.x1 and inner.y1 <= outer.y1


def texts_of(fig: Any) -> list[Any]:
    """Every visible, non-empty text artist of a figure (titles, ticks, legends, annotations)."""
    from matplotlib.text import Text

    hidden = _unshown_tick_labels(fig)
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and id(t) not in hidden]


def _unshown_tick_labels(fig: Any) -> set[int]:
    """Tick labels matplotlib keeps but does not draw: their ticks lie outside the axis limits, or their axes is hidden."""
    out: set[int] = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                loc = tick.get_loc()
                if not ax.get_visible() or loc is None or not lo <= loc <= hi:
                    out.update((id(tick.label1), id(tick.label2)))
    return out


def overlapping_texts(fig: Any) -> list[tuple[str, str]]:
    """Pairs of visible texts whose boxes overlap (after drawing the figure): what a test asserts empty."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts_of(fig)]
    out = []
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1:]:
            if ba.overlaps(bb) and _area(ba, bb) > 1.0:
                out.append((a, b))
    return out


def texts_outside(fig: Any) -> list[str]:
    """Visible texts that stick out of the figure (clipped when saved)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = fig.bbox
    return [t.get_text() for t in texts_of(fig) if not _contains(padded(frame, 0.5), t.get_window_extent(renderer))]


def _area(a: Bbox, b: Bbox) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(w, 0.0) * max(h, 0.0)
