// The layer pattern of a hybrid model: one cell per layer, Gated DeltaNet (linear) and full attention
// in two colours, with the layer index under each cell.
#pragma once
#include <QStringList>
#include <QWidget>

namespace studio {

class LayerStrip : public QWidget {
  Q_OBJECT
 public:
  explicit LayerStrip(QWidget* parent = nullptr);
  void setLayerTypes(const QStringList& types);  // "linear_attention" | "full_attention"
  const QStringList& layerTypes() const { return types_; }
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

  static QColor linearColor();
  static QColor fullColor();

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  QStringList types_;
};

}  // namespace studio
