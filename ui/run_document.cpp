#include "run_document.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>
#include <stdexcept>

namespace studio {

RunDocument::RunDocument(QObject* parent) : QObject(parent) {}

void RunDocument::setConfig(const deltatune::RunConfig& cfg, QObject* source) {
  config_ = cfg;
  emit configChanged(source);
}

void RunDocument::setFilePath(const QString& path) {
  if (path == filePath_) return;
  filePath_ = path;
  emit filePathChanged(path);
}

QString RunDocument::baseDir() const {
  return filePath_.isEmpty() ? QDir::currentPath() : QFileInfo(filePath_).absolutePath();
}

QString RunDocument::toYaml() const {
  return QString::fromStdString(deltatune::run_config_to_yaml(config_));
}

void RunDocument::loadYaml(const QString& yaml, QObject* source) {
  setConfig(deltatune::run_config_from_yaml_string(yaml.toStdString(), baseDir().toStdString()), source);
}

void RunDocument::loadFile(const QString& path) {
  deltatune::RunConfig cfg =
      deltatune::run_config_from_yaml_file(QFileInfo(path).absoluteFilePath().toStdString());
  setFilePath(QFileInfo(path).absoluteFilePath());
  setConfig(cfg, nullptr);
}

void RunDocument::saveFile(const QString& path) {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Text))
    throw std::runtime_error("cannot write " + path.toStdString() + ": " + f.errorString().toStdString());
  f.write(toYaml().toUtf8());
  if (!f.commit())
    throw std::runtime_error("cannot write " + path.toStdString() + ": " + f.errorString().toStdString());
  setFilePath(QFileInfo(path).absoluteFilePath());
}

void RunDocument::setModelInfo(std::optional<deltatune::ModelInfo> info) {
  modelInfo_ = std::move(info);
  emit modelInfoChanged();
}

void RunDocument::setDataImageTokensPerStep(int64_t tokens) {
  if (tokens == dataImageTokensPerStep_) return;
  dataImageTokensPerStep_ = tokens;
  emit dataImageTokensChanged();
}

}  // namespace studio
