#include "app_settings.h"

#include <QDir>

namespace studio {

namespace key {
constexpr const char* kRecentModels = "model.recent";
constexpr const char* kRecentRunFiles = "run.recent_files";
constexpr const char* kLastDataDir = "data.last_dir";
constexpr const char* kLastExportDir = "export.last_dir";
constexpr const char* kDatabasePath = "store.database_path";
constexpr const char* kWindowGeometry = "window.geometry";
constexpr const char* kWindowState = "window.state";
constexpr const char* kLastPage = "window.last_page";
}  // namespace key

AppSettings::AppSettings() : settings_() {}
AppSettings::AppSettings(const QString& iniFile) : settings_(iniFile, QSettings::IniFormat) {}

QStringList AppSettings::recentList(const char* k) const {
  return settings_.value(k).toStringList();
}

void AppSettings::pushRecent(const char* k, const QString& value) {
  const QString v = QDir::cleanPath(value);
  QStringList list = recentList(k);
  list.removeAll(v);
  list.prepend(v);
  while (list.size() > kMaxRecent) list.removeLast();
  settings_.setValue(k, list);
}

QStringList AppSettings::recentModels() const {
  return recentList(key::kRecentModels);
}
void AppSettings::addRecentModel(const QString& dir) {
  pushRecent(key::kRecentModels, dir);
}
void AppSettings::removeRecentModel(const QString& dir) {
  QStringList list = recentModels();
  list.removeAll(QDir::cleanPath(dir));
  settings_.setValue(key::kRecentModels, list);
}

QStringList AppSettings::recentRunFiles() const {
  return recentList(key::kRecentRunFiles);
}
void AppSettings::addRecentRunFile(const QString& path) {
  pushRecent(key::kRecentRunFiles, path);
}

QString AppSettings::lastDataDir() const {
  return settings_.value(key::kLastDataDir).toString();
}
void AppSettings::setLastDataDir(const QString& dir) {
  settings_.setValue(key::kLastDataDir, dir);
}
QString AppSettings::lastExportDir() const {
  return settings_.value(key::kLastExportDir).toString();
}
void AppSettings::setLastExportDir(const QString& dir) {
  settings_.setValue(key::kLastExportDir, dir);
}

QString AppSettings::databasePath() const {
  return settings_.value(key::kDatabasePath).toString();
}
void AppSettings::setDatabasePath(const QString& path) {
  settings_.setValue(key::kDatabasePath, path);
}

QByteArray AppSettings::windowGeometry() const {
  return settings_.value(key::kWindowGeometry).toByteArray();
}
void AppSettings::setWindowGeometry(const QByteArray& g) {
  settings_.setValue(key::kWindowGeometry, g);
}
QByteArray AppSettings::windowState() const {
  return settings_.value(key::kWindowState).toByteArray();
}
void AppSettings::setWindowState(const QByteArray& s) {
  settings_.setValue(key::kWindowState, s);
}
int AppSettings::lastPage() const {
  return settings_.value(key::kLastPage, 0).toInt();
}
void AppSettings::setLastPage(int page) {
  settings_.setValue(key::kLastPage, page);
}

void AppSettings::sync() {
  settings_.sync();
}

}  // namespace studio
