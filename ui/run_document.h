// The run being edited: one RunConfig shared by all pages (the GUI is an editor of the run YAML), the
// file it came from, and what is known about its model. Pages write through setConfig() and redraw
// on configChanged() when another page (or the YAML dialog) was the source.
#pragma once
#include <QObject>
#include <QString>
#include <optional>

#include "deltatune/model_info.h"
#include "deltatune/run_config.h"

namespace studio {

class RunDocument : public QObject {
  Q_OBJECT
 public:
  explicit RunDocument(QObject* parent = nullptr);

  const deltatune::RunConfig& config() const { return config_; }
  void setConfig(const deltatune::RunConfig& cfg, QObject* source = nullptr);

  QString filePath() const { return filePath_; }
  void setFilePath(const QString& path);
  // Folder that relative paths in YAML text typed by the user resolve against.
  QString baseDir() const;

  // Canonical YAML of the current config (every key).
  QString toYaml() const;
  // Parse errors throw (std::exception with the engine's message naming the key); the config is only
  // replaced when the whole text parses.
  void loadYaml(const QString& yaml, QObject* source = nullptr);
  void loadFile(const QString& path);
  void saveFile(const QString& path);

  const std::optional<deltatune::ModelInfo>& modelInfo() const { return modelInfo_; }
  void setModelInfo(std::optional<deltatune::ModelInfo> info);

  // The most image tokens in one micro-batch of the run's data (the Data page's preview; 0: none or not read).
  int64_t dataImageTokensPerStep() const { return dataImageTokensPerStep_; }
  void setDataImageTokensPerStep(int64_t tokens);

 signals:
  void configChanged(QObject* source);
  void modelInfoChanged();
  void dataImageTokensChanged();
  void filePathChanged(const QString& path);

 private:
  deltatune::RunConfig config_;
  QString filePath_;
  std::optional<deltatune::ModelInfo> modelInfo_;
  int64_t dataImageTokensPerStep_ = 0;
};

}  // namespace studio
