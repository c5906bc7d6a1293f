#include "pages/data_page.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>

#include "app_settings.h"
#include "background_task.h"
#include "format.h"
#include "image_strip.h"
#include "run_document.h"
#include "token_view.h"

namespace studio {

namespace {
const QStringList kTypes = {QString(), "chat", "sharegpt", "alpaca", "completion", "pretokenized"};

QComboBox* makeTypeCombo(const QString& type) {
  auto* c = new QComboBox;
  for (const QString& t : kTypes) c->addItem(t.isEmpty() ? QObject::tr("auto-detect") : t, t);
  c->setCurrentIndex(std::max(0, static_cast<int>(kTypes.indexOf(type))));
  return c;
}
QComboBox* makeUseCombo(bool eval) {
  auto* c = new QComboBox;
  c->addItem(QObject::tr("train"));
  c->addItem(QObject::tr("eval"));
  c->setCurrentIndex(eval ? 1 : 0);
  return c;
}
}  // namespace

DataPage::DataPage(RunDocument* doc, AppSettings* settings, QWidget* parent)
    : QWidget(parent), doc_(doc), settings_(settings) {
  auto* outer = new QVBoxLayout(this);
  auto* split = new QSplitter(Qt::Vertical);
  outer->addWidget(split, 1);

  auto* top = new QWidget;
  auto* topLayout = new QVBoxLayout(top);
  topLayout->setContentsMargins(0, 0, 0, 0);
  auto* filesBox = new QGroupBox(tr("Dataset files (JSONL / JSON)"));
  auto* filesLayout = new QVBoxLayout(filesBox);
  table_ = new QTableWidget(0, ColumnCount);
  table_->setHorizontalHeaderLabels({tr("File"), tr("Use"), tr("Format"), tr("Detected"), tr("Rows")});
  table_->horizontalHeader()->setSectionResizeMode(PathColumn, QHeaderView::Stretch);
  table_->verticalHeader()->setVisible(false);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setMinimumHeight(90);
  table_->setMaximumHeight(150);
  filesLayout->addWidget(table_);
  auto* buttons = new QHBoxLayout;
  auto* add = new QPushButton(tr("Add files…"));
  auto* remove = new QPushButton(tr("Remove"));
  auto* refresh = new QPushButton(tr("Refresh preview"));
  buttons->addWidget(add);
  buttons->addWidget(remove);
  buttons->addStretch();
  buttons->addWidget(refresh);
  filesLayout->addLayout(buttons);
  topLayout->addWidget(filesBox);

  auto* row = new QHBoxLayout;
  auto* optBox = new QGroupBox(tr("Rendering and labels"));
  auto* form = new QFormLayout(optBox);
  trainOnInputs_ = new QCheckBox(tr("Train on prompts too (not only assistant turns)"));
  skipBadRows_ = new QCheckBox(tr("Skip malformed rows instead of stopping"));
  truncation_ = new QComboBox;
  truncation_->addItem(tr("truncate to sequence length"), "truncate");
  truncation_->addItem(tr("drop longer examples"), "drop");
  form->addRow(trainOnInputs_);
  form->addRow(skipBadRows_);
  form->addRow(tr("Too long:"), truncation_);
  thinking_ = new QComboBox;
  thinking_->setObjectName("enable_thinking");
  thinking_->addItem(tr("template default"), "auto");
  thinking_->addItem(tr("on (enable_thinking=True)"), "true");
  thinking_->addItem(tr("off (enable_thinking=False)"), "false");
  thinking_->setToolTip(tr("Passed to the chat template like HF's apply_chat_template(enable_thinking=...)"));
  form->addRow(tr("Thinking:"), thinking_);
  row->addWidget(optBox, 1);
  auto* statsBox = new QGroupBox(tr("Statistics"));
  auto* statsLayout = new QVBoxLayout(statsBox);
  stats_ = new QLabel(tr("—"));
  stats_->setTextFormat(Qt::RichText);
  stats_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  statsLayout->addWidget(stats_);
  row->addWidget(statsBox, 1);
  topLayout->addLayout(row);
  error_ = new QLabel;
  error_->setWordWrap(true);
  error_->setStyleSheet(QStringLiteral("color: #b00020;"));
  error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  topLayout->addWidget(error_);
  split->addWidget(top);

  auto* exBox = new QGroupBox(tr("Rendered examples"));
  auto* exLayout = new QVBoxLayout(exBox);
  auto* nav = new QHBoxLayout;
  nav->addWidget(new QLabel(tr("Example")));
  exampleIndex_ = new QSpinBox;
  exampleIndex_->setRange(1, 1);
  nav->addWidget(exampleIndex_);
  exampleSource_ = new QLabel;
  nav->addWidget(exampleSource_, 1);
  auto* legend =
      new QLabel(tr("<span style='background:#cdeec7; color:#0d4a12;'>&nbsp;trained&nbsp;</span> "
                    "<span style='background:#cfcfcf; color:#444;'>&nbsp;not trained&nbsp;</span> "
                    "&nbsp;each box is one token, &middot; = space, &crarr; = newline"));
  nav->addWidget(legend);
  exLayout->addLayout(nav);
  exampleError_ = new QLabel;
  exampleError_->setWordWrap(true);
  exampleError_->setStyleSheet(QStringLiteral("color: #b00020;"));
  exampleError_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  exampleError_->setVisible(false);
  exLayout->addWidget(exampleError_);
  // Tokens on the left, the example's images (as the model gets them) on the right.
  auto* exSplit = new QSplitter(Qt::Horizontal);
  view_ = new QTextBrowser;
  exSplit->addWidget(view_);
  images_ = new ImageStrip;
  images_->setObjectName("example_images");
  exSplit->addWidget(images_);
  exSplit->setStretchFactor(0, 1);
  exSplit->setStretchFactor(1, 0);
  exLayout->addWidget(exSplit, 1);
  split->addWidget(exBox);
  split->setStretchFactor(0, 0);
  split->setStretchFactor(1, 1);

  debounce_.setSingleShot(true);
  debounce_.setInterval(400);
  connect(&debounce_, &QTimer::timeout, this, &DataPage::refreshPreview);
  connect(add, &QPushButton::clicked, this, [this] {
    const QStringList files =
        QFileDialog::getOpenFileNames(this, tr("Dataset files"), settings_->lastDataDir(),
                                      tr("JSON lines (*.jsonl *.json);;All files (*)"));
    for (const QString& f : files) addDataset(f);
    if (!files.isEmpty()) settings_->setLastDataDir(QFileInfo(files.first()).absolutePath());
  });
  connect(remove, &QPushButton::clicked, this, [this] {
    const int r = table_->currentRow();
    if (r < 0) return;
    table_->removeRow(r);
    writeToConfig();
  });
  connect(refresh, &QPushButton::clicked, this, &DataPage::refreshPreview);
  connect(trainOnInputs_, &QCheckBox::toggled, this, &DataPage::writeToConfig);
  connect(skipBadRows_, &QCheckBox::toggled, this, &DataPage::writeToConfig);
  connect(truncation_, &QComboBox::currentIndexChanged, this, &DataPage::writeToConfig);
  connect(thinking_, &QComboBox::currentIndexChanged, this, &DataPage::writeToConfig);
  connect(exampleIndex_, &QSpinBox::valueChanged, this, [this](int v) { showExample(v - 1); });
  connect(doc_, &RunDocument::configChanged, this, &DataPage::onConfigChanged);
  connect(doc_, &RunDocument::modelInfoChanged, this, [this] { debounce_.start(); });
  loadFromConfig();
}

QString DataPage::errorText() const {
  return error_->text();
}

void DataPage::addDataset(const QString& path, bool eval) {
  const int r = table_->rowCount();
  table_->insertRow(r);
  auto* item = new QTableWidgetItem(QFileInfo(path).absoluteFilePath());
  item->setToolTip(item->text());
  table_->setItem(r, PathColumn, item);
  auto* use = makeUseCombo(eval);
  auto* type = makeTypeCombo(QString());
  table_->setCellWidget(r, UseColumn, use);
  table_->setCellWidget(r, TypeColumn, type);
  table_->setItem(r, DetectedColumn, new QTableWidgetItem);
  table_->setItem(r, RowsColumn, new QTableWidgetItem);
  connect(use, &QComboBox::currentIndexChanged, this, &DataPage::writeToConfig);
  connect(type, &QComboBox::currentIndexChanged, this, &DataPage::writeToConfig);
  if (!loading_) writeToConfig();
}

void DataPage::loadFromConfig() {
  loading_ = true;
  const deltatune::RunConfig& cfg = doc_->config();
  table_->setRowCount(0);
  auto addSpec = [this](const deltatune::DatasetSpec& d, bool eval) {
    addDataset(QString::fromStdString(d.path), eval || d.split == "validation");
    auto* type = qobject_cast<QComboBox*>(table_->cellWidget(table_->rowCount() - 1, TypeColumn));
    type->blockSignals(true);
    type->setCurrentIndex(std::max(0, static_cast<int>(kTypes.indexOf(QString::fromStdString(d.type)))));
    type->blockSignals(false);
  };
  for (const auto& d : cfg.datasets) addSpec(d, false);
  for (const auto& d : cfg.test_datasets) addSpec(d, true);
  QSignalBlocker b1(trainOnInputs_), b2(skipBadRows_), b3(truncation_), b4(thinking_);
  thinking_->setCurrentIndex(std::max(0, thinking_->findData(QString::fromStdString(cfg.enable_thinking))));
  trainOnInputs_->setChecked(cfg.train_on_inputs);
  skipBadRows_->setChecked(cfg.skip_bad_rows);
  truncation_->setCurrentIndex(std::max(0, truncation_->findData(QString::fromStdString(cfg.truncation))));
  loading_ = false;
}

void DataPage::writeToConfig() {
  if (loading_) return;
  deltatune::RunConfig cfg = doc_->config();
  cfg.datasets.clear();
  cfg.test_datasets.clear();
  for (int r = 0; r < table_->rowCount(); ++r) {
    deltatune::DatasetSpec d;
    d.path = table_->item(r, PathColumn)->text().toStdString();
    d.type =
        qobject_cast<QComboBox*>(table_->cellWidget(r, TypeColumn))->currentData().toString().toStdString();
    const bool eval = qobject_cast<QComboBox*>(table_->cellWidget(r, UseColumn))->currentIndex() == 1;
    (eval ? cfg.test_datasets : cfg.datasets).push_back(d);
  }
  cfg.train_on_inputs = trainOnInputs_->isChecked();
  cfg.skip_bad_rows = skipBadRows_->isChecked();
  cfg.truncation = truncation_->currentData().toString().toStdString();
  cfg.enable_thinking = thinking_->currentData().toString().toStdString();
  doc_->setConfig(cfg, this);
  debounce_.start();
}

void DataPage::onConfigChanged(QObject* source) {
  if (source == this) return;
  loadFromConfig();
  debounce_.start();
}

void DataPage::refreshPreview() {
  debounce_.stop();
  const deltatune::RunConfig cfg = doc_->config();
  if (cfg.datasets.empty()) {
    error_->setText(tr("Add at least one training file."));
    return;
  }
  if (cfg.base_model.empty()) {
    error_->setText(tr("Choose a model first: examples are rendered and tokenized with its tokenizer."));
    return;
  }
  previewing_ = true;
  const int generation = ++previewGeneration_;
  error_->setText(QString());
  stats_->setText(tr("Reading and tokenizing…"));
  runInBackground<deltatune::DataPreview>(
      this, [cfg] { return deltatune::preview_data(cfg, 50); },
      [this, generation](deltatune::DataPreview p) {
        if (generation != previewGeneration_) return;
        previewing_ = false;
        preview_ = std::move(p);
        showPreview();
        emit previewReady();
      },
      [this, generation](QString message) {
        if (generation != previewGeneration_) return;
        previewing_ = false;
        preview_ = {};
        doc_->setDataImageTokensPerStep(0);
        stats_->setText(tr("—"));
        view_->clear();
        images_->setImages({});
        exampleError_->setVisible(false);
        error_->setText(tr("Cannot read the data: %1").arg(message));
        emit previewFailed(message);
      });
}

void DataPage::showPreview() {
  for (int r = 0; r < table_->rowCount(); ++r) {
    const std::string path = table_->item(r, PathColumn)->text().toStdString();
    for (const auto& d : preview_.datasets) {
      if (d.path != path) continue;
      table_->item(r, DetectedColumn)->setText(QString::fromStdString(d.format));
      table_->item(r, RowsColumn)
          ->setText(d.skipped_rows > 0 ? tr("%1 (%2 skipped)").arg(d.rows).arg(d.skipped_rows)
                                       : QString::number(d.rows));
    }
  }
  const deltatune::DataStats& s = preview_.stats;
  auto row = [](const QString& k, const QString& v) {
    return QStringLiteral("<tr><td style='padding-right:12px; color:#555;'>%1</td><td><b>%2</b></td></tr>")
        .arg(k, v);
  };
  QString html = QStringLiteral("<table>");
  html +=
      row(tr("Examples"), QString::number(s.examples) +
                              (s.eval_examples > 0 ? tr(" (+%1 for eval)").arg(s.eval_examples) : QString()));
  html += row(tr("Tokens"), formatCount(s.tokens));
  const double frac =
      s.tokens > 0 ? 100.0 * static_cast<double>(s.trained_tokens) / static_cast<double>(s.tokens) : 0;
  html += row(tr("Trained tokens"), tr("%1 (%2 %)").arg(formatCount(s.trained_tokens)).arg(frac, 0, 'f', 1));
  html += row(tr("Truncated / dropped"), QString("%1 / %2").arg(s.truncated).arg(s.dropped));
  if (s.images > 0) {
    html += row(tr("Images"), tr("%1, %2 image tokens").arg(s.images).arg(formatCount(s.image_tokens)));
    html += row(tr("Image tokens / step"), tr("at most %1").arg(formatCount(s.max_image_tokens_per_step)));
  }
  if (doc_->config().sample_packing)
    html += row(tr("Packing"),
                tr("%1 rows, %2 % filled").arg(s.packed_rows).arg(100.0 * s.packing_efficiency, 0, 'f', 1));
  html += QStringLiteral("</table>");
  if (!preview_.warnings.empty()) {
    html += QStringLiteral("<p style='color:#a05a00'>");
    for (const auto& w : preview_.warnings) html += QString::fromStdString(w).toHtmlEscaped() + "<br/>";
    html += QStringLiteral("</p>");
  }
  stats_->setText(html);
  doc_->setDataImageTokensPerStep(s.max_image_tokens_per_step);
  const int n = static_cast<int>(preview_.examples.size());
  exampleIndex_->blockSignals(true);
  exampleIndex_->setRange(1, std::max(1, n));
  exampleIndex_->setValue(1);
  exampleIndex_->blockSignals(false);
  showExample(0);
}

void DataPage::showExample(int index) {
  if (index < 0 || index >= static_cast<int>(preview_.examples.size())) {
    view_->clear();
    exampleSource_->clear();
    images_->setImages({});
    exampleError_->setVisible(false);
    return;
  }
  const auto& ex = preview_.examples[static_cast<size_t>(index)];
  int trained = 0;
  for (const auto& t : ex.tokens) trained += t.trained ? 1 : 0;
  int imageTokens = 0;
  for (const auto& t : ex.tokens) imageTokens += t.image ? 1 : 0;
  exampleSource_->setText(tr("of %1 — %2, %3 tokens, %4 trained")
                              .arg(preview_.examples.size())
                              .arg(QString::fromStdString(ex.source))
                              .arg(ex.tokens.size())
                              .arg(trained) +
                          (ex.images.empty() ? QString()
                                             : (ex.images.size() == 1 ? tr(", 1 image") :
                                                tr(", %1 images").arg(ex.images.size())) +
                                                   tr(" (%1 image tokens)").arg(imageTokens)));
  view_->setHtml(tokensToHtml(ex));
  images_->setImages(ex.images);
  exampleError_->setText(ex.error.empty() ? QString()
                                          : tr("Not trained (skip_bad_rows skips it, else the run stops): %1")
                                                .arg(QString::fromStdString(ex.error)));
  exampleError_->setVisible(!ex.error.empty());
}

QString DataPage::exampleSourceText() const {
  return exampleSource_->text();
}

void DataPage::selectExample(int index) {
  exampleIndex_->setValue(index + 1);
}

}  // namespace studio
