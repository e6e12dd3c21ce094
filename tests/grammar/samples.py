"""One string each of llama.cpp's grammars/*.gbnf should accept, a few hundred characters long."""

from __future__ import annotations

import json

_OBJ = {"name": "llamacpy", "version": [0, 3, 36], "ok": True, "none": None,
        "nested": {"c": -12.5e3, "s": "quote \" backslash \\ accent \u00e9 newline \n"},
        "list": [1, 2, 3, {"k": "v"}] * 5}

GBNF_SAMPLES = {
    "arithmetic.gbnf": "".join(f"x{i} +(y *3) -4/z = {i}\n" for i in range(20)),
    "c.gbnf": ("int main(){int x = 1;while(x<10){x = x+1;}// count\n"
               "for(i = 0; i<10; i = i+1){y = f(x, 2*i);}/* done */return x;}") * 3,
    "chess.gbnf": "1. e4 e5\n" + "".join(f"{i}. Nf3 Nc6\n" for i in range(2, 40)),
    "english.gbnf": ("Hello, world! This is a test of the english grammar; "
                     "it has (some) punctuation. " * 4).strip(),
    "japanese.gbnf": "これは日本語のテストです。カタカナも、漢字も。" * 10,
    "json.gbnf": json.dumps(_OBJ),
    "json_arr.gbnf": "[\n" + ",\n".join(json.dumps(x) for x in _OBJ["list"]) + "]",
    "list.gbnf": "".join(f"- item number {i}\n" for i in range(30)),
}
