"""Line-based chunking of memory documents (GoClaw's `ChunkText`, reference §6.3): chunks of whole lines up to
≈`max_chars`, cut at a blank line once half full, each starting with the last lines (≤ `overlap` chars) of the one
before, so a sentence on a boundary is found in both. Pure functions: no Django."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

MAX_CHARS = 1000
OVERLAP_CHARS = 200


@dataclass(frozen=True)
class Chunk:
    """Lines `start_line`..`end_line` (1-based, inclusive) of a document, joined by newlines."""

    start_line: int
    end_line: int
    text: str

    @property
    def text_hash(self) -> str:
        return text_hash(self.text)


def text_hash(text: str) -> str:
    """The key a chunk's vector is cached under (with the model)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def document_lines(content: str) -> list[str]:
    """The document's lines as read_file numbers them (a final newline ends the last line, it adds none)."""
    if not content:
        return []
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def chunk_text(content: str, max_chars: int = MAX_CHARS, overlap: int = OVERLAP_CHARS) -> list[Chunk]:
    """The chunks of `content`. A line longer than `max_chars` is cut into pieces of its own (same line number);
    whitespace-only chunks are dropped; the overlap is clamped below max_chars / 2 so every chunk moves forward."""
    max_chars = max(1, int(max_chars))
    overlap = max(0, min(int(overlap), max_chars // 2 - 1))
    chunks: list[Chunk] = []
    current: list[tuple[int, str]] = []
    size = 0
    fresh = False  # whether `current` holds a line no earlier chunk had (overlap lines alone are not a chunk)

    def flush() -> None:
        nonlocal current, size, fresh
        if fresh:
            text = "\n".join(line for _, line in current)
            if text.strip():
                chunks.append(Chunk(current[0][0], current[-1][0], text))
        tail: list[tuple[int, str]] = []
        tail_size = 0
        for number, line in reversed(current):
            if tail_size + len(line) + 1 > overlap:
                break
            tail.insert(0, (number, line))
            tail_size += len(line) + 1
        while tail and not tail[0][1].strip():
            tail_size -= len(tail.pop(0)[1]) + 1
        current, size, fresh = tail, tail_size, False

    for number, line in enumerate(document_lines(content), 1):
        if len(line) + 1 > max_chars:
            flush()
            current, size = [], 0
            for start in range(0, len(line), max_chars):
                piece = line[start:start + max_chars]
                if piece.strip():
                    chunks.append(Chunk(number, number, piece))
            continue
        if current and size + len(line) + 1 > max_chars:
            flush()
            if size + len(line) + 1 > max_chars:  # the overlap and this line do not fit together: no overlap
                current, size = [], 0
        current.append((number, line))
        size += len(line) + 1
        fresh = True
        if not line.strip() and size >= max_chars // 2:
            flush()
    flush()
    return chunks
