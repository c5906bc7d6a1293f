#include "gpu_picker.h"

#include <QCheckBox>
#include <QVBoxLayout>
#include <QSignalBlocker>

#include "format.h"

namespace studio {

GpuPicker::GpuPicker(QWidget* parent) : QWidget(parent) {
  row_ = new QVBoxLayout(this);
  row_->setContentsMargins(0, 0, 0, 0);
  row_->setSpacing(2);
  all_ = new QCheckBox(tr("all GPUs of this machine"));
  all_->setObjectName(QStringLiteral("gpus_all"));
  all_->setToolTip(tr("Train data-parallel on every GPU the machine has (gpus: all)"));
  row_->addWidget(all_);
  connect(all_, &QCheckBox::toggled, this, [this](bool on) {
    for (QCheckBox* c : checks_) c->setEnabled(!on);
    emit changed();
  });
  rebuild({0}, {0}, false);
}

QList<int> GpuPicker::shownIndices() const {
  QList<int> out;
  for (const QCheckBox* c : checks_) out << c->property("gpu").toInt();
  return out;
}

void GpuPicker::rebuild(const QList<int>& indices, const QList<int>& checked, bool all) {
  // deleteLater: the Train page may hold signal blockers on the old boxes while it reloads.
  for (QCheckBox* c : checks_) {
    c->hide();
    row_->removeWidget(c);
    c->disconnect(this);
    c->deleteLater();
  }
  checks_.clear();
  QList<int> sorted = indices;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  int pos = 0;
  for (int g : sorted) {
    QString text = tr("GPU %1").arg(g);
    for (const GpuInfo& d : detected_)
      if (d.index == g)
        text = QStringLiteral("%1: %2 (%3%4%5)")
                   .arg(g)
                   .arg(d.name, formatBytes(d.totalBytes), d.arch.isEmpty() ? QString() : ", " + d.arch,
                        d.kernelPath.isEmpty() ? QString() : tr(", %1 kernels").arg(d.kernelPath));
    if (!detected_.isEmpty() && text == tr("GPU %1").arg(g)) text += tr(" (not detected)");
    auto* c = new QCheckBox(text);
    c->setObjectName(QStringLiteral("gpu_%1").arg(g));
    c->setProperty("gpu", g);
    c->setChecked(checked.contains(g));
    c->setEnabled(!all);
    row_->insertWidget(pos++, c);
    connect(c, &QCheckBox::toggled, this, [this, c](bool on) {
      // At least one GPU stays chosen (none would be no choice at all).
      if (!on && checkedGpus().isEmpty()) {
        QSignalBlocker b(c);
        c->setChecked(true);
        return;
      }
      emit changed();
    });
    checks_ << c;
  }
  QSignalBlocker b(all_);
  all_->setChecked(all);
}

void GpuPicker::setDetected(const QList<GpuInfo>& gpus) {
  detected_ = gpus;
  QList<int> indices;
  for (const GpuInfo& g : gpus) indices << g.index;
  const QList<int> checked = checkedGpus();
  for (int g : checked)
    if (!indices.contains(g)) indices << g;
  rebuild(indices, checked, allChecked());
}

void GpuPicker::loadFrom(const deltatune::RunConfig& cfg) {
  QList<int> checked;
  if (!cfg.gpus.empty()) {
    for (int g : cfg.gpus) checked << g;
  } else {
    checked << cfg.gpu;
  }
  QList<int> indices;
  for (const GpuInfo& g : detected_) indices << g.index;
  indices << checked;
  if (checked.isEmpty()) checked << 0;
  rebuild(indices, checked, cfg.gpus_all);
}

void GpuPicker::applyTo(deltatune::RunConfig& cfg) const {
  const QList<int> checked = checkedGpus();
  cfg.gpus_all = allChecked();
  cfg.gpus.clear();
  if (cfg.gpus_all) return;
  if (checked.size() == 1) {
    cfg.gpu = checked.first();  // a one-GPU run keeps the plain `gpu` key
    return;
  }
  for (int g : checked) cfg.gpus.push_back(g);
}

QList<int> GpuPicker::checkedGpus() const {
  QList<int> out;
  for (const QCheckBox* c : checks_)
    if (c->isChecked()) out << c->property("gpu").toInt();
  return out;
}

bool GpuPicker::allChecked() const {
  return all_->isChecked();
}

void GpuPicker::setChecked(int gpu, bool on) {
  for (QCheckBox* c : checks_)
    if (c->property("gpu").toInt() == gpu) c->setChecked(on);
}

void GpuPicker::setAll(bool on) {
  all_->setChecked(on);
}

}  // namespace studio
