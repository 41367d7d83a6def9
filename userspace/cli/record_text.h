// One agent record (docs/record.md: the JSON line `oomsnap watch` writes per
// incident) rendered as plain text for a person: `oomsnap show`. A pure
// function of the JSON, so tests feed it records and compare text. The JSON
// stays the contract; this text may change to read better.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace oomsnap {

// Whether `j` looks like an agent record: an object with a numeric
// `incident_id` and a `trigger` object (every record has both).
bool is_agent_record(const nlohmann::json& j);

struct RenderOptions {
  // Block characters for the memory bar (a terminal); plain ASCII when false.
  bool unicode = false;
};

// The record as a block of lines, each ending in '\n'. Never throws on odd
// field types (a hand-edited or damaged record): what cannot be read is left
// out. All text from the record passes through terminal_safe().
std::string render_record(const nlohmann::json& record, const RenderOptions& options = {});

// "512 B", "1.5 KiB", "250.0 MiB", "1.7 GiB" (binary units).
std::string human_bytes(uint64_t bytes);

}  // namespace oomsnap
