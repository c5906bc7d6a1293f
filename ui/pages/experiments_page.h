// Experiments page: all runs of the experiment database (runs from the CLI too), sortable and
// filterable, with tags and delete; the curves of the selected runs overlaid (by step, tokens seen or
// wall time), their configs diffed (only differing keys), and the details of one (device, GPUs, artifacts).
#pragma once
#include "store_handle.h"
#include <QMap>
#include <QTimer>
#include <QWidget>
#include <memory>
#include <vector>

#include "deltatune/experiment_store.h"
#include "metric_series.h"
#include "yaml_blocks.h"

class QComboBox;
class QCustomPlot;
class QLabel;
class QLineEdit;
class QSortFilterProxyModel;
class QTableView;
class QTableWidget;
class QTextBrowser;

namespace studio {

class AppSettings;
class SamplesView;
class RunsTableModel;

class ExperimentsPage : public QWidget {
  Q_OBJECT
 public:
  ExperimentsPage(AppSettings* settings, QWidget* parent = nullptr);
  ~ExperimentsPage() override;

  RunsTableModel* model() const { return model_; }
  QTableView* view() const { return view_; }
  QCustomPlot* overlayPlot() const { return plot_; }
  const QList<ConfigDiffRow>& diffRows() const { return diff_; }
  QStringList selectedRunIds() const;
  QString errorText() const;
  QString detailsText() const;  // the Details tab as plain text
  SamplesView* samples() const { return samples_; }  // the Samples tab: the selected runs' sample generations

 public slots:
  void refresh();
  void selectRuns(const QStringList& ids);
  void setAxis(studio::Axis a);
  void setMetric(studio::Metric m);
  void setFilterText(const QString& text);
  void tagSelected(const QString& tag);
  void deleteSelected();  // no confirmation; the button asks first

 signals:
  // Another page should open a run (e.g. export it).
  void exportRequested(const QString& runId);
  // Load the run's config into the editor / continue the run from its last checkpoint.
  void openConfigRequested(const QString& runId, const QString& configYaml);
  void resumeRequested(const QString& runId, const QString& configYaml);

 private:
  deltatune::ExperimentStore* store();
  void updateOverlay();
  void updateDiff();
  void updateDetails();  // and the Samples tab
  void updateSamples();
  const std::vector<deltatune::StepMetrics>& metricsOf(const std::string& id);
  QString canonicalConfig(const deltatune::RunRecord& r) const;

  AppSettings* settings_;
  StoreHandle store_;
  RunsTableModel* model_;
  QSortFilterProxyModel* proxy_;
  QTableView* view_;
  QLineEdit* filter_;
  QLabel* error_;
  QComboBox* axis_;
  QComboBox* metric_;
  QCustomPlot* plot_;
  QTableWidget* diffTable_;
  QTextBrowser* details_;
  SamplesView* samples_;
  QList<ConfigDiffRow> diff_;
  std::map<std::string, std::vector<deltatune::StepMetrics>> metricsCache_;
  QTimer liveTimer_;
};

}  // namespace studio
