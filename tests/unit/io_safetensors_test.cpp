#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("dt_io_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A raw safetensors file: 8-byte length (or `declared_len` when >= 0), header text, data bytes.
std::string raw_file(const std::string& header, size_t data_bytes, int64_t declared_len = -1) {
  const uint64_t n = declared_len >= 0 ? static_cast<uint64_t>(declared_len) : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\x01');
}

// Expects SafetensorsFile(path) to throw an Error whose message names the file and contains `what`.
void expect_open_error(const std::string& path, const std::string& what) {
  try {
    SafetensorsFile f(path);
    FAIL() << "no error for " << path << " (expected one mentioning '" << what << "')";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message must be one line: " << msg;
  }
}

Tensor filled(Shape shape, DType dt, int seed) {
  Tensor t = host_tensor(std::move(shape), dt);
  auto* p = static_cast<unsigned char*>(t.data);
  for (size_t i = 0; i < t.nbytes(); ++i)
    p[i] = static_cast<unsigned char>((i * 31 + static_cast<size_t>(seed)) & 0xff);
  return t;
}

TEST(IoSafetensors, RoundTripAllDtypesAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"z.u8", filled({3, 5}, DType::U8, 1)},      {"a.bf16", filled({7}, DType::BF16, 2)},
      {"m.f32", filled({2, 3, 4}, DType::F32, 3)}, {"h.f16", filled({1, 9}, DType::F16, 4)},
      {"i.i32", filled({4}, DType::I32, 5)},       {"l.i64", filled({2, 2}, DType::I64, 6)},
      {"scalar", filled({}, DType::F32, 7)},       {"empty", filled({0, 4}, DType::F32, 8)}};
  safetensors_write(path, tensors, {{"note", "hello"}});

  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "hello");
  ASSERT_EQ(f.entries().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(f.has(name)) << name;
    Tensor r = f.get(name);
    EXPECT_EQ(r.dtype, t.dtype) << name;
    EXPECT_EQ(r.shape, t.shape) << name;
    ASSERT_EQ(r.nbytes(), t.nbytes()) << name;
    EXPECT_EQ(std::memcmp(r.data, t.data, t.nbytes()), 0) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data) % dtype_size(r.dtype), 0u) << name << " misaligned";
  }
  EXPECT_FALSE(f.has("nope"));
  EXPECT_THROW(f.get("nope"), Error);

  // Writer layout per docs/peft-adapter.md §7.4: N multiple of 8, __metadata__ first, then alignment desc, name asc.
  const std::string bytes = read_text_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"", 0), 0u) << header;
  const std::vector<std::string> order = {"l.i64",  "empty",  "i.i32", "m.f32",
                                          "scalar", "a.bf16", "h.f16", "z.u8"};
  size_t pos = 0;
  for (const auto& name : order) {
    const size_t at = header.find("\"" + name + "\"");
    ASSERT_NE(at, std::string::npos) << name;
    EXPECT_GT(at, pos) << name << " out of order in " << header;
    pos = at;
  }
  // No temp file left next to it.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
}

TEST(IoSafetensors, TensorsKeepMappingAlive) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  Tensor src = filled({16}, DType::F32, 9);
  safetensors_write(path, {{"w", src}});
  Tensor t;
  {
    SafetensorsFile f(path);
    t = f.get("w");
  }
  EXPECT_EQ(std::memcmp(t.data, src.data, src.nbytes()), 0);
}

TEST(IoSafetensors, OverwriteReplacesWholeFile) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  safetensors_write(path, {{"a", filled({100}, DType::F32, 1)}});
  safetensors_write(path, {{"b", filled({2}, DType::BF16, 2)}});
  SafetensorsFile f(path);
  EXPECT_FALSE(f.has("a"));
  EXPECT_EQ(f.entry("b").shape, (Shape{2}));
}

TEST(IoSafetensors, WriteRejectsDuplicateNames) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  EXPECT_THROW(
      safetensors_write(path, {{"a", filled({1}, DType::F32, 0)}, {"a", filled({1}, DType::F32, 0)}}), Error);
  EXPECT_FALSE(fs::exists(path));
}

TEST(IoSafetensors, WriteIntoMissingFolderNamesPath) {
  TempDir dir;
  const std::string path = dir.file("no/such/folder/t.safetensors");
  try {
    safetensors_write(path, {{"a", filled({1}, DType::F32, 0)}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// Disk full: a file-size limit makes write() fail with EFBIG mid-file, as ENOSPC would. Runs in a child
// process so the limit and the ignored SIGXFSZ do not leak into other tests (we run as root, so a
// read-only folder would not fail).
TEST(IoSafetensors, DiskFullLeavesNoPartialFile) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim {
      4096, 4096
    };
    ::setrlimit(RLIMIT_FSIZE, &lim);
    int code = 10;
    try {
      safetensors_write(path, {{"big", filled({1 << 16}, DType::F32, 0)}});
    } catch (const Error& e) {
      code = std::string(e.what()).find(path) != std::string::npos ? 0 : 11;
    } catch (...) {
      code = 12;
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no error, 11: error without the path, 12: wrong exception";
  EXPECT_TRUE(fs::is_empty(dir.path())) << "partial or temp file left behind";
}

TEST(IoSafetensors, CorruptFilesNameTheFileAndProblem) {
  TempDir dir;
  const std::string ok_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  struct Case {
    std::string name, bytes, expect;
  };
  const std::vector<Case> cases = {
      {"empty.safetensors", "", "shorter than the 8-byte"},
      {"short.safetensors", std::string(5, '\0'), "shorter than the 8-byte"},
      {"huge_n.safetensors", raw_file(ok_header, 8, 200'000'000), "exceeds the safetensors limit"},
      {"past_eof.safetensors", raw_file(ok_header, 8, 5000), "runs past the end of the file"},
      {"bad_json.safetensors", raw_file(R"({"a":{"dtype":"F32",)", 8), "not valid JSON"},
      {"not_object.safetensors", raw_file("[1,2]", 0), "does not start with '{'"},
      {"truncated.safetensors", raw_file(ok_header, 5), "truncated"},
      {"trailing.safetensors", raw_file(ok_header, 12), "trailing bytes"},
      {"dtype.safetensors", raw_file(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8),
       "unsupported dtype 'F64'"},
      {"neg_shape.safetensors", raw_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       "non-negative"},
      {"wrong_size.safetensors", raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "expected 12"},
      {"overlap.safetensors",
       raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                12),
       "overlaps"},
      {"hole.safetensors",
       raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
                20),
       "hole"},
      {"not_at_zero.safetensors", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "hole"},
      {"meta.safetensors", raw_file(R"({"__metadata__":{"x":1}})", 0), "__metadata__"},
      {"dup.safetensors",
       raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                8),
       "twice"},
      {"offsets.safetensors", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
       "data_offsets"},
      {"missing.safetensors", raw_file(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", 8), "shape"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.file(c.name);
    write_bytes(path, c.bytes);
    expect_open_error(path, c.expect);
  }
  expect_open_error(dir.file("absent.safetensors"), "cannot open");
  // Tensor-level errors also name the tensor.
  write_bytes(dir.file("t.safetensors"),
              raw_file(R"({"weird":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8));
  expect_open_error(dir.file("t.safetensors"), "'weird'");
  // A valid hand-made file with an unpadded header opens (copy path for misaligned data).
  write_bytes(dir.file("ok.safetensors"),
              raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8));
  SafetensorsFile ok(dir.file("ok.safetensors"));
  EXPECT_EQ(ok.get("a").numel(), 2);
}

void write_index(const std::string& path, const std::map<std::string, std::string>& weight_map) {
  nlohmann::json j;
  j["metadata"]["total_size"] = 0;
  j["weight_map"] = weight_map;
  write_bytes(path, j.dump());
}

TEST(IoCheckpointReader, ShardedAndSingle) {
  TempDir dir;
  Tensor a = filled({4}, DType::F32, 1), b = filled({2, 2}, DType::BF16, 2), c = filled({3}, DType::F32, 3);
  safetensors_write(dir.file("model-00001-of-00002.safetensors"), {{"a", a}, {"b", b}});
  safetensors_write(dir.file("model-00002-of-00002.safetensors"), {{"c", c}});
  write_index(dir.file("model.safetensors.index.json"), {{"a", "model-00001-of-00002.safetensors"},
                                                         {"b", "model-00001-of-00002.safetensors"},
                                                         {"c", "model-00002-of-00002.safetensors"}});
  CheckpointReader r(dir.path().string());
  EXPECT_TRUE(r.sharded());
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(r.files(), (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                 "model-00002-of-00002.safetensors"}));
  EXPECT_EQ(r.file_of("c"), "model-00002-of-00002.safetensors");
  EXPECT_EQ(r.entry("b").dtype, DType::BF16);
  Tensor got = r.get("c");
  EXPECT_EQ(std::memcmp(got.data, c.data, c.nbytes()), 0);
  EXPECT_THROW(r.get("d"), Error);

  fs::remove(dir.file("model.safetensors.index.json"));
  fs::remove(dir.file("model-00002-of-00002.safetensors"));
  fs::rename(dir.file("model-00001-of-00002.safetensors"), dir.file("model.safetensors"));
  CheckpointReader s(dir.path().string());
  EXPECT_FALSE(s.sharded());
  EXPECT_EQ(s.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s.files(), (std::vector<std::string>{"model.safetensors"}));
}

void expect_reader_error(const std::string& dir, const std::string& what1, const std::string& what2) {
  try {
    CheckpointReader r(dir);
    FAIL() << "no error (expected '" << what1 << "')";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(what1), std::string::npos) << msg;
    EXPECT_NE(msg.find(what2), std::string::npos) << msg;
  }
}

TEST(IoCheckpointReader, ShardErrors) {
  TempDir dir;
  const std::string d = dir.path().string();
  expect_reader_error(d, "no model.safetensors", d);
  expect_reader_error(dir.file("nope"), "not a folder", "nope");

  safetensors_write(dir.file("model-00001-of-00002.safetensors"), {{"a", filled({4}, DType::F32, 1)}});
  write_index(dir.file("model.safetensors.index.json"),
              {{"a", "model-00001-of-00002.safetensors"}, {"c", "model-00002-of-00002.safetensors"}});
  expect_reader_error(d, "model-00002-of-00002.safetensors", "missing");

  write_index(dir.file("model.safetensors.index.json"),
              {{"a", "model-00001-of-00002.safetensors"}, {"zz", "model-00001-of-00002.safetensors"}});
  expect_reader_error(d, "'zz'", "model-00001-of-00002.safetensors");

  write_bytes(dir.file("model.safetensors.index.json"), "{\"weight_map\": ");
  expect_reader_error(d, "model.safetensors.index.json", "not valid JSON");
}

}  // namespace
}  // namespace deltatune
