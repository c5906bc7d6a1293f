#include "image_strip.h"

#include <QFileInfo>
#include <QFrame>
#include <QImage>
#include <QLabel>
#include <QPixmap>
#include <QScrollArea>
#include <QVBoxLayout>

namespace studio {

ImageStrip::ImageStrip(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  auto* scroll = new QScrollArea;
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  auto* body = new QWidget;
  list_ = new QVBoxLayout(body);
  list_->setContentsMargins(4, 4, 4, 4);
  empty_ = new QLabel(tr("No images in this example."));
  empty_->setStyleSheet(QStringLiteral("color:#777;"));
  list_->addWidget(empty_);
  list_->addStretch();
  scroll->setWidget(body);
  outer->addWidget(scroll);
  setMinimumWidth(static_cast<int>(deltatune::kPreviewThumbnailSide) + 40);
}

void ImageStrip::setImages(const std::vector<deltatune::PreviewImage>& images) {
  for (QWidget* c : cards_) delete c;
  cards_.clear();
  thumbnails_.clear();
  captions_.clear();
  empty_->setVisible(images.empty());
  int index = 0;
  for (const deltatune::PreviewImage& im : images) {
    auto* card = new QFrame;
    card->setFrameShape(QFrame::StyledPanel);
    auto* layout = new QVBoxLayout(card);
    layout->setContentsMargins(6, 6, 6, 6);
    auto* thumb = new QLabel;
    thumb->setAlignment(Qt::AlignCenter);
    auto* caption = new QLabel;
    caption->setWordWrap(true);
    caption->setTextFormat(Qt::RichText);
    caption->setTextInteractionFlags(Qt::TextSelectableByMouse);
    const QString name = QFileInfo(QString::fromStdString(im.path)).fileName().toHtmlEscaped();
    if (im.error.empty() && !im.thumbnail_rgb.empty()) {
      const QImage rgb(im.thumbnail_rgb.data(), static_cast<int>(im.thumbnail_width),
                       static_cast<int>(im.thumbnail_height), static_cast<int>(im.thumbnail_width * 3),
                       QImage::Format_RGB888);
      thumb->setPixmap(QPixmap::fromImage(rgb.copy()));  // copy: the preview's buffer is not kept alive
      thumb->setToolTip(QString::fromStdString(im.path));
      caption->setText(tr("<b>%1</b> %2<br/>%3 × %4 px → %5 × %6<br/>%7 × %8 patches, <b>%9 tokens</b>")
                           .arg(index + 1)
                           .arg(name)
                           .arg(im.width)
                           .arg(im.height)
                           .arg(im.resized_width)
                           .arg(im.resized_height)
                           .arg(im.grid_h)
                           .arg(im.grid_w)
                           .arg(im.tokens));
    } else {
      thumb->setText(QStringLiteral("&#9888;"));
      thumb->setTextFormat(Qt::RichText);
      thumb->setStyleSheet(QStringLiteral("color:#b00020; font-size:28px;"));
      caption->setText(QStringLiteral("<b>%1</b> %2<br/><span style='color:#b00020'>%3</span>")
                           .arg(index + 1)
                           .arg(name, QString::fromStdString(im.error).toHtmlEscaped()));
    }
    layout->addWidget(thumb);
    layout->addWidget(caption);
    list_->insertWidget(list_->count() - 1, card);
    cards_.push_back(card);
    thumbnails_.push_back(thumb);
    captions_.push_back(caption);
    ++index;
  }
}

}  // namespace studio
