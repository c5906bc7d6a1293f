// "Show YAML": the run file of the current settings, editable. Apply parses the text with the engine's
// run-file parser and, only if it is valid, replaces the settings (errors name the key).
#pragma once
#include <QDialog>

class QLabel;
class QPlainTextEdit;

namespace studio {

class RunDocument;

class YamlDialog : public QDialog {
  Q_OBJECT
 public:
  explicit YamlDialog(RunDocument* doc, QWidget* parent = nullptr);

  QPlainTextEdit* editor() const { return editor_; }
  QString errorText() const;
  bool apply();  // true when the text parsed and was applied

 private:
  void reload();

  RunDocument* doc_;
  QPlainTextEdit* editor_;
  QLabel* error_;
  bool applying_ = false;
};

}  // namespace studio
