#include "pages/train_page.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileDialog>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QSaveFile>
#include <QScrollArea>
#include <QSpinBox>
#include <QThread>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <vector>
#include "deltatune/memory_plan.h"

#include "format.h"
#include "gpu_picker.h"
#include "gpu_probe.h"
#include "deltatune/shard_plan.h"
#include "run_document.h"
#include "yaml_blocks.h"
#include "yaml_dialog.h"

namespace studio {

namespace {

// A spin box for values spanning decades (learning rates): shown as 2e-04, not 0.000200.
class SciSpinBox : public QDoubleSpinBox {
 public:
  using QDoubleSpinBox::QDoubleSpinBox;
  QString textFromValue(double v) const override { return QString::number(v, 'g', 6); }
  double valueFromText(const QString& text) const override { return text.toDouble(); }
  QValidator::State validate(QString& text, int&) const override {
    bool ok = false;
    text.toDouble(&ok);
    if (ok) return QValidator::Acceptable;
    return text.isEmpty() || text.endsWith('e') || text.endsWith('-') || text.endsWith('.')
               ? QValidator::Intermediate
               : QValidator::Invalid;
  }
};

const QMap<QString, QString>& groupTitles() {
  static const QMap<QString, QString> t = {
      {"attn", QObject::tr("Full attention (q/k/v/o_proj)")},
      {"linear_attn", QObject::tr("Gated DeltaNet (in_proj_qkv/z/a/b, out_proj)")},
      {"mlp", QObject::tr("MLP (gate/up/down_proj)")},
      {"shared_expert", QObject::tr("Shared expert")},
      {"experts", QObject::tr("Routed experts (3-D weights)")},
      {"vision", QObject::tr("Vision tower (attn.qkv/proj, mlp.linear_fc1/fc2)")},
  };
  return t;
}

template <typename W>
W* named(W* w, const char* key) {
  w->setObjectName(QLatin1String(key));
  return w;
}

}  // namespace

const QStringList& TrainPage::allLoraGroups() {
  static const QStringList g = {"attn", "linear_attn", "mlp", "shared_expert", "experts", "vision"};
  return g;
}

const QStringList& TrainPage::presetSkippedKeys() {
  static const QStringList k = {"base_model",
                                "datasets",
                                "test_datasets",
                                "output_dir",
                                "run_name",
                                "resume_from_checkpoint",
                                "lora_model_dir",
                                "dataset_prepared_path",
                                "tags"};
  return k;
}

TrainPage::TrainPage(RunDocument* doc, GpuProbe* gpus, QWidget* parent)
    : QWidget(parent), doc_(doc), gpus_(gpus) {
  buildUi();
  connect(doc_, &RunDocument::configChanged, this, [this](QObject* source) {
    if (source != this) loadFromConfig();
    updateGroups();
    updateRuntimeLine();
    updateVram();
  });
  connect(doc_, &RunDocument::modelInfoChanged, this, [this] {
    updateGroups();
    updateVram();
  });
  connect(doc_, &RunDocument::dataImageTokensChanged, this, &TrainPage::updateVram);
  if (gpus_) connect(gpus_, &GpuProbe::gpusChanged, this, &TrainPage::updateGpuList);
  loadFromConfig();
  updateGpuList();
  updateGroups();
  updateVram();
}

void TrainPage::buildUi() {
  auto* outer = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  auto* yaml = new QPushButton(tr("Show YAML…"));
  auto* load = new QPushButton(tr("Load preset…"));
  auto* save = new QPushButton(tr("Save preset…"));
  bar->addWidget(yaml);
  bar->addStretch();
  bar->addWidget(load);
  bar->addWidget(save);
  outer->addLayout(bar);
  connect(yaml, &QPushButton::clicked, this, &TrainPage::showYaml);
  connect(load, &QPushButton::clicked, this, &TrainPage::choosePreset);
  connect(save, &QPushButton::clicked, this, [this] {
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Save preset"), QString(), tr("YAML (*.yaml *.yml)"));
    if (!path.isEmpty()) savePreset(path);
  });

  auto* scroll = new QScrollArea;
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  auto* body = new QWidget;
  auto* grid = new QGridLayout(body);
  grid->setContentsMargins(0, 0, 0, 0);
  scroll->setWidget(body);
  outer->addWidget(scroll, 1);

  // LoRA
  auto* lora = new QGroupBox(tr("LoRA adapter"));
  auto* loraLayout = new QVBoxLayout(lora);
  auto* groupsGrid = new QGridLayout;
  int row = 0;
  for (const QString& g : allLoraGroups()) {
    auto* check = new QCheckBox(groupTitles().value(g));
    check->setObjectName("lora_group_" + g);
    auto* info = new QLabel;
    info->setStyleSheet(QStringLiteral("color: #555;"));
    groupsGrid->addWidget(check, row, 0);
    groupsGrid->addWidget(info, row, 1, Qt::AlignRight);
    groupChecks_.insert(g, check);
    groupInfo_.insert(g, info);
    connect(check, &QCheckBox::toggled, this, &TrainPage::writeToConfig);
    ++row;
  }
  loraLayout->addLayout(groupsGrid);
  groupsNote_ = new QLabel;
  groupsNote_->setWordWrap(true);
  groupsNote_->setStyleSheet(QStringLiteral("color: #555;"));
  loraLayout->addWidget(groupsNote_);
  auto* loraForm = new QFormLayout;
  rank_ = named(new QSpinBox, "lora_r");
  rank_->setRange(1, 1024);
  alpha_ = named(new QDoubleSpinBox, "lora_alpha");
  alpha_->setRange(0.01, 4096);
  alpha_->setDecimals(2);
  dropout_ = named(new QDoubleSpinBox, "lora_dropout");
  dropout_->setRange(0, 0.9);
  dropout_->setSingleStep(0.05);
  dropout_->setDecimals(3);
  rslora_ = named(new QCheckBox(tr("rank-stabilised scaling (alpha / √r)")), "use_rslora");
  loraForm->addRow(tr("Rank r"), rank_);
  loraForm->addRow(tr("Alpha"), alpha_);
  loraForm->addRow(tr("Dropout"), dropout_);
  loraForm->addRow(QString(), rslora_);
  loraLayout->addLayout(loraForm);
  grid->addWidget(lora, 0, 0);

  // Batches
  auto* batch = new QGroupBox(tr("Sequences and batches"));
  auto* batchForm = new QFormLayout(batch);
  seqLen_ = named(new QSpinBox, "sequence_len");
  seqLen_->setRange(16, 1 << 20);
  seqLen_->setSingleStep(256);
  packing_ = named(new QCheckBox(tr("pack several examples per row")), "sample_packing");
  microBatch_ = named(new QSpinBox, "micro_batch_size");
  microBatch_->setRange(1, 4096);
  accum_ = named(new QSpinBox, "gradient_accumulation_steps");
  accum_->setRange(1, 4096);
  batchForm->addRow(tr("Sequence length"), seqLen_);
  batchForm->addRow(tr("Packing"), packing_);
  batchForm->addRow(tr("Micro-batch size"), microBatch_);
  batchForm->addRow(tr("Gradient accumulation"), accum_);
  grid->addWidget(batch, 0, 1);

  // Optimisation
  auto* opt = new QGroupBox(tr("Optimisation"));
  auto* optForm = new QFormLayout(opt);
  lr_ = named(new SciSpinBox, "learning_rate");
  lr_->setDecimals(12);
  lr_->setRange(0, 10);
  lr_->setSingleStep(1e-5);
  scheduler_ = named(new QComboBox, "lr_scheduler");
  scheduler_->addItems({"constant", "linear", "cosine"});
  warmup_ = named(new QSpinBox, "warmup_steps");
  warmup_->setRange(0, 1000000);
  epochs_ = named(new QDoubleSpinBox, "num_epochs");
  epochs_->setRange(0.01, 1000);
  epochs_->setDecimals(2);
  maxSteps_ = named(new QSpinBox, "max_steps");
  maxSteps_->setRange(-1, 100000000);
  maxSteps_->setSpecialValueText(tr("from epochs"));
  weightDecay_ = named(new QDoubleSpinBox, "weight_decay");
  weightDecay_->setRange(0, 1);
  weightDecay_->setDecimals(4);
  weightDecay_->setSingleStep(0.01);
  maxGradNorm_ = named(new QDoubleSpinBox, "max_grad_norm");
  maxGradNorm_->setRange(0, 1000);
  maxGradNorm_->setSpecialValueText(tr("no clipping"));
  optForm->addRow(tr("Learning rate"), lr_);
  optForm->addRow(tr("Schedule"), scheduler_);
  optForm->addRow(tr("Warm-up steps"), warmup_);
  optForm->addRow(tr("Epochs"), epochs_);
  optForm->addRow(tr("Max steps"), maxSteps_);
  optForm->addRow(tr("Weight decay"), weightDecay_);
  optForm->addRow(tr("Clip grad norm"), maxGradNorm_);
  grid->addWidget(opt, 1, 0);

  // Evaluation, engine, output
  auto* eng = new QGroupBox(tr("Evaluation, engine and output"));
  auto* engForm = new QFormLayout(eng);
  valSplit_ = named(new QDoubleSpinBox, "val_set_size");
  valSplit_->setRange(0, 0.5);
  valSplit_->setDecimals(3);
  valSplit_->setSingleStep(0.01);
  evalSteps_ = named(new QSpinBox, "eval_steps");
  evalSteps_->setRange(0, 1000000);
  evalSteps_->setSpecialValueText(tr("at the end"));
  saveSteps_ = named(new QSpinBox, "save_steps");
  saveSteps_->setRange(0, 1000000);
  saveSteps_->setSpecialValueText(tr("at the end / on stop"));
  seed_ = named(new QSpinBox, "seed");
  seed_->setRange(0, 2147483647);
  backend_ = named(new QComboBox, "backend");
  backend_->addItems({"auto", "cpu", "cuda"});
  baseQuant_ = named(new QComboBox, "base_quantization");
  baseQuant_->addItem(tr("bf16 (as stored)"), QStringLiteral("none"));
  baseQuant_->addItem(tr("FP8 (8-bit, 128x128 block scales)"), QStringLiteral("fp8"));
  baseQuant_->addItem(tr("NF4 (4-bit, QLoRA)"), QStringLiteral("nf4"));
  baseQuant_->setToolTip(tr("Hold the frozen base's linear weights quantized on the GPU (less memory; the LoRA "
                            "weights and the exported adapter stay as they are). FP8 checkpoints are used as FP8."));
  gpus_picker_ = named(new GpuPicker, "gpus");
  gpusNote_ = new QLabel;
  gpusNote_->setStyleSheet(QStringLiteral("color: #555;"));
  gpuRuntime_ = named(new QLabel, "gpu_runtime");  // driver, CUDA runtime, or what to install
  gpuRuntime_->setWordWrap(true);
  gpuRuntime_->setAlignment(Qt::AlignLeft | Qt::AlignTop);  // a wrapped label's row can be taller than its text
  gpuRuntime_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  fusedLoss_ = named(new QCheckBox(tr("fused linear cross-entropy")), "fused_loss");
  lossLogits_ = named(new QComboBox, "loss_logits");
  lossLogits_->addItem(tr("fp32 (default)"), QStringLiteral("fp32"));
  lossLogits_->addItem(tr("bf16 (as HF and Liger; faster on a GPU)"), QStringLiteral("bf16"));
  lossLogits_->setToolTip(tr("loss_logits: the precision of the fused loss's logits. bf16 is what HF transformers and "
                             "Liger compute (the lm_head GEMM's output); the cross-entropy's math stays fp32. On the "
                             "GPU the loss then runs in larger chunks in the same memory. The CPU backend computes "
                             "fp32 logits."));
  gradCkptAuto_ = named(new QCheckBox(tr("plan checkpointing for the GPU's free memory (auto)")),
                        "gradient_checkpointing_auto");
  gradCkptAuto_->setToolTip(tr("gradient_checkpointing: auto: at the start of the run the fastest setting that fits "
                               "the GPU's free memory (checkpointed layers, loss chunk) is chosen; the estimate "
                               "below shows the plan."));
  activationOffload_ = named(new QCheckBox(tr("the plan may use page-locked host memory")), "activation_offload");
  activationOffload_->setToolTip(tr("activation_offload: with the auto plan on a GPU, checkpointed layers' inputs (and "
                                    "some MLP activations) may wait in page-locked host memory during the step, so "
                                    "that more is kept for the recompute. Off for hosts short of RAM."));
  gradCkpt_ = named(new QCheckBox(tr("gradient checkpointing")), "gradient_checkpointing");
  ckptLayers_ = named(new QSpinBox, "gradient_checkpointing_layers");
  ckptLayers_->setRange(-1, 100000);
  ckptLayers_->setSpecialValueText(tr("all"));
  ckptLayers_->setToolTip(tr("With gradient checkpointing: how many decoder layers, counted from the first, are "
                             "checkpointed; the others keep their activations (faster, more memory)."));
  outputDir_ = named(new QLineEdit, "output_dir");
  runName_ = named(new QLineEdit, "run_name");
  runName_->setPlaceholderText(tr("(generated)"));
  engForm->addRow(tr("Validation split"), valSplit_);
  engForm->addRow(tr("Evaluate every"), evalSteps_);
  engForm->addRow(tr("Checkpoint every"), saveSteps_);
  engForm->addRow(tr("Seed"), seed_);
  engForm->addRow(tr("Backend"), backend_);
  engForm->addRow(tr("Base weights"), baseQuant_);
  engForm->addRow(tr("GPUs"), gpus_picker_);
  engForm->addRow(QString(), gpusNote_);
  engForm->addRow(QString(), gpuRuntime_);
  engForm->addRow(tr("Loss"), fusedLoss_);
  engForm->addRow(tr("Loss logits"), lossLogits_);
  engForm->addRow(tr("Memory"), gradCkptAuto_);
  engForm->addRow(QString(), activationOffload_);
  engForm->addRow(QString(), gradCkpt_);
  engForm->addRow(tr("Layers checkpointed"), ckptLayers_);
  engForm->addRow(tr("Output folder"), outputDir_);
  engForm->addRow(tr("Run name"), runName_);
  grid->addWidget(eng, 1, 1);

  // VRAM
  auto* vram = new QGroupBox(tr("Estimated peak GPU memory"));
  auto* vramLayout = new QVBoxLayout(vram);
  vramBar_ = new QProgressBar;
  vramBar_->setRange(0, 1000);
  vramBar_->setTextVisible(false);
  vramLayout->addWidget(vramBar_);
  vramLabel_ = new QLabel;
  vramLabel_->setWordWrap(true);
  vramLayout->addWidget(vramLabel_);
  grid->addWidget(vram, 2, 0, 1, 2);
  grid->setRowStretch(3, 1);

  for (QSpinBox* s :
       {rank_, seqLen_, microBatch_, accum_, warmup_, maxSteps_, evalSteps_, saveSteps_, seed_, ckptLayers_})
    connect(s, &QSpinBox::valueChanged, this, &TrainPage::writeToConfig);
  for (QDoubleSpinBox* s : {alpha_, dropout_, lr_, epochs_, weightDecay_, maxGradNorm_, valSplit_})
    connect(s, &QDoubleSpinBox::valueChanged, this, &TrainPage::writeToConfig);
  for (QCheckBox* c : {rslora_, packing_, fusedLoss_, gradCkptAuto_, activationOffload_, gradCkpt_})
    connect(c, &QCheckBox::toggled, this, &TrainPage::writeToConfig);
  connect(gpus_picker_, &GpuPicker::changed, this, &TrainPage::writeToConfig);
  for (QComboBox* c : {scheduler_, backend_, baseQuant_, lossLogits_})
    connect(c, &QComboBox::currentIndexChanged, this, &TrainPage::writeToConfig);
  for (QLineEdit* e : {outputDir_, runName_})
    connect(e, &QLineEdit::textEdited, this, &TrainPage::writeToConfig);
}

void TrainPage::loadFromConfig() {
  loading_ = true;
  const deltatune::RunConfig& c = doc_->config();
  const QList<QWidget*> all = findChildren<QWidget*>();
  std::vector<QSignalBlocker> blockers;
  blockers.reserve(static_cast<size_t>(all.size()));
  for (QWidget* w : all) blockers.emplace_back(w);
  for (const QString& g : allLoraGroups())
    groupChecks_[g]->setChecked(std::find(c.lora_target_groups.begin(), c.lora_target_groups.end(),
                                          g.toStdString()) != c.lora_target_groups.end());
  rank_->setValue(c.lora_r);
  alpha_->setValue(c.lora_alpha);
  dropout_->setValue(c.lora_dropout);
  rslora_->setChecked(c.use_rslora);
  seqLen_->setValue(static_cast<int>(c.sequence_len));
  packing_->setChecked(c.sample_packing);
  microBatch_->setValue(static_cast<int>(c.micro_batch_size));
  accum_->setValue(static_cast<int>(c.gradient_accumulation_steps));
  lr_->setValue(c.learning_rate);
  scheduler_->setCurrentText(QString::fromStdString(c.lr_scheduler));
  warmup_->setValue(static_cast<int>(c.warmup_steps));
  epochs_->setValue(c.num_epochs);
  maxSteps_->setValue(c.max_steps > 0 ? static_cast<int>(c.max_steps) : -1);
  weightDecay_->setValue(c.weight_decay);
  maxGradNorm_->setValue(std::max(0.0, c.max_grad_norm));
  valSplit_->setValue(c.val_set_size);
  evalSteps_->setValue(static_cast<int>(c.eval_steps));
  saveSteps_->setValue(static_cast<int>(c.save_steps));
  seed_->setValue(static_cast<int>(c.seed));
  backend_->setCurrentText(QString::fromStdString(c.backend));
  baseQuant_->setCurrentIndex(std::max(0, baseQuant_->findData(QString::fromStdString(c.base_quantization))));
  gpus_picker_->loadFrom(c);
  fusedLoss_->setChecked(c.fused_loss);
  lossLogits_->setCurrentIndex(std::max(0, lossLogits_->findData(QString::fromStdString(c.loss_logits))));
  gradCkptAuto_->setChecked(c.gradient_checkpointing_auto);
  activationOffload_->setChecked(c.activation_offload);
  activationOffload_->setEnabled(c.gradient_checkpointing_auto);
  gradCkpt_->setChecked(c.gradient_checkpointing);
  gradCkpt_->setEnabled(!c.gradient_checkpointing_auto);
  ckptLayers_->setValue(static_cast<int>(c.gradient_checkpointing_layers));
  ckptLayers_->setEnabled(!c.gradient_checkpointing_auto && c.gradient_checkpointing);
  outputDir_->setText(QString::fromStdString(c.output_dir));
  runName_->setText(QString::fromStdString(c.run_name));
  loading_ = false;
}

void TrainPage::writeToConfig() {
  if (loading_) return;
  deltatune::RunConfig c = doc_->config();
  c.lora_target_groups.clear();
  for (const QString& g : allLoraGroups())
    if (groupChecks_[g]->isChecked() && groupChecks_[g]->isEnabled())
      c.lora_target_groups.push_back(g.toStdString());
  c.lora_r = rank_->value();
  c.lora_alpha = alpha_->value();
  c.lora_dropout = dropout_->value();
  c.use_rslora = rslora_->isChecked();
  c.sequence_len = seqLen_->value();
  c.sample_packing = packing_->isChecked();
  c.micro_batch_size = microBatch_->value();
  c.gradient_accumulation_steps = accum_->value();
  c.learning_rate = lr_->value();
  c.lr_scheduler = scheduler_->currentText().toStdString();
  c.warmup_steps = warmup_->value();
  c.num_epochs = epochs_->value();
  c.max_steps = maxSteps_->value() > 0 ? maxSteps_->value() : -1;
  c.weight_decay = weightDecay_->value();
  c.max_grad_norm = maxGradNorm_->value();
  c.val_set_size = valSplit_->value();
  c.eval_steps = evalSteps_->value();
  c.save_steps = saveSteps_->value();
  c.seed = seed_->value();
  c.backend = backend_->currentText().toStdString();
  c.base_quantization = baseQuant_->currentData().toString().toStdString();
  gpus_picker_->applyTo(c);
  c.fused_loss = fusedLoss_->isChecked();
  c.loss_logits = lossLogits_->currentData().toString().toStdString();
  c.gradient_checkpointing_auto = gradCkptAuto_->isChecked();
  c.activation_offload = activationOffload_->isChecked();
  c.gradient_checkpointing = gradCkpt_->isChecked();
  // auto plans the layers itself: the layer count is kept only for an explicit setting.
  c.gradient_checkpointing_layers = c.gradient_checkpointing_auto ? -1 : ckptLayers_->value();
  activationOffload_->setEnabled(c.gradient_checkpointing_auto);
  gradCkpt_->setEnabled(!c.gradient_checkpointing_auto);
  ckptLayers_->setEnabled(!c.gradient_checkpointing_auto && c.gradient_checkpointing);
  c.output_dir = outputDir_->text().toStdString();
  c.run_name = runName_->text().toStdString();
  doc_->setConfig(c, this);
}

QString TrainPage::groupInfoText(const QString& group) const {
  QLabel* l = groupInfo_.value(group);
  return l ? l->text() : QString();
}

QString TrainPage::vramText() const {
  return vramLabel_->text();
}

void TrainPage::updateGroups() {
  const auto& info = doc_->modelInfo();
  std::map<std::string, int64_t> perGroup;
  if (info) {
    try {
      perGroup = deltatune::lora_params_per_group(*info, rank_->value());
    } catch (const std::exception&) {
      perGroup.clear();
    }
  }
  for (const QString& g : allLoraGroups()) {
    const bool listed = info && std::find(info->lora_groups.begin(), info->lora_groups.end(), g.toStdString()) !=
                                    info->lora_groups.end();
    // The `vision` box stays in sight, greyed out, without a vision tower (so the option can be found); a model's
    // other missing groups (mlp in an MoE, experts in a dense model) are hidden.
    const bool vision = g == QLatin1String("vision");
    groupChecks_[g]->setVisible(!info || listed || vision);
    groupInfo_[g]->setVisible(!info || listed || vision);
    groupChecks_[g]->setEnabled(vision ? listed : !info || listed);
    groupChecks_[g]->setToolTip(vision && !listed ? tr("Needs a vision-language checkpoint (config.json with a "
                                                       "vision_config); off by default, the tower is then frozen")
                                                  : QString());
    const auto it = perGroup.find(g.toStdString());
    // Adapters are trained and saved in fp32: 4 bytes per parameter.
    groupInfo_[g]->setText(
        it != perGroup.end() ? tr("%1 params · %2").arg(formatCount(it->second), formatBytes(it->second * 4))
        : vision && info     ? tr("no vision tower")
                             : QString());
  }
  if (!info) {
    groupsNote_->setText(tr("Load a model to see which groups it has and their sizes."));
  } else {
    int64_t total = 0;
    for (const QString& g : allLoraGroups()) {
      const auto it = perGroup.find(g.toStdString());
      if (it != perGroup.end() && groupChecks_[g]->isChecked() && groupChecks_[g]->isEnabled())
        total += it->second;
    }
    groupsNote_->setText(tr("Trainable: <b>%1</b> parameters, adapter file %2 (fp32)")
                             .arg(formatCount(total), formatBytes(total * 4)));
  }
}

void TrainPage::updateGpuList() {
  if (gpus_) {
    {
      QSignalBlocker block(gpus_picker_);
      gpus_picker_->setDetected(gpus_->gpus());
      gpus_picker_->loadFrom(doc_->config());
    }
  }
  updateRuntimeLine();
  updateVram();
}

void TrainPage::updateRuntimeLine() {
  const RuntimeLine line = describeRuntimeForBackend(gpus_ ? gpus_->environment() : nullptr,
                                                     QString::fromStdString(doc_->config().backend),
                                                     QThread::idealThreadCount());
  gpuRuntime_->setText(line.text);
  gpuRuntime_->setStyleSheet(line.warning ? QStringLiteral("color:#b00020") : QString());
}

QString TrainPage::gpusNoteText() const {
  return gpusNote_->text();
}

void TrainPage::updateGpusNote() {
  const deltatune::RunConfig& c = doc_->config();
  const int n = c.gpus_all ? (gpus_ ? static_cast<int>(gpus_->gpus().size()) : 0) : static_cast<int>(c.gpus.size());
  if (!c.gpus_all && n <= 1) {
    gpusNote_->setText(tr("One GPU; check several to train this run data-parallel."));
    gpusNote_->setToolTip(QString());
    return;
  }
  QString text = n > 0 ? tr("Data parallel over %1 GPUs").arg(n) : tr("Data parallel over every GPU");
  if (n > 0)
    text += tr(" · global batch %1 × %2 × %3 = %4 sequences per step")
                .arg(c.micro_batch_size)
                .arg(c.gradient_accumulation_steps)
                .arg(n)
                .arg(c.micro_batch_size * c.gradient_accumulation_steps * n);
  gpusNote_->setText(text);
  gpusNote_->setToolTip(tr("One worker process per GPU, each with the base model and a LoRA copy; the run goes "
                           "to a separate 'deltatune train' process: Pause is not available, Stop writes a "
                           "checkpoint."));
}

void TrainPage::updateVram() {
  updateGpusNote();
  const auto& info = doc_->modelInfo();
  const deltatune::RunConfig& c = doc_->config();
  if (!info) {
    vramEstimate_ = {};
    vramBar_->setValue(0);
    vramLabel_->setText(tr("Load a model to estimate memory."));
    return;
  }
  int64_t capacity = 0, freeBytes = 0;
  QString gpuName;
  if (gpus_) {
    // Data parallel: every worker trains micro-batches of the same shape, so the smallest chosen GPU decides.
    QList<int> chosen;
    if (!c.gpus.empty())
      for (int g : c.gpus) chosen << g;
    else if (!c.gpus_all)
      chosen << c.gpu;
    for (const GpuInfo& g : gpus_->gpus()) {
      if ((c.gpus_all || chosen.contains(g.index)) && (capacity == 0 || g.totalBytes < capacity)) {
        capacity = g.totalBytes;
        freeBytes = g.freeBytes > 0 ? g.freeBytes : g.totalBytes;
        gpuName = g.name;
      }
    }
  }
  deltatune::VramEstimate est;
  QString planText;
  // Image rows: the data's most image tokens in one micro-batch (the Data page reads them), part of the step's tokens.
  deltatune::ImageLoad images;
  if (info->vision.present)
    images.image_tokens_per_step = std::min(doc_->dataImageTokensPerStep(), c.micro_batch_size * c.sequence_len);
  const bool visionLora = std::find(c.lora_target_groups.begin(), c.lora_target_groups.end(), "vision") !=
                          c.lora_target_groups.end();
  try {
    if (c.gradient_checkpointing_auto && freeBytes > 0 && c.backend != "cpu") {
      deltatune::MemoryPlanRequest req;
      req.lora_r = static_cast<int>(c.lora_r);
      req.tokens_per_step = c.micro_batch_size * c.sequence_len;
      req.fused_loss = c.fused_loss;
      req.loss_logits = deltatune::loss_logits_from_name(c.loss_logits, "loss_logits");
      req.base_quantization = c.base_quantization;
      req.free_bytes = freeBytes;
      req.images = images;
      req.lora_groups = c.lora_target_groups;
      req.host_offload = c.activation_offload;  // as the run plans it on a GPU
      const deltatune::MemoryPlan plan = deltatune::plan_memory(*info, req);
      est = plan.estimate;
      planText = tr("Checkpointing plan (auto, %1): %2. ")
                     .arg(gpuName, QString::fromStdString(deltatune::memory_plan_text(*info, plan)));
    } else {
      est = deltatune::estimate_vram(*info, c.lora_r, c.micro_batch_size * c.sequence_len, c.fused_loss,
                                     !c.gradient_checkpointing_auto && c.gradient_checkpointing,
                                     c.gradient_checkpointing_layers, c.base_quantization, 1024, images,
                                     c.lora_target_groups, false,
                                     deltatune::loss_logits_from_name(c.loss_logits, "loss_logits"));
      if (c.gradient_checkpointing_auto)
        planText = tr("Checkpointing: auto (planned at the start of the run for the GPU's free memory; shown "
                      "without checkpointing). ");
    }
  } catch (const std::exception& e) {
    vramEstimate_ = {};
    vramLabel_->setText(tr("No estimate: %1").arg(QString::fromUtf8(e.what())));
    return;
  }
  vramEstimate_ = est;
  QString text = planText +
      tr("About <b>%1</b>: weights %2, LoRA + optimizer %3, activations %4, logits %5")
          .arg(formatBytes(est.total), formatBytes(est.weights), formatBytes(est.lora_and_optimizer),
               formatBytes(est.activations), formatBytes(est.logits));
  if (images.image_tokens_per_step > 0)
    text += tr(", vision tower (%1 image tokens a step, %2) weights %3, activations %4")
                .arg(formatCount(images.image_tokens_per_step),
                     visionLora ? tr("LoRA") : tr("frozen"), formatBytes(est.vision_weights),
                     formatBytes(est.vision_activations));
  // The engine's total includes fixed overheads (runtime context, workspaces) beyond the listed parts.
  const int64_t other = est.total - est.weights - est.lora_and_optimizer - est.activations - est.logits -
                        est.vision_weights - est.vision_activations;
  text += other > 0 ? tr(", runtime overhead %1.").arg(formatBytes(other)) : QStringLiteral(".");
  QString barColor = QStringLiteral("#2c7a2c");
  // Several GPUs, or one the run does not fit: the multi-GPU plan says which weight layout fits each GPU
  // (replicated, sharded, expert parallel) or, when none does, what would.
  const int gpuCount = c.gpus_all ? (gpus_ ? static_cast<int>(gpus_->gpus().size()) : 0)
                                  : std::max(1, static_cast<int>(c.gpus.size()));
  int64_t perGpu = est.total;
  QString planAdvice;
  if (capacity > 0 && gpuCount >= 1 && (gpuCount > 1 || est.total > capacity)) {
    deltatune::ShardPlanSettings s;
    s.lora_r = c.lora_r;
    s.lora_groups = c.lora_target_groups;
    s.tokens_per_step = c.micro_batch_size * c.sequence_len;
    s.fused_loss = c.fused_loss;
    s.loss_logits = deltatune::loss_logits_from_name(c.loss_logits, "loss_logits");
    s.gradient_checkpointing = c.gradient_checkpointing;
    s.checkpoint_layers = c.gradient_checkpointing_layers;
    s.base_quantization = c.base_quantization;
    s.images = images;
    try {
      // Checkpointing auto: the layout and the checkpointed layers are planned together (one GPU too, so a refusal
      // never suggests the checkpointing auto already tried).
      const deltatune::GpuPool pool{gpuCount, capacity};
      const deltatune::ShardPlan plan = c.gradient_checkpointing_auto
                                            ? deltatune::plan_multi_gpu_auto_checkpointing(*info, s, pool)
                                            : deltatune::plan_multi_gpu(*info, s, pool);
      if (const deltatune::LayoutEstimate* ch = plan.choice()) {
        perGpu = ch->total;
        text += tr(" On %1: <b>%2</b>, about %3 per GPU (%4).")
                    .arg(gpuCount == 1 ? tr("one GPU") : tr("%1 GPUs").arg(gpuCount))
                    .arg(QString::fromUtf8(deltatune::weight_layout_name(ch->layout)), formatBytes(ch->total),
                         QString::fromStdString(plan.reason));
      } else if (!plan.would_fit.empty()) {
        QStringList items;
        for (const auto& w : plan.would_fit) items << QString::fromStdString(w);
        planAdvice = tr(" Any one of these would fit: %1.").arg(items.join(QStringLiteral("; ")));
      }
    } catch (const std::exception& e) {
      text += tr(" No multi-GPU plan: %1.").arg(QString::fromUtf8(e.what()));
    }
  }
  if (capacity > 0) {
    const double frac = static_cast<double>(perGpu) / static_cast<double>(capacity);
    vramBar_->setValue(static_cast<int>(std::min(1.0, frac) * 1000));
    text += tr(" %1 % of %2 (%3).").arg(frac * 100, 0, 'f', 0).arg(formatBytes(capacity), gpuName);
    if (frac > 1.0) {
      barColor = QStringLiteral("#b00020");
      text += planAdvice.isEmpty()
                  ? tr(" <b style='color:#b00020'>Will not fit:</b> lower the sequence length or micro-batch, "
                       "or turn on gradient checkpointing.")
                  : tr(" <b style='color:#b00020'>Will not fit.</b>") + planAdvice;
    } else if (frac > 0.9) {
      barColor = QStringLiteral("#d08000");
      text += tr(" Tight: little room for fragmentation.");
    }
  } else {
    vramBar_->setValue(0);
    text += c.backend == "cpu" ? tr(" (CPU backend: this is host memory.)")
                               : tr(" No NVIDIA GPU found to compare with.");
  }
  vramBar_->setStyleSheet(QStringLiteral("QProgressBar::chunk { background: %1; }").arg(barColor));
  vramLabel_->setText(text);
}

void TrainPage::showYaml() {
  auto* dlg = new YamlDialog(doc_, this);
  dlg->setAttribute(Qt::WA_DeleteOnClose);
  dlg->show();
}

void TrainPage::choosePreset() {
  QMenu menu(this);
  for (const QString& name : QDir(QStringLiteral(":/templates")).entryList({"*.yaml"})) {
    menu.addAction(tr("Template: %1").arg(name), this, [this, name] { loadPreset(":/templates/" + name); });
  }
  menu.addSeparator();
  menu.addAction(tr("From file…"), this, [this] {
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Load preset"), QString(), tr("YAML (*.yaml *.yml)"));
    if (!path.isEmpty()) loadPreset(path);
  });
  menu.exec(QCursor::pos());
}

void TrainPage::loadPreset(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) {
    emit errorOccurred(tr("Cannot read preset %1: %2").arg(path, f.errorString()));
    return;
  }
  try {
    const QString merged =
        mergeYamlBlocks(doc_->toYaml(), QString::fromUtf8(f.readAll()), presetSkippedKeys());
    doc_->loadYaml(merged, nullptr);
  } catch (const std::exception& e) {
    emit errorOccurred(tr("Preset %1 not applied: %2").arg(path, QString::fromUtf8(e.what())));
  }
}

void TrainPage::savePreset(const QString& path) {
  try {
    const QString yaml = "# DeltaTune preset (training settings only)\n" +
                         removeYamlBlocks(doc_->toYaml(), presetSkippedKeys());
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Text))
      throw std::runtime_error(f.errorString().toStdString());
    f.write(yaml.toUtf8());
    if (!f.commit()) throw std::runtime_error(f.errorString().toStdString());
  } catch (const std::exception& e) {
    emit errorOccurred(tr("Cannot save preset %1: %2").arg(path, QString::fromUtf8(e.what())));
  }
}

}  // namespace studio
