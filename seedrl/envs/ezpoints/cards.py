"""The EZPoints table as an image, drawn by our own code (no card assets): verl-agent's layout of
``EZPointEnv._get_observation`` (gym_cards ``envs/ezpoints.py``): a 300x300 green table, two cards of
135x189 pixels side by side, vertically centred, and the formula written in white at the bottom.

A card is white with a black frame; its rank (``2``..``10``, ``J``, ``Q``, ``K``, ``A``) sits in the top
left and bottom right corners, its suit symbol under the top rank and large in the middle, in red for
hearts and diamonds and black for spades and clubs. :func:`read_cards` reads the cards back from an image
(tests, debugging).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seedrl.envs.pixels import GLYPH_H, canvas, draw_text, fill, frame, read_glyph, stamp, text_size

SIZE = 300
TABLE = (0x35, 0x65, 0x4D)
CARD_W = int(SIZE / 2 * 0.9)
CARD_H = int(CARD_W * 7 / 5)
CARD_TOP = (SIZE - CARD_H) // 2
PAPER, EDGE, RED, BLACK, CHALK = (255, 255, 255), (0, 0, 0), (200, 0, 0), (0, 0, 0), (255, 255, 255)
RANK_SCALE, SMALL_SUIT_SCALE, BIG_SUIT_SCALE, FORMULA_SCALE = 4, 2, 8, 3
MARGIN = 8
FORMULA_TOP = int(SIZE * 0.86)

#: 7x7 suit symbols
SUITS: dict[str, tuple[str, ...]] = {
    "H": (".##.##.", "#######", "#######", "#######", ".#####.", "..###..", "...#..."),
    "D": ("...#...", "..###..", ".#####.", "#######", ".#####.", "..###..", "...#..."),
    "S": ("...#...", "..###..", ".#####.", "#######", "##.#.##", "...#...", "..###.."),
    "C": ("..###..", "..###..", "##.#.##", "#######", "##.#.##", "...#...", "..###.."),
}
SUIT_NAMES = {"H": "hearts", "D": "diamonds", "S": "spades", "C": "clubs"}


def card_left(index: int) -> int:
    """The left edge of card ``index`` (0 or 1), as verl-agent spaces them (``5 + i * width * 1.1``)."""
    return 5 + int(index * CARD_W * 1.1)


def rank_label(card: str) -> str:
    """What a card shows as its rank: ``"10"`` for verl-agent's ``T``, else the rank letter or digit."""
    return "10" if card[1:] == "T" else card[1:]


def ink(card: str) -> tuple[int, int, int]:
    """Red for hearts and diamonds, black for spades and clubs."""
    return RED if card[0] in "HD" else BLACK


def draw_card(img: np.ndarray, card: str, top: int, left: int) -> None:
    """Draw ``card`` (``"H5"``) with its top-left corner at ``(top, left)`` in place."""
    fill(img, top, left, CARD_H, CARD_W, PAPER)
    frame(img, top, left, CARD_H, CARD_W, 2, EDGE)
    label, colour = rank_label(card), ink(card)
    h, w = text_size(label, RANK_SCALE)
    draw_text(img, label, top + MARGIN, left + MARGIN, RANK_SCALE, colour)
    draw_text(img, label, top + CARD_H - MARGIN - h, left + CARD_W - MARGIN - w, RANK_SCALE, colour)
    stamp(img, SUITS[card[0]], top + MARGIN + h + 4, left + MARGIN, SMALL_SUIT_SCALE, colour)
    big = 7 * BIG_SUIT_SCALE
    stamp(img, SUITS[card[0]], top + (CARD_H - big) // 2, left + (CARD_W - big) // 2, BIG_SUIT_SCALE, colour)


def render_table(cards: Sequence[str], formula: Sequence[str]) -> np.ndarray:
    """The ``(300, 300, 3)`` uint8 image of the two cards and the formula so far (``formula``'s tokens
    joined, as verl-agent's ``"Formula: ..."`` line shows them, without the label)."""
    img = canvas(SIZE, SIZE, TABLE)
    for i, card in enumerate(cards):
        draw_card(img, card, CARD_TOP, card_left(i))
    text = "".join(formula)
    if text:
        draw_text(img, text, FORMULA_TOP, 10, FORMULA_SCALE, CHALK)
    return img


def read_cards(img: np.ndarray, n: int = 2) -> list[str]:
    """The cards drawn by :func:`render_table`, read back from the top-left rank and the small suit
    (``"?"`` for what cannot be read): ``["H5", "CT"]``."""
    out = []
    for i in range(n):
        top, left = CARD_TOP + MARGIN, card_left(i) + MARGIN
        suit = "?"
        for s, bitmap in SUITS.items():
            colour = ink(s + "2")
            probe = img.copy()
            stamp(probe, bitmap, top + GLYPH_H * RANK_SCALE + 4, left, SMALL_SUIT_SCALE, colour)
            if np.array_equal(probe, img) and read_glyph(img, top, left, RANK_SCALE, colour) is not None:
                suit = s
                break
        colour = ink(suit + "2") if suit != "?" else BLACK
        first = read_glyph(img, top, left, RANK_SCALE, colour) or "?"
        second = read_glyph(img, top, left + 6 * RANK_SCALE, RANK_SCALE, colour, glyphs="0")
        out.append(suit + ("T" if first == "1" and second == "0" else first))
    return out


def describe(cards: Sequence[str]) -> str:
    """A text fallback of the cards for debugging (text mode): ``"5 of hearts and 10 of clubs"``."""
    return " and ".join(f"{rank_label(c)} of {SUIT_NAMES[c[0]]}" for c in cards)
