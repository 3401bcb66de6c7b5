"""`dumps(doc)`: exactly `json.dumps(doc, indent=2)`, several times faster.

With an indent, the standard library encodes in pure Python through nested generators; a 2,560-type `types --json`
spent more time there than in discovery. This builds the same text with one join per container and the C string
encoder, writes scalars without a call each, and encodes a flat nested dict once per distinct content and depth
(every VF of a GPU repeats the same type `attributes`). Anything beyond plain JSON types (str subclasses such as
StrEnum, non-str keys, floats, other objects) falls back to json.dumps, so the output is always the standard
library's.
"""

try:  # the C string encoder without importing the json package (its decoder costs start-up time)
    from _json import encode_basestring_ascii as _string
except ImportError:  # pragma: no cover - a Python without the C accelerator
    from json.encoder import encode_basestring_ascii as _string

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands
if TYPE_CHECKING:
    from typing import Any


class _NotPlain(Exception):
    pass


def dumps(doc: "Any") -> str:
    try:
        return _Encoder().encode(doc, "")
    except _NotPlain:
        import json

        return json.dumps(doc, indent=2)


class _Encoder:
    """One document's encoding; its caches live as long as the call."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}  # key → '"key": '
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
        keys = self.keys
        items = []
        for k, v in o.items():
            key = keys.get(k)
            if key is None:
                if type(k) is not str:
                    raise _NotPlain
                key = keys[k] = _string(k) + ": "
            t = type(v)
            if t is str:
                items.append(key + _string(v))
            elif t is int:
                items.append(key + int.__repr__(v))
            elif v is None:
                items.append(key + "null")
            elif t is dict:
                items.append(key + self.nested(v, inner))
            else:
                items.append(key + self.encode(v, inner))
        return "{\n" + inner + (",\n" + inner).join(items) + "\n" + indent + "}"

    def nested(self, o: "dict[Any, Any]", indent: str) -> str:
        try:
            # The value types belong to the key: True == 1 and hash alike, yet encode differently.
            memo = (indent, tuple(o.items()), tuple(map(type, o.values())))
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
