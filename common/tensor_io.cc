#include "common/tensor_io.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace mxval {
namespace {

absl::Status Bad(absl::string_view what) { return absl::InvalidArgumentError(std::string(what.data(), what.size())); }

// Multiplies dims with overflow and cap checks.
absl::StatusOr<int64_t> CheckedNumel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return Bad("negative dimension");
    if (d != 0 && n > kMaxTensorBytes / d) return Bad("tensor too large");
    n *= d;
  }
  return n;
}

absl::StatusOr<DType> NpyDescr(absl::string_view descr) {
  // Accept explicit little-endian or "not applicable" byte order.
  if (descr == "|u1" || descr == "<u1") return DType::kU8;
  if (descr == "|i1" || descr == "<i1") return DType::kI8;
  if (descr == "<u2") return DType::kU16;
  if (descr == "<f2") return DType::kF16;
  if (descr == "<f4") return DType::kF32;
  if (descr == "<f8") return DType::kF64;
  return Bad(absl::StrCat("unsupported .npy dtype '", descr, "' (want |u1, |i1, <u2, <f2, <f4 or <f8)"));
}

std::string NpyDescrOf(DType d) {
  switch (d) {
    case DType::kU8: return "|u1";
    case DType::kI8: return "|i1";
    case DType::kU16:
    case DType::kBF16: return "<u2";  // numpy has no bf16: stored as raw uint16
    case DType::kF16: return "<f2";
    case DType::kF32: return "<f4";
    case DType::kF64: return "<f8";
  }
  return "|u1";
}

// Extracts the value text after 'key': in a numpy header dict literal.
absl::StatusOr<absl::string_view> DictValue(absl::string_view header, absl::string_view key) {
  const std::string quoted = absl::StrCat("'", key, "'");
  size_t p = header.find(quoted);
  if (p == absl::string_view::npos) return Bad(absl::StrCat(".npy header has no '", key, "' key"));
  p = header.find(':', p + quoted.size());
  if (p == absl::string_view::npos) return Bad(".npy header is malformed");
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(header.substr(p + 1));
  if (rest.empty()) return Bad(".npy header is malformed");
  if (rest[0] == '\'') {
    size_t e = rest.find('\'', 1);
    if (e == absl::string_view::npos) return Bad(".npy header has an unterminated string");
    return rest.substr(1, e - 1);
  }
  if (rest[0] == '(') {
    size_t e = rest.find(')');
    if (e == absl::string_view::npos) return Bad(".npy header has an unterminated shape tuple");
    return rest.substr(1, e - 1);
  }
  size_t e = rest.find_first_of(",}");
  return absl::StripAsciiWhitespace(rest.substr(0, e));
}

}  // namespace

absl::StatusOr<HostTensor> ParseNpy(absl::string_view bytes) {
  static constexpr char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.substr(0, 6) != absl::string_view(kMagic, 6)) return Bad("not a .npy file (bad magic)");
  const uint8_t major = static_cast<uint8_t>(bytes[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad("truncated .npy header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
    offset = 12;
  } else {
    return Bad(absl::StrCat("unsupported .npy version ", major));
  }
  if (header_len > bytes.size() - offset) return Bad("truncated .npy header");
  const absl::string_view header = bytes.substr(offset, header_len);
  MXVAL_ASSIGN_OR_RETURN(absl::string_view descr, DictValue(header, "descr"));
  MXVAL_ASSIGN_OR_RETURN(absl::string_view fortran, DictValue(header, "fortran_order"));
  MXVAL_ASSIGN_OR_RETURN(absl::string_view shape_text, DictValue(header, "shape"));
  if (fortran != "False") return Bad(".npy file is Fortran-ordered; only C order is supported");
  HostTensor t;
  MXVAL_ASSIGN_OR_RETURN(t.dtype, NpyDescr(descr));
  for (absl::string_view part : absl::StrSplit(shape_text, ',', absl::SkipWhitespace())) {
    int64_t d;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d) || d < 0) {
      return Bad(absl::StrCat(".npy shape has a bad dimension '", part, "'"));
    }
    t.shape.push_back(d);
  }
  MXVAL_ASSIGN_OR_RETURN(int64_t numel, CheckedNumel(t.shape));
  const int64_t nbytes = numel * DTypeSize(t.dtype);
  if (nbytes > kMaxTensorBytes) return Bad("tensor too large");
  const size_t data_off = offset + header_len;
  if (bytes.size() - data_off < static_cast<size_t>(nbytes)) {
    return Bad(absl::StrCat("truncated .npy data: header promises ", nbytes, " bytes, file has ", bytes.size() - data_off));
  }
  t.data.assign(bytes.begin() + data_off, bytes.begin() + data_off + nbytes);
  return t;
}

std::string SerializeNpy(const HostTensor& t) {
  std::string shape;
  if (t.shape.size() == 1) shape = absl::StrCat(t.shape[0], ",");
  else shape = absl::StrJoin(t.shape, ", ");
  std::string header = absl::StrCat("{'descr': '", NpyDescrOf(t.dtype), "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Pad so that magic(6)+version(2)+len(2)+header is a multiple of 64, ending in '\n'.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xFF));
  out.push_back(static_cast<char>((header.size() >> 8) & 0xFF));
  out += header;
  out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  return out;
}

namespace {

absl::StatusOr<nlohmann::json> SafetensorsHeader(absl::string_view bytes, size_t* data_start) {
  if (bytes.size() < 8) return Bad("not a .safetensors file (shorter than its 8-byte header length)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  if (n > bytes.size() - 8 || n > (100u << 20)) return Bad("truncated or corrupt .safetensors header length");
  nlohmann::json j = nlohmann::json::parse(bytes.substr(8, n), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad(".safetensors header is not a JSON object");
  *data_start = 8 + n;
  return j;
}

absl::StatusOr<DType> SafetensorsDType(const std::string& s) {
  if (s == "U8") return DType::kU8;
  if (s == "I8") return DType::kI8;
  if (s == "U16") return DType::kU16;
  if (s == "BF16") return DType::kBF16;
  if (s == "F16") return DType::kF16;
  if (s == "F32") return DType::kF32;
  if (s == "F64") return DType::kF64;
  return Bad(absl::StrCat("unsupported safetensors dtype '", s, "'"));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ListSafetensors(absl::string_view bytes) {
  size_t start;
  MXVAL_ASSIGN_OR_RETURN(nlohmann::json j, SafetensorsHeader(bytes, &start));
  std::vector<std::string> names;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "__metadata__") names.push_back(it.key());
  }
  return names;
}

absl::StatusOr<HostTensor> ParseSafetensors(absl::string_view bytes, const std::string& name) {
  size_t start;
  MXVAL_ASSIGN_OR_RETURN(nlohmann::json j, SafetensorsHeader(bytes, &start));
  if (!j.contains(name) || name == "__metadata__") {
    MXVAL_ASSIGN_OR_RETURN(auto names, ListSafetensors(bytes));
    return absl::NotFoundError(absl::StrCat("no tensor '", name, "' in .safetensors file (has: ", absl::StrJoin(names, ", "), ")"));
  }
  const nlohmann::json& e = j[name];
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets") ||
      !e["dtype"].is_string() || !e["shape"].is_array() || !e["data_offsets"].is_array() ||
      e["data_offsets"].size() != 2) {
    return Bad(absl::StrCat(".safetensors entry '", name, "' lacks dtype/shape/data_offsets"));
  }
  HostTensor t;
  MXVAL_ASSIGN_OR_RETURN(t.dtype, SafetensorsDType(e["dtype"].get<std::string>()));
  for (const auto& d : e["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) return Bad(absl::StrCat(".safetensors entry '", name, "' has a bad shape"));
    t.shape.push_back(d.get<int64_t>());
  }
  const auto& off = e["data_offsets"];
  if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) return Bad("bad data_offsets");
  const uint64_t b0 = off[0].get<uint64_t>(), b1 = off[1].get<uint64_t>();
  MXVAL_ASSIGN_OR_RETURN(int64_t numel, CheckedNumel(t.shape));
  const uint64_t want = static_cast<uint64_t>(numel) * DTypeSize(t.dtype);
  const uint64_t avail = bytes.size() - start;
  if (b1 < b0 || b1 - b0 != want) {
    return Bad(absl::StrCat(".safetensors entry '", name, "': data_offsets span ", b1 - b0, " bytes but shape needs ", want));
  }
  if (b1 > avail) return Bad(absl::StrCat(".safetensors entry '", name, "' runs past the end of the file (truncated?)"));
  t.data.assign(bytes.begin() + start + b0, bytes.begin() + start + b1);
  return t;
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open '", path, "': ", std::strerror(errno)));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return absl::DataLossError(absl::StrCat("error reading '", path, "'"));
  return ss.str();
}

absl::StatusOr<HostTensor> LoadTensor(const std::string& spec) {
  std::string path = spec, name;
  const size_t hash = spec.rfind('#');
  if (hash != std::string::npos && absl::StrContains(spec.substr(0, hash), ".safetensors")) {
    path = spec.substr(0, hash);
    name = spec.substr(hash + 1);
  }
  MXVAL_ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes(path));
  absl::StatusOr<HostTensor> t;
  if (absl::EndsWith(path, ".safetensors")) {
    if (name.empty()) {
      auto names = ListSafetensors(bytes);
      if (names.ok() && names->size() == 1) name = (*names)[0];
      else return Bad(absl::StrCat("'", path, "': name the tensor as ", path, "#NAME"));
    }
    t = ParseSafetensors(bytes, name);
  } else {
    t = ParseNpy(bytes);
  }
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  return t;
}

absl::Status SaveNpy(const std::string& path, const HostTensor& t) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "': ", std::strerror(errno)));
  const std::string bytes = SerializeNpy(t);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return absl::DataLossError(absl::StrCat("error writing '", path, "'"));
  return absl::OkStatus();
}

}  // namespace mxval
