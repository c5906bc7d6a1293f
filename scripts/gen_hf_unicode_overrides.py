"""Generates engine/src/data/hf_unicode_overrides.h: where Hugging Face `tokenizers` and our tokenizer's utf8proc
disagree about Unicode, measured against `tokenizers` itself (not looked up).

1. kNormalizerInert: code points HF's normalizers (NFC/NFD/NFKC/NFKD; the `unicode-normalization-alignments`
   crate, whose tables are several Unicode versions older than utf8proc 2.8's Unicode 15) treat as unassigned:
   combining class 0, no decomposition, composing with nothing. utf8proc knows them (e.g. U+1AC6 has combining
   class 230, U+1FBF0 a compatibility decomposition to "0", U+11935 U+11930 compose to U+11938), so normalizing
   "\\U00011F42\\u20EA" reorders the two marks in utf8proc but not in HF. The tokenizer normalizes the text in
   pieces around each of these code points and copies them as they are, which is exactly HF's behaviour for an
   unassigned starter. U+11A7 (Hangul T_base) is added by hand: utf8proc < 2.9 composes an LV syllable with it
   and drops it, while it really is an inert starter.
2. kWordCharOverrides: HF's single_word added tokens test the neighbours with Rust regex `\\w` (Alphabetic, marks,
   decimal digits, connector punctuation, ZWNJ/ZWJ); the tokenizer uses utf8proc's categories L, M, Nd, Nl, Pc
   plus U+200C/U+200D, and these ranges where that rule and Rust's `\\w` differ (Other_Alphabetic symbols such as
   circled letters, characters newer than Unicode 15).

The generated table is checked before it is written: a Python model of the C++ normalizer (utf8proc through ctypes,
split at the inert code points) must equal HF on every probe string and every canonical composition pair.
  python3 scripts/gen_hf_unicode_overrides.py   (needs `pip install tokenizers` and libutf8proc.so.2)
"""
import ctypes
import os
import random
import sys

from tokenizers import AddedToken, Tokenizer, __version__ as tokenizers_version, models, normalizers

OUT = os.path.join(os.path.dirname(__file__), "..", "engine", "src", "data", "hf_unicode_overrides.h")
HAND_INERT = {0x11A7}  # utf8proc < 2.9 bug, see above

lib = ctypes.CDLL(os.environ.get("DT_UTF8PROC", "libutf8proc.so.2"))
libc = ctypes.CDLL(None)
libc.free.argtypes = [ctypes.c_void_p]


class Prop(ctypes.Structure):  # leading fields of utf8proc_property_t
    _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16),
                ("bidi_class", ctypes.c_int16), ("decomp_type", ctypes.c_int16)]


lib.utf8proc_get_property.restype = ctypes.POINTER(Prop)
lib.utf8proc_version.restype = ctypes.c_char_p
FORMS = []
for name in ("NFC", "NFD", "NFKC", "NFKD"):
    f = getattr(lib, "utf8proc_" + name)
    f.restype = ctypes.c_void_p
    f.argtypes = [ctypes.c_char_p]
    FORMS.append(f)
HF = [normalizers.NFC(), normalizers.NFD(), normalizers.NFKC(), normalizers.NFKD()]
CPS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def u8p(form, s):
    if not s:
        return s
    p = form(s.encode())
    r = ctypes.string_at(p).decode()
    libc.free(p)
    return r


def prop(c):
    return lib.utf8proc_get_property(c).contents


def ranges_of(sorted_cps, key=lambda c: None):
    out = []
    for c in sorted_cps:
        if out and out[-1][1] == c - 1 and out[-1][2] == key(c):
            out[-1][1] = c
        else:
            out.append([c, c, key(c)])
    return out


def probes(c):
    return [(c,), (c, 0x334), (c, 0x301), (c, 0x345), (0x301, c), (0x334, c), (0x61, c), (0x61, c, 0x301),
            (0x61, 0x301, c), (0x1100, 0x1161, c), (0xAC00, c)]


def model(form, s, inert):  # the C++ normalizer: pieces around inert code points
    out, cur = [], []
    for ch in s:
        if ord(ch) in inert:
            out.append(u8p(form, "".join(cur)))
            out.append(ch)
            cur = []
        else:
            cur.append(ch)
    out.append(u8p(form, "".join(cur)))
    return "".join(out)


def measure_inert():
    differ = set()
    for c in CPS:
        p = prop(c)
        if p.category == 0 or c == 0:  # unassigned in utf8proc: inert on both sides; NUL: no C string
            continue
        for s in probes(c) if (p.combining_class or u8p(FORMS[3], chr(c)) != chr(c)) else [(c,)]:
            t = "".join(map(chr, s))
            if any(u8p(f, t) != h.normalize_str(t) for f, h in zip(FORMS, HF)):
                differ.add(c)
    inert = set(differ) | HAND_INERT
    for c in differ:  # components of compositions HF does not know (U+11938 -> U+11935 U+11930)
        d = u8p(FORMS[1], chr(c))
        if d != chr(c) and all(prop(ord(x)).combining_class == 0 for x in d):
            inert |= {ord(x) for x in d if u8p(FORMS[3], x) == x}
    return inert


def check_inert(inert):
    texts = []
    for c in inert:
        texts += ["".join(map(chr, s)) for s in probes(c)]
    for c in CPS:  # every canonical pair utf8proc composes, alone and with a trailing mark
        d = u8p(FORMS[1], chr(c))
        if len(d) == 2 and u8p(FORMS[0], d) == chr(c):
            texts += [d, d + "\u0301", d[0] + "\u0334" + d[1]]
    rnd = random.Random(0)
    pool = sorted(inert) + [0x61, 0x301, 0x334, 0x316, 0x1100, 0x1161, 0x11A8, 0xAC00, 0x3099, 0x304B, 0x6F22]
    texts += ["".join(chr(rnd.choice(pool)) for _ in range(rnd.randint(1, 8))) for _ in range(20000)]
    bad = [t for t in texts if any(model(f, t, inert) != h.normalize_str(t) for f, h in zip(FORMS, HF))]
    if bad:
        sys.exit(f"{len(bad)} strings still differ from HF, e.g. {[hex(ord(x)) for x in bad[0]]}")
    return len(texts)


def measure_word():
    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.add_tokens([AddedToken("Z", single_word=True, normalized=False)])
    zid = tok.token_to_id("Z")
    word = {}
    for i in range(0, len(CPS), 50000):
        chunk = CPS[i:i + 50000]
        before = tok.encode_batch([chr(c) + "Z" for c in chunk], add_special_tokens=False)
        after = tok.encode_batch(["Z" + chr(c) for c in chunk], add_special_tokens=False)
        for c, b, a in zip(chunk, before, after):
            w = zid not in b.ids
            if w != (zid not in a.ids):
                sys.exit(f"U+{c:04X} is a word character on one side of the token only")
            word[c] = w

    def rule(c):  # mirrors is_word_char in tokenizer.cpp: L*, M*, Nd, Nl, Pc (categories 1..10, 12), ZWNJ, ZWJ
        cat = prop(c).category
        return 1 <= cat <= 10 or cat == 12 or c in (0x200C, 0x200D)

    return ranges_of([c for c in CPS if word[c] != rule(c)], key=lambda c: word[c])


def main():
    inert = measure_inert()
    n_checked = check_inert(inert)
    words = measure_word()
    inert_rows = "\n".join(f"    {{0x{a:05X}, 0x{b:05X}}}," for a, b, _ in ranges_of(sorted(inert)))
    word_rows = "\n".join(f"    {{0x{a:05X}, 0x{b:05X}, {'true' if w else 'false'}}}," for a, b, w in words)
    version = lib.utf8proc_version().decode()
    with open(OUT, "w") as f:
        f.write(f"""// Generated by scripts/gen_hf_unicode_overrides.py (tokenizers {tokenizers_version}, utf8proc {version}):
// where Hugging Face `tokenizers` and utf8proc disagree about Unicode (see the script). Do not edit.
#pragma once

namespace deltatune {{

struct CodePointRange {{
  char32_t first, last;
}};

// Code points HF's normalizers treat as unassigned (class 0, no decomposition, no composition) while utf8proc
// does not: the text is normalized in pieces around them and they are copied as they are.
// clang-format off
inline constexpr CodePointRange kNormalizerInert[] = {{
{inert_rows}
}};
// clang-format on

struct WordCharOverride {{
  char32_t first, last;
  bool word;
}};

// Where Rust regex \\w (HF's single_word test) differs from the rule L, M, Nd, Nl, Pc, U+200C, U+200D on
// utf8proc's categories.
// clang-format off
inline constexpr WordCharOverride kWordCharOverrides[] = {{
{word_rows}
}};
// clang-format on

}}  // namespace deltatune
""")
    print(f"{len(inert)} inert code points (model checked on {n_checked} strings), {len(words)} word-char ranges "
          f"-> {OUT}")


if __name__ == "__main__":
    main()
