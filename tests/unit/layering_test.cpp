// The repository's structural rules, checked on the source tree (docs/ARCHITECTURE.md "Layers and folders"):
// app/ and ui/ use only the public engine API; no getenv in kernels/ or engine/src/model/; engine folders
// include only folders below them; every "spec §" citation names a section that exists in docs/.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "io/files.h"

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = DT_SOURCE_DIR;

bool is_source(const fs::path& p) {
  static const std::set<std::string> exts = {".cpp", ".h", ".cu", ".cuh", ".hpp", ".cc"};
  return exts.count(p.extension().string()) > 0;
}

std::vector<fs::path> sources_under(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && is_source(e.path())) out.push_back(e.path());
  return out;
}

std::string read_all(const fs::path& p) { return deltatune::read_text_file(p.string()); }

// Quoted and angle includes of a file, in order.
std::vector<std::string> includes_of(const fs::path& p) {
  static const std::regex re(R"(^\s*#\s*include\s*["<]([^">]+)[">])");
  std::vector<std::string> out;
  std::istringstream in(read_all(p));
  std::string line;
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_search(line, m, re)) out.push_back(m[1]);
  return out;
}

std::string rel(const fs::path& p) { return fs::relative(p, kRoot).string(); }

}  // namespace

TEST(Layering, AppAndUiIncludeOnlyThePublicEngineApi) {
  std::vector<std::string> bad;
  for (const char* top : {"app", "ui"})
    for (const fs::path& f : sources_under(kRoot / top))
      for (const std::string& inc : includes_of(f)) {
        if (inc.rfind("deltatune/", 0) == 0) continue;
        if (fs::exists(f.parent_path() / inc) || fs::exists(kRoot / "ui" / inc)) continue;  // its own files
        if (fs::exists(kRoot / "engine/src" / inc) || fs::exists(kRoot / "kernels" / inc))
          bad.push_back(rel(f) + " includes " + inc);
      }
  EXPECT_TRUE(bad.empty()) << "app/ and ui/ may include only engine/include/deltatune/ headers (add a public "
                              "API function instead):\n  "
                           << testing::PrintToString(bad);
}

// Files allowed to call getenv there: none (issue 28 retired the last environment switches). Kept as a list so
// a file that must be waived is named here, in review, rather than silently.
const std::set<std::string> kGetenvAllowList = {};

TEST(Layering, NoGetenvInKernelsOrModel) {
  static const std::regex re(R"(\bgetenv\s*\()");
  std::vector<std::string> bad, stale;
  std::set<std::string> calling;
  for (const fs::path& dir : {kRoot / "kernels", kRoot / "engine/src/model"})
    for (const fs::path& f : sources_under(dir))
      if (std::regex_search(read_all(f), re)) calling.insert(rel(f));
  for (const std::string& f : calling)
    if (!kGetenvAllowList.count(f)) bad.push_back(f);
  for (const std::string& f : kGetenvAllowList)
    if (!calling.count(f)) stale.push_back(f);
  EXPECT_TRUE(bad.empty()) << "getenv in kernels/ or engine/src/model/ (settings come from the run config or the "
                              "KernelPolicy):\n  "
                           << testing::PrintToString(bad);
  EXPECT_TRUE(stale.empty()) << "no longer call getenv: remove them from kGetenvAllowList:\n  "
                             << testing::PrintToString(stale);
}

// The engine's layers, lowest first (docs/ARCHITECTURE.md). A folder includes only its own headers, the
// public API (deltatune/) and folders before it in this list, so no two folders include each other.
const std::vector<std::string> kEngineLayers = {"core",  "io",    "quant",  "backend", "vision", "data",
                                                "lora",  "model", "decode", "store",   "dist",   "train", "generate"};

TEST(Layering, EngineFoldersIncludeOnlyLowerLayers) {
  const fs::path src = kRoot / "engine/src";
  std::map<std::string, size_t> rank;
  for (size_t i = 0; i < kEngineLayers.size(); ++i) rank[kEngineLayers[i]] = i;
  std::vector<std::string> bad, unknown;
  for (const auto& e : fs::directory_iterator(src)) {
    if (!e.is_directory()) continue;
    const std::string from = e.path().filename().string();
    if (!rank.count(from)) {
      unknown.push_back(from);
      continue;
    }
    for (const fs::path& f : sources_under(e.path()))
      for (const std::string& inc : includes_of(f)) {
        const size_t slash = inc.find('/');
        if (slash == std::string::npos) continue;
        const std::string to = inc.substr(0, slash);
        if (!rank.count(to) || !fs::exists(src / inc)) continue;  // public API, kernels, system headers
        if (rank[to] > rank[from]) bad.push_back(rel(f) + " (" + from + ") includes " + inc + " (" + to + ")");
      }
  }
  EXPECT_TRUE(unknown.empty()) << "engine/src folders missing from kEngineLayers (place them in the order):\n  "
                               << testing::PrintToString(unknown);
  EXPECT_TRUE(bad.empty()) << "an engine folder includes a higher layer (order: core, io, quant, backend, vision, data, "
                              "lora, model, decode, store, dist, train, generate):\n  "
                           << testing::PrintToString(bad);
}

TEST(Layering, PublicHeadersIncludeOnlyPublicHeaders) {
  std::vector<std::string> bad;
  for (const fs::path& f : sources_under(kRoot / "engine/include/deltatune"))
    for (const std::string& inc : includes_of(f))
      if (fs::exists(kRoot / "engine/src" / inc)) bad.push_back(rel(f) + " includes " + inc);
  EXPECT_TRUE(bad.empty()) << testing::PrintToString(bad);
}

namespace {

// Section numbers ("3", "3.4") of the markdown headings of a docs/ file: "## 3. Forward", "### 3.4 Gated".
std::set<std::string> sections_of(const fs::path& md) {
  static const std::regex re(R"(^#{1,6}\s+([0-9]+(?:\.[0-9]+)*)\.?\s)");
  std::set<std::string> out;
  std::istringstream in(read_all(md));
  std::string line;
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_search(line, m, re)) out.insert(m[1]);
  return out;
}

}  // namespace

// "spec §3.4" cites docs/qwen3_5.md; "peft-adapter.md §6.2" (or "peft-adapter §6") cites docs/peft-adapter.md.
TEST(Docs, SpecCitationsNameSectionsInDocs) {
  const fs::path model_spec = kRoot / "docs/qwen3_5.md", peft_spec = kRoot / "docs/peft-adapter.md";
  ASSERT_TRUE(fs::exists(model_spec)) << model_spec;
  ASSERT_TRUE(fs::exists(peft_spec)) << peft_spec;
  const std::set<std::string> model_sections = sections_of(model_spec), peft_sections = sections_of(peft_spec);
  static const std::regex cite(R"(([A-Za-z0-9_./-]*)\s*§\s*([0-9]+(?:\.[0-9]+)*))");
  std::vector<std::string> bad;
  int checked = 0;
  for (const char* top : {"engine", "kernels", "app", "ui", "tests", "bench", "dev"})
    for (const fs::path& f : sources_under(kRoot / top)) {
      const std::string text = read_all(f);
      for (auto it = std::sregex_iterator(text.begin(), text.end(), cite); it != std::sregex_iterator(); ++it) {
        const std::string doc = (*it)[1], sec = (*it)[2];
        const bool peft = doc.find("peft-adapter") != std::string::npos;
        const bool spec = doc == "spec" || doc == "Spec" || doc.find("qwen3_5.md") != std::string::npos;
        if (!peft && !spec) continue;  // "§" of something else (a paper, a continued "of §4" list)
        ++checked;
        // A cited path ("docs/peft-adapter.md") must be this repository's, not a folder outside it.
        if (doc.find('/') != std::string::npos && !fs::exists(kRoot / doc))
          bad.push_back(rel(f) + ": " + it->str() + " (no file " + doc + " in the repository: cite docs/...)");
        if (!(peft ? peft_sections : model_sections).count(sec))
          bad.push_back(rel(f) + ": " + it->str() + " (no section " + sec + " in " +
                        (peft ? "docs/peft-adapter.md" : "docs/qwen3_5.md") + ")");
      }
    }
  EXPECT_GT(checked, 0) << "found no citations at all: the pattern no longer matches the code";
  EXPECT_TRUE(bad.empty()) << testing::PrintToString(bad);
}
