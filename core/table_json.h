// JSON form of scale tables: [[seqlen_bin, S], ...], as in the checkpoint and engine configs.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "skipsoftmax/threshold.h"

namespace skipsoftmax {

// Throws std::invalid_argument("<context>: ...") for anything but an array of [integer bin, S]
// pairs that ScaleTable accepts. An empty array is the dense table.
ScaleTable scale_table_from_json(const nlohmann::json& j, const std::string& context);
nlohmann::json scale_table_to_json(const ScaleTable& table);

// A table file holds the bare array. Errors name the file.
ScaleTable read_scale_table_file(const std::filesystem::path& path);

}  // namespace skipsoftmax
