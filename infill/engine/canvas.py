"""Infill canvases: free slots for the gap(s), fixed text clamped between and after them, as the engine's tensors.

One row per candidate middle length, laid out by infill/engine/layout.py (the remote backend lays out vLLM's
canvases with it too):

    [gap 0: L free] [between[0] clamped] [gap 1: L free] ... [gap G-1: L free] [suffix anchor clamped] [pad ...]

Rows are padded to one width; pad slots are masked out as keys, so a padded row computes what it would alone (and
`padded_to` pads a canvas further, to a bucket's shape, with the same guarantee). Positions continue after the
prompt in the KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infill.engine.layout import lay_out
from infill.types import InfillError


@dataclass(frozen=True)
class Canvas:
    lengths: tuple[int, ...]  # candidate middle length per row
    fixed_tokens: torch.Tensor  # (B, W) clamped token at fixed/pad slots (anything at free slots)
    free: torch.Tensor  # (B, W) bool: slots the model fills
    anchor: torch.Tensor  # (B, W) bool: clamped fixed-text slots (scored for how well the middle joins them)
    valid: torch.Tensor  # (B, W) bool: not padding
    gap_of: torch.Tensor  # (B, W) int: gap index of a free slot, -1 elsewhere
    position_ids: torch.Tensor  # (B, W) int: positions after the prompt

    @property
    def shape(self) -> tuple[int, int]:
        rows, width = self.free.shape
        return rows, width


def build_canvas(
    lengths: list[int], fixed: list[list[int]], prompt_length: int, pad_id: int, device: torch.device
) -> Canvas:
    """`fixed[g]` is the clamped text after gap g (between texts, then the suffix anchor last)."""
    if not lengths:
        raise InfillError("no candidate middle length fits the canvas")
    rows = [lay_out(n, [len(f) for f in fixed]) for n in lengths]
    width = max(row.width for row in rows)
    tokens = torch.full((len(rows), width), pad_id, dtype=torch.long)
    free = torch.zeros((len(rows), width), dtype=torch.bool)
    anchor = torch.zeros((len(rows), width), dtype=torch.bool)
    gap_of = torch.full((len(rows), width), -1, dtype=torch.long)
    for r, row in enumerate(rows):
        for g, ((gap_start, gap_end), (start, end), clamp) in enumerate(zip(row.gaps, row.fixed, fixed)):
            free[r, gap_start:gap_end] = True
            gap_of[r, gap_start:gap_end] = g
            if clamp:
                tokens[r, start:end] = torch.tensor(clamp, dtype=torch.long)
                anchor[r, start:end] = True
    valid = free | anchor
    positions = prompt_length + torch.arange(width, dtype=torch.long).expand(len(rows), width)
    return Canvas(
        tuple(lengths),
        tokens.to(device),
        free.to(device),
        anchor.to(device),
        valid.to(device),
        gap_of.to(device),
        positions.contiguous().to(device),
    )


def padded_to(canvas: Canvas, rows: int, width: int, pad_id: int) -> Canvas:
    """`canvas` in a larger (rows, width): the added slots are padding (not free, not fixed, not valid), the added
    rows have no slot at all, so neither changes what the canvas's own slots compute."""
    have_rows, have_width = canvas.shape
    if (rows, width) == (have_rows, have_width):
        return canvas

    def grown(t: torch.Tensor, fill: int | bool) -> torch.Tensor:
        out = torch.full((rows, width), fill, dtype=t.dtype, device=t.device)
        out[:have_rows, :have_width] = t
        return out

    positions = canvas.position_ids[0, 0] + torch.arange(width, device=canvas.position_ids.device).expand(rows, width)
    return Canvas(
        canvas.lengths,
        grown(canvas.fixed_tokens, pad_id),
        grown(canvas.free, False),
        grown(canvas.anchor, False),
        grown(canvas.valid, False),
        grown(canvas.gap_of, -1),
        positions.contiguous(),
    )
