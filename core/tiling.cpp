#include "skipsoftmax/tiling.h"

namespace skipsoftmax {

const char* to_string(KvOrder order) {
  switch (order) {
    case KvOrder::kForward:
      return "forward";
    case KvOrder::kReverse:
      return "reverse";
    case KvOrder::kSinkThenReverse:
      return "sink-reverse";
  }
  return "forward";
}

std::optional<KvOrder> parse_kv_order(std::string_view name) {
  for (KvOrder o : {KvOrder::kForward, KvOrder::kReverse, KvOrder::kSinkThenReverse}) {
    if (name == to_string(o)) return o;
  }
  return std::nullopt;
}

std::string kv_order_names() { return "forward, reverse, sink-reverse"; }

}  // namespace skipsoftmax
