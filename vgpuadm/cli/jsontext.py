"""`dumps(doc)`: exactly `json.dumps(doc, indent=2)`, several times faster.

With an indent, the standard library encodes in pure Python through nested generators; a 2,560-type `types --json`
spent more time there than in discovery. This builds the same text with one join per container and the C string
encoder. Rows repeat themselves, so it lays out the keys of a dict once per key list and depth, encodes each
distinct str or int value once, and a flat nested dict once per distinct content and depth (every VF of a GPU
repeats the same type `attributes`). Anything beyond plain JSON types (str subclasses such as StrEnum, non-str keys,
floats, other objects) falls back to json.dumps, so the output is always the standard library's.

Kept rather than orjson (already a dependency, OPT_INDENT_2): its import regresses the cold start (bench_cold_start.py
--runs 15, `types --json`: cpu median 39.8 → 56.6 ms, ratio 2.27x → 3.57x, target ≤ 3x) and its bytes differ from
json.dumps wherever a document holds non-ASCII (summaries say "2 × nvidia-63", problems "—"; it writes UTF-8 where
json writes \u00d7), floats (2e-9, not 2e-09), inf (null) or ints past 64 bits (refused); on the 16 all-ASCII read
goldens the text is identical and orjson encodes the biggest (mixed.types) in 0.25 ms against jsontext's 3.4 ms.
"""

try:  # the C string encoder without importing the json package (its decoder costs start-up time)
    from _json import encode_basestring_ascii as _string
except ImportError:  # pragma: no cover - a Python without the C accelerator
    from json.encoder import encode_basestring_ascii as _string

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any


class _NotPlain(Exception):
    pass


_CHUNK = 65536


def dumps(doc: "Any") -> str:
    return "".join(chunks(doc))


def chunks(doc: "Any", end: str = "", size: int = _CHUNK) -> "Iterator[str]":
    """json.dumps(doc, indent=2) + end in consecutive pieces of `size` characters or more (a list's items are never
    split), each encoded when the one before has been taken. A 2,560-type `types --json` is 1.6 MB of text: built
    whole, joined, copied by each `+` and encoded, it took ~2,100 fresh pages at ~2.7 µs each; as pieces written
    one by one it reuses the same few (bench/README.md, sixth pass). A value only json.dumps encodes (a float, a
    str subclass …) met after some pieces were given: the rest of json.dumps's text follows, as what was given is
    the start of it."""
    encoder = _Encoder()
    given = 0  # characters given so far
    try:
        if (type(doc) is not list and type(doc) is not tuple) or not doc:
            yield encoder.encode(doc, "") + end
            return
        parts: list[str] = []
        total = 0
        sep = "[\n  "
        for v in doc:
            text = encoder.encode(v, "  ")
            parts += (sep, text)
            sep = ",\n  "
            total += len(text)
            if total >= size:
                piece = "".join(parts)
                given += len(piece)
                yield piece
                parts, total = [], 0
        parts.append("\n]" + end)
        yield "".join(parts)
    except _NotPlain:
        import json

        yield json.dumps(doc, indent=2)[given:] + end


class _Encoder:
    """One document's encoding; its caches live as long as the call."""

    def __init__(self) -> None:
        self.layouts: dict[tuple[object, ...], list[str]] = {}  # (keys, indent) → the text around the values
        # str or int → its JSON text (rows repeat parents, names, descriptions). Only exact str and int go in, so
        # True, which equals 1, never meets 1's text.
        self.scalars: dict[str | int, str] = {}
        self.flat: dict[tuple[object, ...], str] = {}  # (indent, items, value types) → text

    def encode(self, o: "Any", indent: str) -> str:
        t = type(o)
        if t is dict:
            return self.obj(o, indent)
        if t is list or t is tuple:
            return self.array(o, indent)
        text = _scalar(o)
        if text is None:
            raise _NotPlain
        return text

    def obj(self, o: "dict[Any, Any]", indent: str) -> str:
        if not o:
            return "{}"
        inner = indent + "  "
        layout = self.layouts.get((tuple(o), indent))
        if layout is None:
            layout = self.layout(o, indent)
        scalars = self.scalars
        texts: list[str] = []
        append = texts.append
        for v in o.values():
            t = type(v)
            if t is str or t is int:
                text = scalars.get(v)
                if text is None:
                    text = scalars[v] = _string(v) if t is str else int.__repr__(v)
                append(text)
            elif v is None:
                append("null")
            elif t is dict:
                append(self.nested(v, inner))
            else:
                append(self.encode(v, inner))
        pieces = layout.copy()
        pieces[1::2] = texts
        return "".join(pieces)

    def layout(self, o: "dict[Any, Any]", indent: str) -> list[str]:
        """The text of a dict with these keys at this indent, as pieces with a gap for each value to go in."""
        if any(type(k) is not str for k in o):
            raise _NotPlain
        inner = indent + "  "
        pieces = ["{\n" + inner + _string(next(iter(o))) + ": "]
        for k in list(o)[1:]:
            pieces += ("", ",\n" + inner + _string(k) + ": ")
        pieces += ("", "\n" + indent + "}")
        self.layouts[(tuple(o), indent)] = pieces
        return pieces

    def nested(self, o: "dict[Any, Any]", indent: str) -> str:
        try:
            # The value types belong to the key: True == 1 and hash alike, yet encode differently. Keys and values
            # as two tuples: no (key, value) pair to build per item.
            values = tuple(o.values())
            memo = (indent, tuple(o), values, tuple(map(type, values)))
            text = self.flat.get(memo)
        except TypeError:  # unhashable values (lists, dicts): not a flat dict, encode as usual
            return self.obj(o, indent)
        if text is None:
            text = self.flat[memo] = self.obj(o, indent)
        return text

    def array(self, o: "list[Any] | tuple[Any, ...]", indent: str) -> str:
        if not o:
            return "[]"
        inner = indent + "  "
        return "[\n" + inner + (",\n" + inner).join([self.encode(v, inner) for v in o]) + "\n" + indent + "]"


def _scalar(o: "Any") -> str | None:
    t = type(o)
    if t is str:
        return _string(o)
    if t is int:
        return int.__repr__(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    return None  # floats (json's own repr rules, NaN) and everything else: json.dumps decides
