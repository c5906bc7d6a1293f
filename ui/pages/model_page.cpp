#include "pages/model_page.h"

#include <algorithm>

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QTableWidget>
#include <QVBoxLayout>

#include "app_settings.h"
#include "background_task.h"
#include "demo_paths.h"
#include "format.h"
#include "layer_strip.h"
#include "run_document.h"

namespace studio {

namespace {
QString groupLabel(const std::string& g) {
  static const QMap<QString, QString> names = {
      {"embed", "Embeddings"},
      {"attn", "Full attention (q/k/v/o)"},
      {"linear_attn", "Gated DeltaNet"},
      {"mlp", "MLP"},
      {"experts", "Routed experts"},
      {"shared_expert", "Shared expert"},
      {"norm", "Norms"},
      {"lm_head", "LM head"},
      {"total", "Total"},
  };
  const QString k = QString::fromStdString(g);
  return names.value(k, k);
}
}  // namespace

ModelPage::ModelPage(RunDocument* doc, AppSettings* settings, QWidget* parent)
    : QWidget(parent), doc_(doc), settings_(settings) {
  auto* outer = new QVBoxLayout(this);

  auto* pick = new QHBoxLayout;
  pick->addWidget(new QLabel(tr("Checkpoint folder:")));
  folder_ = new QComboBox;
  folder_->setEditable(true);
  folder_->setInsertPolicy(QComboBox::NoInsert);
  folder_->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
  folder_->lineEdit()->setPlaceholderText(
      tr("a Hugging Face Qwen3.5 folder (config.json, *.safetensors, tokenizer)"));
  pick->addWidget(folder_, 1);
  auto* browse = new QPushButton(tr("Browse…"));
  pick->addWidget(browse);
  loadButton_ = new QPushButton(tr("Load"));
  loadButton_->setDefault(true);
  pick->addWidget(loadButton_);
  auto* demo = new QPushButton(tr("Demo model"));
  demo->setToolTip(tr("The tiny bundled Qwen3.5-architecture model"));
  demo->setEnabled(!demoDir().isEmpty());
  pick->addWidget(demo);
  outer->addLayout(pick);

  status_ = new QLabel;
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  outer->addWidget(status_);

  auto* scroll = new QScrollArea;
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  auto* body = new QWidget;
  auto* layout = new QVBoxLayout(body);
  layout->setContentsMargins(0, 0, 0, 0);

  auto* archBox = new QGroupBox(tr("Architecture"));
  auto* archLayout = new QVBoxLayout(archBox);
  summary_ = new QLabel;
  summary_->setTextFormat(Qt::RichText);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  archLayout->addWidget(summary_);
  archLayout->addWidget(new QLabel(tr("Layer pattern")));
  strip_ = new LayerStrip;
  archLayout->addWidget(strip_);
  stripLegend_ =
      new QLabel(tr("<span style='color:%1'>&#9632;</span> linear attention (Gated DeltaNet) &nbsp;&nbsp; "
                    "<span style='color:%2'>&#9632;</span> full attention (gated)")
                     .arg(LayerStrip::linearColor().name(), LayerStrip::fullColor().name()));
  archLayout->addWidget(stripLegend_);
  layout->addWidget(archBox);

  auto* row = new QHBoxLayout;
  auto* paramBox = new QGroupBox(tr("Parameters"));
  auto* paramLayout = new QVBoxLayout(paramBox);
  params_ = new QTableWidget(0, 2);
  params_->setHorizontalHeaderLabels({tr("Group"), tr("Parameters")});
  params_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  params_->verticalHeader()->setVisible(false);
  params_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  params_->setSelectionMode(QAbstractItemView::NoSelection);
  params_->verticalHeader()->setDefaultSectionSize(fontMetrics().height() + 8);
  paramLayout->addWidget(params_);
  row->addWidget(paramBox, 1);

  auto* filesBox = new QGroupBox(tr("Files"));
  auto* filesLayout = new QVBoxLayout(filesBox);
  files_ = new QLabel;
  files_->setTextFormat(Qt::RichText);
  files_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  files_->setWordWrap(true);
  filesLayout->addWidget(files_);
  filesLayout->addStretch();
  row->addWidget(filesBox, 1);
  layout->addLayout(row, 1);

  auto* visionBox = new QGroupBox(tr("Vision tower"));
  visionBox->setObjectName("vision_tower");
  auto* visionLayout = new QVBoxLayout(visionBox);
  vision_ = new QLabel;
  vision_->setTextFormat(Qt::RichText);
  vision_->setWordWrap(true);
  vision_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  visionLayout->addWidget(vision_);
  visionBox_ = visionBox;
  visionBox_->setVisible(false);
  layout->addWidget(visionBox_);

  warnings_ = new QLabel;
  warnings_->setWordWrap(true);
  warnings_->setTextFormat(Qt::RichText);
  layout->addWidget(warnings_);
  scroll->setWidget(body);
  outer->addWidget(scroll, 1);

  connect(browse, &QPushButton::clicked, this, &ModelPage::onBrowse);
  connect(loadButton_, &QPushButton::clicked, this, [this] { loadModel(folder_->currentText().trimmed()); });
  connect(folder_->lineEdit(), &QLineEdit::returnPressed, this,
          [this] { loadModel(folder_->currentText().trimmed()); });
  connect(folder_, &QComboBox::activated, this, [this](int i) { loadModel(folder_->itemText(i)); });
  connect(demo, &QPushButton::clicked, this, [this] { loadModel(demoDir() + QStringLiteral("/model")); });
  connect(doc_, &RunDocument::configChanged, this, &ModelPage::onConfigChanged);

  refreshRecent();
  showError(QString());
  status_->setText(tr("Choose a checkpoint folder, or try the bundled demo model."));
}

QString ModelPage::errorText() const {
  return loadedDir_.isEmpty() ? status_->text() : QString();
}

void ModelPage::refreshRecent() {
  const QString current = folder_->currentText();
  folder_->blockSignals(true);
  folder_->clear();
  folder_->addItems(settings_->recentModels());
  folder_->setCurrentText(current);
  folder_->blockSignals(false);
}

void ModelPage::onBrowse() {
  const QString dir =
      QFileDialog::getExistingDirectory(this, tr("Checkpoint folder"), folder_->currentText());
  if (!dir.isEmpty()) loadModel(dir);
}

void ModelPage::loadModel(const QString& dir) {
  if (dir.isEmpty()) return;
  const QString clean = QDir::cleanPath(QDir(dir).absolutePath());
  deltatune::RunConfig cfg = doc_->config();
  if (QString::fromStdString(cfg.base_model) != clean) {
    cfg.base_model = clean.toStdString();
    doc_->setConfig(cfg, this);
  }
  startLoad(clean);
}

void ModelPage::onConfigChanged(QObject* source) {
  if (doc_->modelInfo()) showVision(*doc_->modelInfo());  // the vision LoRA group may have been turned on/off
  const QString dir = QString::fromStdString(doc_->config().base_model);
  if (source == this || dir.isEmpty() || dir == loadedDir_ || dir == pendingDir_) return;
  startLoad(dir);
}

void ModelPage::startLoad(const QString& dir) {
  folder_->setCurrentText(dir);
  pendingDir_ = dir;
  loading_ = true;
  status_->setStyleSheet(QString());
  status_->setText(tr("Reading %1 …").arg(dir));
  runInBackground<deltatune::ModelInfo>(
      this, [d = dir.toStdString()] { return deltatune::model_info_load(d); },
      [this, dir](deltatune::ModelInfo info) {
        if (dir != pendingDir_) return;  // a newer request superseded this one
        loading_ = false;
        pendingDir_.clear();
        loadedDir_ = dir;
        settings_->addRecentModel(dir);
        refreshRecent();
        showInfo(info);
        doc_->setModelInfo(info);
        emit modelLoaded(dir);
      },
      [this, dir](QString message) {
        if (dir != pendingDir_) return;
        loading_ = false;
        pendingDir_.clear();
        loadedDir_.clear();
        showError(message);
        doc_->setModelInfo(std::nullopt);
        emit modelFailed(message);
      });
}

void ModelPage::showInfo(const deltatune::ModelInfo& info) {
  status_->setStyleSheet(QString());
  status_->setText(tr("Loaded <b>%1</b>").arg(QString::fromStdString(info.dir).toHtmlEscaped()));
  auto row = [](const QString& k, const QString& v) {
    return QStringLiteral("<tr><td style='padding-right:16px; color:#555;'>%1</td><td><b>%2</b></td></tr>")
        .arg(k, v);
  };
  QString html = QStringLiteral("<table>");
  html += row(tr("Model type"), QString::fromStdString(info.model_type) +
                                    (info.is_moe ? tr(" (mixture of experts)") : tr(" (dense)")));
  html +=
      row(tr("Architecture"),
          QString::fromStdString(info.architecture) +
              (info.vision.present ? tr(" — vision-language: text model + vision tower (below)")
               : info.vision_language_layout ? tr(" — vision-language layout, text part used")
                                             : QString()));
  html += row(tr("Hidden size / layers"), QString("%1 / %2").arg(info.hidden_size).arg(info.num_layers));
  html += row(tr("Full attention"), tr("%1 query heads, %2 KV heads, head dim %3")
                                        .arg(info.num_attention_heads)
                                        .arg(info.num_key_value_heads)
                                        .arg(info.head_dim));
  html += row(tr("Gated DeltaNet"), tr("%1 key heads × %2, %3 value heads × %4")
                                        .arg(info.linear_num_key_heads)
                                        .arg(info.linear_key_head_dim)
                                        .arg(info.linear_num_value_heads)
                                        .arg(info.linear_value_head_dim));
  if (info.is_moe) {
    html += row(tr("Experts"), tr("%1 experts, %2 per token, expert FFN %3, shared expert FFN %4")
                                   .arg(info.num_experts)
                                   .arg(info.num_experts_per_tok)
                                   .arg(info.moe_intermediate_size)
                                   .arg(info.shared_expert_intermediate_size));
  } else {
    html += row(tr("MLP"), tr("intermediate size %1").arg(info.intermediate_size));
  }
  html += row(tr("Vocabulary"), QString::number(info.vocab_size) +
                                    (info.tied_embeddings ? tr(" (tied embeddings)") : QString()));
  html += row(tr("Total parameters"), formatCount(info.total_params));
  html += QStringLiteral("</table>");
  summary_->setText(html);

  QStringList types;
  for (const auto& t : info.layer_types) types << QString::fromStdString(t);
  strip_->setLayerTypes(types);

  params_->setRowCount(0);
  // Model order (input to output), then anything the engine adds later.
  std::vector<std::pair<std::string, int64_t>> ordered;
  for (const char* g :
       {"embed", "linear_attn", "attn", "mlp", "shared_expert", "experts", "norm", "lm_head"}) {
    const auto it = info.params_per_group.find(g);
    if (it != info.params_per_group.end()) ordered.emplace_back(*it);
  }
  for (const auto& kv : info.params_per_group)
    if (std::find_if(ordered.begin(), ordered.end(), [&](const auto& g) { return g.first == kv.first; }) ==
        ordered.end())
      ordered.emplace_back(kv);
  ordered.emplace_back("total", info.total_params);
  for (const auto& [group, n] : ordered) {
    const int r = params_->rowCount();
    params_->insertRow(r);
    params_->setItem(r, 0, new QTableWidgetItem(groupLabel(group)));
    auto* num = new QTableWidgetItem(formatCount(n));
    num->setToolTip(QString::number(n));
    num->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    params_->setItem(r, 1, num);
    if (group == "total") {
      QFont bold = num->font();
      bold.setBold(true);
      num->setFont(bold);
      params_->item(r, 0)->setFont(bold);
    }
  }

  QStringList dtypes;
  for (const auto& [dt, n] : info.dtype_counts)
    dtypes << QString("%1 × %2").arg(QString::fromStdString(dt)).arg(n);
  auto yesNo = [](bool ok, const QString& what) {
    return QString("<span style='color:%1'>%2</span> %3")
        .arg(ok ? "#2c7a2c" : "#b00020", ok ? "&#10004;" : "&#10008;", what);
  };
  QString f;
  f += tr("Tensor dtypes: <b>%1</b><br/>").arg(dtypes.join(", "));
  if (info.skipped_tensors > 0)
    f += (info.vision.present ? tr("Not in the text model (vision tower / MTP): %1 tensors<br/>")
                              : tr("Skipped (vision / MTP): %1 tensors<br/>"))
             .arg(info.skipped_tensors);
  f += yesNo(info.has_tokenizer, tr("tokenizer.json")) + "<br/>";
  f += yesNo(info.has_chat_template, tr("chat template")) + "<br/>";
  QStringList groups;
  for (const auto& g : info.lora_groups) groups << QString::fromStdString(g);
  f += tr("LoRA target groups: <b>%1</b>").arg(groups.join(", "));
  files_->setText(f);

  showVision(info);

  if (info.warnings.empty()) {
    warnings_->clear();
  } else {
    QString w = QStringLiteral("<b style='color:#b00020'>%1</b><ul>").arg(tr("Warnings"));
    for (const auto& m : info.warnings) w += "<li>" + QString::fromStdString(m).toHtmlEscaped() + "</li>";
    warnings_->setText(w + "</ul>");
  }
}

QString ModelPage::visionText() const {
  return vision_->text();
}

void ModelPage::showVision(const deltatune::ModelInfo& info) {
  const deltatune::VisionTowerInfo& v = info.vision;
  visionBox_->setVisible(v.present);
  if (!v.present) {
    vision_->clear();
    return;
  }
  auto row = [](const QString& k, const QString& val) {
    return QStringLiteral("<tr><td style='padding-right:16px; color:#555;'>%1</td><td><b>%2</b></td></tr>")
        .arg(k, val);
  };
  QString html = QStringLiteral("<table>");
  html += row(tr("Blocks / hidden"), tr("%1 / %2, %3 heads, MLP %4").arg(v.depth).arg(v.hidden).arg(v.heads).arg(
                                         v.intermediate));
  html += row(tr("Patches"), tr("%1 × %1 pixels (temporal %2), merged %3 × %3 into one token of width %4")
                                 .arg(v.patch_size)
                                 .arg(v.temporal_patch_size)
                                 .arg(v.merge_size)
                                 .arg(v.out_hidden));
  html += row(tr("Parameters"), formatCount(v.params));
  html += row(tr("Image size"), tr("%1 to %2 pixels: at most %3 tokens an image")
                                    .arg(formatCount(v.min_pixels), formatCount(v.max_pixels))
                                    .arg(deltatune::image_tokens_for_pixels(info)));
  const bool hasGroup =
      std::find(info.lora_groups.begin(), info.lora_groups.end(), "vision") != info.lora_groups.end();
  const auto& groups = doc_->config().lora_target_groups;
  const bool trained = hasGroup && std::find(groups.begin(), groups.end(), "vision") != groups.end();
  html += row(tr("Training"),
              trained ? tr("LoRA on the tower's attention and MLP (the <i>vision</i> target group)")
              : hasGroup
                  ? tr("frozen (the <i>vision</i> LoRA target group is off; turn it on in Train settings)")
                  : tr("frozen (this build has no <i>vision</i> LoRA target group)"));
  html += QStringLiteral("</table>");
  if (!v.unusable.empty())
    html += QStringLiteral("<p style='color:#b00020'>%1</p>")
                .arg(tr("Image rows cannot be trained: %1").arg(QString::fromStdString(v.unusable).toHtmlEscaped()));
  vision_->setText(html);
}

void ModelPage::showError(const QString& message) {
  summary_->setText(QString());
  strip_->setLayerTypes({});
  params_->setRowCount(0);
  files_->clear();
  vision_->clear();
  visionBox_->setVisible(false);
  warnings_->clear();
  if (!message.isEmpty()) {
    status_->setStyleSheet(QStringLiteral("color: #b00020;"));
    status_->setText(tr("Cannot use this folder: %1").arg(message));
  }
}

}  // namespace studio
