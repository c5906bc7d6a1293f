// The experiment database a page reads, reopened when the configured path changes.
#pragma once
#include <QString>
#include <memory>

#include "deltatune/experiment_store.h"

class StoreHandle {
 public:
  // `configuredPath` empty = the engine's default database.
  deltatune::ExperimentStore* open(const QString& configuredPath) {
    const QString path = configuredPath.isEmpty()
                             ? QString::fromStdString(deltatune::ExperimentStore::default_path())
                             : configuredPath;
    if (!store_ || path != path_) {
      store_.reset();
      path_ = path;
      store_ = std::make_unique<deltatune::ExperimentStore>(path.toStdString());
    }
    return store_.get();
  }

 private:
  std::unique_ptr<deltatune::ExperimentStore> store_;
  QString path_;
};
