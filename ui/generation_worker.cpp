#include "generation_worker.h"

#include <QMetaObject>
#include <QString>
#include <exception>

#include "generation_controller.h"

namespace studio {

GenerationWorker::GenerationWorker(GenerationController* sink, std::shared_ptr<std::atomic<bool>> cancel)
    : sink_(sink), cancel_(std::move(cancel)) {}

GenerationWorker::~GenerationWorker() = default;

template <typename F>
void GenerationWorker::post(F f) {
  GenerationController* sink = sink_;
  QMetaObject::invokeMethod(
      sink, [sink, f]() { f(sink); }, Qt::QueuedConnection);
}

void GenerationWorker::load(const deltatune::GeneratorOptions& opts) {
  try {
    const bool sameModel = gen_ && opts.model_dir == opts_.model_dir && opts.backend == opts_.backend &&
                           opts.gpu == opts_.gpu && opts.db_path == opts_.db_path;
    if (!sameModel) {
      gen_.reset();  // the old weights go before the new ones load
      deltatune::GeneratorOptions base = opts;
      base.adapter.clear();  // the adapter separately: one that does not fit leaves the model loaded
      gen_ = std::make_unique<deltatune::Generator>(base);
      opts_ = base;
    }
    if (opts.adapter != opts_.adapter || !opts.adapter.empty())
      gen_->set_adapter(opts.adapter);  // a run's newest checkpoint may have changed: resolve again
    opts_ = opts;
    GeneratorInfo info;
    info.modelDir = QString::fromStdString(opts.model_dir);
    info.adapterDir = QString::fromStdString(gen_->adapter_dir());
    info.backend = QString::fromStdString(gen_->backend_name());
    info.backendNote = QString::fromStdString(gen_->backend_note());
    info.contextLength = gen_->context_length();
    if (!gen_->has_tokenizer())
      throw std::runtime_error(opts.model_dir + ": no tokenizer.json, so the model cannot chat");
    post([info](GenerationController* c) { c->handleLoaded(info); });
  } catch (const std::exception& e) {
    const QString msg = QString::fromUtf8(e.what());
    // When the model loaded and only the adapter failed, the model stays (without an adapter).
    bool keep = gen_ && gen_->has_tokenizer();
    if (keep) {
      try {
        if (gen_->has_adapter() || !opts.adapter.empty()) gen_->set_adapter("");
      } catch (const std::exception&) {
        keep = false;
      }
    }
    if (!keep) gen_.reset();
    opts_ = opts;
    opts_.adapter.clear();
    GeneratorInfo info;
    if (keep) {
      info.modelDir = QString::fromStdString(opts.model_dir);
      info.backend = QString::fromStdString(gen_->backend_name());
      info.contextLength = gen_->context_length();
    }
    post([msg, keep, info](GenerationController* c) { c->handleLoadFailed(msg, keep, info); });
  }
}

void GenerationWorker::generate(const std::vector<deltatune::GenerateRequest>& requests) {
  if (!gen_) {
    post([](GenerationController* c) { c->handleFailed(QObject::tr("No model is loaded.")); });
    return;
  }
  try {
    cancel_->store(false);
    const std::vector<deltatune::GenerateResult> results = gen_->generate(
        requests,
        [this](const deltatune::GenerateEvent& e) {
          const int req = static_cast<int>(e.request);
          if (!e.text_delta.empty()) {
            QString text = QString::fromStdString(e.text_delta);
            post([req, text](GenerationController* c) { emit c->delta(req, text); });
          }
        },
        cancel_.get());
    for (size_t i = 0; i < results.size(); ++i) {
      const int req = static_cast<int>(i);
      const QString reason = QString::fromStdString(results[i].finish_reason);
      const int tokens = static_cast<int>(results[i].token_ids.size());
      const int prompt = static_cast<int>(results[i].prompt_tokens);
      post([req, reason, tokens, prompt](GenerationController* c) {
        emit c->requestFinished(req, reason, tokens, prompt);
      });
    }
    post([](GenerationController* c) { c->handleFinished(); });
  } catch (const std::exception& e) {
    const QString msg = QString::fromUtf8(e.what());
    post([msg](GenerationController* c) { c->handleFailed(msg); });
  }
}

}  // namespace studio
