#include "pages/experiments_page.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <exception>

#include "app_settings.h"
#include "run_details.h"
#include "samples_view.h"
#include "runs_table_model.h"

namespace studio {

namespace {
const QList<QColor>& palette10() {
  static const QList<QColor> c = {
      QColor(0x1f, 0x77, 0xb4), QColor(0xff, 0x7f, 0x0e), QColor(0x2c, 0xa0, 0x2c), QColor(0xd6, 0x27, 0x28),
      QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b), QColor(0xe3, 0x77, 0xc2), QColor(0x7f, 0x7f, 0x7f),
      QColor(0xbc, 0xbd, 0x22), QColor(0x17, 0xbe, 0xcf)};
  return c;
}
}  // namespace

ExperimentsPage::ExperimentsPage(AppSettings* settings, QWidget* parent)
    : QWidget(parent), settings_(settings) {
  auto* outer = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  filter_ = new QLineEdit;
  filter_->setPlaceholderText(tr("Filter by name, status, model, tag…"));
  filter_->setClearButtonEnabled(true);
  bar->addWidget(filter_, 1);
  auto* refreshButton = new QPushButton(tr("Refresh"));
  auto* tagButton = new QPushButton(tr("Tag…"));
  auto* exportButton = new QPushButton(tr("Export…"));
  auto* openButton = new QPushButton(tr("Open config"));
  openButton->setToolTip(tr("Load the selected run's settings into the editor (to start a variant)"));
  auto* resumeButton = new QPushButton(tr("Resume"));
  resumeButton->setToolTip(tr("Continue a stopped or crashed run from its last checkpoint"));
  auto* deleteButton = new QPushButton(tr("Delete"));
  for (QPushButton* b : {refreshButton, openButton, resumeButton, tagButton, exportButton, deleteButton})
    bar->addWidget(b);
  outer->addLayout(bar);
  error_ = new QLabel;
  error_->setWordWrap(true);
  error_->setStyleSheet(QStringLiteral("color: #b00020;"));
  error_->hide();
  outer->addWidget(error_);

  auto* split = new QSplitter(Qt::Vertical);
  model_ = new RunsTableModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  proxy_->setSourceModel(model_);
  proxy_->setSortRole(RunsTableModel::SortRole);
  proxy_->setFilterKeyColumn(-1);
  proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);
  view_ = new QTableView;
  view_->setModel(proxy_);
  view_->setSortingEnabled(true);
  view_->sortByColumn(RunsTableModel::Created, Qt::DescendingOrder);
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  view_->verticalHeader()->setVisible(false);
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view_->horizontalHeader()->setStretchLastSection(true);
  view_->setAlternatingRowColors(true);
  split->addWidget(view_);

  auto* tabs = new QTabWidget;
  auto* curves = new QWidget;
  auto* curvesLayout = new QVBoxLayout(curves);
  auto* curveBar = new QHBoxLayout;
  curveBar->addWidget(new QLabel(tr("Show")));
  metric_ = new QComboBox;
  for (Metric m : {Metric::Loss, Metric::EvalLoss, Metric::LearningRate, Metric::GradNorm,
                   Metric::TokensPerSecond, Metric::VramAllocated, Metric::MoeLoadMaxRatio, Metric::MoeLoadCv})
    metric_->addItem(metricName(m), static_cast<int>(m));
  curveBar->addWidget(metric_);
  curveBar->addWidget(new QLabel(tr("against")));
  axis_ = new QComboBox;
  for (Axis a : {Axis::Step, Axis::TokensSeen, Axis::WallTime})
    axis_->addItem(axisName(a), static_cast<int>(a));
  curveBar->addWidget(axis_);
  curveBar->addStretch();
  curveBar->addWidget(new QLabel(tr("Select several runs (Ctrl/Shift-click) to compare.")));
  curvesLayout->addLayout(curveBar);
  plot_ = new QCustomPlot;
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  plot_->legend->setVisible(true);
  plot_->setMinimumHeight(200);
  curvesLayout->addWidget(plot_, 1);
  tabs->addTab(curves, tr("Curves"));
  diffTable_ = new QTableWidget;
  diffTable_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  diffTable_->verticalHeader()->setVisible(false);
  diffTable_->setWordWrap(true);
  tabs->addTab(diffTable_, tr("Config diff"));
  details_ = new QTextBrowser;
  details_->setOpenLinks(false);
  tabs->addTab(details_, tr("Details"));
  samples_ = new SamplesView;
  tabs->addTab(samples_, tr("Samples"));
  split->addWidget(tabs);
  split->setStretchFactor(0, 2);
  split->setStretchFactor(1, 3);
  outer->addWidget(split, 1);

  // While a run is live its curve and row keep moving; re-read the database now and then (only while
  // this page is on screen).
  liveTimer_.setInterval(3000);
  connect(&liveTimer_, &QTimer::timeout, this, [this] {
    if (isVisible()) refresh();
  });
  connect(filter_, &QLineEdit::textChanged, this, &ExperimentsPage::setFilterText);
  connect(refreshButton, &QPushButton::clicked, this, &ExperimentsPage::refresh);
  connect(tagButton, &QPushButton::clicked, this, [this] {
    if (selectedRunIds().isEmpty()) return;
    bool ok = false;
    const QString tag =
        QInputDialog::getText(this, tr("Tag runs"), tr("Tag:"), QLineEdit::Normal, QString(), &ok);
    if (ok && !tag.trimmed().isEmpty()) tagSelected(tag.trimmed());
  });
  connect(deleteButton, &QPushButton::clicked, this, [this] {
    const QStringList ids = selectedRunIds();
    if (ids.isEmpty()) return;
    if (QMessageBox::question(this, tr("Delete runs"),
                              tr("Delete %n run(s) from the database? Their output folders stay on disk.",
                                 nullptr, static_cast<int>(ids.size()))) == QMessageBox::Yes)
      deleteSelected();
  });
  auto withSelectedRun = [this](auto emitter) {
    return [this, emitter] {
      const QStringList ids = selectedRunIds();
      const int row = ids.isEmpty() ? -1 : model_->rowOfId(ids.first());
      if (row < 0) return;
      const deltatune::RunRecord* r = model_->runAt(row);
      emitter(QString::fromStdString(r->id), QString::fromStdString(r->config_yaml), r->status);
    };
  };
  connect(openButton, &QPushButton::clicked, this,
          withSelectedRun([this](const QString& id, const QString& yaml, const std::string&) {
            emit openConfigRequested(id, yaml);
          }));
  connect(resumeButton, &QPushButton::clicked, this,
          withSelectedRun([this](const QString& id, const QString& yaml, const std::string& status) {
            if (status == "finished" || status == "running") {
              error_->setText(tr("Run %1 is %2: nothing to resume.").arg(id, QString::fromStdString(status)));
              error_->show();
              return;
            }
            emit resumeRequested(id, yaml);
          }));
  connect(exportButton, &QPushButton::clicked, this, [this] {
    const QStringList ids = selectedRunIds();
    if (!ids.isEmpty()) emit exportRequested(ids.first());
  });
  connect(view_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
    updateOverlay();
    updateDiff();
    updateDetails();
  });
  connect(axis_, &QComboBox::currentIndexChanged, this, &ExperimentsPage::updateOverlay);
  connect(metric_, &QComboBox::currentIndexChanged, this, &ExperimentsPage::updateOverlay);
}

ExperimentsPage::~ExperimentsPage() = default;

QString ExperimentsPage::errorText() const {
  return error_->text();
}

deltatune::ExperimentStore* ExperimentsPage::store() {
  return store_.open(settings_->databasePath());
}

void ExperimentsPage::refresh() {
  const QStringList keep = selectedRunIds();
  try {
    deltatune::ExperimentStore* s = store();
    s->mark_crashed_runs();
    model_->setRuns(s->list_runs());
    error_->hide();
    error_->clear();
  } catch (const std::exception& e) {
    error_->setText(tr("Cannot read the experiment database: %1").arg(QString::fromUtf8(e.what())));
    error_->show();
    model_->setRuns({});
  }
  metricsCache_.clear();
  if (keep.isEmpty() && proxy_->rowCount() > 0) {
    // Show something useful on first look: the newest run (top row with the default sort).
    selectRuns({proxy_->index(0, 0).data(RunsTableModel::RunIdRole).toString()});
  } else {
    selectRuns(keep);
  }
  bool running = false;
  for (const auto& r : model_->runs()) running = running || r.status == "running";
  if (running && !liveTimer_.isActive()) liveTimer_.start();
  if (!running) liveTimer_.stop();
}

QStringList ExperimentsPage::selectedRunIds() const {
  QStringList ids;
  for (const QModelIndex& i : view_->selectionModel()->selectedRows())
    ids << proxy_->data(i, RunsTableModel::RunIdRole).toString();
  return ids;
}

void ExperimentsPage::selectRuns(const QStringList& ids) {
  QItemSelection sel;
  for (const QString& id : ids) {
    const int row = model_->rowOfId(id);
    if (row < 0) continue;
    const QModelIndex src = model_->index(row, 0);
    const QModelIndex p = proxy_->mapFromSource(src);
    if (p.isValid()) sel.select(p, p);
  }
  view_->selectionModel()->select(sel, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  updateOverlay();
  updateDiff();
  updateDetails();
}

QString ExperimentsPage::detailsText() const {
  return details_->toPlainText();
}

void ExperimentsPage::updateSamples() {
  std::vector<SamplesView::Run> runs;
  try {
    for (const QString& id : selectedRunIds()) {
      const int row = model_->rowOfId(id);
      const deltatune::RunRecord* r = row >= 0 ? model_->runAt(row) : nullptr;
      const QString label = r && !r->name.empty() ? QString::fromStdString(r->name) : id;
      runs.push_back({label, store()->samples(id.toStdString())});
    }
  } catch (const std::exception& e) {
    error_->setText(QString::fromUtf8(e.what()));
    error_->show();
  }
  samples_->setRuns(std::move(runs));
}

void ExperimentsPage::updateDetails() {
  updateSamples();
  const QStringList ids = selectedRunIds();
  const int row = ids.isEmpty() ? -1 : model_->rowOfId(ids.first());
  if (row < 0) {
    details_->setHtml(tr("<p style='color:#555'>Select a run to see where it ran, its folders and artifacts.</p>"));
    return;
  }
  const deltatune::RunRecord* r = model_->runAt(row);
  try {
    details_->setHtml(runDetailsHtml(*r, store()->artifacts(r->id), store()->events(r->id)));
  } catch (const std::exception& e) {
    details_->setHtml(runDetailsHtml(*r, {}, {}));
    error_->setText(QString::fromUtf8(e.what()));
    error_->show();
  }
}

void ExperimentsPage::setAxis(Axis a) {
  axis_->setCurrentIndex(axis_->findData(static_cast<int>(a)));
}
void ExperimentsPage::setMetric(Metric m) {
  metric_->setCurrentIndex(metric_->findData(static_cast<int>(m)));
}
void ExperimentsPage::setFilterText(const QString& text) {
  if (filter_->text() != text) filter_->setText(text);
  proxy_->setFilterFixedString(text);
}

void ExperimentsPage::tagSelected(const QString& tag) {
  try {
    for (const QString& id : selectedRunIds()) store()->add_tag(id.toStdString(), tag.toStdString());
  } catch (const std::exception& e) {
    error_->setText(QString::fromUtf8(e.what()));
    error_->show();
  }
  refresh();
}

void ExperimentsPage::deleteSelected() {
  try {
    for (const QString& id : selectedRunIds()) store()->delete_run(id.toStdString());
  } catch (const std::exception& e) {
    error_->setText(QString::fromUtf8(e.what()));
    error_->show();
  }
  view_->clearSelection();
  refresh();
}

const std::vector<deltatune::StepMetrics>& ExperimentsPage::metricsOf(const std::string& id) {
  auto it = metricsCache_.find(id);
  const int row = model_->rowOfId(QString::fromStdString(id));
  const bool running = row >= 0 && model_->runAt(row)->status == "running";
  if (it == metricsCache_.end() || running) {
    std::vector<deltatune::StepMetrics> m;
    try {
      m = store()->metrics(id);
    } catch (const std::exception& e) {
      error_->setText(QString::fromUtf8(e.what()));
      error_->show();
    }
    it = metricsCache_.insert_or_assign(id, std::move(m)).first;
  }
  return it->second;
}

void ExperimentsPage::updateOverlay() {
  plot_->clearGraphs();
  const auto axis = static_cast<Axis>(axis_->currentData().toInt());
  const auto metric = static_cast<Metric>(metric_->currentData().toInt());
  int i = 0;
  for (const QString& id : selectedRunIds()) {
    const int row = model_->rowOfId(id);
    if (row < 0) continue;
    const deltatune::RunRecord* r = model_->runAt(row);
    Series s = seriesOf(metricsOf(r->id), axis, metric);
    QCPGraph* g = plot_->addGraph();
    const QColor color = palette10()[i++ % palette10().size()];
    g->setPen(QPen(color, 1.6));
    if (metric == Metric::EvalLoss)
      g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, color, color, 6));
    g->setName(QString::fromStdString(r->name.empty() ? r->id : r->name));
    g->setData(s.x, s.y, true);
  }
  plot_->legend->setVisible(plot_->graphCount() > 0);
  plot_->xAxis->setLabel(axisName(axis));
  plot_->yAxis->setLabel(metricName(metric));
  plot_->rescaleAxes();
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

QString ExperimentsPage::canonicalConfig(const deltatune::RunRecord& r) const {
  // Canonical YAML makes configs written by different versions or by hand comparable key by key.
  try {
    return QString::fromStdString(
        deltatune::run_config_to_yaml(deltatune::run_config_from_yaml_string(r.config_yaml, "/")));
  } catch (const std::exception&) {
    return QString::fromStdString(r.config_yaml);
  }
}

void ExperimentsPage::updateDiff() {
  QList<QString> yamls;
  QStringList names;
  for (const QString& id : selectedRunIds()) {
    const int row = model_->rowOfId(id);
    if (row < 0) continue;
    const deltatune::RunRecord* r = model_->runAt(row);
    yamls << canonicalConfig(*r);
    names << QString::fromStdString(r->name.empty() ? r->id : r->name);
  }
  diff_ = yamls.size() >= 2 ? configDiff(yamls) : QList<ConfigDiffRow>{};
  diffTable_->clear();
  diffTable_->setColumnCount(static_cast<int>(names.size()) + 1);
  diffTable_->setHorizontalHeaderLabels(QStringList{tr("Key")} + names);
  diffTable_->setRowCount(static_cast<int>(diff_.size()));
  for (int r = 0; r < diff_.size(); ++r) {
    diffTable_->setItem(r, 0, new QTableWidgetItem(diff_[r].key));
    for (int c = 0; c < diff_[r].values.size(); ++c)
      diffTable_->setItem(r, c + 1, new QTableWidgetItem(diff_[r].values[c]));
  }
  if (yamls.size() >= 2 && diff_.isEmpty()) {
    diffTable_->setRowCount(1);
    diffTable_->setItem(0, 0, new QTableWidgetItem(tr("(identical configs)")));
  } else if (yamls.size() < 2) {
    diffTable_->setRowCount(1);
    diffTable_->setItem(0, 0, new QTableWidgetItem(tr("Select two or more runs to see their differences.")));
  }
  diffTable_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  diffTable_->resizeRowsToContents();
}

}  // namespace studio
