#include "service/coordinator/request_bounds.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"

namespace mxval {
namespace coordinator {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::Status CheckString(const std::string& s, const FieldDescriptor* f, const std::string& path,
                         const RequestBounds& b) {
  auto limit = b.string_bytes.find(f->full_name());
  const size_t max = limit == b.string_bytes.end() ? b.max_string_bytes : limit->second;
  if (s.size() > max) return Bad(path, absl::StrCat(s.size(), " bytes; at most ", max));
  if (f->type() == FieldDescriptor::TYPE_BYTES) return absl::OkStatus();
  const size_t at = FindControlCharacter(s, b.multiline.count(f->full_name()) ? "\t\n\r" : "");
  if (at != absl::string_view::npos) {
    return Bad(path, absl::StrCat("control character at byte ", at, " (not allowed in this field)"));
  }
  return absl::OkStatus();
}

absl::Status Check(const Message& m, const std::string& path, const RequestBounds& b, int depth) {
  if (depth > 32) return Bad(path, "nested too deeply");
  const Reflection* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);  // only the fields that are set
  for (const FieldDescriptor* f : fields) {
    const std::string name = path.empty() ? f->name() : absl::StrCat(path, ".", f->name());
    if (f->is_repeated()) {
      const int n = r->FieldSize(m, f);
      auto limit = b.repeated.find(f->full_name());
      const int max = limit == b.repeated.end() ? b.max_repeated : limit->second;
      if (n > max) return Bad(name, absl::StrCat(n, " entries; at most ", max));
      for (int i = 0; i < n; ++i) {
        const std::string item = absl::StrCat(name, "[", i, "]");
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
          std::string scratch;
          if (absl::Status st = CheckString(r->GetRepeatedStringReference(m, f, i, &scratch), f, item, b); !st.ok()) {
            return st;
          }
        } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          if (absl::Status st = Check(r->GetRepeatedMessage(m, f, i), item, b, depth + 1); !st.ok()) return st;
        }
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      std::string scratch;
      if (absl::Status st = CheckString(r->GetStringReference(m, f, &scratch), f, name, b); !st.ok()) return st;
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (absl::Status st = Check(r->GetMessage(m, f), name, b, depth + 1); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

RequestBounds MakeApiBounds() {
  RequestBounds b;
  b.max_string_bytes = 1024;
  b.max_repeated = 4096;
  // A dispatch table is a file (AITER's JSON configs are tens of KiB).
  b.string_bytes["mxval.v1.ConfigTable.json"] = 4 << 20;
  b.multiline.insert("mxval.v1.ConfigTable.json");
  for (const char* f : {"mxval.v1.JobSpec.name", "mxval.v1.ConfigTable.name", "mxval.v1.KernelRef.library",
                        "mxval.v1.KernelRef.kernel", "mxval.v1.KernelRef.build_id", "mxval.v1.RegisterWorkerRequest.worker_id",
                        "mxval.v1.HeartbeatRequest.worker_id", "mxval.v1.LeaseTaskRequest.worker_id",
                        "mxval.v1.ReportResultRequest.worker_id", "mxval.v1.WorkerCapabilities.hostname",
                        "mxval.v1.DeviceInfo.name", "mxval.v1.HeartbeatRequest.lease_ids",
                        "mxval.v1.ReportResultRequest.lease_id", "mxval.v1.JobSpec.target_archs",
                        "mxval.v1.JobSpec.presets", "mxval.v1.PullRequestContext.repository",
                        "mxval.v1.PullRequestContext.base_revision", "mxval.v1.PullRequestContext.head_revision"}) {
    b.string_bytes[f] = 256;
  }
  b.string_bytes["mxval.v1.DeviceInfo.arch"] = 32;
  // A monorepo's pull request may touch tens of thousands of files.
  b.repeated["mxval.v1.PullRequestContext.changed_files"] = 100000;
  b.repeated["mxval.v1.PullRequestContext.changed_dispatch_entries"] = 100000;
  b.repeated["mxval.v1.JobSpec.m_values"] = 1024;
  b.repeated["mxval.v1.JobSpec.target_archs"] = 16;
  b.repeated["mxval.v1.JobSpec.presets"] = 16;
  b.repeated["mxval.v1.WorkerCapabilities.devices"] = kMaxWorkerDevices;
  b.repeated["mxval.v1.WorkerCapabilities.libraries"] = 256;
  b.repeated["mxval.v1.KernelLibraryInfo.kernels"] = 1024;
  b.repeated["mxval.v1.HeartbeatRequest.lease_ids"] = 1024;
  return b;
}

}  // namespace

const RequestBounds& ApiBounds() {
  static const RequestBounds* bounds = new RequestBounds(MakeApiBounds());
  return *bounds;
}

absl::Status CheckBounds(const Message& m, const std::string& path, const RequestBounds& bounds) {
  return Check(m, path, bounds, 0);
}

size_t FindControlCharacter(absl::string_view text, absl::string_view allow) {
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 || c == 0x7f) && allow.find(static_cast<char>(c)) == absl::string_view::npos) return i;
    // C1 controls U+0080..U+009F are 0xC2 0x80..0x9F in UTF-8.
    if (c == 0xC2 && i + 1 < text.size()) {
      const unsigned char d = static_cast<unsigned char>(text[i + 1]);
      if (d >= 0x80 && d <= 0x9F) return i;
    }
  }
  return absl::string_view::npos;
}

absl::Status ValidateRegistration(const v1::RegisterWorkerRequest& req) {
  if (req.worker_id().empty()) return Bad("worker_id", "empty");
  if (absl::Status st = CheckBounds(req, ""); !st.ok()) return st;
  const auto& devices = req.capabilities().devices();
  if (devices.empty()) return Bad("capabilities.devices", "a worker needs at least one device (cpu counts)");
  std::set<int> seen;
  for (int i = 0; i < devices.size(); ++i) {
    const v1::DeviceInfo& d = devices[i];
    const std::string f = absl::StrCat("capabilities.devices[", i, "]");
    if (d.index() < 0 || d.index() > kMaxDeviceIndex) {
      return Bad(f + ".index", absl::StrCat(d.index(), " is not in [0, ", kMaxDeviceIndex, "]"));
    }
    if (!seen.insert(d.index()).second) return Bad(f + ".index", absl::StrCat(d.index(), " is listed twice"));
    if (d.arch().empty()) return Bad(f + ".arch", "empty");
    for (char c : d.arch()) {
      if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_') {
        return Bad(f + ".arch", "only [a-z0-9_] (e.g. sm_90a, gfx942, cpu)");
      }
    }
    if (d.memory_bytes() < 0) return Bad(f + ".memory_bytes", "negative");
  }
  return absl::OkStatus();
}

absl::Status ValidateDeadline(const google::protobuf::Duration& d) {
  if (d.nanos() < 0 || d.nanos() > 999999999) return Bad("spec.deadline.nanos", "must be in [0, 999999999]");
  if (d.seconds() < 0 || d.seconds() > kMaxDeadlineSeconds || (d.seconds() == 0 && d.nanos() == 0)) {
    return Bad("spec.deadline", absl::StrCat(d.seconds(), " s is not in (0, ", kMaxDeadlineSeconds, "] s (30 days)"));
  }
  return absl::OkStatus();
}

}  // namespace coordinator
}  // namespace mxval
