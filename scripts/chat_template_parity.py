"""Chat-template parity: renders every *.jinja in a folder with jinja2 configured as HF transformers'
apply_chat_template does (ImmutableSandboxedEnvironment, trim/lstrip_blocks, loopcontrols, {% generation %},
HF's tojson, raise_exception, strftime_now) and with `deltatune tokenize --chat`, over a set of conversations
(tools, tool calls with dict and string arguments, content parts, reasoning, several turns, enable_thinking),
with and without the generation prompt, and prints every difference.
  python3 scripts/chat_template_parity.py BUILD/app/deltatune TEMPLATE_DIR   (needs jinja2)
Known, intended differences: reasoning under "reasoning_content" is also visible to templates as "thinking"
(chat_template.h), and templates that make Python raise (e.g. tojson of a generator) may render here.
"""
import glob, json, os, shutil, subprocess, sys, tempfile
from datetime import datetime
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import Extension
from jinja2 import nodes

BIN = sys.argv[1]
TEMPLATES = sys.argv[2]
TOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "goldens", "tokenizer", "tiny_qwen.json")

class AssistantTracker(Extension):
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)
    def _render(self, caller):
        return caller()

def env():
    def raise_exception(message): raise jinja2.exceptions.TemplateError(message)
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    def strftime_now(fmt): return datetime.now().strftime(fmt)
    e = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    e.filters["tojson"] = tojson
    e.globals["raise_exception"] = raise_exception
    e.globals["strftime_now"] = strftime_now
    return e

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City"},
                                                          "unit": {"type": "string", "enum": ["c", "f"]}},
                         "required": ["city"]}}}]
S = {"role": "system", "content": "You are helpful."}
U = lambda c: {"role": "user", "content": c}
A = lambda c: {"role": "assistant", "content": c}
CONVS = [
    ("basic", [U("Hi!"), A("Hello!")], None),
    ("system", [S, U("What is 2+2?"), A("4"), U("And 3+3?"), A("6")], None),
    ("parts", [{"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "text", "text": " this."}]},
               A("Sure.")], None),
    ("tools", [S, U("Weather in Paris?"),
               {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
               {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21}"},
               A("It is 21 °C.")], TOOLS),
    ("reasoning", [U("Think."), {"role": "assistant", "content": "Answer.", "reasoning_content": "Let me think."}], None),
    ("think_inline", [U("Q"), A("<think>\nhmm\n</think>\n\nA")], None),
    ("unicode", [U("多语言 👋 e\u0301\n  spaced  "), A("  ok\n")], None),
    ("tool_args_str", [U("Weather?"), {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}, A("Sunny.")], TOOLS),
    ("image", [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}, A("A cat.")], None),
    ("three_turns", [U("a"), A("b"), U("c"), A("d"), U("e"), A("f")], None),
]
KW = [{}, {"enable_thinking": False}]

def main():
    e = env()
    work = tempfile.mkdtemp(prefix="dt_chat_parity_"); shutil.rmtree(work, ignore_errors=True); os.makedirs(work)
    total = bad = 0
    for path in sorted(glob.glob(os.path.join(TEMPLATES, "*.jinja"))):
        name = os.path.basename(path)[:-6]
        src = open(path, encoding="utf-8").read()
        d = os.path.join(work, name); os.makedirs(d)
        shutil.copy(TOK, os.path.join(d, "tokenizer.json"))
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "chat_template": src}, open(os.path.join(d, "tokenizer_config.json"), "w"))
        try:
            tpl = e.from_string(src)
        except Exception as ex:
            print(f"{name}: jinja2 cannot compile: {ex}"); continue
        for (cname, msgs, tools), kw in [(c, k) for c in CONVS for k in KW]:
            if kw and cname not in ("basic", "reasoning", "three_turns"): continue
            for agp in (False, True):
                total += 1
                try:
                    ref = tpl.render(messages=msgs, tools=tools, documents=None, add_generation_prompt=agp,
                                     bos_token="<s>", eos_token="</s>", **kw)
                    rerr = None
                except Exception as ex:
                    ref, rerr = None, f"{type(ex).__name__}: {ex}"
                line = json.dumps({"messages": msgs, "tools": tools, "add_generation_prompt": agp, **kw})
                r = subprocess.run([BIN, "tokenize", "--model", d, "--chat", "--train-on-inputs"], input=line.encode(),
                                   capture_output=True, timeout=60)
                ours, oerr = None, None
                if r.returncode == 0:
                    try: ours = json.loads(r.stdout.decode().splitlines()[0])["text"]
                    except Exception as ex: oerr = "bad output: " + r.stdout.decode()[:200]
                else:
                    oerr = r.stderr.decode().strip()[:300]
                ok = (ref is not None and ours == ref) or (ref is None and ours is None)
                if not ok:
                    bad += 1
                    print(f"--- {name} / {cname} / agp={agp} {kw}")
                    if rerr: print("  HF error:", rerr[:200])
                    if oerr: print("  our error:", oerr)
                    if ref is not None and ours is not None:
                        k = next((i for i, (a, b) in enumerate(zip(ref, ours)) if a != b), min(len(ref), len(ours)))
                        print("  first diff at", k, "\n  ref:", repr(ref[max(0, k - 60):k + 60]), "\n  our:", repr(ours[max(0, k - 60):k + 60]))
    shutil.rmtree(work, ignore_errors=True)
    print(f"{total - bad}/{total} identical")
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main())
