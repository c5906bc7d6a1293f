// A compact table of the GPUs: utilization and memory in use as bars, one row per GPU (Monitor page).
#pragma once
#include <QList>
#include <QWidget>

#include "gpu_usage.h"

class QLabel;
class QTableWidget;

namespace studio {

class GpuUsageView : public QWidget {
  Q_OBJECT
 public:
  explicit GpuUsageView(QWidget* parent = nullptr);

  void setUsage(const QList<GpuUsage>& usage);
  void setUnavailable(const QString& why);  // no nvidia-smi: one line instead of the table
  int rowCount() const;
  QString cellText(int row, int column) const;  // tests: "45 %", "12.0 GiB / 80.0 GiB"

 private:
  QTableWidget* table_;
  QLabel* note_;
};

}  // namespace studio
