// The atomic file writer's leftovers: a killed write's temp file is removed by the next write of the same
// file; temp files of live writers, of other files and of unknown form stay.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "io/files.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;

TEST(IoFiles, AtomicWriteRemovesKilledWritersTempFiles) {
  const fs::path dir = fs::temp_directory_path() / ("dt_io_files_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // a pid that no longer runs
  const std::string dead = std::to_string(child), live = std::to_string(::getppid());
  const fs::path stale = dir / (".x.json.tmp." + dead + ".a1b2c3");
  const fs::path running = dir / (".x.json.tmp." + live + ".a1b2c3");     // its writer may be at work
  const fs::path other_file = dir / (".y.json.tmp." + dead + ".a1b2c3");  // another file's: its own writes
  const fs::path old_form = dir / ".x.json.tmp.a1b2c3";                   // no pid: cannot be judged
  const fs::path huge_pid = dir / ".x.json.tmp.123456789012345678901.a1b2c3";
  for (const fs::path& p : {stale, running, other_file, old_form, huge_pid}) std::ofstream(p) << "partial";

  write_text_file_atomic((dir / "x.json").string(), "{\"ok\": true}");
  EXPECT_EQ(read_text_file((dir / "x.json").string()), "{\"ok\": true}");
  EXPECT_FALSE(fs::exists(stale));
  for (const fs::path& p : {running, other_file, old_form, huge_pid}) EXPECT_TRUE(fs::exists(p)) << p;
  int temps = 0;  // the write's own temp file is gone after commit
  for (const auto& e : fs::directory_iterator(dir))
    temps += e.path().filename().string().rfind(".x.json.tmp." + std::to_string(::getpid()), 0) == 0;
  EXPECT_EQ(temps, 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deltatune
