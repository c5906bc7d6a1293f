// Chat templates rendered byte-identically to HF apply_chat_template, and label masks equal to the
// reference in tests/goldens/chat/make_goldens.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/jinja/template.h"
#include "data/tokenizer.h"
#include "../test_data.h"

namespace deltatune {
namespace {

using ojson = nlohmann::ordered_json;
const std::string kChatDir = std::string(DT_SOURCE_DIR) + "/tests/goldens/chat/";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::map<std::string, std::string> kTemplateFiles = {{"qwen3", "qwen3_template.jinja"},
                                                           {"qwen3_5", "qwen3_5_reconstructed.jinja"},
                                                           {"chatml", "chatml.jinja"},
                                                           {"llama3_style", "llama3_style.jinja"},
                                                           {"features", "features.jinja"}};

const ChatTemplate& template_named(const std::string& name) {
  static std::map<std::string, std::unique_ptr<ChatTemplate>> cache;
  auto& slot = cache[name];
  // Special tokens as the Qwen3 tokenizer_config gives them to HF (eos and pad only).
  if (!slot)
    slot = std::make_unique<ChatTemplate>(slurp(kChatDir + kTemplateFiles.at(name)), "<|im_end|>", "",
                                          "<|endoftext|>", "", name);
  return *slot;
}

std::vector<ojson> load_cases() {
  std::ifstream f(kChatDir + "chat_goldens.jsonl");
  std::vector<ojson> out;
  std::string line;
  while (std::getline(f, line)) out.push_back(ojson::parse(line));
  return out;
}

ChatOptions options_of(const ojson& c) {
  ChatOptions o;
  o.add_generation_prompt = c["kwargs"].value("add_generation_prompt", false);
  if (c["kwargs"].contains("enable_thinking")) o.enable_thinking = c["kwargs"]["enable_thinking"].get<bool>();
  return o;
}

TEST(DataChat, RendersLikeHF) {
  const auto cases = load_cases();
  ASSERT_GT(cases.size(), 100u);
  std::map<std::string, std::pair<int, int>> per_template;  // identical, total
  for (const auto& c : cases) {
    const std::string name = c["template"].get<std::string>();
    const auto& tpl = template_named(name);
    auto& stats = per_template[name];
    ++stats.second;
    if (c.contains("error")) {
      EXPECT_THROW(tpl.render(c["messages"], c["tools"], options_of(c)), Error)
          << name << " " << c["messages"].dump();
      ++stats.first;
      continue;
    }
    std::string got;
    try {
      got = tpl.render(c["messages"], c["tools"], options_of(c));
    } catch (const Error& e) {
      ADD_FAILURE() << name << ": " << e.what() << "\n" << c["messages"].dump();
      continue;
    }
    if (got == c["text"].get<std::string>())
      ++stats.first;
    else
      EXPECT_EQ(got, c["text"].get<std::string>()) << name << " kwargs=" << c["kwargs"].dump() << "\n"
                                                   << c["messages"].dump();
  }
  for (const auto& [name, s] : per_template) {
    std::cout << "[ chat ] " << name << ": " << s.first << "/" << s.second << " renders identical\n";
    EXPECT_EQ(s.first, s.second) << name;
  }
}

void check_labels(const Tokenizer& tok, const std::string& prefix) {
  int checked = 0;
  for (const auto& c : load_cases()) {
    if (!c.contains(prefix + "_labels")) continue;
    const auto& tpl = template_named(c["template"].get<std::string>());
    const auto enc =
        chat_encode(tok, tpl, c["messages"], c["tools"], options_of(c), /*train_on_inputs=*/false);
    EXPECT_EQ(enc.text, c["text"].get<std::string>());
    EXPECT_EQ(enc.ids, c[prefix + "_ids"].get<std::vector<int32_t>>())
        << c["template"] << " " << c["messages"].dump();
    EXPECT_EQ(enc.labels, c[prefix + "_labels"].get<std::vector<int32_t>>())
        << c["template"] << " " << c["messages"].dump();
    const auto all =
        chat_encode(tok, tpl, c["messages"], c["tools"], options_of(c), /*train_on_inputs=*/true);
    EXPECT_EQ(all.labels, all.ids);
    ++checked;
  }
  EXPECT_GT(checked, 50);
  std::cout << "[ chat ] " << prefix << ": " << checked << " label masks compared\n";
}

TEST(DataChat, LabelMasksMatchReferenceTinyTokenizer) {
  check_labels(Tokenizer::from_file(std::string(DT_SOURCE_DIR) + "/tests/goldens/tokenizer/tiny_qwen.json"),
               "tiny");
}

TEST(DataChat, LabelMasksMatchReferenceQwen3Tokenizer) {
  const std::string path = test_data::qwen3_tokenizer();
  if (const auto why = test_data::missing(path, "DT_QWEN3_TOKENIZER"); !why.empty()) GTEST_SKIP() << why;
  check_labels(Tokenizer::from_file(path), "qwen3");
}

TEST(DataChat, AssistantSpanIsContentThroughImEnd) {
  const auto tok =
      Tokenizer::from_file(std::string(DT_SOURCE_DIR) + "/tests/goldens/tokenizer/tiny_qwen.json");
  const auto& tpl = template_named("chatml");
  const ojson msgs = ojson::parse(R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Yo"}])");
  const auto enc = chat_encode(tok, tpl, msgs, nullptr, {}, false);
  std::string trained;
  for (size_t i = 0; i < enc.ids.size(); ++i)
    if (enc.labels[i] != -100) trained += tok.decode({enc.ids[i]});
  EXPECT_EQ(trained, "Yo<|im_end|>");
}

std::string render_src(const std::string& src, const ojson& ctx = ojson::object()) {
  jinja::Dict d;
  jinja::Template t(src, "t");
  (void)ctx;
  return t.render(jinja::Value::dict(std::move(d)));
}

TEST(DataChat, UnsupportedConstructsNameTheConstructAndLine) {
  auto expect_error = [](const std::string& src, const std::string& needle) {
    try {
      render_src(src);
      ADD_FAILURE() << "no error for " << src;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("line1\n{% include 'x' %}", "'{% include %}'");
  expect_error("\n\n{% include 'x' %}", "line 3");
  expect_error("{{ x | frobnicate }}", "filter 'frobnicate'");
  expect_error("{{ 1 is frob }}", "test 'frob'");
  expect_error("{% if x %}", "endif");
  expect_error("{{ raise_exception('boom') }}", "boom");
  expect_error("{{ undefined_thing.attr }}", "'undefined_thing' is undefined");
  expect_error("{% set x = 1 %}{% set x.y = 2 %}", "not a namespace");
}

TEST(DataChat, WhitespaceControlMatchesJinja) {
  // Expected strings from jinja2 with trim_blocks/lstrip_blocks (as HF configures it).
  EXPECT_EQ(render_src("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");
  EXPECT_EQ(render_src("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(render_src("{{ 'x' }}  {% if true %}y{% endif %}"), "x  y");
  EXPECT_EQ(render_src("  {%+ if true %}y{% endif %}"), "  y");
  EXPECT_EQ(render_src("{# c #}\nz"), "z");
}

TEST(DataChat, FiltersAndMarkupMatchJinja) {
  // Expected strings from jinja2 in HF's environment (ImmutableSandboxedEnvironment, trim/lstrip_blocks, HF's
  // tojson): select/reject/map start with `if value:`, so none or '' give an empty sequence (functionary's
  // `tools | selectattr(...)` with tools = none), and Markup (|safe, |escape) + a plain string HTML-escapes
  // the plain one, while `~` joins as plain strings.
  EXPECT_EQ(render_src("{{ (none | selectattr('type', 'equalto', 'x') | list | length) ~ "
                       "(none | map('upper') | list | length) ~ ('' | reject | list | length) }}"),
            "000");
  EXPECT_EQ(render_src("{{ \"Use '\"|safe + 'a\"b' + \"'\\n\"|safe + {'k': '<v>'}|tojson }}"),
            "Use 'a&#34;b'\n{&#34;k&#34;: &#34;&lt;v&gt;&#34;}");
  EXPECT_EQ(render_src("{{ 'x' ~ '<'|safe ~ '&' }}"), "x<&");
  EXPECT_EQ(render_src("{{ ('<a>'|safe).upper() + '<' }}|{{ ('<'|safe|trim) + '>' }}|{{ '<'|escape + '&' }}|"
                       "{{ 'a' + '<b>'|safe }}"),
            "<A>&lt;|<&gt;|&lt;&amp;|a<b>");
}

TEST(DataChat, ReprTestsAndFiltersMatchJinjaEdgeCases) {
  // Expected strings from HF apply_chat_template (found by fuzzing expressions against it). repr() escapes
  // what str.isprintable() rejects (Zs but the space, Zl/Zp, Cc, Cf such as ZWJ, Co), as printing a list or
  // dict shows it; `is lower/upper` is str(value).islower()/isupper(); round keeps ints; |title starts words
  // after - ( [ { < and whitespace only (str.title() does after any non-letter); |wordcount counts \w+ runs;
  // round is Python's (half to even). The template source keeps U+2028/U+0085 (jinja2 3 breaks lines at \r,
  // \n).
  EXPECT_EQ(render_src("{{ ['a\u00a0b', 'c\u3000', 'z\u200dw', '\u2028', '\u0085', '\U0001F600'] }}|"
                       "{{ {'k': '\ue000'} }}"),
            "['a\\xa0b', 'c\\u3000', 'z\\u200dw', '\\u2028', '\\x85', '\U0001F600']|{'k': '\\ue000'}");
  EXPECT_EQ(render_src("{{ 1|lower is lower }}{{ 'ab1' is lower }}{{ 'AB' is upper }}{{ '' is upper }}"
                       "{{ [1] is lower }}"),
            "FalseTrueTrueFalseFalse");
  EXPECT_EQ(render_src("{{ 3|round }} {{ true|round(2) }} {{ 2.5|round }} {{ 7|round(1, 'floor') }}"),
            "3 1 2.0 7.0");
  EXPECT_EQ(render_src("{{ \"o'neil-smith (x) [y] {z} <w> tab\tcase\"|title }}|{{ {'k': 1}|title }}|"
                       "{{ \"o'neil\".title() }}"),
            "O'neil-Smith (X) [Y] {Z} <W> Tab\tCase|{'k': 1}|O'Neil");
  EXPECT_EQ(render_src("{{ 'a.b,c d_e'|wordcount }} {{ []|wordcount }} {{ ''|wordcount }}"), "4 0 0");
  EXPECT_EQ(render_src("{{ undefined_name is callable }}"), "True");
}

TEST(DataChat, StringLiteralsUsePythonEscapes) {
  // jinja2 decodes literals with Python's unicode-escape; unknown escapes stay as written.
  EXPECT_EQ(render_src(R"({{ '\u00e9\x41\n\t\\ \d' }})"),
            "\xC3\xA9"
            "A\n\t\\ \\d");
  EXPECT_EQ(render_src(R"({{ "it's" ~ 'say "hi"' }})"),
            "it's"
            "say \"hi\"");
  EXPECT_THROW(render_src(R"({{ '\xZZ' }})"), Error);
}

}  // namespace
}  // namespace deltatune
