#include "gpu_usage_view.h"

#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QTableWidget>
#include <QVBoxLayout>

#include "format.h"

namespace studio {

namespace {
enum Column { Gpu, Utilization, Memory, ColumnCount };

QProgressBar* bar(int permille, const QString& text, const QString& color) {
  auto* b = new QProgressBar;
  b->setRange(0, 1000);
  b->setValue(std::clamp(permille, 0, 1000));
  b->setFormat(text);
  b->setAlignment(Qt::AlignCenter);
  b->setStyleSheet(QStringLiteral("QProgressBar { max-height: 16px; } QProgressBar::chunk { background: %1; }")
                       .arg(color));
  return b;
}
}  // namespace

GpuUsageView::GpuUsageView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  table_ = new QTableWidget(0, ColumnCount);
  table_->setHorizontalHeaderLabels({tr("GPU"), tr("Utilization"), tr("Memory in use")});
  table_->verticalHeader()->setVisible(false);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionMode(QAbstractItemView::NoSelection);
  table_->horizontalHeader()->setSectionResizeMode(Gpu, QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(Utilization, QHeaderView::Stretch);
  table_->horizontalHeader()->setSectionResizeMode(Memory, QHeaderView::Stretch);
  table_->verticalHeader()->setDefaultSectionSize(22);
  layout->addWidget(table_);
  note_ = new QLabel;
  note_->setStyleSheet(QStringLiteral("color: #555;"));
  note_->hide();
  layout->addWidget(note_);
}

void GpuUsageView::setUsage(const QList<GpuUsage>& usage) {
  note_->hide();
  table_->show();
  table_->setRowCount(static_cast<int>(usage.size()));
  for (int r = 0; r < usage.size(); ++r) {
    const GpuUsage& u = usage[r];
    table_->setItem(r, Gpu, new QTableWidgetItem(QStringLiteral("%1: %2").arg(u.index).arg(u.name)));
    const QString util = QStringLiteral("%1 %").arg(u.utilization);
    table_->setCellWidget(r, Utilization, bar(u.utilization * 10, util, QStringLiteral("#1f77b4")));
    table_->setItem(r, Utilization, new QTableWidgetItem(util));
    const double frac = u.totalBytes > 0 ? static_cast<double>(u.usedBytes) / static_cast<double>(u.totalBytes) : 0;
    const QString mem = QStringLiteral("%1 / %2").arg(formatBytes(u.usedBytes), formatBytes(u.totalBytes));
    table_->setCellWidget(r, Memory,
                          bar(static_cast<int>(frac * 1000), mem,
                              frac > 0.95 ? QStringLiteral("#b00020") : QStringLiteral("#17becf")));
    table_->setItem(r, Memory, new QTableWidgetItem(mem));
  }
  const int h = table_->horizontalHeader()->height() + 22 * static_cast<int>(std::max<qsizetype>(1, usage.size())) + 4;
  table_->setFixedHeight(h);
}

void GpuUsageView::setUnavailable(const QString& why) {
  table_->hide();
  note_->setText(why);
  note_->show();
}

int GpuUsageView::rowCount() const {
  return table_->rowCount();
}

QString GpuUsageView::cellText(int row, int column) const {
  const QTableWidgetItem* it = table_->item(row, column);
  return it ? it->text() : QString();
}

}  // namespace studio
