"""The inputs scripts/fuzz_cli.py feeds redkit's command line, one generator a family: records cut, flipped or of
the wrong types, numbers and nesting no reader expects, bytes in every script, and damaged JSON documents and
safetensors files. Each takes a `random.Random` (the fuzzer's seed: the same seed, the same inputs) and gives bytes.
"""

import json
import random
from pathlib import Path

from safetensors.torch import load_file, save_file

GOOD = [
    {"question": "What is 12 plus 27?", "answer": 39},
    {"question": "What is 50 plus 48?", "answer": 98},
    {"question": "Add 3 and 4.", "answer": 7},
]
UNICODE = [
    "Was ist 12 plus 27?",
    "12 + 27 = ?",
    "१२ जमा २७",
    "١٢ زائد ٢٧",
    "十二加二十七是多少？",
    "What\u00a0is\u200b12\u202eplus 27?",
    "e\u0301\u0301\u0301",
    "🧮 12 ➕ 27",
    "\ufeffWhat is 12 plus 27?",
    "\U0010ffff",
    "\x1c\x1d",
    "ǅ" * 200,
]
ODD_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    "",
    " ",
    "39",
    [],
    {},
    [39],
    {"a": 1},
    "R3",
    "range_2_20",
    "²",
    "NaN",
    1e308,
]
FIELDS = ["question", "expr", "answer", "label", "domain", "num_ops", "num_steps", "id", "program", "operation"]


# ---- input generators: each returns the bytes of a data file (or of a config) -------------------


def as_lines(rows) -> bytes:
    return b"".join(
        (r if isinstance(r, bytes) else json.dumps(r, ensure_ascii=False).encode("utf-8", "surrogatepass")) + b"\n"
        for r in rows
    )


def malformed_json(rng: random.Random) -> bytes:
    line = bytearray(json.dumps(rng.choice(GOOD)).encode())
    how = rng.randrange(4)
    if how == 0:
        line = line[: rng.randrange(len(line))]
    elif how == 1:
        for _ in range(rng.randint(1, 4)):
            line[rng.randrange(len(line))] = rng.choice(b'{}[]",:\\ \x00x9')
    elif how == 2:
        pos = rng.randrange(len(line))
        line[pos:pos] = rng.choice([b",", b"}", b'"', b"\\u12", b"'", b"//", b"NaN", b"\x7f"])
    else:
        line = bytearray(b"{'question': 'single quotes', 'answer': 5}")
    return as_lines([rng.choice(GOOD), bytes(line)])


def wrong_types(rng: random.Random) -> bytes:
    row = dict(rng.choice(GOOD))
    for _ in range(rng.randint(1, 3)):
        row[rng.choice(FIELDS)] = rng.choice(ODD_VALUES)
    return as_lines([row, rng.choice(GOOD)] if rng.random() < 0.5 else [row])


def huge_numbers(rng: random.Random) -> bytes:
    value = rng.choice(
        [
            10 ** rng.randint(19, 400),
            -(10 ** rng.randint(19, 400)),
            1e308,
            -1e308,
            5e-324,
            "9" * 5000,
            "-0",
            "+39",
            "0039",
            "39.0",
            39.0,
        ]
    )
    row = dict(rng.choice(GOOD)) | {rng.choice(["answer", "id", "num_ops", "label"]): value}
    raw = as_lines([row])
    if rng.random() < 0.3:  # literals json.dumps never writes but json.loads reads
        raw = rng.choice(
            [
                b'{"question": "q", "answer": NaN}\n',
                b'{"question": "q", "answer": Infinity}\n',
                b'{"question": "q", "answer": -Infinity}\n',
                b'{"question": "q", "answer": 1' + b"0" * 5000 + b"}\n",
                b'{"question": "q", "answer": 1e99999}\n',
            ]
        )
    return raw


def empty_strings(rng: random.Random) -> bytes:
    return rng.choice(
        [
            b"",
            b"\n",
            b"\n\n\n",
            b"   \n\t\n",
            as_lines([{"question": "", "answer": 5}]),
            as_lines([{"question": "   ", "answer": 5}]),
            as_lines([{"question": "q", "answer": ""}]),
            as_lines([{"": ""}]),
            as_lines([{}]),
            as_lines([""]),
            as_lines([{"question": "q", "answer": 5, "domain": ""}]),
            as_lines([{"expr": "", "answer": 5}]),
            b"\xef\xbb\xbf\n",
            as_lines([rng.choice(GOOD) | {"program": ""}]),
        ]
    )


def binary(rng: random.Random) -> bytes:
    return b"\n".join(rng.randbytes(rng.randint(1, 80)) for _ in range(rng.randint(1, 3)))


def unicode_text(rng: random.Random) -> bytes:
    question = (
        rng.choice(UNICODE)
        if rng.random() < 0.7
        else "".join(chr(rng.randrange(0x20, 0x2FFFF)) for _ in range(rng.randint(1, 30)))
    )
    question = question.encode("utf-8", "replace").decode("utf-8")  # lone surrogates: not text any file could hold
    return as_lines([{"question": question, "answer": rng.randint(2, 100)}])


def nested(rng: random.Random, depth: int):
    value = 39
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


def deep_nesting(rng: random.Random) -> bytes:
    depth = rng.choice([10, 100, 900, 5000, 100_000])
    if depth > 900:  # json.dumps itself recurses: write the text directly
        return (
            (b'{"question": "q", "answer": ' if rng.random() < 0.5 else b"")
            + b"[" * depth
            + b"39"
            + b"]" * depth
            + b"\n"
        )
    row = dict(rng.choice(GOOD)) | {rng.choice(FIELDS): nested(rng, depth)}
    return as_lines([row])


DATA_FAMILIES = {
    "malformed_json": malformed_json,
    "wrong_types": wrong_types,
    "huge_numbers": huge_numbers,
    "empty_strings": empty_strings,
    "binary": binary,
    "unicode": unicode_text,
    "deep_nesting": deep_nesting,
}


def mutate_json_document(rng: random.Random, text: bytes) -> bytes:
    """A config.json (of a run or a module) or a manifest with one value replaced, a key removed or
    added, or its bytes damaged by a data family's generator."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    how = rng.randrange(4)
    if how == 3 or not isinstance(doc, dict):
        return rng.choice([malformed_json, binary, empty_strings, deep_nesting])(rng)
    paths = []

    def walk(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                paths.append(path + [key])
                walk(value, path + [key])
        elif isinstance(node, list):
            for i, value in enumerate(node):
                paths.append(path + [i])
                walk(value, path + [i])

    walk(doc, [])
    path = rng.choice(paths)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if how == 0:
        parent[path[-1]] = rng.choice(
            ODD_VALUES + [10**40, -(10**40), "x" * 500, nested(rng, 50), "cuda", "/nonexistent"]
        )
    elif how == 1 and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[rng.choice(["extra", "ünïcödé", ""])] = rng.choice(ODD_VALUES)
    return json.dumps(doc).encode()


def damage_safetensors(rng: random.Random, data: bytes) -> bytes:
    how = rng.randrange(4)
    if how == 0:
        return data[: rng.randrange(len(data))]
    if how == 1:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if how == 2:
        return rng.choice([b"", b"\x00" * 8, data[:8], rng.randbytes(64)])
    return b"NAN"  # marker: replaced by a file with NaN / inf weights (see nan_weights)


def nan_weights(rng: random.Random, path: Path) -> bytes:
    """The safetensors file at `path` with one float tensor's entries set to NaN or ±inf."""
    state = load_file(str(path))
    name = rng.choice(sorted(k for k, v in state.items() if v.is_floating_point()))
    tensor = state[name].clone()
    flat = tensor.view(-1)
    flat[rng.randrange(flat.numel())] = rng.choice([float("nan"), float("inf"), float("-inf")])
    if rng.random() < 0.3:
        flat[:] = float("nan")
    tmp = path.with_name(".nan.safetensors")
    save_file(state | {name: tensor}, str(tmp))
    data = tmp.read_bytes()
    tmp.unlink()
    return data
