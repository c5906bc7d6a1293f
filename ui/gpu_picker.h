// The Train page's GPU choice: one checkbox per GPU (those nvidia-smi lists, plus any the run names) and
// "all". One GPU checked is a one-GPU run (`gpu: N`); several, or all, train one run data-parallel
// (`gpus: [..]` / `gpus: all`: one worker process per GPU).
#pragma once
#include <QList>
#include <QWidget>
#include <vector>

#include "deltatune/run_config.h"
#include "gpu_probe.h"

class QCheckBox;
class QVBoxLayout;
class QLabel;

namespace studio {

class GpuPicker : public QWidget {
  Q_OBJECT
 public:
  explicit GpuPicker(QWidget* parent = nullptr);

  void setDetected(const QList<GpuInfo>& gpus);
  // Shows the GPUs of `cfg` (gpu, gpus, gpus all).
  void loadFrom(const deltatune::RunConfig& cfg);
  // Writes the choice into `cfg`'s gpu / gpus / gpus_all.
  void applyTo(deltatune::RunConfig& cfg) const;

  QList<int> checkedGpus() const;
  bool allChecked() const;
  void setChecked(int gpu, bool on);  // tests
  void setAll(bool on);

 signals:
  void changed();

 private:
  void rebuild(const QList<int>& indices, const QList<int>& checked, bool all);
  QList<int> shownIndices() const;

  QList<GpuInfo> detected_;
  QVBoxLayout* row_;
  QList<QCheckBox*> checks_;
  QCheckBox* all_;
};

}  // namespace studio
