// Is the process that owns a run still alive? A pid alone is not enough: after a reboot, or after the pid
// wrapped around, the same number names another process. So a run records the machine, the boot and the
// process start time next to its pid.
#pragma once
#include <cstdint>
#include <string>

namespace deltatune {

std::string host_id();  // /etc/machine-id, else the host name
std::string boot_id();  // /proc/sys/kernel/random/boot_id, "" where there is none
// Start time of `pid` since boot in clock ticks (/proc/<pid>/stat field 22), "" when unknown.
std::string process_start_time(int64_t pid);

enum class ProcessState { Alive, Dead, Unknown };

// Unknown when the run was started on another machine (its pid means nothing here).
ProcessState process_state(int64_t pid, const std::string& host, const std::string& boot,
                           const std::string& start_time);

}  // namespace deltatune
