"""Chat-template goldens from HF transformers `apply_chat_template` (+ label masks by the reference below).

  DT_QWEN3_DIR=<folder of Qwen3's tokenizer.json and tokenizer_config.json> python tests/goldens/chat/make_goldens.py

Writes chat_goldens.jsonl; one line per (template, conversation, options):
  {"template", "messages", "tools", "kwargs", "text" | "error", and for conversations without
   add_generation_prompt: "tiny_ids"/"tiny_labels" (tests/goldens/tokenizer/tiny_qwen.json) and
   "qwen3_ids"/"qwen3_labels" (the real Qwen3 tokenizer)}.
Templates: qwen3 (real, from ../shared/data/tokenizers/qwen3/tokenizer_config.json), qwen3_5
(qwen3_5_reconstructed.jinja: written from the spec, NOT the official file), chatml, llama3_style, features.

Label reference (the same definition the engine implements, computed here with HF rendering and
`tokenizers` offsets): F = render(all messages). For assistant message i: H = render(messages[:i]),
G = render(messages[:i], add_generation_prompt=True); header = first line (through "\n") of G[len(H):].
The content starts after the header: at len(H) + len(header) when F starts with H + header, else at the
first occurrence of header in F after the previous assistant span. Trained tokens: from the first token
starting at or after that offset through the first special added token (e.g. <|im_end|>), inclusive, and
never past the turn's end: len(render(messages[:i+1])) when F starts with it (an end marker that is not a
special token in this tokenizer, e.g. <|eot_id|> with a Qwen vocabulary, must not train the next turns).
"""
import json
import os
import sys

from tokenizers import Tokenizer
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN3_DIR = os.environ.get("DT_QWEN3_DIR") or sys.exit("set DT_QWEN3_DIR to the folder of Qwen3's tokenizer files")
TINY = os.path.join(HERE, "..", "tokenizer", "tiny_qwen.json")


def read(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return f.read()


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city, in °C.",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}, "days": {"type": "integer"}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Web search",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
]

S = {"role": "system", "content": "You are a helpful assistant."}
CONVS = [
    [S, {"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": "6"},
     {"role": "user", "content": "Thanks"}, {"role": "assistant", "content": "You're welcome."}],
    [{"role": "user", "content": "Think first."},
     {"role": "assistant", "content": "Answer A.", "reasoning_content": "Let me think.\nStep 1."},
     {"role": "user", "content": "Again"},
     {"role": "assistant", "content": "Answer B.", "reasoning_content": "Thinking more."}],
    [{"role": "user", "content": "Inline think"},
     {"role": "assistant", "content": "<think>\nhidden reasoning\n</think>\n\nVisible answer."}],
    [S, {"role": "user", "content": "  padded content with spaces  \n"},
     {"role": "assistant", "content": "\n\n  answer with leading newlines  "}],
    [{"role": "user", "content": "多语言：你好 👋 مرحبا नमस्ते\ttab"}, {"role": "assistant", "content": "Привет! ✓ e\u0301"}],
    [{"role": "user", "content": "Empty reply please"}, {"role": "assistant", "content": ""}],
    [{"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": "",
      "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
     {"role": "tool", "content": "{\"temp\": 21}"},
     {"role": "assistant", "content": "It is 21 °C in Paris."}],
    [{"role": "user", "content": "Two tools"},
     {"role": "assistant", "content": "Let me check both.", "reasoning_content": "Need two calls.",
      "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
                     {"type": "function", "function": {"name": "search", "arguments": {"q": "Oslo news", "tags": ["a", "b"], "opts": {"n": 3}}}}]},
     {"role": "tool", "content": "cold"}, {"role": "tool", "content": "nothing new"},
     {"role": "assistant", "content": "Cold and quiet."},
     {"role": "user", "content": "ok"}, {"role": "assistant", "content": "Bye"}],
    [{"role": "user", "content": "Only a question"}],
    [S, {"role": "user", "content": "Q"}, {"role": "assistant", "content": "A <|im_start|> literal? no: just text"}],
    [{"role": "user", "content": "code:\n```python\ndef f():\n    return 1\n```"},
     {"role": "assistant", "content": "```python\nprint('hi')\n```\n"}],
]
MM_CONV = [{"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "image"}, {"type": "text", "text": " please"}]},
           {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}]


def main():
    hf = AutoTokenizer.from_pretrained(QWEN3_DIR)
    qwen3_tok = Tokenizer.from_file(os.path.join(QWEN3_DIR, "tokenizer.json"))
    tiny_tok = Tokenizer.from_file(TINY)
    templates = {"qwen3": hf.chat_template, "qwen3_5": read("qwen3_5_reconstructed.jinja"),
                 "chatml": read("chatml.jinja"), "llama3_style": read("llama3_style.jinja"),
                 "features": read("features.jinja")}

    def render(tpl, msgs, tools, agp, kw):
        return hf.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=agp,
                                      chat_template=tpl, **kw)

    def labels_for(tok, tpl, msgs, tools, kw):
        full = render(tpl, msgs, tools, False, kw)
        headers, prefixes, turn_ends = [], [], []
        for i, m in enumerate(msgs):
            if m["role"] != "assistant":
                continue
            turn_end = len(full)  # where the conversation through this turn ends, when it renders as a prefix
            if i + 1 < len(msgs):
                try:
                    r = render(tpl, msgs[:i + 1], tools, False, kw)
                    if full.startswith(r):
                        turn_end = len(r)
                except Exception:
                    pass
            turn_ends.append(turn_end)
            try:
                h = render(tpl, msgs[:i], tools, False, kw)
                g = render(tpl, msgs[:i], tools, True, kw)
            except Exception:
                headers.append(None), prefixes.append(None)
                continue
            header = None
            if g.startswith(h) and len(g) > len(h):
                d = g[len(h):]
                nl = d.find("\n")
                header = d[:nl + 1] if nl >= 0 else d
            headers.append(header), prefixes.append(h)
        default = next((h for h in headers if h), None)
        enc = tok.encode(full, add_special_tokens=False)
        ids, offs = enc.ids, enc.offsets
        special = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
        trained = [False] * len(ids)
        search_from = 0
        for h, header, turn_end in zip(prefixes, headers, turn_ends):
            header = header or default
            if header is None:
                raise RuntimeError("cannot find assistant header")
            if h is not None and full.startswith(h + header):
                s = len(h) + len(header)
            else:
                k = full.find(header, search_from)
                if k < 0:
                    raise RuntimeError("assistant header not found")
                s = k + len(header)
            t = next((t for t in range(len(ids)) if offs[t][0] >= s), len(ids))
            end_char = turn_end
            while t < len(ids) and offs[t][0] < turn_end:
                trained[t] = True
                if ids[t] in special:
                    end_char = offs[t][1]
                    break
                t += 1
            search_from = end_char
        return ids, [i if tr else -100 for i, tr in zip(ids, trained)]

    cases = []
    for name in ["qwen3", "qwen3_5", "chatml", "llama3_style", "features"]:
        convs = CONVS + ([MM_CONV] if name == "qwen3_5" else [])
        for ci, conv in enumerate(convs):
            simple = all(isinstance(m.get("content"), str) and "tool_calls" not in m and m["role"] != "tool" for m in conv)
            if name in ("chatml", "features") and not simple:
                continue
            option_sets = [({}, False), ({}, True), ({"enable_thinking": False}, True)]
            if ci in (0, 2, 7):
                option_sets.append(({"enable_thinking": False}, False))
            for tools in ([None, TOOLS] if ci in (0, 7) and name in ("qwen3", "qwen3_5", "llama3_style") else [None]):
                for kw, agp in option_sets:
                    case = {"template": name, "messages": conv, "tools": tools, "kwargs": dict(kw, add_generation_prompt=agp)}
                    try:
                        case["text"] = render(templates[name], conv, tools, agp, kw)
                    except Exception as e:  # the engine must fail too
                        case["error"] = f"{type(e).__name__}: {e}"
                    if "text" in case and not agp and conv[-1]["role"] == "assistant" and name != "features":
                        case["tiny_ids"], case["tiny_labels"] = labels_for(tiny_tok, templates[name], conv, tools, kw)
                        case["qwen3_ids"], case["qwen3_labels"] = labels_for(qwen3_tok, templates[name], conv, tools, kw)
                    cases.append(case)
    # Error cases.
    cases.append({"template": "qwen3_5", "messages": [{"role": "robot", "content": "x"}], "tools": None,
                  "kwargs": {"add_generation_prompt": False}})
    cases.append({"template": "qwen3_5", "messages": [], "tools": None, "kwargs": {"add_generation_prompt": False}})
    for c in cases[-2:]:
        try:
            c["text"] = render(templates[c["template"]], c["messages"], None, False, {})
        except Exception as e:
            c["error"] = f"{type(e).__name__}: {e}"
    with open(os.path.join(HERE, "chat_goldens.jsonl"), "w", encoding="utf-8") as f:
        for c in cases:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    with open(os.path.join(HERE, "qwen3_template.jinja"), "w", encoding="utf-8") as f:
        f.write(hf.chat_template)
    print(f"{len(cases)} cases, {sum('error' in c for c in cases)} errors, "
          f"{sum('tiny_labels' in c for c in cases)} with labels")


if __name__ == "__main__":
    main()
