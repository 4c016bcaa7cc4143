"""What ``corpus prepare`` reads: files, folders and globs of plain text, ``.jsonl`` / ``.jsonl.gz`` and
``.parquet``, checked before any task starts, and cut into pieces, one per task.

A plain-text file larger than a piece is cut at byte offsets; a piece owns the documents whose first byte lies in
its range, so every document is read once, whole, whatever the cut. The pieces depend only on the corpus (never on
``--workers``): the store is the same for any number of workers and machines, and a relaunch has the same tasks.
"""

import glob
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import check_text_file

PIECE_BYTES = 32 << 20  # ~10 s of one core's tokenising
DOCUMENT_SPLITS = ("lines", "paragraphs")


def file_kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".json.gz", ".ndjson")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    return "text"


def corpus_files(specs) -> list[Path]:
    """Each ``--corpus`` entry: a file, a folder (every file in it, recursively, hidden ones left out) or a glob;
    in name order, each once."""
    files = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file()
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not found:
                raise UserInputError(f"--corpus {spec}: the folder holds no files")
        elif path.is_file():
            found = [path]
        elif glob.has_magic(str(spec)):
            found = sorted(Path(p) for p in glob.glob(str(spec), recursive=True) if Path(p).is_file())
            if not found:
                raise UserInputError(f"--corpus {spec}: the pattern matches no file")
        else:
            raise UserInputError(f"--corpus {spec}: no such file or folder")
        files += [p for p in found if p not in files]
    return files


def check_source(path: Path, text_field: str) -> None:
    """Refuse what a task would fail on, before any task starts: unreadable, empty, not UTF-8 (named with the byte),
    a JSON line that is not an object with a string ``text_field`` (named ``file:line``), a Parquet file without
    that column."""
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise UserInputError(f"--corpus {path}: cannot be read ({err.strerror})") from None
    kind = file_kind(path)
    if kind == "text":
        check_text_file(path)
    elif kind == "jsonl":
        rows = 0
        for number, record in _json_records(path):
            if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
                raise UserInputError(f"{path}:{number}: no string field {text_field!r} (--text-field names it)")
            rows += 1
        if rows == 0:
            raise UserInputError(f"--corpus {path} is empty")
    else:
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(path)
        except Exception as err:  # pyarrow's own errors: not a Parquet file, cut
            raise UserInputError(f"{path}: not a readable Parquet file ({' '.join(str(err).split())[:200]})") from None
        if text_field not in schema.names:
            raise UserInputError(f"{path}: no column {text_field!r} (it has {', '.join(schema.names)}; --text-field "
                                 f"names it)")


def _json_records(path: Path):
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as stream:
            for number, line in enumerate(stream, start=1):
                if line.strip():
                    try:
                        yield number, json.loads(line)
                    except ValueError as err:
                        raise UserInputError(f"{path}:{number}: not JSON ({err})") from None
    except UnicodeDecodeError as err:
        raise UserInputError(f"{path}: not UTF-8 text ({err.reason})") from None
    except (OSError, EOFError) as err:
        raise UserInputError(f"{path}: cannot be read ({err})") from None


@dataclass(frozen=True)
class Piece:
    """A task's input: a whole file, or the documents of a plain-text file that start in ``[start, stop)``."""

    path: str
    kind: str
    start: int = 0
    stop: int | None = None


def pieces_of(files: list[Path], piece_bytes: int = PIECE_BYTES) -> list[Piece]:
    pieces = []
    for path in files:
        kind, size = file_kind(path), path.stat().st_size
        if kind != "text" or size <= piece_bytes:
            pieces.append(Piece(str(path), kind))
            continue
        count = -(-size // piece_bytes)
        bounds = [size * i // count for i in range(count + 1)]
        pieces += [Piece(str(path), kind, start, stop) for start, stop in zip(bounds, bounds[1:])]
    return pieces


def read_piece(piece: Piece, documents: str, text_field: str):
    """The documents of ``piece``, as strings, in order: a text file's lines (``documents="lines"``) or its
    blank-line-separated paragraphs (``"paragraphs"``, lines joined by newlines); a record's ``text_field``."""
    if piece.kind == "jsonl":
        for _, record in _json_records(Path(piece.path)):
            yield record[text_field]
    elif piece.kind == "parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(piece.path).iter_batches(columns=[text_field], batch_size=4096):
            yield from (text for text in batch.column(0).to_pylist() if text is not None)
    else:
        yield from _text_documents(piece, documents)


def _text_documents(piece: Piece, documents: str):
    """A text piece's documents: those that start at a byte in ``[start, stop)``, read whole (past ``stop`` if
    need be)."""
    stop = piece.stop if piece.stop is not None else float("inf")
    with open(piece.path, "rb") as stream:
        position, previous_blank = _first_line_start(stream, piece.start)
        paragraph = []
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8").rstrip("\r\n")
            starts_at, position = position, position + len(raw)
            blank = not line.strip()
            if documents == "lines":
                if starts_at >= stop:
                    return
                if not blank:
                    yield line
                continue
            if paragraph:
                if blank:
                    yield "\n".join(paragraph)
                    paragraph = []
                else:
                    paragraph.append(line)
            elif not blank and previous_blank:  # a paragraph starts here: this piece's if it starts in range
                if starts_at >= stop:
                    return
                paragraph = [line]
            previous_blank = blank
        if paragraph:
            yield "\n".join(paragraph)


def _first_line_start(stream, start: int) -> tuple[int, bool]:
    """Seek ``stream`` to the first line that starts at or after ``start``; return its offset and whether the line
    before it is blank (or there is none: a paragraph may start there)."""
    if start == 0:
        return 0, True
    stream.seek(start - 1)
    if stream.read(1) != b"\n":
        stream.readline()  # the rest of a line that started before this piece
    position = stream.tell()
    begin = max(0, position - 4096)  # a blank line is short: its last 4 KiB tell
    stream.seek(begin)
    lines = stream.read(position - begin).split(b"\n")
    stream.seek(position)
    return position, len(lines) < 2 or not lines[-2].strip()


def record_of(files: list[Path]) -> list[dict]:
    """What the manifest says of the sources: each file with its size and time."""
    return [{"path": str(p.resolve()), "bytes": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns} for p in files]
