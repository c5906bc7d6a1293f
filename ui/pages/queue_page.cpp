#include "pages/queue_page.h"

#include <QCheckBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QPushButton>
#include <QStyle>
#include <QTableView>
#include <QVBoxLayout>

#include "format.h"
#include "gpu_probe.h"
#include "grid_dialog.h"
#include "queue_runner.h"
#include "run_document.h"
#include "run_queue.h"

namespace studio {

QueuePage::QueuePage(RunDocument* doc, RunQueue* queue, QueueRunner* runner, GpuProbe* gpus, QWidget* parent)
    : QWidget(parent), doc_(doc), queue_(queue), runner_(runner), gpus_(gpus) {
  auto* outer = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  auto* addButton = new QPushButton(style()->standardIcon(QStyle::SP_FileDialogNewFolder), tr("Queue current run"));
  addButton->setToolTip(tr("Add the settings being edited as one run at the end of the queue"));
  auto* gridButton = new QPushButton(tr("Queue a grid…"));
  gridButton->setToolTip(tr("Queue every combination of a few settings (e.g. learning rate × LoRA rank)"));
  runButton_ = new QPushButton;
  runButton_->setCheckable(true);
  bar->addWidget(addButton);
  bar->addWidget(gridButton);
  bar->addStretch();
  bar->addWidget(runButton_);
  outer->addLayout(bar);

  gpuRow_ = new QHBoxLayout;
  gpuRow_->addWidget(new QLabel(tr("Side by side on GPUs:")));
  gpuHint_ = new QLabel;
  gpuHint_->setStyleSheet(QStringLiteral("color: #555;"));
  gpuRow_->addWidget(gpuHint_);
  gpuRow_->addStretch();
  outer->addLayout(gpuRow_);

  emptyHint_ = new QLabel(tr("No runs queued yet. <b>Queue current run</b> adds the settings being edited; "
                             "<b>Queue a grid…</b> adds every combination of a few settings (e.g. learning rate "
                             "× LoRA rank). Queued runs are kept when the studio closes."));
  emptyHint_->setWordWrap(true);
  emptyHint_->setStyleSheet(QStringLiteral("color: #555; padding: 8px;"));
  outer->addWidget(emptyHint_);
  view_ = new QTableView;
  view_->setModel(queue_);
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->setSelectionMode(QAbstractItemView::SingleSelection);
  view_->verticalHeader()->setVisible(false);
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view_->horizontalHeader()->setStretchLastSection(true);
  view_->setAlternatingRowColors(true);
  outer->addWidget(view_, 1);

  auto* rowBar = new QHBoxLayout;
  up_ = new QPushButton(style()->standardIcon(QStyle::SP_ArrowUp), tr("Earlier"));
  down_ = new QPushButton(style()->standardIcon(QStyle::SP_ArrowDown), tr("Later"));
  cancel_ = new QPushButton(style()->standardIcon(QStyle::SP_MediaStop), tr("Cancel"));
  cancel_->setToolTip(tr("A queued run is skipped; a running one stops at its next step with a checkpoint"));
  remove_ = new QPushButton(style()->standardIcon(QStyle::SP_TrashIcon), tr("Remove"));
  auto* clear = new QPushButton(tr("Remove finished"));
  for (QPushButton* b : {up_, down_, cancel_, remove_, clear}) rowBar->addWidget(b);
  rowBar->addStretch();
  summary_ = new QLabel;
  rowBar->addWidget(summary_);
  outer->addLayout(rowBar);
  note_ = new QLabel;
  note_->setWordWrap(true);
  outer->addWidget(note_);

  connect(addButton, &QPushButton::clicked, this, &QueuePage::addCurrentRun);
  connect(gridButton, &QPushButton::clicked, this, &QueuePage::openGridDialog);
  connect(runButton_, &QPushButton::toggled, runner_, &QueueRunner::setActive);
  connect(runner_, &QueueRunner::activeChanged, this, &QueuePage::updateButtons);
  connect(runner_, &QueueRunner::runningChanged, this, &QueuePage::updateButtons);
  connect(runner_, &QueueRunner::message, this, [this](const QString& m) { showNote(m, true); });
  connect(up_, &QPushButton::clicked, this, [this] { moveSelected(-1); });
  connect(down_, &QPushButton::clicked, this, [this] { moveSelected(+1); });
  connect(cancel_, &QPushButton::clicked, this, &QueuePage::cancelSelected);
  connect(remove_, &QPushButton::clicked, this, &QueuePage::removeSelected);
  connect(clear, &QPushButton::clicked, this, [this] { queue_->removeFinished(); });
  connect(queue_, &QAbstractItemModel::dataChanged, this, &QueuePage::updateButtons);
  connect(queue_, &QAbstractItemModel::rowsInserted, this, &QueuePage::updateButtons);
  connect(queue_, &QAbstractItemModel::rowsRemoved, this, &QueuePage::updateButtons);
  connect(queue_, &QAbstractItemModel::modelReset, this, &QueuePage::updateButtons);
  connect(view_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &QueuePage::updateButtons);
  if (gpus_) connect(gpus_, &GpuProbe::gpusChanged, this, &QueuePage::updateGpuChecks);
  updateGpuChecks();
  updateButtons();
}

QString QueuePage::noteText() const {
  return note_->text();
}

void QueuePage::showNote(const QString& text, bool error) {
  note_->setStyleSheet(error ? QStringLiteral("color: #b00020;") : QStringLiteral("color: #2c7a2c;"));
  note_->setText(text);
  if (error) emit errorOccurred(text);
}

QString QueuePage::selectedId() const {
  const QModelIndexList rows = view_->selectionModel()->selectedRows();
  if (rows.isEmpty()) return {};
  const QueueItem* it = queue_->item(rows.first().row());
  return it ? it->id : QString();
}

bool QueuePage::addCurrentRun() {
  const deltatune::RunConfig& cfg = doc_->config();
  if (cfg.base_model.empty() || cfg.datasets.empty()) {
    showNote(tr("Choose a model and a training file before queueing the run."), true);
    return false;
  }
  SweepRun run;
  run.config = cfg;
  run.name = QString::fromStdString(!cfg.run_name.empty() ? cfg.run_name
                                                          : QFileInfo(QString::fromStdString(cfg.output_dir))
                                                                .fileName()
                                                                .toStdString());
  return addRuns({run}) == 1;
}

int QueuePage::addRuns(const QList<SweepRun>& runs) {
  // Two waiting runs writing into one output folder would mix their checkpoints: refuse.
  QStringList taken;
  for (const QueueItem& it : queue_->items()) {
    if (it.state != QueueItem::State::Queued && it.state != QueueItem::State::Running) continue;
    try {
      taken << QString::fromStdString(
          deltatune::run_config_from_yaml_string(it.configYaml.toStdString(), "/").output_dir);
    } catch (const std::exception&) {
    }
  }
  QList<QueueItem> items;
  for (const SweepRun& r : runs) {
    const QString out = QString::fromStdString(r.config.output_dir);
    if (taken.contains(out)) {
      showNote(tr("Not queued: another queued run already writes into %1. Change the output folder or the run "
                  "name.")
                   .arg(out),
               true);
      return 0;
    }
    taken << out;
    QueueItem it;
    it.name = r.name;
    it.configYaml = QString::fromStdString(deltatune::run_config_to_yaml(r.config));
    items << it;
  }
  queue_->add(items);
  showNote(tr("Queued %1.").arg(runsText(static_cast<int>(items.size()))), false);
  runner_->schedule();
  return static_cast<int>(items.size());
}

void QueuePage::openGridDialog() {
  GridDialog dlg(doc_->config(), this);
  if (dlg.exec() == QDialog::Accepted) addRuns(dlg.runs());
}

void QueuePage::moveSelected(int delta) {
  const QString id = selectedId();
  if (id.isEmpty() || !queue_->move(id, delta)) return;
  view_->selectRow(queue_->rowOfId(id));
}

void QueuePage::cancelSelected() {
  const QString id = selectedId();
  if (!id.isEmpty()) runner_->cancel(id);
}

void QueuePage::removeSelected() {
  const QString id = selectedId();
  if (id.isEmpty()) return;
  if (!queue_->remove(id)) showNote(tr("A running run cannot be removed: cancel it first."), true);
}

void QueuePage::updateGpuChecks() {
  const QList<int> pool = runner_->gpuPool();
  for (QCheckBox* c : gpuChecks_) {
    c->hide();
    c->disconnect(this);
    c->deleteLater();
  }
  gpuChecks_.clear();
  const QList<GpuInfo> gpus = gpus_ ? gpus_->gpus() : QList<GpuInfo>{};
  for (const GpuInfo& g : gpus) {
    auto* c = new QCheckBox(QStringLiteral("%1: %2 (%3)").arg(g.index).arg(g.name, formatBytes(g.totalBytes)));
    c->setProperty("gpu", g.index);
    c->setChecked(pool.contains(g.index));
    gpuRow_->insertWidget(static_cast<int>(gpuRow_->count()) - 2, c);
    connect(c, &QCheckBox::toggled, this, [this] {
      QList<int> picked;
      for (QCheckBox* b : gpuChecks_)
        if (b->isChecked()) picked << b->property("gpu").toInt();
      runner_->setGpuPool(picked);
      updateButtons();
    });
    gpuChecks_ << c;
  }
  updateButtons();
}

void QueuePage::updateButtons() {
  const QList<int> pool = runner_->gpuPool();
  gpuHint_->setText(gpuChecks_.isEmpty() ? tr("no NVIDIA GPU detected: runs train one after another")
                    : pool.size() > 1   ? tr("%1 runs at a time, one per picked GPU").arg(pool.size())
                    : pool.size() == 1  ? tr("one run at a time, on GPU %1").arg(pool.first())
                                        : tr("none picked: one run at a time, each on its own configured GPU"));
  {
    QSignalBlocker b(runButton_);
    runButton_->setChecked(runner_->isActive());
  }
  runButton_->setIcon(style()->standardIcon(runner_->isActive() ? QStyle::SP_MediaPause : QStyle::SP_MediaPlay));
  runButton_->setText(runner_->isActive() ? tr("Pause queue") : tr("Run queue"));
  runButton_->setToolTip(runner_->isActive() ? tr("Start no further runs (running ones go on)")
                                             : tr("Start the queued runs"));
  const QueueItem* it = queue_->item(queue_->rowOfId(selectedId()));
  const bool running = it && it->state == QueueItem::State::Running;
  const bool waiting = it && it->state == QueueItem::State::Queued;
  up_->setEnabled(it != nullptr);
  down_->setEnabled(it != nullptr);
  cancel_->setEnabled(running || waiting);
  remove_->setEnabled(it && !running);
  emptyHint_->setVisible(queue_->rowCount() == 0);
  summary_->setText(tr("%1 running · %2 queued · %3 done · %4 failed · %5 cancelled")
                        .arg(queue_->count(QueueItem::State::Running))
                        .arg(queue_->count(QueueItem::State::Queued))
                        .arg(queue_->count(QueueItem::State::Done))
                        .arg(queue_->count(QueueItem::State::Failed))
                        .arg(queue_->count(QueueItem::State::Cancelled)));
}

}  // namespace studio
