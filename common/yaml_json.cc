#include "common/yaml_json.h"

#include <yaml.h>

#include <optional>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mxval {
namespace {

absl::Status Bad(absl::string_view what, const yaml_mark_t& mark) {
  return absl::InvalidArgumentError(absl::StrCat(what, " (line ", mark.line + 1, ")"));
}

nlohmann::json TypedScalar(const std::string& v, yaml_scalar_style_t style) {
  if (style != YAML_PLAIN_SCALAR_STYLE) return nlohmann::json(v);
  if (v == "null" || v == "~" || v.empty()) return nlohmann::json(nullptr);
  if (v == "true" || v == "false") return nlohmann::json(v == "true");
  int64_t i;
  if (absl::SimpleAtoi(v, &i)) return nlohmann::json(i);
  double d;
  if (absl::SimpleAtod(v, &d) && !absl::StrContains(v, "inf") && !absl::StrContains(v, "nan")) return nlohmann::json(d);
  return nlohmann::json(v);
}

// A finished node: its JSON, how many nodes it holds (itself included), and
// for a scalar its text (a mapping key is the scalar's text, untyped).
struct Node {
  nlohmann::json value;
  int64_t nodes = 1;
  std::optional<std::string> scalar_text;
};

// A sequence or mapping being built.
struct Open {
  nlohmann::json value;
  bool is_map = false;
  std::optional<std::string> key;  // a mapping's pending key
  std::string anchor;
  int64_t nodes = 1;
};

// Builds JSON from the parser's events with an explicit stack, so depth costs
// no recursion and each event is handled once.
class Builder {
 public:
  // Handles one event; sets *done at the end of the first document.
  absl::Status Event(const yaml_event_t& e, bool* done) {
    switch (e.type) {
      case YAML_SCALAR_EVENT: {
        Node n;
        n.scalar_text.emplace(reinterpret_cast<const char*>(e.data.scalar.value), e.data.scalar.length);
        n.value = TypedScalar(*n.scalar_text, e.data.scalar.style);
        Remember(e.data.scalar.anchor, n);
        return Add(std::move(n), e.start_mark, done);
      }
      case YAML_SEQUENCE_START_EVENT:
      case YAML_MAPPING_START_EVENT: {
        const bool is_map = e.type == YAML_MAPPING_START_EVENT;
        if (!stack_.empty() && stack_.back().is_map && !stack_.back().key) {
          return Bad("YAML keys must be scalars", e.start_mark);
        }
        if (static_cast<int>(stack_.size()) >= kMaxYamlDepth) {
          return Bad(absl::StrCat("YAML nested deeper than ", kMaxYamlDepth, " levels"), e.start_mark);
        }
        Open o;
        o.is_map = is_map;
        o.value = is_map ? nlohmann::json::object() : nlohmann::json::array();
        const yaml_char_t* anchor = is_map ? e.data.mapping_start.anchor : e.data.sequence_start.anchor;
        if (anchor != nullptr) o.anchor = reinterpret_cast<const char*>(anchor);
        stack_.push_back(std::move(o));
        return absl::OkStatus();
      }
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT: {
        Open o = std::move(stack_.back());
        stack_.pop_back();
        Node n;
        n.value = std::move(o.value);
        n.nodes = o.nodes;
        if (!o.anchor.empty()) anchors_[o.anchor] = n;
        return Add(std::move(n), e.start_mark, done);
      }
      case YAML_ALIAS_EVENT: {
        const std::string name(reinterpret_cast<const char*>(e.data.alias.anchor));
        auto it = anchors_.find(name);
        if (it == anchors_.end()) return Bad(absl::StrCat("YAML alias *", name, " names no earlier anchor"), e.start_mark);
        alias_nodes_ += it->second.nodes;
        if (alias_nodes_ > kMaxYamlAliasNodes) {
          return Bad(absl::StrCat("YAML aliases expand to more than ", kMaxYamlAliasNodes, " nodes"), e.start_mark);
        }
        return Add(Node(it->second), e.start_mark, done);
      }
      case YAML_DOCUMENT_END_EVENT:
      case YAML_STREAM_END_EVENT:
        *done = true;
        return absl::OkStatus();
      default:
        return absl::OkStatus();
    }
  }

  nlohmann::json TakeRoot() { return std::move(root_); }

 private:
  void Remember(const yaml_char_t* anchor, const Node& n) {
    if (anchor != nullptr) anchors_[reinterpret_cast<const char*>(anchor)] = n;
  }

  absl::Status Add(Node n, const yaml_mark_t& mark, bool* done) {
    if (stack_.empty()) {
      root_ = std::move(n.value);
      *done = true;
      return absl::OkStatus();
    }
    Open& top = stack_.back();
    top.nodes += n.nodes;
    if (!top.is_map) {
      top.value.push_back(std::move(n.value));
      return absl::OkStatus();
    }
    if (!top.key) {
      if (!n.scalar_text) return Bad("YAML keys must be scalars", mark);
      if (top.value.contains(*n.scalar_text)) {
        return Bad(absl::StrCat("YAML key '", *n.scalar_text, "' appears twice"), mark);
      }
      top.key = std::move(n.scalar_text);
      return absl::OkStatus();
    }
    top.value[*top.key] = std::move(n.value);
    top.key.reset();
    return absl::OkStatus();
  }

  std::vector<Open> stack_;
  std::unordered_map<std::string, Node> anchors_;
  int64_t alias_nodes_ = 0;
  nlohmann::json root_ = nullptr;
};

}  // namespace

absl::StatusOr<std::string> YamlToJson(const std::string& yaml) {
  if (yaml.size() > kMaxYamlBytes) return absl::InvalidArgumentError("YAML larger than 4 MiB");
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return absl::InternalError("YAML parser initialization failed");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(yaml.data()), yaml.size());
  Builder b;
  absl::Status st;
  for (bool done = false; !done && st.ok();) {
    yaml_event_t e;
    if (!yaml_parser_parse(&parser, &e)) {
      st = absl::InvalidArgumentError(absl::StrCat("YAML: ", parser.problem ? parser.problem : "parse error", " at line ",
                                                   parser.problem_mark.line + 1, " column ",
                                                   parser.problem_mark.column + 1));
      break;
    }
    st = b.Event(e, &done);
    yaml_event_delete(&e);
  }
  yaml_parser_delete(&parser);
  if (!st.ok()) return st;
  return b.TakeRoot().dump();
}

bool IsYamlConfig(const std::string& path, const std::string& text) {
  if (absl::EndsWith(path, ".yaml") || absl::EndsWith(path, ".yml")) return true;
  if (absl::EndsWith(path, ".json")) return false;
  const size_t first = text.find_first_not_of(" \t\r\n");
  return first == std::string::npos || text[first] != '{';
}

}  // namespace mxval
