"""Seeded random texts that stress tokenizers: mixed scripts, whitespace runs, numbers, emoji
sequences, code, contractions, special-token text and broken UTF-8."""

from __future__ import annotations

import random

WORDS = ["the", "Hello", "world", "tokenizer", "don't", "I'm", "you're", "THEY'LL", "we've",
         "it'S", "she'd", "l'homme", "naïve", "café", "Straße", "Ærø", "İstanbul", "ǅemal",
         "ﬁnance", "ＡＢＣ", "x", "a", "Z", "llama.cpp", "GGUF", "e.g.", "U.S.A."]
SCRIPTS = {
    "cjk": (
        "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之"
        "过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如"
        "前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其"
        "种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政"
        "海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比"
        "住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司"
        "利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统"
        "色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权"
        "往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江"
        "语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改"
        "议形委早房音火际则首单手"
    ),
    "kana": (
        "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれ"
        "ろわをんアイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨ"
        "ラリルレロワヲンー"
    ),
    "cyrillic": (
        "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯіїєґ"
    ),
    "arabic": (
        "ابتثجحخدذرزسشصضطظعغفقكلمنهويًٌٍَُِّْ٠١٢٣٤٥٦٧٨٩،؟"
    ),
    "devanagari": (
        "अआइईउऊऋएऐओऔकखगघङचछजझञटठडढणतथदधनपफबभमयरलवशषसहािीुूेैोौंः्०१२३४५६७८९।"
    ),
    "thai": (
        "กขฃคฅฆงจฉชซฌญฎฏฐฑฒณดตถทธนบปผฝพฟภมยรลวศษสหฬอฮัิีึืุู็่้๊๋๐๑๒๓๔๕๖๗๘๙"
    ),
    "hangul": (
        "가나다라마바사아자차카타파하한국어글각간갇갈감갑값강개객거건걸검겁것게겨격견결겸경계"
        "고곡곤골곰곱곳공과관광괴교구국군굴궁권귀규균그극근글금급기긴길김깊"
    ),
    "greek": (
        "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩάέήίόύώ"
    ),
    "latin_ext": (
        "àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿĀāĂăĄąĆćČčĎďĐđĒēĘęĚěĞğĪīİıŁłŃńŇňŌōŐőŒœŘřŚśŞşŠšŢţŤťŪūŮ"
        "ůŰűŸŹźŻżŽžƒǎǐǒǔ"
    ),
    "math": (
        "∀∂∃∅∇∈∉∋∏∑−∓∕∗∘√∝∞∠∧∨∩∪∫∴∼≅≈≠≡≤≥⊂⊃⊆⊇⊕⊗⊥⋅𝐀𝐁𝐂𝑎𝑏𝑐𝔸𝔹ℂℕℝ½¼¾²³¹⁰ⁿ₀₁₂"
    ),
}
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\t\t", "    ",
          "\u00a0", "\u2002", "\u2003", "\u2009", "\u200a", "\u3000", "\u2028", "\u2029",
          "\u0085", "\u1680", "\u202f", "\u205f", "\x0b", "\x0c", " \t \n", "\u200b"]
EMOJI = ["😀", "😂", "🦙", "🚀", "✅", "❤️", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "😶‍🌫️",
         "🇺🇸", "🇯🇵", "1️⃣", "#️⃣", "🤷🏻‍♀️", "🧑🏿‍🚀", "☕", "⭐", "🎉", "💯", "🔥", "🙏🏼"]
CODE = ["def f(x):\n    return x**2\n", "if (a && b) { c++; }", "for i in range(10):",
        "<div class=\"x\">", "</div>", "x = [1, 2, 3]", "SELECT * FROM t WHERE id=1;",
        "#include <stdio.h>", "console.log(`${a}`);", "a->b", "::", "!==", "/* c */", "// note",
        "{\"key\": \"value\"}", "$HOME/.cache", "~/x", "^_^", "a|b", "@user", "100%", "x+=1"]
PUNCT = list(".,!?;:'\"()[]{}<>-_=+*/\\|@#$%^&~`…—–“”‘’«»¿¡·•、。，！？：；（）《》「」【】")
CONTROL = ["\x00", "\x01", "\x07", "\x08", "\x1b", "\x1c", "\x1f", "\x7f", "\u200c", "\u200d",
           "\ufeff", "\u200e", "\u200f", "\u202e", "\ufffd", "\ufffe", "\uffff", "\ue000",
           "\U000f0000", "\u0378", "\U000e0001", "\u0300", "\u0301\u0302", "\u20dd", "\U0001f3fb"]
BAD_UTF8 = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80",
            b"\xed\xbf\xbf", b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff", b"\xe0\x80\x80",
            b"\xc2\x41", b"\xe4\xb8", b"\x9f\x98\x80"]
SPECIAL_TEXT = ["<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "<s>", "</s>",
                "<|endoftext|>", "<bos>", "<eos>", "<unk>", "<pad>", "<mask>", "[CLS]", "[SEP]",
                "[MASK]", "<|eot_id|>", "<|begin_of_text|>", "<|end|>", "<|user|>", "<unused0>",
                "<|fim_prefix|>", "<0x0A>", "<|im_start|>user\n", "<start_of_turn>model\n"]


def _number(rng: random.Random) -> str:
    k = rng.choice([1, 2, 3, 4, 5, 7, 10, 16, 25])
    s = "".join(rng.choice("0123456789") for _ in range(k))
    return rng.choice([s, s, "-" + s, s + "." + s[:3], "1,234,567", "3.14159", "0x1F", "1e-9"])


def _script_run(rng: random.Random) -> str:
    alphabet = SCRIPTS[rng.choice(list(SCRIPTS))]
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))


def _piece(rng: random.Random, specials: list[str]) -> str | bytes:
    r = rng.random()
    if r < 0.22:
        return rng.choice(WORDS)
    if r < 0.40:
        return _script_run(rng)
    if r < 0.55:
        return rng.choice(SPACES)
    if r < 0.62:
        return _number(rng)
    if r < 0.69:
        return rng.choice(EMOJI)
    if r < 0.75:
        return rng.choice(CODE)
    if r < 0.82:
        return "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 3)))
    if r < 0.86:
        return rng.choice(CONTROL)
    if r < 0.89:
        return rng.choice(BAD_UTF8)
    if r < 0.96:
        return rng.choice(specials or SPECIAL_TEXT)
    return chr(rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF),
                           rng.randint(0x3000, 0xD7FF), rng.randint(0xE000, 0xFFFD),
                           rng.randint(0x10000, 0x10FFFF)]))


def random_text(rng: random.Random, specials: list[str] | None = None,
                max_pieces: int = 24) -> bytes:
    """One random text as bytes (possibly invalid UTF-8, never with code points past U+10FFFF)."""
    specials = list(SPECIAL_TEXT) + list(specials or [])
    out = bytearray()
    for _ in range(rng.randint(0, max_pieces)):
        p = _piece(rng, specials)
        out += p if isinstance(p, bytes) else p.encode("utf-8")
        if rng.random() < 0.3:
            out += b" "
    return bytes(out)


def random_texts(seed: int, n: int, specials: list[str] | None = None,
                 max_pieces: int = 24) -> list[bytes]:
    rng = random.Random(seed)
    return [random_text(rng, specials, max_pieces) for _ in range(n)]
