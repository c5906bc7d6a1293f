// The generations of the run config's sample_prompts (made at every eval step): one row per prompt, one column
// per run and step, so answers are compared across the steps of a run (all steps) or across runs (latest step).
#pragma once
#include <QString>
#include <QWidget>
#include <vector>

#include "deltatune/experiment_store.h"

class QComboBox;
class QLabel;
class QTableWidget;

namespace studio {

class SamplesView : public QWidget {
  Q_OBJECT
 public:
  struct Run {
    QString label;  // the run's name or id
    std::vector<deltatune::SampleRecord> samples;
  };
  explicit SamplesView(QWidget* parent = nullptr);

  void setRuns(std::vector<Run> runs);
  // false: each run's latest step only (the default with several runs); true: every step.
  void setAllSteps(bool all);
  QTableWidget* table() const { return table_; }
  // The text of the shown cell for prompt row `row` under the column header `header` ("" when absent).
  QString cellText(int row, const QString& header) const;

 private:
  void rebuild();

  QComboBox* steps_;
  QLabel* empty_;
  QTableWidget* table_;
  std::vector<Run> runs_;
};

// The text shown for a chat (a JSON array of {role, content}): its last user message.
QString samplePromptText(const std::string& chatJson);

}  // namespace studio
