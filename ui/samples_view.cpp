#include "samples_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <map>

namespace studio {

QString samplePromptText(const std::string& chatJson) {
  const QJsonArray chat = QJsonDocument::fromJson(QByteArray::fromStdString(chatJson)).array();
  for (auto it = chat.end(); it != chat.begin();) {
    const QJsonObject m = (--it)->toObject();
    if (m.value(QStringLiteral("role")).toString() == QStringLiteral("user"))
      return m.value(QStringLiteral("content")).toString();
  }
  return chat.isEmpty() ? QString() : chat.last().toObject().value(QStringLiteral("content")).toString();
}

SamplesView::SamplesView(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Steps:")));
  steps_ = new QComboBox;
  steps_->addItem(tr("latest of each run"));
  steps_->addItem(tr("every eval step"));
  bar->addWidget(steps_);
  bar->addStretch(1);
  outer->addLayout(bar);
  empty_ = new QLabel(tr("No sample generations. Add sample_prompts to the run config (a list of chats or a JSONL "
                         "file): they are answered at every eval step."));
  empty_->setWordWrap(true);
  empty_->setStyleSheet(QStringLiteral("color:#555"));
  outer->addWidget(empty_);
  table_ = new QTableWidget;
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setWordWrap(true);
  table_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  outer->addWidget(table_, 1);
  connect(steps_, &QComboBox::currentIndexChanged, this, &SamplesView::rebuild);
  rebuild();
}

void SamplesView::setRuns(std::vector<Run> runs) {
  runs_ = std::move(runs);
  rebuild();
}

void SamplesView::setAllSteps(bool all) { steps_->setCurrentIndex(all ? 1 : 0); }

QString SamplesView::cellText(int row, const QString& header) const {
  for (int c = 0; c < table_->columnCount(); ++c)
    if (table_->horizontalHeaderItem(c) && table_->horizontalHeaderItem(c)->text() == header)
      return table_->item(row, c) ? table_->item(row, c)->text() : QString();
  return {};
}

void SamplesView::rebuild() {
  const bool all = steps_->currentIndex() == 1;
  // Columns: (run, step); rows: prompt index (the prompt text from the first run that has it).
  struct Column {
    QString header;
    std::map<int64_t, const deltatune::SampleRecord*> byPrompt;
  };
  std::vector<Column> cols;
  std::map<int64_t, QString> prompts;
  for (const Run& r : runs_) {
    if (r.samples.empty()) continue;
    int64_t latest = 0;
    for (const auto& s : r.samples) latest = std::max(latest, s.step);
    std::map<int64_t, Column> steps;
    for (const auto& s : r.samples) {
      if (!all && s.step != latest) continue;
      Column& c = steps[s.step];
      c.header = runs_.size() > 1 ? tr("%1 · step %2").arg(r.label).arg(s.step) : tr("step %1").arg(s.step);
      c.byPrompt[s.prompt_index] = &s;
      if (!prompts.count(s.prompt_index)) prompts[s.prompt_index] = samplePromptText(s.prompt);
    }
    for (auto& [step, c] : steps) cols.push_back(std::move(c));
  }
  empty_->setVisible(cols.empty());
  table_->setVisible(!cols.empty());
  table_->clear();
  table_->setColumnCount(static_cast<int>(cols.size()) + 1);
  table_->setRowCount(static_cast<int>(prompts.size()));
  QStringList headers{tr("Prompt")};
  for (const Column& c : cols) headers << c.header;
  table_->setHorizontalHeaderLabels(headers);
  int row = 0;
  for (const auto& [index, text] : prompts) {
    table_->setItem(row, 0, new QTableWidgetItem(text));
    for (size_t c = 0; c < cols.size(); ++c) {
      auto it = cols[c].byPrompt.find(index);
      if (it == cols[c].byPrompt.end()) continue;
      auto* item = new QTableWidgetItem(QString::fromStdString(it->second->text));
      item->setToolTip(tr("%1 tokens, finished: %2")
                           .arg(it->second->tokens)
                           .arg(QString::fromStdString(it->second->finish_reason)));
      table_->setItem(row, static_cast<int>(c) + 1, item);
    }
    ++row;
  }
}

}  // namespace studio
