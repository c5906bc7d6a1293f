// The Experiments page's "Details" of one run as HTML: what ran where (device and GPUs as the engine
// recorded them), its folders, numbers, artifacts and latest events.
#pragma once
#include <QString>
#include <vector>

#include "deltatune/experiment_store.h"

namespace studio {

// The GPUs a run's config asks for, from its YAML: "0, 1 (data parallel)", "all visible GPUs (data
// parallel)", "GPU 0", or for the CPU backend "CPU" / "CPU, 2 data-parallel workers".
QString runGpusText(const QString& configYaml);

QString runDetailsHtml(const deltatune::RunRecord& run, const std::vector<deltatune::ArtifactRecord>& artifacts,
                       const std::vector<deltatune::EventRecord>& events);

}  // namespace studio
