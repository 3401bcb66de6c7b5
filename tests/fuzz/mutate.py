"""Cheap mutants of a hypothesis-generated input, so that one example yields a batch of inputs: hypothesis draws the
seed input and a Random (derandomized with it), and these functions derive text or document variants from them in
microseconds. A violating mutant is named in full in the failure; hypothesis then shrinks the seed and the Random."""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

from tests.fuzz.strategies import HOSTILE


def text_mutants(rng: random.Random, seed: str, tokens: Sequence[str], n: int) -> list[str]:
    """n variants of `seed`: tokens inserted, spans deleted, lines duplicated, swapped or re-indented, bytes
    flipped, or the text cut short."""
    out = []
    for _ in range(n):
        t = seed
        for _ in range(rng.randint(1, 3)):
            pos = rng.randint(0, len(t))
            op = rng.randrange(7)
            if op == 0:
                t = t[:pos] + rng.choice(tokens) + t[pos:]
            elif op == 1:
                t = t[:pos] + t[pos + rng.randint(1, 12) :]
            elif op in (2, 3):
                lines = t.splitlines(keepends=True)
                if lines:
                    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
                    if op == 2:
                        lines.insert(i, lines[j])
                    else:
                        lines[i], lines[j] = lines[j], lines[i]
                t = "".join(lines)
            elif op == 4:
                t = t[:pos] + rng.choice(["  ", "\t", " ", "- "]) + t[pos:]
            elif op == 5 and t:
                i = rng.randrange(len(t))
                t = (
                    t[:i]
                    + chr(rng.choice([0, 1, 0x1B, 0x7F, 0x85, 0xA0, 0x2028, 0xFEFF, ord(t[i]) ^ 0x20]))
                    + t[i + 1 :]
                )
            else:
                t = t[:pos]
        out.append(t)
    return out


def doc_mutants(rng: random.Random, doc: Any, n: int, values: Sequence[Any] = ()) -> list[Any]:
    """n variants of a JSON document: one to three nodes replaced by a hostile or odd value, keys dropped, list
    items duplicated."""
    pool = [*values, *HOSTILE, None, True, False, 0, -1, 2**64, 1.5, float("nan"), [], {}, [None], {"": None}]
    out = []
    for _ in range(n):
        d = copy.deepcopy(doc)
        for _ in range(rng.randint(1, 3)):
            d = _mutate_once(rng, d, pool)
        out.append(d)
    return out


def _mutate_once(rng: random.Random, doc: Any, pool: Sequence[Any]) -> Any:
    nodes = list(_paths(doc))
    path = rng.choice(nodes)
    if not path:
        return copy.deepcopy(rng.choice(pool))
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    op = rng.randrange(4)
    if op == 0 and isinstance(parent, dict):
        del parent[path[-1]]
    elif op == 1 and isinstance(parent, list):
        parent.insert(path[-1], copy.deepcopy(parent[path[-1]]))
    else:
        parent[path[-1]] = copy.deepcopy(rng.choice(pool))
    return doc


def _paths(node: Any, here: tuple[Any, ...] = ()) -> Any:
    yield here
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*here, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*here, i))
