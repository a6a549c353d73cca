#include "common/yaml_json.h"

#include <yaml.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mxval {
namespace {

constexpr int kMaxDepth = 64;
constexpr size_t kMaxYamlBytes = 4 << 20;

absl::StatusOr<nlohmann::json> NodeToJson(yaml_document_t* doc, yaml_node_t* node, int depth) {
  if (node == nullptr) return nlohmann::json(nullptr);
  if (depth > kMaxDepth) return absl::InvalidArgumentError("YAML nested deeper than 64 levels");
  const auto where = [&] { return absl::StrCat(" (line ", node->start_mark.line + 1, ")"); };
  switch (node->type) {
    case YAML_SCALAR_NODE: {
      const std::string v(reinterpret_cast<const char*>(node->data.scalar.value), node->data.scalar.length);
      if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return nlohmann::json(v);
      if (v == "null" || v == "~" || v.empty()) return nlohmann::json(nullptr);
      if (v == "true" || v == "false") return nlohmann::json(v == "true");
      int64_t i;
      if (absl::SimpleAtoi(v, &i)) return nlohmann::json(i);
      double d;
      if (absl::SimpleAtod(v, &d) && !absl::StrContains(v, "inf") && !absl::StrContains(v, "nan")) return nlohmann::json(d);
      return nlohmann::json(v);
    }
    case YAML_SEQUENCE_NODE: {
      nlohmann::json a = nlohmann::json::array();
      for (yaml_node_item_t* it = node->data.sequence.items.start; it < node->data.sequence.items.top; ++it) {
        auto v = NodeToJson(doc, yaml_document_get_node(doc, *it), depth + 1);
        if (!v.ok()) return v.status();
        a.push_back(std::move(*v));
      }
      return a;
    }
    case YAML_MAPPING_NODE: {
      nlohmann::json o = nlohmann::json::object();
      for (yaml_node_pair_t* p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; ++p) {
        yaml_node_t* k = yaml_document_get_node(doc, p->key);
        if (k == nullptr || k->type != YAML_SCALAR_NODE) return absl::InvalidArgumentError("YAML keys must be scalars" + where());
        const std::string key(reinterpret_cast<const char*>(k->data.scalar.value), k->data.scalar.length);
        if (o.contains(key)) return absl::InvalidArgumentError(absl::StrCat("YAML key '", key, "' appears twice", where()));
        auto v = NodeToJson(doc, yaml_document_get_node(doc, p->value), depth + 1);
        if (!v.ok()) return v.status();
        o[key] = std::move(*v);
      }
      return o;
    }
    default:
      return nlohmann::json(nullptr);
  }
}

}  // namespace

absl::StatusOr<std::string> YamlToJson(const std::string& yaml) {
  if (yaml.size() > kMaxYamlBytes) return absl::InvalidArgumentError("YAML larger than 4 MiB");
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return absl::InternalError("YAML parser initialization failed");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(yaml.data()), yaml.size());
  yaml_document_t doc;
  if (!yaml_parser_load(&parser, &doc)) {
    absl::Status st = absl::InvalidArgumentError(absl::StrCat("YAML: ", parser.problem ? parser.problem : "parse error",
                                                              " at line ", parser.problem_mark.line + 1, " column ",
                                                              parser.problem_mark.column + 1));
    yaml_parser_delete(&parser);
    return st;
  }
  auto json = NodeToJson(&doc, yaml_document_get_root_node(&doc), 0);
  yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
  if (!json.ok()) return json.status();
  return json->dump();
}

}  // namespace mxval
