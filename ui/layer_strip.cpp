#include "layer_strip.h"

#include <QPainter>

namespace studio {

LayerStrip::LayerStrip(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
}

QColor LayerStrip::linearColor() {
  return QColor(0x4c, 0x8b, 0xd6);
}
QColor LayerStrip::fullColor() {
  return QColor(0xe0, 0x8a, 0x2c);
}

void LayerStrip::setLayerTypes(const QStringList& types) {
  types_ = types;
  setToolTip(types.isEmpty() ? QString()
                             : tr("%1 layers: %2 linear attention (Gated DeltaNet), %3 full attention")
                                   .arg(types.size())
                                   .arg(types.count(QStringLiteral("linear_attention")))
                                   .arg(types.count(QStringLiteral("full_attention"))));
  update();
}

QSize LayerStrip::sizeHint() const {
  return {400, 46};
}
QSize LayerStrip::minimumSizeHint() const {
  return {100, 46};
}

void LayerStrip::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  if (types_.isEmpty()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter, tr("no model loaded"));
    return;
  }
  const int n = static_cast<int>(types_.size());
  const double w = static_cast<double>(width() - 2) / n;
  const int cellH = 26;
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.8);
  p.setFont(small);
  const int labelEvery = n <= 16 ? 1 : (n <= 32 ? 4 : 8);
  for (int i = 0; i < n; ++i) {
    const QRectF cell(1 + i * w, 1, std::max(1.0, w - (w > 4 ? 2 : 0)), cellH);
    const bool full = types_[i] == QLatin1String("full_attention");
    p.setPen(Qt::NoPen);
    p.setBrush(full ? fullColor() : linearColor());
    p.drawRoundedRect(cell, 3, 3);
    if (i % labelEvery == 0) {
      p.setPen(palette().color(QPalette::WindowText));
      p.drawText(QRectF(cell.left() - 10, cellH + 2, cell.width() + 20, height() - cellH - 2),
                 Qt::AlignHCenter | Qt::AlignTop, QString::number(i));
    }
  }
}

}  // namespace studio
