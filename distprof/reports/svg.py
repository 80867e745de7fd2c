"""A small SVG plotting kit for report.html: axes with round ticks, rectangles, lines, text, and a
heat map embedded as a PNG data URI.

Why not matplotlib: in a small merge the report cost more than the analysis (importing
matplotlib 0.3-0.5 s, then every figure drawn twice for ``bbox_inches="tight"``, with a text
layout pass per tick label). The report's three plots are bars, a band and a grid: written
directly they take milliseconds, stay self-contained (no script, no font, no fetch) and the
text stays text.
"""

from __future__ import annotations

import base64
import html
import math
import struct
import zlib

FONT = "system-ui,-apple-system,Segoe UI,Roboto,sans-serif"
INK, GRID = "#1d232b", "#e1e5ea"
# magma, reversed (light = short wait, dark = long wait): anchors of matplotlib's magma_r
MAGMA_R = ((252, 253, 191), (254, 176, 120), (241, 96, 93), (183, 55, 121), (114, 31, 129), (44, 17, 95),
           (0, 0, 4))


def nice_ticks(high: float, count: int = 6) -> list[float]:
    """Round tick values from 0 to at least ``high`` (1, 2, 2.5 or 5 times a power of ten)."""
    if not high > 0:
        return [0.0, 1.0]
    raw = high / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    return [i * step for i in range(int(math.ceil(high / step - 1e-9)) + 1)]


def label(value: float) -> str:
    """A tick label without float noise: 0.30000000000000004 -> '0.3', 2.0 -> '2'."""
    return f"{value:.6g}"


def _e(text) -> str:
    return html.escape(str(text))


CHAR_EM = 0.62  # a system-ui character's advance over the font size, on the wide side (digits ~0.55)


def text_width(text: str, size: int = 11) -> float:
    """An upper estimate of a label's width in user units: the SVG is laid out here, without a
    browser to measure text, so layouts keep their labels apart by this figure."""
    return CHAR_EM * size * len(text)


def thinned(positions: list[float], texts: list[str], size: int = 11, gap: float = 6) -> list[int]:
    """Indices of the labels to draw along an axis (centred at ``positions``, in order): every k-th,
    with the smallest k at which no two drawn labels overlap (32 rank numbers in a 380-wide panel, or
    "step N" at every step of a long heat map, drew over each other)."""
    for stride in range(1, len(positions) + 1):  # the first stride that fits ends the search
        kept = list(range(0, len(positions), stride))
        if all(positions[j] - positions[i] >= (text_width(texts[i], size) + text_width(texts[j], size)) / 2 + gap
               for i, j in zip(kept, kept[1:])):
            return kept
    return [0] if positions else []


def spread(ys: list[float], low: float, high: float, gap: float = 13) -> list[float]:
    """Label baselines moved apart to at least ``gap`` each, as near their own ``ys`` as that allows,
    inside [low, high] (squeezed when they cannot all fit): labels at the ends of lines that end at
    one height stay readable."""
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    gap = min(gap, (high - low) / max(len(ys) - 1, 1))
    placed = [0.0] * len(ys)
    floor = low
    for i in order:  # downwards: each at its own y or just below the one above
        placed[i] = floor = max(ys[i], floor)
        floor += gap
    ceiling = high
    for i in reversed(order):  # upwards: pull back inside the bottom edge
        placed[i] = ceiling = min(placed[i], ceiling)
        ceiling -= gap
    return placed


def wrapped(text: str, length: float, size: int = 11) -> list[str]:
    """``text`` in lines of at most ``length`` user units, broken between words (a word longer than
    that alone on its line): a colour bar's rotated title longer than the plot is tall was cut off."""
    lines: list[str] = []
    for word in text.split():
        if lines and text_width(f"{lines[-1]} {word}", size) <= length:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines


class Canvas:
    """SVG elements in user units; ``svg()`` has a viewBox and no fixed size (CSS sets the width)."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.parts: list[str] = []

    def rect(self, x: float, y: float, w: float, h: float, fill: str, extra: str = "") -> None:
        self.parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{h:.1f}" '
                          f'fill="{fill}"{extra}/>')

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = INK, width: float = 1) -> None:
        self.parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}" '
                          f'stroke-width="{width}"/>')

    def text(self, x: float, y: float, text: str, anchor: str = "start", size: int = 11, extra: str = "") -> None:
        self.parts.append(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}"{extra}>'
                          f"{_e(text)}</text>")

    def polyline(self, points: list[tuple[float, float]], stroke: str, fill: str = "none", width: float = 1.5,
                 close: bool = False) -> None:
        tag = "polygon" if close else "polyline"
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        self.parts.append(f'<{tag} points="{coords}" fill="{fill}" stroke="{stroke}" stroke-width="{width}"/>')

    def svg(self) -> str:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width} {self.height}" '
                f'font-family="{FONT}" fill="{INK}">' + "".join(self.parts) + "</svg>")


class Axes:
    """A plot area inside a Canvas: data coordinates to user units, ticks, labels."""

    def __init__(self, canvas: Canvas, left: float, top: float, width: float, height: float) -> None:
        self.canvas, self.left, self.top, self.width, self.height = canvas, left, top, width, height
        self.x_range, self.y_range = (0.0, 1.0), (0.0, 1.0)

    def x(self, value: float) -> float:
        low, high = self.x_range
        return self.left + (value - low) / ((high - low) or 1) * self.width

    def y(self, value: float) -> float:
        """Data y to user units; y grows downwards when ``y_range`` is (top value, bottom value)."""
        low, high = self.y_range
        return self.top + self.height - (value - low) / ((high - low) or 1) * self.height

    def value_axis(self, axis: str, ticks: list[float], title: str) -> None:
        """Grid lines and labels of a numeric axis ('x' at the bottom, 'y' at the left)."""
        c = self.canvas
        for tick in ticks:
            if axis == "x":
                x = self.x(tick)
                c.line(x, self.top, x, self.top + self.height, GRID)
                c.text(x, self.top + self.height + 14, label(tick), "middle")
            else:
                y = self.y(tick)
                c.line(self.left, y, self.left + self.width, y, GRID)
                c.text(self.left - 5, y + 4, label(tick), "end")
        self.title(axis, title)

    def title(self, axis: str, title: str) -> None:
        if axis == "x":
            self.canvas.text(self.left + self.width / 2, self.top + self.height + 32, title, "middle")
        else:
            x, y = self.left - 42, self.top + self.height / 2
            self.canvas.text(x, y, title, "middle", extra=f' transform="rotate(-90 {x:.1f} {y:.1f})"')

    def frame(self) -> None:
        c = self.canvas
        c.line(self.left, self.top, self.left, self.top + self.height)
        c.line(self.left, self.top + self.height, self.left + self.width, self.top + self.height)


def legend(canvas: Canvas, x: float, y: float, entries: list[tuple[str, str]]) -> None:
    """A row of colour swatches and names starting at (x, y)."""
    for name, colour in entries:
        canvas.rect(x, y - 9, 12, 10, colour)
        canvas.text(x + 16, y, name)
        x += 28 + 6.2 * len(name)


def rank_positions(count: int, most: int = 32) -> list[int]:
    """Indices that get a rank label: at most ~``most`` of them."""
    step = max(1, count // most + (count % most > 0))
    return list(range(0, count, step))


def colour_of(fraction: float, anchors=MAGMA_R) -> tuple[int, int, int]:
    """Colour at ``fraction`` (0..1) along a colour map given by evenly spaced anchors."""
    scaled = min(max(fraction, 0.0), 1.0) * (len(anchors) - 1)
    low = min(int(scaled), len(anchors) - 2)
    t = scaled - low
    return tuple(round(a + (b - a) * t) for a, b in zip(anchors[low], anchors[low + 1]))


def png_data_uri(rgba_rows: list[bytes], width: int) -> str:
    """An RGBA image (rows of ``4 * width`` bytes) as a PNG ``data:`` URI: stdlib only, no fetch."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + row for row in rgba_rows)  # filter type 0 per scanline
    header = struct.pack(">IIBBBBB", width, len(rgba_rows), 8, 6, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
