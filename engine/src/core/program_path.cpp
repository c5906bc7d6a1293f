#include "deltatune/program_path.h"

#include <errno.h>  // program_invocation_name (GNU)

namespace deltatune {

std::filesystem::path program_path() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && exe.filename().string().rfind("ld-linux", 0) != 0) return exe;
  // Started through the loader: it passes the program's path on as argv[0].
  const fs::path arg0 = program_invocation_name ? program_invocation_name : "";
  if (arg0.has_parent_path()) {
    const fs::path p = fs::canonical(arg0, ec);
    if (!ec) return p;
  }
  return {};
}

}  // namespace deltatune
