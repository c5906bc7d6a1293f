// Runs the engine's Generator for the Playground on a private thread: loading a model (and adapter) and
// generating never block the UI. Streamed text comes back as queued signals on the UI thread; cancel() is
// an atomic the engine checks at every decode step.
#pragma once
#include <QObject>
#include <QString>
#include <QThread>
#include <atomic>
#include <memory>
#include <vector>

#include "deltatune/generate.h"

namespace studio {

class GenerationWorker;

// What the loaded generator is (for the page's status line).
struct GeneratorInfo {
  QString modelDir;
  QString adapterDir;  // "" = none
  QString backend;
  QString backendNote;  // why backend auto took the CPU ("" when it did not)
  qint64 contextLength = 0;
};

class GenerationController : public QObject {
  Q_OBJECT
 public:
  explicit GenerationController(QObject* parent = nullptr);
  ~GenerationController() override;  // cancels and joins the thread

  // Loads the model (kept when model folder, backend and GPU are unchanged) and sets the adapter (folder or
  // run id; "" = none). Ends with loaded() or failed().
  void load(const deltatune::GeneratorOptions& opts);
  // Generates every request together, streaming. Ends with finished() or failed(). Refused (false) while
  // loading or generating.
  bool generate(const std::vector<deltatune::GenerateRequest>& requests);
  void cancel();
  bool isBusy() const { return busy_; }
  bool isLoaded() const { return loaded_; }
  const GeneratorInfo& info() const { return info_; }

 signals:
  void loaded(const studio::GeneratorInfo& info);
  void delta(int request, const QString& text);
  // After generate(): why each request ended (stop | length | cancelled) and its token counts.
  void requestFinished(int request, const QString& finishReason, int newTokens, int promptTokens);
  void finished();
  void failed(const QString& message);
  void busyChanged(bool busy);

 public:
  // Called (queued, on the UI thread) by the worker only.
  void handleLoaded(const GeneratorInfo& info);
  void handleFailed(const QString& message);
  // A load that failed; `stillLoaded`: the model is there without an adapter (`info`).
  void handleLoadFailed(const QString& message, bool stillLoaded, const GeneratorInfo& info);
  void handleFinished();

 private:
  void setBusy(bool b);

  QThread thread_;
  GenerationWorker* worker_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  GeneratorInfo info_;
  bool busy_ = false;
  bool loaded_ = false;
};

}  // namespace studio

Q_DECLARE_METATYPE(studio::GeneratorInfo)
