#include "grid_dialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QGridLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>
#include <exception>

namespace studio {

QString runsText(int n) {
  return n == 1 ? QObject::tr("1 run") : QObject::tr("%1 runs").arg(n);
}

GridDialog::GridDialog(const deltatune::RunConfig& base, QWidget* parent) : QDialog(parent), base_(base) {
  setWindowTitle(tr("Queue a grid of runs"));
  auto* outer = new QVBoxLayout(this);
  auto* intro = new QLabel(tr("Every combination of the values below becomes one queued run of the current "
                              "settings, with its own name and output folder. Separate values with commas."));
  intro->setWordWrap(true);
  outer->addWidget(intro);
  auto* grid = new QGridLayout;
  grid->addWidget(new QLabel(tr("<b>Key</b>")), 0, 0);
  grid->addWidget(new QLabel(tr("<b>Values</b>")), 0, 1);
  for (int i = 0; i < kAxes; ++i) {
    auto* key = new QComboBox;
    key->setObjectName(QStringLiteral("grid_key_%1").arg(i));
    key->addItem(tr("(none)"), QString());
    for (const QString& k : sweepableKeys()) key->addItem(k, k);
    auto* values = new QLineEdit;
    values->setObjectName(QStringLiteral("grid_values_%1").arg(i));
    values->setPlaceholderText(i == 0 ? tr("e.g. 1e-4, 2e-4, 5e-4") : QString());
    grid->addWidget(key, i + 1, 0);
    grid->addWidget(values, i + 1, 1);
    keys_ << key;
    values_ << values;
    connect(key, &QComboBox::currentIndexChanged, this, &GridDialog::updatePreview);
    connect(values, &QLineEdit::textChanged, this, &GridDialog::updatePreview);
  }
  grid->setColumnStretch(1, 1);
  outer->addLayout(grid);
  count_ = new QLabel;
  outer->addWidget(count_);
  error_ = new QLabel;
  error_->setWordWrap(true);
  error_->setStyleSheet(QStringLiteral("color: #b00020;"));
  outer->addWidget(error_);
  preview_ = new QListWidget;
  outer->addWidget(preview_, 1);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
  ok_ = buttons->button(QDialogButtonBox::Ok);
  outer->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  // The usual first sweep, ready to edit.
  setAxis(0, QStringLiteral("learning_rate"), QString());
  setAxis(1, QStringLiteral("lora_r"), QString());
  resize(640, 480);
  updatePreview();
}

void GridDialog::setAxis(int i, const QString& key, const QString& values) {
  if (i < 0 || i >= kAxes) return;
  keys_[i]->setCurrentIndex(std::max(0, keys_[i]->findData(key)));
  values_[i]->setText(values);
}

QList<SweepAxis> GridDialog::axes() const {
  QList<SweepAxis> out;
  for (int i = 0; i < kAxes; ++i) {
    const QString key = keys_[i]->currentData().toString();
    const QStringList vs = parseSweepValues(values_[i]->text());
    if (key.isEmpty() || vs.isEmpty()) continue;
    out.append({key, vs});
  }
  return out;
}

QString GridDialog::errorText() const {
  return error_->text();
}

void GridDialog::updatePreview() {
  runs_.clear();
  preview_->clear();
  error_->clear();
  const QList<SweepAxis> a = axes();
  try {
    if (!a.isEmpty()) runs_ = expandSweep(base_, a);
  } catch (const std::exception& e) {
    error_->setText(QString::fromUtf8(e.what()));
    runs_.clear();
  }
  for (const SweepRun& r : runs_)
    preview_->addItem(QStringLiteral("%1   →   %2").arg(r.name, QString::fromStdString(r.config.output_dir)));
  count_->setText(a.isEmpty() ? tr("Pick a key and type its values.")
                              : tr("<b>%1</b> will be queued.").arg(runsText(static_cast<int>(runs_.size()))));
  ok_->setText(tr("Queue %1").arg(runsText(static_cast<int>(runs_.size()))));
  ok_->setEnabled(!runs_.isEmpty());
}

}  // namespace studio
