// Lives on the GenerationController's thread and owns the engine's Generator; every engine call happens here.
#pragma once
#include <QObject>
#include <atomic>
#include <memory>
#include <vector>

#include "deltatune/generate.h"

namespace studio {

class GenerationController;

class GenerationWorker : public QObject {
  Q_OBJECT
 public:
  GenerationWorker(GenerationController* sink, std::shared_ptr<std::atomic<bool>> cancel);
  ~GenerationWorker() override;

  void load(const deltatune::GeneratorOptions& opts);
  void generate(const std::vector<deltatune::GenerateRequest>& requests);

 private:
  template <typename F>
  void post(F f);

  GenerationController* sink_;  // outlives the thread (its destructor joins it)
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::unique_ptr<deltatune::Generator> gen_;
  deltatune::GeneratorOptions opts_;
};

}  // namespace studio
