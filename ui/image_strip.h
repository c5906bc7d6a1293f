// The images of one rendered example, beside its tokens: each image's thumbnail (decoded by the engine, as the
// trainer sees it), its size, its patch grid and how many tokens it becomes, or the error naming file and row.
#pragma once
#include <QWidget>
#include <vector>

#include "deltatune/data_preview.h"

class QLabel;
class QVBoxLayout;

namespace studio {

class ImageStrip : public QWidget {
  Q_OBJECT
 public:
  explicit ImageStrip(QWidget* parent = nullptr);

  void setImages(const std::vector<deltatune::PreviewImage>& images);
  int count() const { return static_cast<int>(thumbnails_.size()); }
  QLabel* thumbnail(int i) const { return thumbnails_.at(static_cast<size_t>(i)); }  // no pixmap for a bad image
  QLabel* caption(int i) const { return captions_.at(static_cast<size_t>(i)); }

 private:
  QVBoxLayout* list_;
  QLabel* empty_;
  std::vector<QLabel*> thumbnails_, captions_;
  std::vector<QWidget*> cards_;
};

}  // namespace studio
