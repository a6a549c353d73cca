// mxval triage: sorts failing CI jobs into caused-by-this-change and
// unrelated, from their logs, the change's files or diff, and optionally the
// same jobs' logs on the merge base. Locally, or through a coordinator's
// TriageService.
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/report.h"
#include "client/service_verbs.h"
#include "client/verb_util.h"
#include "common/bounded_read.h"
#include "google/protobuf/util/json_util.h"
#include "mxval/v1/mxval.grpc.pb.h"
#include "service/triage/log_triage.h"
#include "service/triage/triage_config.h"

namespace mxval {
namespace {

struct TriageFlags {
  std::string changed_path, diff_path, logs_dir, base_dir, rules_path, ownership_path, coordinator;
  std::string format = "markdown", out_path = "-", fail_on = "pr-touched,untouched";
  int64_t max_log_bytes = 8 << 20;
};

// Bounds on what triage reads (every log is also cut to --max-log-bytes).
constexpr int64_t kMaxChangedFilesBytes = 64 << 20;
constexpr int64_t kMaxDiffBytes = 32 << 20;
constexpr size_t kMaxLogFiles = 10000;

// The regular files of a log directory, sorted; INVALID_ARGUMENT naming the
// flag if it cannot be listed or holds more than kMaxLogFiles. Entries that
// are not regular files (directories, devices, pipes, symlinks to them) are
// not jobs and are skipped.
absl::StatusOr<std::vector<std::filesystem::path>> LogFiles(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;
    if (files.size() == kMaxLogFiles) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": ", dir, " holds more than ", kMaxLogFiles, " log files"));
    }
    files.push_back(it->path());
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", dir, ": ", ec.message()));
  std::sort(files.begin(), files.end());
  return files;
}

// The request: changed files, diff, one job per file in --logs, its base log
// from the file of the same name in --base-logs. A usage message on error.
absl::StatusOr<v1::TriageLogsRequest> ReadRequest(const TriageFlags& fl) {
  v1::TriageLogsRequest req;
  if (!fl.changed_path.empty()) {
    // A file or a pipe (<(git diff --name-only ...)).
    auto text = ReadFileBounded(fl.changed_path, kMaxChangedFilesBytes, /*allow_pipe=*/true);
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--changed-files: ", text.status().message()));
    for (absl::string_view line : absl::StrSplit(*text, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (!line.empty() && line[0] != '#') req.add_changed_files(std::string(line));
    }
  }
  if (!fl.diff_path.empty()) {
    auto text = ReadFileBounded(fl.diff_path, kMaxDiffBytes, /*allow_pipe=*/true);  // a file or <(git diff ...)
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--diff: ", text.status().message()));
    req.set_diff(std::move(*text));
  }
  auto files = LogFiles("--logs", fl.logs_dir);
  if (!files.ok()) return files.status();
  if (files->empty()) return absl::InvalidArgumentError(absl::StrCat("--logs: no files in ", fl.logs_dir));
  for (const auto& p : *files) {
    v1::CiJobLog* j = req.add_jobs();
    std::string name = p.filename().string();
    for (const char* ext : {".log", ".txt"})
      if (absl::EndsWith(name, ext)) name.resize(name.size() - strlen(ext));
    j->set_name(name);
    bool cut = false;
    auto log = ReadFileTail(p.string(), fl.max_log_bytes, &cut);
    if (!log.ok()) return absl::InvalidArgumentError(absl::StrCat("--logs: ", log.status().message()));
    j->set_log(std::move(*log));
    j->set_truncated(cut);
    if (!fl.base_dir.empty()) {
      const std::filesystem::path b = std::filesystem::path(fl.base_dir) / p.filename();
      std::error_code ec;
      if (std::filesystem::is_regular_file(b, ec)) {
        auto base = ReadFileTail(b.string(), fl.max_log_bytes);
        if (!base.ok()) return absl::InvalidArgumentError(absl::StrCat("--base-logs: ", base.status().message()));
        j->set_base_log(std::move(*base));
      }
    }
  }
  return req;
}

// Through a coordinator, in batches under its 16 MiB message limit; the
// answers are merged in order.
int TriageRemote(const TriageFlags& fl, const v1::TriageLogsRequest& req, v1::TriageLogsResponse* resp,
                 std::ostream& err) {
  grpc::ChannelArguments ca;
  ca.SetMaxSendMessageSize(-1);
  ca.SetMaxReceiveMessageSize(64 << 20);
  auto creds = EnvCredentials();
  if (!creds.ok()) return Usage(err, "triage", std::string(creds.status().message()));
  auto stub = v1::TriageService::NewStub(ClientChannel(fl.coordinator, *creds, ca));
  constexpr size_t kBatchBytes = 12 << 20;
  for (const v1::CiJobLog& j : req.jobs()) {
    if (j.ByteSizeLong() + req.diff().size() > kBatchBytes) {
      return Usage(err, "triage",
                   absl::StrCat("job '", j.name(), "': its log, base log and the diff exceed what one request to a ",
                                "coordinator carries (12 MiB); lower --max-log-bytes"));
    }
  }
  for (int i = 0; i < req.jobs_size();) {
    v1::TriageLogsRequest batch;
    *batch.mutable_changed_files() = req.changed_files();
    batch.set_diff(req.diff());
    size_t bytes = batch.ByteSizeLong();
    while (i < req.jobs_size() && (batch.jobs_size() == 0 || bytes + req.jobs(i).ByteSizeLong() <= kBatchBytes)) {
      bytes += req.jobs(i).ByteSizeLong();
      *batch.add_jobs() = req.jobs(i++);
    }
    v1::TriageLogsResponse part;
    const grpc::Status st = stub->TriageLogs(Ctx(absl::Seconds(120)).get(), batch, &part);
    if (!st.ok()) return GrpcExit(err, "triage", st);
    for (v1::JobTriage& j : *part.mutable_jobs()) *resp->add_jobs() = std::move(j);
  }
  return -1;
}

int TriageLocal(const TriageFlags& fl, const v1::TriageLogsRequest& req, v1::TriageLogsResponse* resp,
                std::ostream& err) {
  v1::LogRules rules = triage::DefaultLogRules();
  if (!fl.rules_path.empty()) {
    auto r = triage::LoadLogRules(fl.rules_path);
    if (!r.ok()) return Usage(err, "triage", absl::StrCat("--rules: ", r.status().message()));
    rules = std::move(*r);
  }
  auto classifier = triage::LogClassifier::Create(rules);
  if (!classifier.ok()) return Usage(err, "triage", absl::StrCat("--rules: ", classifier.status().message()));
  std::unique_ptr<triage::Ownership> ownership = triage::Ownership::Empty();
  if (!fl.ownership_path.empty()) {
    auto m = triage::LoadOwnership(fl.ownership_path);
    if (!m.ok()) return Usage(err, "triage", absl::StrCat("--ownership: ", m.status().message()));
    auto o = triage::Ownership::Create(*m);
    if (!o.ok()) return Usage(err, "triage", absl::StrCat("--ownership: ", o.status().message()));
    ownership = std::move(*o);
  }
  triage::LogTriageOptions o;
  o.max_log_bytes = static_cast<size_t>(fl.max_log_bytes);
  auto r = triage::TriageLogs(req, **classifier, *ownership, o);
  if (!r.ok()) return Usage(err, "triage", std::string(r.status().message()));
  *resp = std::move(*r);
  return -1;
}

}  // namespace

int TriageVerb(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  TriageFlags fl;
  FlagSet f("triage",
            "Sorts failing CI jobs into caused-by-this-change and unrelated, from their logs.\n"
            "Each file in --logs is one failing job (name: the file name without .log/.txt); the file of the same\n"
            "name in --base-logs is that job's log on the merge base. Per job: the root cause (the first fatal\n"
            "event; later noise is listed as its consequences), the evidence that the change reaches it (frames in\n"
            "changed files, changed functions, tests the change adds, flags and kernels the diff introduces), the\n"
            "decision with its confidence, and the next step where the evidence is thin. Exit codes: 0 nothing\n"
            "that --fail-on gates, 1 something does (default: PR_TOUCHED or UNTOUCHED_FAILURE), 2 bad input,\n"
            "3 coordinator unavailable.");
  f.String("changed-files", &fl.changed_path, "file listing the change's files, one path per line");
  f.String("diff", &fl.diff_path, "the change's unified diff (git diff); its files join --changed-files");
  f.String("logs", &fl.logs_dir, "directory of failing jobs' logs", true);
  f.String("base-logs", &fl.base_dir, "directory of the same jobs' logs on the merge base");
  f.String("rules", &fl.rules_path, "rule file (.yaml or .json; default: the built-in rules)");
  f.String("ownership", &fl.ownership_path, "ownership map (.yaml or .json) adding job-to-path evidence; default: none");
  f.String("coordinator", &fl.coordinator, "ask this coordinator's TriageService instead of triaging locally");
  f.String("format", &fl.format, "markdown | json");
  f.String("out", &fl.out_path, "file to write ('-': stdout)");
  f.String("fail-on", &fl.fail_on, "classes that make the exit code 1: pr-touched | pr-touched,untouched | any");
  f.Int("max-log-bytes", &fl.max_log_bytes, "read at most this many bytes from the end of each log");
  if (int rc = ParseFlags(f, args, "triage", out, err); rc >= 0) return rc;
  GatePolicy gate;
  if (!ParseGatePolicy(fl.fail_on, &gate)) {
    return Usage(err, "triage", "--fail-on must be pr-touched, pr-touched,untouched or any");
  }
  if (fl.format != "markdown" && fl.format != "json") return Usage(err, "triage", "--format must be markdown or json");
  if (fl.max_log_bytes < 1024 || fl.max_log_bytes > (int64_t{256} << 20)) {
    return Usage(err, "triage", "--max-log-bytes must be in [1024, 268435456]");
  }
  if (fl.changed_path.empty() && fl.diff_path.empty()) {
    return Usage(err, "triage", "give the change: --changed-files FILE, --diff FILE, or both");
  }
  auto req = ReadRequest(fl);
  if (!req.ok()) return Usage(err, "triage", std::string(req.status().message()));
  v1::TriageLogsResponse resp;
  const int rc = fl.coordinator.empty() ? TriageLocal(fl, *req, &resp, err) : TriageRemote(fl, *req, &resp, err);
  if (rc >= 0) return rc;
  std::string text;
  if (fl.format == "json") {
    google::protobuf::util::JsonPrintOptions jo;
    jo.add_whitespace = true;
    if (!google::protobuf::util::MessageToJsonString(resp, &text, jo).ok()) {
      err << "mxval triage: cannot print the result as JSON\n";
      return kInternal;
    }
  } else {
    text = LogTriageMarkdown(resp);
  }
  if (int wrc = WriteOutput("triage", fl.out_path, text, out, err); wrc != kOk) return wrc;
  return LogTriageExitCode(resp, gate) == 0 ? kOk : kFailed;
}

}  // namespace mxval
