#include "live_plots.h"

#include <qcustomplot.h>

#include <QGridLayout>
#include <cmath>

namespace studio {

LivePlots::LivePlots(QWidget* parent) : QWidget(parent) {
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->setSpacing(6);

  QCustomPlot* loss = makePlot(tr("Loss"), tr("loss"));
  graphs_.append({Metric::Loss, addGraph(loss, QColor(0x1f, 0x77, 0xb4), tr("train"))});
  graphs_.append({Metric::EvalLoss, addGraph(loss, QColor(0xd6, 0x27, 0x28), tr("eval"), true)});
  loss->legend->setVisible(true);
  QCustomPlot* lr = makePlot(tr("Learning rate"), tr("lr"));
  graphs_.append({Metric::LearningRate, addGraph(lr, QColor(0x2c, 0xa0, 0x2c), tr("lr"))});
  QCustomPlot* gn = makePlot(tr("Gradient norm"), tr("norm"));
  graphs_.append({Metric::GradNorm, addGraph(gn, QColor(0x94, 0x67, 0xbd), tr("grad norm"))});
  QCustomPlot* tps = makePlot(tr("Throughput"), tr("tokens/s"));
  graphs_.append({Metric::TokensPerSecond, addGraph(tps, QColor(0x8c, 0x56, 0x4b), tr("tokens/s"))});
  QCustomPlot* vram = makePlot(tr("VRAM"), tr("GiB"));
  memoryTitle_ = qobject_cast<QCPTextElement*>(vram->plotLayout()->element(0, 0));
  graphs_.append({Metric::VramAllocated, addGraph(vram, QColor(0x17, 0xbe, 0xcf), tr("allocated"))});
  graphs_.append({Metric::VramReserved, addGraph(vram, QColor(0xbc, 0xbd, 0x22), tr("reserved"))});
  vram->legend->setVisible(true);
  // MoE runs only: shown once the first router statistics arrive.
  moe_ = makePlot(tr("MoE router load"), tr("balance"));
  graphs_.append({Metric::MoeLoadMaxRatio, addGraph(moe_, QColor(0xe3, 0x77, 0xc2), tr("max/mean"))});
  graphs_.append({Metric::MoeLoadCv, addGraph(moe_, QColor(0x7f, 0x7f, 0x7f), tr("CV"))});
  moe_->legend->setVisible(true);
  moe_->setVisible(false);

  grid->addWidget(loss, 0, 0, 1, 2);
  grid->addWidget(lr, 1, 0);
  grid->addWidget(gn, 1, 1);
  grid->addWidget(tps, 2, 0);
  grid->addWidget(vram, 2, 1);
  grid->addWidget(moe_, 3, 0, 1, 2);
  grid->setRowStretch(0, 3);
  grid->setRowStretch(1, 2);
  grid->setRowStretch(2, 2);

  timer_.setInterval(kRepaintMs);
  connect(&timer_, &QTimer::timeout, this, &LivePlots::flush);
}

QCustomPlot* LivePlots::makePlot(const QString& title, const QString& yLabel) {
  auto* plot = new QCustomPlot(this);
  plot->setMinimumHeight(120);
  plot->plotLayout()->insertRow(0);
  auto* t = new QCPTextElement(plot, title, QFont(font().family(), font().pointSize(), QFont::Bold));
  plot->plotLayout()->addElement(0, 0, t);
  plot->xAxis->setLabel(tr("step"));
  plot->yAxis->setLabel(yLabel);
  plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  plot->legend->setFont(QFont(font().family(), font().pointSize() - 1));
  plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  plots_.append(plot);
  return plot;
}

QCPGraph* LivePlots::addGraph(QCustomPlot* plot, const QColor& color, const QString& name, bool dots) {
  QCPGraph* g = plot->addGraph();
  g->setName(name);
  g->setPen(QPen(color, 1.6));
  if (dots) {
    g->setLineStyle(QCPGraph::lsLine);
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, color, color, 6));
  }
  return g;
}

void LivePlots::setMemoryOnHost(bool host) {
  if (!memoryTitle_) return;
  memoryTitle_->setText(host ? tr("Memory (CPU run: host RAM held by tensors)") : tr("VRAM"));
  memoryTitle_->parentPlot()->replot(QCustomPlot::rpQueuedReplot);
}

QString LivePlots::memoryTitle() const {
  return memoryTitle_ ? memoryTitle_->text() : QString();
}

void LivePlots::clear() {
  pending_.clear();
  for (auto& [metric, g] : graphs_) g->data()->clear();
  for (QCustomPlot* p : plots_) p->replot();
  moe_->setVisible(false);
}

void LivePlots::addStep(const deltatune::StepMetrics& m) {
  pending_.push_back(m);
  if (!timer_.isActive()) timer_.start();
}

void LivePlots::setSteps(const std::vector<deltatune::StepMetrics>& steps) {
  for (auto& [metric, g] : graphs_) g->data()->clear();
  pending_ = steps;
  flush();
}

void LivePlots::flush() {
  timer_.stop();
  if (pending_.empty()) return;
  for (auto& [metric, g] : graphs_) {
    Series s = seriesOf(pending_, Axis::Step, metric);
    if (!s.x.isEmpty()) g->addData(s.x, s.y, true);
  }
  pending_.clear();
  if (!moe_->isVisible() && pointCount(Metric::MoeLoadMaxRatio) > 0) moe_->setVisible(true);
  for (QCustomPlot* p : plots_) {
    p->rescaleAxes();
    // The y range comes from the data itself: for a flat series QCustomPlot's rescale keeps the axis' old
    // size, so padding that range again on every repaint would grow it without bound.
    bool found = false;
    QCPRange y;
    for (int i = 0; i < p->graphCount(); ++i) {
      bool has = false;
      const QCPRange r = p->graph(i)->getValueRange(has);
      if (!has) continue;
      y = found ? QCPRange(std::min(y.lower, r.lower), std::max(y.upper, r.upper)) : r;
      found = true;
    }
    if (!found) continue;
    if (y.upper - y.lower <= 1e-9 * std::max(1.0, std::abs(y.upper))) {
      // A flat series (e.g. memory held by the same tensors every step): a band from zero to twice the value.
      const double v = y.upper;
      p->yAxis->setRange(v > 0 ? 0.0 : v - 1, v > 0 ? 2 * v : v + 1);
      p->replot(QCustomPlot::rpQueuedReplot);
      continue;
    }
    const double pad = std::max(1e-12, (y.upper - y.lower) * 0.08);
    double lo = y.lower - pad;
    if (y.lower >= 0 && lo < 0) lo = 0;  // non-negative metrics keep a zero floor
    p->yAxis->setRange(lo, y.upper + pad);
    p->replot(QCustomPlot::rpQueuedReplot);
  }
  ++replots_;
}

int LivePlots::pointCount(Metric m) const {
  int n = 0;
  for (const auto& [metric, g] : graphs_)
    if (metric == m) n += g->dataCount();
  return n;
}

}  // namespace studio
