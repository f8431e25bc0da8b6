"""Drawing for envs with a pixel mode: solid rectangles and a small bitmap font on ``uint8`` RGB arrays.

Pure NumPy, no font files or image assets: every picture an env shows is drawn by its own code, so it
is the same on every machine and a test can read it back. Glyphs are 5 wide and 7 high (``#`` = ink),
drawn at an integer ``scale`` (each glyph cell becomes a ``scale x scale`` block).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seedrl.errors import SeedRLError

Colour = tuple[int, int, int]

GLYPH_W, GLYPH_H = 5, 7

#: the characters the envs draw: digits, card ranks and the formula operators
FONT: dict[str, tuple[str, ...]] = {
    "0": (".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."),
    "1": ("..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."),
    "2": (".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"),
    "3": ("####.", "....#", "....#", ".###.", "....#", "....#", "####."),
    "4": ("...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."),
    "5": ("#####", "#....", "####.", "....#", "....#", "#...#", ".###."),
    "6": (".###.", "#....", "#....", "####.", "#...#", "#...#", ".###."),
    "7": ("#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."),
    "8": (".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."),
    "9": (".###.", "#...#", "#...#", ".####", "....#", "....#", ".###."),
    "A": (".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"),
    "J": ("..###", "...#.", "...#.", "...#.", "#..#.", "#..#.", ".##.."),
    "Q": (".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"),
    "K": ("#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"),
    "+": (".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."),
    "*": (".....", "#.#.#", ".###.", "#####", ".###.", "#.#.#", "....."),
    "=": (".....", ".....", "#####", ".....", "#####", ".....", "....."),
    " ": (".....",) * 7,
}


def canvas(height: int, width: int, colour: Colour) -> np.ndarray:
    """A ``(height, width, 3)`` uint8 image filled with ``colour``."""
    img = np.empty((height, width, 3), dtype=np.uint8)
    img[:, :] = colour
    return img


def fill(img: np.ndarray, top: int, left: int, height: int, width: int, colour: Colour) -> None:
    """Paint a rectangle (clipped to the image) in place."""
    img[max(top, 0):max(top + height, 0), max(left, 0):max(left + width, 0)] = colour


def frame(img: np.ndarray, top: int, left: int, height: int, width: int, thickness: int, colour: Colour) -> None:
    """Paint the border (``thickness`` pixels wide, inside the rectangle) of a rectangle in place."""
    fill(img, top, left, thickness, width, colour)
    fill(img, top + height - thickness, left, thickness, width, colour)
    fill(img, top, left, height, thickness, colour)
    fill(img, top, left + width - thickness, height, thickness, colour)


def bitmap_mask(rows: Sequence[str], scale: int = 1) -> np.ndarray:
    """The boolean ink mask of a bitmap (``#`` = ink), each cell blown up to ``scale x scale``."""
    mask = np.array([[ch == "#" for ch in row] for row in rows], dtype=bool)
    return np.kron(mask, np.ones((scale, scale), dtype=bool)).astype(bool)


def stamp(img: np.ndarray, rows: Sequence[str], top: int, left: int, scale: int, colour: Colour) -> None:
    """Paint a bitmap's ink at ``(top, left)`` in place (the bitmap must fit inside the image)."""
    mask = bitmap_mask(rows, scale)
    h, w = mask.shape
    if top < 0 or left < 0 or top + h > img.shape[0] or left + w > img.shape[1]:
        raise SeedRLError(f"a {h}x{w} bitmap at ({top}, {left}) does not fit a {img.shape[0]}x{img.shape[1]} image")
    img[top:top + h, left:left + w][mask] = colour


def text_size(text: str, scale: int) -> tuple[int, int]:
    """(height, width) of ``text`` drawn by :func:`draw_text` (one blank column between glyphs)."""
    n = len(text)
    return GLYPH_H * scale, (n * (GLYPH_W + 1) - 1) * scale if n else 0


def draw_text(img: np.ndarray, text: str, top: int, left: int, scale: int, colour: Colour) -> None:
    """Draw ``text`` (characters of :data:`FONT`) left to right from ``(top, left)`` in place."""
    for i, ch in enumerate(text):
        if ch not in FONT:
            raise SeedRLError(f"no glyph for {ch!r}; the pixel font has {''.join(sorted(FONT))!r}")
        stamp(img, FONT[ch], top, left + i * (GLYPH_W + 1) * scale, scale, colour)


def read_glyph(img: np.ndarray, top: int, left: int, scale: int, ink: Colour,
               glyphs: Sequence[str] | None = None) -> str | None:
    """The character of :data:`FONT` drawn in ``ink`` at ``(top, left)`` and ``scale``, read by sampling
    the centre pixel of each glyph cell; ``None`` when no glyph (of ``glyphs``, default all) matches."""
    half = scale // 2
    cells = img[top + half:top + GLYPH_H * scale:scale, left + half:left + GLYPH_W * scale:scale]
    if cells.shape[:2] != (GLYPH_H, GLYPH_W):
        return None
    seen = np.all(cells == np.array(ink, dtype=np.uint8), axis=-1)
    for ch in glyphs if glyphs is not None else FONT:
        if np.array_equal(seen, bitmap_mask(FONT[ch])):
            return ch
    return None
