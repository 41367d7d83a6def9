// Shared by the configuration's unit tests.
#pragma once
#include <string>

#include "agent/config.h"

namespace oomsnap_test {

// The message of the ConfigError that load() throws, or "" when it throws none.
template <class Load>
std::string config_error(Load load) {
  try {
    load();
  } catch (const oomsnap::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace oomsnap_test
