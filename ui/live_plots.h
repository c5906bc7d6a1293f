// The Monitor page's plots: loss + eval loss, learning rate, grad norm, tokens/s, VRAM, and for MoE runs
// the router load balance. New steps are
// buffered and drawn by a ~40 ms coalescing timer, so a fast run costs one replot per frame, not per step.
#pragma once
#include <QList>
#include <QTimer>
#include <QWidget>
#include <vector>

#include "deltatune/trainer.h"
#include "metric_series.h"

class QCustomPlot;
class QCPGraph;
class QCPTextElement;

namespace studio {

class LivePlots : public QWidget {
  Q_OBJECT
 public:
  explicit LivePlots(QWidget* parent = nullptr);

  void clear();
  void addStep(const deltatune::StepMetrics& m);  // cheap: buffers until the next repaint tick
  void setSteps(const std::vector<deltatune::StepMetrics>& steps);  // replace all (e.g. a resumed run)
  void flush();  // draw buffered steps now (the timer calls this)
  // The run trains on the CPU backend: the memory plot shows host RAM held by tensors, and says so.
  void setMemoryOnHost(bool host);
  QString memoryTitle() const;

  int pointCount(Metric m) const;  // points drawn so far, for tests
  int replotCount() const { return replots_; }
  QList<QCustomPlot*> plots() const { return plots_; }
  static constexpr int kRepaintMs = 40;

 private:
  QCustomPlot* makePlot(const QString& title, const QString& yLabel);
  QCPGraph* addGraph(QCustomPlot* plot, const QColor& color, const QString& name, bool dots = false);

  QList<QCustomPlot*> plots_;
  QCustomPlot* moe_ = nullptr;  // hidden for dense runs
  QCPTextElement* memoryTitle_ = nullptr;
  QList<QPair<Metric, QCPGraph*>> graphs_;
  std::vector<deltatune::StepMetrics> pending_;
  QTimer timer_;
  int replots_ = 0;
};

}  // namespace studio
