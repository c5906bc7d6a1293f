// libFuzzer: safetensors files (8-byte length + JSON header + data), opened through the real mmap reader
// from an in-memory file. Bad input must end in deltatune::Error; every tensor of a file that opens must
// be readable within the mapping (ASan catches reads past it).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  try {
    deltatune::SafetensorsFile f("/proc/self/fd/" + std::to_string(fd));
    volatile unsigned char sink = 0;
    for (const auto& e : f.entries()) {
      const deltatune::Tensor t = f.get(e.name);
      const auto* bytes = static_cast<const unsigned char*>(t.data);
      for (size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ bytes[i];
    }
  } catch (const deltatune::Error&) {
  }
  close(fd);
  return 0;
}
