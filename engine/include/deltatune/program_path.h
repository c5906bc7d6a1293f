// The running program's file, for finding what is installed beside it (lib/deltatune, share/deltatune).
#pragma once
#include <filesystem>

namespace deltatune {

// Absolute path of the program, also when it was started through the dynamic loader
// (`/lib64/ld-linux-x86-64.so.2 x/usr/bin/deltatune`, where /proc/self/exe names the loader). Empty when
// it cannot be found.
std::filesystem::path program_path();

}  // namespace deltatune
