// The one typed wrapper over QSettings (dotted keys). Run settings never live here: they live in the
// run's YAML file; this keeps only per-user UI state (recent folders, window layout, paths).
#pragma once
#include <QByteArray>
#include <QSettings>
#include <QString>
#include <QStringList>

namespace studio {

class AppSettings {
 public:
  AppSettings();                                 // the application's settings (organisation/app name)
  explicit AppSettings(const QString& iniFile);  // a private file (tests)

  static constexpr int kMaxRecent = 10;

  QStringList recentModels() const;  // most recent first, no duplicates
  void addRecentModel(const QString& dir);
  void removeRecentModel(const QString& dir);

  QStringList recentRunFiles() const;
  void addRecentRunFile(const QString& path);

  QString lastDataDir() const;
  void setLastDataDir(const QString& dir);
  QString lastExportDir() const;
  void setLastExportDir(const QString& dir);

  // Experiment database; empty = the engine's default ($DELTATUNE_DB or XDG data dir).
  QString databasePath() const;
  void setDatabasePath(const QString& path);

  QByteArray windowGeometry() const;
  void setWindowGeometry(const QByteArray& g);
  QByteArray windowState() const;
  void setWindowState(const QByteArray& s);
  int lastPage() const;
  void setLastPage(int page);

  void sync();

 private:
  QStringList recentList(const char* key) const;
  void pushRecent(const char* key, const QString& value);

  QSettings settings_;
};

}  // namespace studio
