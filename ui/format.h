// Human-readable numbers for labels and tables.
#pragma once
#include <QString>
#include <cstdint>

namespace studio {

QString formatBytes(int64_t bytes);      // "1.5 GiB"
QString formatCount(int64_t n);          // "1.23 M", "950"
QString formatDuration(double seconds);  // "1 h 02 min", "3 min 05 s", "12 s"
QString formatLoss(double v);            // "2.345" or "—" when < 0

}  // namespace studio
