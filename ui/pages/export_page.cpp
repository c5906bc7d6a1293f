#include "pages/export_page.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QRadioButton>
#include <QVBoxLayout>
#include <exception>

#include "app_settings.h"
#include "background_task.h"
#include "deltatune/export.h"

namespace studio {

ExportPage::ExportPage(AppSettings* settings, QWidget* parent) : QWidget(parent), settings_(settings) {
  auto* outer = new QVBoxLayout(this);
  auto* what = new QGroupBox(tr("What to export"));
  auto* form = new QFormLayout(what);
  auto* runRow = new QHBoxLayout;
  run_ = new QComboBox;
  run_->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
  auto* refreshButton = new QPushButton(tr("Refresh"));
  runRow->addWidget(run_, 1);
  runRow->addWidget(refreshButton);
  form->addRow(tr("Run"), runRow);
  source_ = new QComboBox;
  form->addRow(tr("Checkpoint / adapter"), source_);
  baseModel_ = new QLineEdit;
  baseModel_->setPlaceholderText(tr("base checkpoint folder (needed for merging and key names)"));
  form->addRow(tr("Base model"), baseModel_);
  outer->addWidget(what);

  auto* how = new QGroupBox(tr("Format"));
  auto* howForm = new QFormLayout(how);
  adapter_ = new QRadioButton(tr("PEFT adapter (adapter_config.json + adapter_model.safetensors)"));
  merged_ = new QRadioButton(tr("Merged full checkpoint (base weights + LoRA, bf16 safetensors)"));
  adapter_->setChecked(true);
  howForm->addRow(adapter_);
  howForm->addRow(merged_);
  modelClass_ = new QComboBox;
  modelClass_->addItem(tr("auto (as the base checkpoint)"), "auto");
  modelClass_->addItem(tr("AutoModelForCausalLM / Qwen3_5ForCausalLM (text only)"), "causal_lm");
  modelClass_->addItem(tr("Qwen3_5ForConditionalGeneration (vision-language)"), "conditional_generation");
  modelClass_->setToolTip(
      tr("Adapter key names differ between the two Hugging Face classes; an adapter "
         "for one class loads only partly into the other."));
  howForm->addRow(tr("Load with"), modelClass_);
  auto* outRow = new QHBoxLayout;
  outDir_ = new QLineEdit(settings_->lastExportDir());
  auto* browse = new QPushButton(tr("Browse…"));
  outRow->addWidget(outDir_, 1);
  outRow->addWidget(browse);
  howForm->addRow(tr("Output folder"), outRow);
  outer->addWidget(how);

  auto* go = new QHBoxLayout;
  exportButton_ = new QPushButton(tr("Export"));
  progress_ = new QProgressBar;
  progress_->setRange(0, 1000);
  progress_->setValue(0);
  progress_->setFormat(QStringLiteral("%p%"));
  go->addWidget(exportButton_);
  go->addWidget(progress_, 1);
  outer->addLayout(go);
  status_ = new QLabel;
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  outer->addWidget(status_);
  outer->addStretch();

  connect(refreshButton, &QPushButton::clicked, this, &ExportPage::refresh);
  connect(run_, &QComboBox::currentIndexChanged, this, &ExportPage::onRunChanged);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, tr("Output folder"), outDir_->text());
    if (!d.isEmpty()) setOutputDir(d);
  });
  connect(exportButton_, &QPushButton::clicked, this, &ExportPage::startExport);
}

ExportPage::~ExportPage() = default;

QString ExportPage::statusText() const {
  return status_->text();
}

deltatune::ExperimentStore* ExportPage::store() {
  return store_.open(settings_->databasePath());
}

void ExportPage::refresh() {
  const QString keep = run_->currentData().toString();
  QSignalBlocker block(run_);
  run_->clear();
  try {
    for (const auto& r : store()->list_runs()) {
      const QString label =
          QString("%1 — %2 (%3 steps)")
              .arg(QString::fromStdString(r.name.empty() ? r.id : r.name), QString::fromStdString(r.status))
              .arg(r.steps);
      run_->addItem(label, QString::fromStdString(r.id));
    }
  } catch (const std::exception& e) {
    status_->setText(tr("Cannot read the experiment database: %1").arg(QString::fromUtf8(e.what())));
  }
  const int i = run_->findData(keep);
  run_->setCurrentIndex(i >= 0 ? i : 0);
  onRunChanged();
}

void ExportPage::selectRun(const QString& runId) {
  if (run_->findData(runId) < 0) refresh();
  run_->setCurrentIndex(run_->findData(runId));
}

void ExportPage::setOutputDir(const QString& dir) {
  outDir_->setText(dir);
}
void ExportPage::setMerged(bool merged) {
  (merged ? merged_ : adapter_)->setChecked(true);
}

void ExportPage::onRunChanged() {
  source_->clear();
  const std::string id = run_->currentData().toString().toStdString();
  if (id.empty()) return;
  try {
    const auto rec = store()->find_run(id);
    if (rec) {
      baseModel_->setText(QString::fromStdString(rec->model));
      if (outDir_->text().isEmpty() && !rec->output_dir.empty())
        outDir_->setText(QString::fromStdString(rec->output_dir) + QStringLiteral("/export"));
    }
    auto artifacts = store()->artifacts(id);
    // Newest first: the usual choice is the last checkpoint.
    std::reverse(artifacts.begin(), artifacts.end());
    for (const auto& a : artifacts) {
      if (a.kind == "merged") continue;
      source_->addItem(QString("%1 @ step %2 — %3")
                           .arg(QString::fromStdString(a.kind))
                           .arg(a.step)
                           .arg(QString::fromStdString(a.path)),
                       QString::fromStdString(a.path));
    }
    if (source_->count() == 0) status_->setText(tr("This run has no checkpoint or adapter yet."));
  } catch (const std::exception& e) {
    status_->setText(QString::fromUtf8(e.what()));
  }
}

bool ExportPage::startExport() {
  if (exporting_) return false;
  deltatune::ExportOptions opts;
  opts.model_dir = baseModel_->text().trimmed().toStdString();
  opts.adapter_dir = source_->currentData().toString().toStdString();
  opts.out_dir = outDir_->text().trimmed().toStdString();
  opts.merged = merged_->isChecked();
  opts.model_class = modelClass_->currentData().toString().toStdString();
  if (opts.adapter_dir.empty() || opts.out_dir.empty()) {
    status_->setText(tr("Choose a checkpoint and an output folder."));
    return false;
  }
  settings_->setLastExportDir(outDir_->text().trimmed());
  exporting_ = true;
  exportButton_->setEnabled(false);
  progress_->setValue(0);
  status_->setText(tr("Exporting to %1 …").arg(outDir_->text().trimmed()));
  QPointer<ExportPage> guard(this);
  opts.progress = [guard](double p) {
    QMetaObject::invokeMethod(
        qApp,
        [guard, p] {
          if (guard) guard->progress_->setValue(static_cast<int>(p * 1000));
        },
        Qt::QueuedConnection);
  };
  const QString out = outDir_->text().trimmed();
  runInBackground<bool>(
      this,
      [opts] {
        deltatune::export_adapter(opts);
        return true;
      },
      [this, out](bool) {
        exporting_ = false;
        exportButton_->setEnabled(true);
        progress_->setValue(1000);
        const QString msg = tr("Exported to %1").arg(out);
        status_->setText(msg);
        emit exportFinished(true, msg);
      },
      [this](QString message) {
        exporting_ = false;
        exportButton_->setEnabled(true);
        status_->setText(tr("Export failed: %1").arg(message));
        emit exportFinished(false, message);
      });
  return true;
}

}  // namespace studio
