// Run ids and adapter folders (deltatune::resolve_adapter).
#pragma once
#include <string>

namespace deltatune {

// See deltatune::resolve_adapter.
std::string resolve_adapter_folder(const std::string& adapter, const std::string& db_path);

}  // namespace deltatune
