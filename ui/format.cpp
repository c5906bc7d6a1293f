#include "format.h"

#include <cmath>

namespace studio {

QString formatBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? QString("%1 B").arg(bytes) : QString("%1 %2").arg(v, 0, 'f', v < 10 ? 2 : 1).arg(units[u]);
}

QString formatCount(int64_t n) {
  const double v = static_cast<double>(n);
  if (std::fabs(v) >= 1e9) return QString("%1 B").arg(v / 1e9, 0, 'f', 2);
  if (std::fabs(v) >= 1e6) return QString("%1 M").arg(v / 1e6, 0, 'f', 2);
  if (std::fabs(v) >= 1e4) return QString("%1 K").arg(v / 1e3, 0, 'f', 1);
  return QString::number(n);
}

QString formatDuration(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return QStringLiteral("—");
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return QString("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60, 2, 10, QChar('0'));
  if (s >= 60) return QString("%1 min %2 s").arg(s / 60).arg(s % 60, 2, 10, QChar('0'));
  return QString("%1 s").arg(s);
}

QString formatLoss(double v) {
  return v < 0 ? QStringLiteral("—") : QString::number(v, 'f', 4);
}

}  // namespace studio
