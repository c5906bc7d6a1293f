// Train settings page: an editor of the run's training keys (each widget's objectName is its YAML key),
// LoRA target groups with their trainable parameters and adapter size, the VRAM estimate against the
// chosen GPU, "Show YAML", and presets.
#pragma once
#include <QMap>
#include <QWidget>

#include "deltatune/model_info.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QGridLayout;
class QLabel;
class QLineEdit;
class QProgressBar;
class QSpinBox;

namespace studio {

class GpuPicker;
class GpuProbe;
class RunDocument;

class TrainPage : public QWidget {
  Q_OBJECT
 public:
  TrainPage(RunDocument* doc, GpuProbe* gpus, QWidget* parent = nullptr);

  static const QStringList& allLoraGroups();
  QCheckBox* groupCheck(const QString& group) const { return groupChecks_.value(group); }
  QString groupInfoText(const QString& group) const;
  QString vramText() const;
  // The last memory estimate shown (zeros before a model is loaded or when there is none).
  const deltatune::VramEstimate& vramEstimate() const { return vramEstimate_; }
  GpuPicker* gpuPicker() const { return gpus_picker_; }
  QString gpusNoteText() const;
  // Keys a preset never changes (they belong to one run, not to a recipe).
  static const QStringList& presetSkippedKeys();

 public slots:
  void showYaml();
  void loadPreset(const QString& path);
  void savePreset(const QString& path);

 signals:
  void errorOccurred(const QString& message);

 private:
  void buildUi();
  void loadFromConfig();
  void writeToConfig();
  void updateGroups();
  void updateVram();
  void updateRuntimeLine();  // driver/runtime line for the chosen backend
  void updateGpuList();
  void updateGpusNote();
  void choosePreset();

  RunDocument* doc_;
  GpuProbe* gpus_;
  bool loading_ = false;

  QMap<QString, QCheckBox*> groupChecks_;
  QMap<QString, QLabel*> groupInfo_;
  QLabel* groupsNote_ = nullptr;
  QSpinBox* rank_ = nullptr;
  QDoubleSpinBox* alpha_ = nullptr;
  QDoubleSpinBox* dropout_ = nullptr;
  QCheckBox* rslora_ = nullptr;
  QSpinBox* seqLen_ = nullptr;
  QCheckBox* packing_ = nullptr;
  QSpinBox* microBatch_ = nullptr;
  QSpinBox* accum_ = nullptr;
  QDoubleSpinBox* lr_ = nullptr;
  QComboBox* scheduler_ = nullptr;
  QSpinBox* warmup_ = nullptr;
  QDoubleSpinBox* epochs_ = nullptr;
  QSpinBox* maxSteps_ = nullptr;
  QDoubleSpinBox* weightDecay_ = nullptr;
  QDoubleSpinBox* maxGradNorm_ = nullptr;
  QDoubleSpinBox* valSplit_ = nullptr;
  QSpinBox* evalSteps_ = nullptr;
  QSpinBox* saveSteps_ = nullptr;
  QSpinBox* seed_ = nullptr;
  QComboBox* backend_ = nullptr;
  QComboBox* baseQuant_ = nullptr;
  GpuPicker* gpus_picker_ = nullptr;
  QLabel* gpusNote_ = nullptr;
  QLabel* gpuRuntime_ = nullptr;
  QCheckBox* fusedLoss_ = nullptr;
  QComboBox* lossLogits_ = nullptr;  // loss_logits: fp32 | bf16
  QCheckBox* gradCkptAuto_ = nullptr;  // gradient_checkpointing: auto (the memory plan decides)
  QCheckBox* activationOffload_ = nullptr;  // activation_offload (the auto plan may use pinned host memory)
  QCheckBox* gradCkpt_ = nullptr;
  QSpinBox* ckptLayers_ = nullptr;
  QLineEdit* outputDir_ = nullptr;
  QLineEdit* runName_ = nullptr;
  QProgressBar* vramBar_ = nullptr;
  QLabel* vramLabel_ = nullptr;
  deltatune::VramEstimate vramEstimate_;
};

}  // namespace studio
