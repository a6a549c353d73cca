#include "common/tensor_io.h"

#include <algorithm>
#include <cerrno>
#include <map>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/bounded_read.h"
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
    if (d != 0 && n > kMaxTensorBytes / d) {
      return Bad(absl::StrCat("tensor of shape [", absl::StrJoin(shape, ", "), "] is larger than ", FormatBytes(kMaxTensorBytes)));
    }
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

// A parsed .npy preamble and header: what the data is and where it starts.
struct NpyHeader {
  DType dtype;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
  int64_t data_bytes = 0;
};

// The header's length and where it starts, from the first 12 (or, for
// version 1, 10) bytes.
absl::Status NpyPreamble(absl::string_view bytes, size_t* offset, size_t* header_len) {
  static constexpr char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.substr(0, 6) != absl::string_view(kMagic, 6)) return Bad("not a .npy file (bad magic)");
  const uint8_t major = static_cast<uint8_t>(bytes[6]);
  if (major == 1) {
    *header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8);
    *offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad("truncated .npy header");
    *header_len = 0;
    for (int i = 0; i < 4; ++i) *header_len |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
    *offset = 12;
  } else {
    return Bad(absl::StrCat("unsupported .npy version ", major));
  }
  return absl::OkStatus();
}

// Parses the preamble and header; `bytes` holds at least both (the data may
// follow, or not).
absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view bytes) {
  size_t offset, header_len;
  MXVAL_RETURN_IF_ERROR(NpyPreamble(bytes, &offset, &header_len));
  if (header_len > bytes.size() - offset) return Bad("truncated .npy header");
  const absl::string_view header = bytes.substr(offset, header_len);
  MXVAL_ASSIGN_OR_RETURN(absl::string_view descr, DictValue(header, "descr"));
  MXVAL_ASSIGN_OR_RETURN(absl::string_view fortran, DictValue(header, "fortran_order"));
  MXVAL_ASSIGN_OR_RETURN(absl::string_view shape_text, DictValue(header, "shape"));
  if (fortran != "False") return Bad(".npy file is Fortran-ordered; only C order is supported");
  NpyHeader h;
  MXVAL_ASSIGN_OR_RETURN(h.dtype, NpyDescr(descr));
  for (absl::string_view part : absl::StrSplit(shape_text, ',', absl::SkipWhitespace())) {
    int64_t d;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d) || d < 0) {
      return Bad(absl::StrCat(".npy shape has a bad dimension '", part, "'"));
    }
    h.shape.push_back(d);
  }
  MXVAL_ASSIGN_OR_RETURN(int64_t numel, CheckedNumel(h.shape));
  if (numel > kMaxTensorBytes / DTypeSize(h.dtype)) {
    return Bad(absl::StrCat("tensor of shape [", absl::StrJoin(h.shape, ", "), "] is larger than ", FormatBytes(kMaxTensorBytes)));
  }
  h.data_bytes = numel * DTypeSize(h.dtype);
  h.data_offset = offset + header_len;
  return h;
}

}  // namespace

absl::StatusOr<HostTensor> ParseNpy(absl::string_view bytes) {
  MXVAL_ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(bytes));
  if (bytes.size() - h.data_offset < static_cast<size_t>(h.data_bytes)) {
    return Bad(absl::StrCat("truncated .npy data: header promises ", h.data_bytes, " bytes, file has ",
                            bytes.size() - h.data_offset));
  }
  HostTensor t;
  t.dtype = h.dtype;
  t.shape = std::move(h.shape);
  t.data.assign(bytes.begin() + h.data_offset, bytes.begin() + h.data_offset + h.data_bytes);
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

// Largest .safetensors JSON header (the safetensors library's own limit is 100 MB).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100u << 20;

// The header's JSON from its 8-byte length and text; `total_size` is the
// file's size (the header must fit in it).
absl::StatusOr<nlohmann::json> SafetensorsHeaderJson(absl::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad(".safetensors header is not a JSON object");
  return j;
}

absl::StatusOr<uint64_t> SafetensorsHeaderLength(absl::string_view first8, uint64_t total_size) {
  if (first8.size() < 8 || total_size < 8) return Bad("not a .safetensors file (shorter than its 8-byte header length)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(first8[i])) << (8 * i);
  if (n > total_size - 8 || n > kMaxSafetensorsHeaderBytes) {
    return Bad(absl::StrCat("truncated or corrupt .safetensors header length (", n, " bytes, file has ", total_size, ")"));
  }
  return n;
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

// Bytes per element of any whole-byte safetensors dtype, 0 if unknown (a
// file may hold tensors of dtypes we do not load; their byte ranges are
// still checked).
int64_t SafetensorsElementBytes(const std::string& s) {
  if (s == "BOOL" || s == "U8" || s == "I8" || s == "F8_E5M2" || s == "F8_E4M3" || s == "F8_E8M0") return 1;
  if (s == "U16" || s == "I16" || s == "F16" || s == "BF16") return 2;
  if (s == "U32" || s == "I32" || s == "F32") return 4;
  if (s == "U64" || s == "I64" || s == "F64") return 8;
  return 0;
}

struct SafetensorsEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

// Every entry of the header, checked against each other and the data size:
// each has a dtype, a shape and data_offsets [begin, end] with begin <= end
// <= data_size, the span matches dtype x shape (for dtypes of known size), and
// no two spans overlap. A file failing any of these is refused whole.
absl::StatusOr<std::map<std::string, SafetensorsEntry>> SafetensorsIndex(const nlohmann::json& header,
                                                                          uint64_t data_size) {
  std::map<std::string, SafetensorsEntry> index;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets") ||
        !e["dtype"].is_string() || !e["shape"].is_array() || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      return Bad(absl::StrCat(".safetensors entry '", name, "' lacks dtype/shape/data_offsets"));
    }
    SafetensorsEntry s;
    s.dtype = e["dtype"].get<std::string>();
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return Bad(absl::StrCat(".safetensors entry '", name, "' has a bad shape"));
      s.shape.push_back(d.get<int64_t>());
    }
    const auto& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return Bad(absl::StrCat(".safetensors entry '", name, "' has bad data_offsets"));
    }
    s.begin = off[0].get<uint64_t>();
    s.end = off[1].get<uint64_t>();
    if (s.end < s.begin) {
      return Bad(absl::StrCat(".safetensors entry '", name, "': data_offsets [", s.begin, ", ", s.end, "] end before they begin"));
    }
    if (s.end > data_size) {
      return Bad(absl::StrCat(".safetensors entry '", name, "' runs past the end of the file (data_offsets end at ", s.end,
                              ", the data has ", data_size, " bytes; truncated?)"));
    }
    if (const int64_t el = SafetensorsElementBytes(s.dtype); el > 0) {
      MXVAL_ASSIGN_OR_RETURN(int64_t numel, CheckedNumel(s.shape));
      if (numel > kMaxTensorBytes / el) return Bad(absl::StrCat(".safetensors entry '", name, "': tensor too large"));
      const uint64_t want = static_cast<uint64_t>(numel * el);
      if (s.end - s.begin != want) {
        return Bad(absl::StrCat(".safetensors entry '", name, "': data_offsets span ", s.end - s.begin,
                                " bytes but dtype and shape need ", want));
      }
    }
    index.emplace(name, std::move(s));
  }
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, const std::string*>> spans;
  for (const auto& [name, e] : index) spans.push_back({{e.begin, e.end}, &name});
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first.first < spans[i - 1].first.second) {
      return Bad(absl::StrCat(".safetensors entries '", *spans[i - 1].second, "' and '", *spans[i].second,
                              "' overlap (data_offsets [", spans[i - 1].first.first, ", ", spans[i - 1].first.second,
                              "] and [", spans[i].first.first, ", ", spans[i].first.second, "])"));
    }
  }
  return index;
}

// The header and index of a whole .safetensors file in memory.
absl::StatusOr<std::map<std::string, SafetensorsEntry>> IndexOfBytes(absl::string_view bytes, size_t* data_start) {
  MXVAL_ASSIGN_OR_RETURN(uint64_t n, SafetensorsHeaderLength(bytes.substr(0, 8), bytes.size()));
  MXVAL_ASSIGN_OR_RETURN(nlohmann::json j, SafetensorsHeaderJson(bytes.substr(8, n)));
  *data_start = 8 + n;
  return SafetensorsIndex(j, bytes.size() - 8 - n);
}

absl::Status NoSuchTensor(const std::map<std::string, SafetensorsEntry>& index, const std::string& name) {
  std::vector<std::string> names;
  for (const auto& [n, e] : index) names.push_back(n);
  return absl::NotFoundError(absl::StrCat("no tensor '", name, "' in .safetensors file (has: ", absl::StrJoin(names, ", "), ")"));
}

// The tensor's dtype and shape; its data is filled by the caller.
absl::StatusOr<HostTensor> TensorOf(const SafetensorsEntry& e, const std::string& name) {
  HostTensor t;
  auto dt = SafetensorsDType(e.dtype);
  if (!dt.ok()) return Bad(absl::StrCat(".safetensors entry '", name, "': ", dt.status().message()));
  t.dtype = *dt;
  t.shape = e.shape;
  return t;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ListSafetensors(absl::string_view bytes) {
  size_t start;
  MXVAL_ASSIGN_OR_RETURN(auto index, IndexOfBytes(bytes, &start));
  std::vector<std::string> names;
  for (const auto& [n, e] : index) names.push_back(n);
  return names;
}

absl::StatusOr<HostTensor> ParseSafetensors(absl::string_view bytes, const std::string& name) {
  size_t start;
  MXVAL_ASSIGN_OR_RETURN(auto index, IndexOfBytes(bytes, &start));
  auto it = index.find(name);
  if (it == index.end()) return NoSuchTensor(index, name);
  MXVAL_ASSIGN_OR_RETURN(HostTensor t, TensorOf(it->second, name));
  t.data.assign(bytes.begin() + start + it->second.begin, bytes.begin() + start + it->second.end);
  return t;
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path, int64_t max_bytes) {
  return ReadFileBounded(path, max_bytes, /*allow_pipe=*/true);
}

namespace {

absl::Status OverCap(const std::string& what, int64_t bytes, int64_t max_bytes) {
  return absl::InvalidArgumentError(absl::StrCat(what, " needs ", bytes, " bytes, over the cap of ", FormatBytes(max_bytes)));
}

// Reads the header, then only the data it describes, after checking that
// against the file's size and the cap.
// With !read_data, the tensor comes back with its dtype and shape, no data.
absl::StatusOr<HostTensor> LoadNpyFile(const BoundedFile& f, int64_t max_bytes, bool read_data) {
  MXVAL_ASSIGN_OR_RETURN(std::string pre, f.ReadAt(0, std::min<int64_t>(f.size(), 12)));
  size_t offset, header_len;
  MXVAL_RETURN_IF_ERROR(NpyPreamble(pre, &offset, &header_len));
  if (header_len > kMaxNpyHeaderBytes) return Bad(absl::StrCat(".npy header of ", header_len, " bytes is over the limit of ", FormatBytes(kMaxNpyHeaderBytes)));
  if (static_cast<int64_t>(offset + header_len) > f.size()) return Bad("truncated .npy header");
  MXVAL_ASSIGN_OR_RETURN(std::string head, f.ReadAt(0, static_cast<int64_t>(offset + header_len)));
  MXVAL_ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(head));
  if (h.data_bytes > max_bytes) return OverCap(absl::StrCat("tensor ", HostTensor{h.dtype, h.shape, {}}.ShapeString()), h.data_bytes, max_bytes);
  const int64_t avail = f.size() - static_cast<int64_t>(h.data_offset);
  if (avail < h.data_bytes) {
    return Bad(absl::StrCat("truncated .npy data: header promises ", h.data_bytes, " bytes, file has ", avail));
  }
  HostTensor t;
  t.dtype = h.dtype;
  t.shape = std::move(h.shape);
  if (!read_data) return t;
  t.data.resize(static_cast<size_t>(h.data_bytes));
  MXVAL_RETURN_IF_ERROR(f.ReadInto(static_cast<int64_t>(h.data_offset), h.data_bytes, t.data.data()));
  return t;
}

absl::StatusOr<HostTensor> LoadSafetensorsFile(const BoundedFile& f, std::string name, int64_t max_bytes,
                                                bool read_data) {
  MXVAL_ASSIGN_OR_RETURN(std::string first8, f.ReadAt(0, std::min<int64_t>(f.size(), 8)));
  MXVAL_ASSIGN_OR_RETURN(uint64_t n, SafetensorsHeaderLength(first8, static_cast<uint64_t>(f.size())));
  MXVAL_ASSIGN_OR_RETURN(std::string text, f.ReadAt(8, static_cast<int64_t>(n)));
  MXVAL_ASSIGN_OR_RETURN(nlohmann::json j, SafetensorsHeaderJson(text));
  const int64_t data_start = 8 + static_cast<int64_t>(n);
  MXVAL_ASSIGN_OR_RETURN(auto index, SafetensorsIndex(j, static_cast<uint64_t>(f.size() - data_start)));
  if (name.empty()) {
    if (index.size() != 1) return Bad(absl::StrCat("name the tensor as ", f.path(), "#NAME"));
    name = index.begin()->first;
  }
  auto it = index.find(name);
  if (it == index.end()) return NoSuchTensor(index, name);
  MXVAL_ASSIGN_OR_RETURN(HostTensor t, TensorOf(it->second, name));
  const int64_t bytes = static_cast<int64_t>(it->second.end - it->second.begin);
  if (bytes > max_bytes) return OverCap(absl::StrCat("tensor '", name, "' ", t.ShapeString()), bytes, max_bytes);
  if (!read_data) return t;
  t.data.resize(static_cast<size_t>(bytes));
  MXVAL_RETURN_IF_ERROR(f.ReadInto(data_start + static_cast<int64_t>(it->second.begin), bytes, t.data.data()));
  return t;
}

// LoadTensor and PeekTensor.
absl::StatusOr<HostTensor> OpenTensor(const std::string& spec, int64_t max_bytes, bool read_data) {
  std::string path = spec, name;
  const size_t hash = spec.rfind('#');
  if (hash != std::string::npos && absl::StrContains(spec.substr(0, hash), ".safetensors")) {
    path = spec.substr(0, hash);
    name = spec.substr(hash + 1);
  }
  MXVAL_ASSIGN_OR_RETURN(BoundedFile f, BoundedFile::Open(path));
  absl::StatusOr<HostTensor> t = absl::EndsWith(path, ".safetensors") ? LoadSafetensorsFile(f, name, max_bytes, read_data)
                                                                      : LoadNpyFile(f, max_bytes, read_data);
  if (!t.ok() && !absl::StartsWith(t.status().message(), path)) {
    return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  }
  return t;
}

}  // namespace

absl::StatusOr<HostTensor> LoadTensor(const std::string& spec, int64_t max_bytes) {
  return OpenTensor(spec, max_bytes, /*read_data=*/true);
}

absl::StatusOr<TensorInfo> PeekTensor(const std::string& spec) {
  MXVAL_ASSIGN_OR_RETURN(HostTensor t, OpenTensor(spec, kMaxTensorBytes, /*read_data=*/false));
  TensorInfo info;
  info.dtype = t.dtype;
  info.shape = std::move(t.shape);
  int64_t numel = 1;
  for (int64_t d : info.shape) numel *= d;  // bounded by the header checks
  info.bytes = numel * DTypeSize(info.dtype);
  return info;
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
