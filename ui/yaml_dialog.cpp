#include "yaml_dialog.h"

#include <QDialogButtonBox>
#include <QFontDatabase>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QVBoxLayout>
#include <exception>

#include "run_document.h"

namespace studio {

YamlDialog::YamlDialog(RunDocument* doc, QWidget* parent) : QDialog(parent), doc_(doc) {
  setWindowTitle(tr("Run file (YAML)"));
  resize(640, 720);
  auto* layout = new QVBoxLayout(this);
  auto* hint = new QLabel(tr("This is the run file the engine will use. Edit it and press Apply; "
                             "the Train settings page follows. Relative paths resolve against %1.")
                              .arg(doc->baseDir()));
  hint->setWordWrap(true);
  layout->addWidget(hint);
  editor_ = new QPlainTextEdit(this);
  editor_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  editor_->setLineWrapMode(QPlainTextEdit::NoWrap);
  layout->addWidget(editor_, 1);
  error_ = new QLabel(this);
  error_->setWordWrap(true);
  error_->setStyleSheet(QStringLiteral("color: #b00020;"));
  error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(error_);
  auto* buttons =
      new QDialogButtonBox(QDialogButtonBox::Apply | QDialogButtonBox::Reset | QDialogButtonBox::Close);
  buttons->button(QDialogButtonBox::Reset)->setText(tr("Revert"));
  layout->addWidget(buttons);
  connect(buttons->button(QDialogButtonBox::Apply), &QPushButton::clicked, this, &YamlDialog::apply);
  connect(buttons->button(QDialogButtonBox::Reset), &QPushButton::clicked, this, &YamlDialog::reload);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(doc_, &RunDocument::configChanged, this, [this](QObject* source) {
    // Follow edits made on the pages, unless the user is typing here.
    if (source != this && !editor_->document()->isModified()) reload();
  });
  reload();
}

QString YamlDialog::errorText() const {
  return error_->text();
}

void YamlDialog::reload() {
  try {
    editor_->setPlainText(doc_->toYaml());
    error_->clear();
  } catch (const std::exception& e) {
    error_->setText(QString::fromUtf8(e.what()));
  }
  editor_->document()->setModified(false);
}

bool YamlDialog::apply() {
  try {
    doc_->loadYaml(editor_->toPlainText(), this);
  } catch (const std::exception& e) {
    error_->setText(tr("Not applied: %1").arg(QString::fromUtf8(e.what())));
    return false;
  }
  error_->clear();
  reload();  // show the canonical form (resolved paths, every key)
  return true;
}

}  // namespace studio
