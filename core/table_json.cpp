#include "table_json.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "file_io.h"

namespace skipsoftmax {

ScaleTable scale_table_from_json(const nlohmann::json& j, const std::string& context) {
  if (!j.is_array()) {
    throw std::invalid_argument(context +
                                ": a scale table is an array of [seqlen_bin, S] rows, got " +
                                std::string(j.type_name()));
  }
  std::vector<ScaleTableRow> rows;
  rows.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& row = j[i];
    const std::string where = context + ": row " + std::to_string(i) + " " + row.dump();
    if (!row.is_array() || row.size() != 2 || !row[0].is_number() || !row[1].is_number()) {
      throw std::invalid_argument(where + " is not a [seqlen_bin, S] pair of numbers");
    }
    const double bin = row[0].get<double>();
    if (!(bin == std::floor(bin)) || bin <= 0 || bin > 9.0e15) {
      throw std::invalid_argument(where + ": seqlen_bin must be an integer in [1, 9e15]");
    }
    rows.push_back({static_cast<std::int64_t>(bin), row[1].get<double>()});
  }
  try {
    return ScaleTable(std::move(rows));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(context + ": " + e.what());
  }
}

nlohmann::json scale_table_to_json(const ScaleTable& table) {
  nlohmann::json j = nlohmann::json::array();
  for (const ScaleTableRow& r : table.rows()) j.push_back({r.seqlen_bin, r.scale});
  return j;
}

ScaleTable read_scale_table_file(const std::filesystem::path& path) {
  return scale_table_from_json(read_json_file(path), path.string());
}

}  // namespace skipsoftmax
