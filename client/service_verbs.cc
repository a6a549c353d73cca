#include "client/service_verbs.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <set>
#include <fstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/flags.h"
#include "nlohmann/json.hpp"
#include "client/library_describe.h"
#include "client/verb_util.h"
#include "client/report.h"
#include "common/digest.h"
#include "kernels/abi/kernel_library.h"
#include "service/auth/auth.h"
#include "service/auth/http_auth.h"
#include "service/auth/listen_address.h"
#include "service/auth/tls_front.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "service/triage/log_triage.h"
#include "service/triage/triage_config.h"
#include "service/triage/kernel_triage.h"
#include "client/spec_file.h"
#include "google/protobuf/util/json_util.h"
#include "prometheus/registry.h"
#include "service/coordinator/coordinator_service.h"
#include "service/coordinator/sqlite_store.h"
#include "service/coordinator/open_store.h"
#include "service/web/metrics_server.h"
#include "service/web/web_ui.h"
#include "service/worker/devices.h"
#include "common/tree_archive.h"
#include "common/tree_digest.h"
#include "kernels/python/manifest.h"
#include "kernels/dispatch/config_table.h"
#include "common/tensor_io.h"
#include "common/status_macros.h"
#include "service/worker/python_host.h"
#include "service/worker/worker.h"
#include "validation/presets.h"
#include "mxval/default_tables.h"
#include "mxval/example_specs.h"

namespace mxval {
namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// Must run before any thread exists (gRPC starts threads when a channel or
// server is created): threads inherit the mask, so SIGTERM reaches only the
// watcher below instead of killing the process.
void BlockTerminationSignals() {
  const sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// A thread that calls `on_signal` when SIGTERM/SIGINT arrives (or returns
// when `stop` is set). BlockTerminationSignals() must have run first.
std::thread SignalWatcher(std::atomic<bool>* stop, std::function<void()> on_signal) {
  const sigset_t set = TerminationSignals();
  return std::thread([set, stop, on_signal] {
    while (!stop->load()) {
      timespec ts{0, 200'000'000};
      if (sigtimedwait(&set, nullptr, &ts) > 0) {
        on_signal();
        return;
      }
    }
  });
}

// TLS for the HTTP listeners (metrics, web page): the HTTP server binds a
// loopback port and an auth::TlsFront serves the configured address (see
// tls_front.h for why civetweb's own TLS is not used).
struct HttpTls {
  std::string cert, key;
  bool on() const { return !cert.empty(); }
};

// An HTTP listen flag (unset: ""): parsed by auth::ParseListenAddress
// (INVALID_ARGUMENT naming the flag) and rewritten to the numeric form the
// HTTP servers bind; plaintext HTTP off loopback only with the explicit
// override (INVALID_ARGUMENT naming `remedy` otherwise).
absl::Status CheckHttpListen(const char* flag, std::string* listen, const HttpTls& tls, bool allow_remote,
                             const char* remedy) {
  if (listen->empty()) return absl::OkStatus();
  auto a = auth::ParseListenAddress(flag, *listen);
  if (!a.ok()) return a.status();
  if (!a->is_loopback && !tls.on() && !allow_remote) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", *listen, " is not a loopback address: ", remedy));
  }
  *listen = a->Numeric();
  return absl::OkStatus();
}

// With TLS, the public face of a loopback HTTP server on `backend_port`.
absl::StatusOr<std::unique_ptr<auth::TlsFront>> StartTlsFront(const std::string& listen, const HttpTls& tls,
                                                              int backend_port) {
  auth::TlsFrontOptions o;
  o.listen = listen;
  o.cert_file = tls.cert;
  o.key_file = tls.key;
  o.backend_port = backend_port;
  return auth::TlsFront::Start(o);
}

// Metrics on `listen` (checked by CheckHttpListen): plaintext, or HTTPS
// through a TLS front; with `auth` (may be null) a scrape needs a token.
// Prints "metrics on HOST:PORT" (and "metrics over HTTPS").
absl::Status ServeMetrics(const std::string& listen, const HttpTls& tls, std::shared_ptr<prometheus::Registry> registry,
                          auth::HttpAuth* auth, std::unique_ptr<web::MetricsServer>* exposer,
                          std::unique_ptr<auth::TlsFront>* front, std::ostream& out) {
  auto e = web::MetricsServer::Start(tls.on() ? "127.0.0.1:0" : listen, std::move(registry), auth);
  if (!e.ok()) return e.status();
  *exposer = std::move(*e);
  int port = (*exposer)->port();
  if (tls.on()) {
    auto f = StartTlsFront(listen, tls, port);
    if (!f.ok()) return f.status();
    *front = std::move(*f);
    port = (*front)->port();
  }
  out << "metrics on " << listen.substr(0, listen.rfind(':')) << ":" << port << "\n";
  if (tls.on()) out << "metrics over HTTPS\n";
  out.flush();
  return absl::OkStatus();
}

}  // namespace

std::string SelfExePath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : "mxval";
}

namespace {

// The default compile-cache directory of Python kernel libraries.
std::string DefaultPythonCacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x == '/') return absl::StrCat(x, "/mxval");
  if (const char* h = std::getenv("HOME"); h != nullptr && *h == '/') return absl::StrCat(h, "/.cache/mxval");
  return absl::StrCat("/tmp/mxval-cache-", getuid());
}

// Sets up the worker's cache of libraries fetched from the coordinator
// (service/worker/library_cache.h) and passes it to the task children.
absl::Status ConfigureLibraryCache(const std::string& dir, int64_t mib, const std::string& kernel_dir,
                                   worker::WorkerOptions* wo) {
  if (mib < 1 || mib > (int64_t{1} << 24)) return absl::InvalidArgumentError("--library-cache-mib must be in [1, 16777216]");
  wo->library_cache.dir = dir.empty() ? DefaultPythonCacheDir() + "/libraries" : dir;
  if (wo->library_cache.dir.front() != '/') {
    std::error_code ec;
    wo->library_cache.dir = std::filesystem::absolute(wo->library_cache.dir, ec).string();
  }
  wo->library_cache.max_bytes = mib << 20;
  wo->library_cache.kernel_dir = kernel_dir;
  wo->child_argv.push_back("--library-cache");
  wo->child_argv.push_back(wo->library_cache.dir);
  return absl::OkStatus();
}

// Sets up `wo` to run tasks with a Python side under `python` (python_host.h)
// and says on `err` what it found; without a usable interpreter such tasks
// become infrastructure failures naming the reason, and the rest still run.
void ConfigurePython(const std::string& python, const std::string& cache_dir, const std::string& who,
                     worker::WorkerOptions* wo, std::ostream& err) {
  worker::PythonHostOptions po;
  po.python = python;
  const std::string self = SelfExePath();
  po.lib_dir = self.substr(0, self.rfind('/')) + "/../lib";
  po.cache_dir = cache_dir.empty() ? DefaultPythonCacheDir() : cache_dir;
  auto argv = worker::PythonChildArgv(po, /*serve=*/true);
  absl::StatusOr<v1::PythonEnvironment> env =
      argv.ok() ? worker::ProbePython(po, absl::Seconds(60)) : absl::StatusOr<v1::PythonEnvironment>(argv.status());
  if (!env.ok()) {
    wo->python_unavailable = absl::StrCat("this worker cannot run Python kernel libraries: --python ", python, ": ",
                                          env.status().message());
    err << "mxval " << who << ": " << wo->python_unavailable << "\n";
    return;
  }
  wo->python_child_argv = *argv;
  wo->python_serving = true;
  wo->python = *env;
  err << "mxval " << who << ": Python kernel libraries run in " << worker::DescribePython(*env) << ", compile cache "
      << po.cache_dir << "\n";
}

}  // namespace

int ServeVerb(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string listen = "127.0.0.1:50051", db = "mxval.db", kernel_dir;
  int64_t workers = 0, lease_seconds = 30, max_queued = 1'000'000;
  bool allow_remote = false;
  FlagSet f("serve",
            "Runs the coordinator (gRPC on --listen, state in --db: a SQLite file or a shared PostgreSQL database);\n"
            "with --workers N also N local\n"
            "CPU workers in this process (the embedded single-machine mode). SIGTERM drains and exits.");
  f.String("listen", &listen, "address to listen on (port 0 picks one; printed on stdout)");
  f.String("db", &db,
           "where jobs, leases and results live: a SQLite file, or a PostgreSQL URI (postgresql://user@host/db)\n"
           "that several coordinators share");
  f.Int("workers", &workers, "embedded local CPU workers");
  f.String("kernel-dir", &kernel_dir, "directory of external kernel libraries for embedded workers (a pre-seeded cache)");
  std::string library_cache;
  int64_t library_cache_mib = 4096, max_library_mib = 256;
  f.String("library-cache", &library_cache,
           "where embedded workers keep libraries fetched from the coordinator (default: $XDG_CACHE_HOME/mxval/libraries)");
  f.Int("library-cache-mib", &library_cache_mib, "the embedded workers' library cache size; least recently used go first");
  f.Int("max-library-mib", &max_library_mib, "largest kernel library content register-library may upload");
  std::string python, python_cache_dir;
  f.String("python", &python, "local workers run Python kernel libraries in this interpreter (default: none)");
  f.String("python-cache-dir", &python_cache_dir, "the local workers' compile cache for Python kernel libraries");
  f.Int("lease-seconds", &lease_seconds, "task lease duration");
  f.Int("max-queued", &max_queued, "unfinished tasks accepted before RESOURCE_EXHAUSTED");
  f.Bool("insecure-allow-remote", &allow_remote, "listen on a non-loopback address without TLS (not recommended)");
  std::string metrics_listen;
  f.String("metrics-listen", &metrics_listen, "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464)");
  std::string rules_path, ownership_path, http_listen, tls_cert, tls_key, tls_client_ca, auth_config_path;
  f.String("tls-cert", &tls_cert, "TLS certificate (PEM) for the gRPC listener");
  f.String("tls-key", &tls_key, "its private key (PEM)");
  HttpTls http_tls;
  f.String("http-tls-cert", &http_tls.cert,
           "TLS certificate for the metrics and web listeners (default: --tls-cert; HTTPS only then)");
  f.String("http-tls-key", &http_tls.key, "its private key (default: --tls-key)");
  f.String("tls-client-ca", &tls_client_ca, "CA that signs worker client certificates (mutual TLS for workers)");
  int64_t max_inflight = 0, submit_rate = 0, rpc_rate = 0;
  f.Int("max-inflight-jobs-per-client", &max_inflight, "jobs a client may have queued or running (0: unlimited)");
  f.Int("submit-rate-per-minute", &submit_rate, "job submissions per client per minute (0: unlimited)");
  f.Int("rpc-rate-per-second", &rpc_rate,
        "other client calls (get, watch, list, cancel, triage, admin) per client per second (0: unlimited)");
  f.String("auth-config", &auth_config_path, "tokens (SHA-256) with roles, allowed worker names (.yaml/.json); needs TLS");
  f.String("http-listen", &http_listen, "serve the read-only web page at http://ADDR/ (e.g. 127.0.0.1:8080; port 0 picks one)");
  f.String("triage-rules", &rules_path, "log triage rule file (.yaml/.json; default: built-in rules)");
  f.String("ownership", &ownership_path, "ownership map for triage (.yaml/.json; default: built-in map)");
  if (int rc = ParseFlags(f, args, "serve", out, err); rc >= 0) return rc;
  // Before anything can start a thread (gRPC's TLS credentials do): every
  // thread inherits the mask, so SIGTERM reaches only the signal watcher.
  BlockTerminationSignals();
  // Credentials and triage configuration are checked before anything starts.
  if (tls_cert.empty() != tls_key.empty()) return Usage(err, "serve", "--tls-cert and --tls-key go together");
  if (http_tls.cert.empty() != http_tls.key.empty()) {
    return Usage(err, "serve", "--http-tls-cert and --http-tls-key go together");
  }
  if (!http_tls.on()) http_tls = {tls_cert, tls_key};  // every listener gets TLS once the gRPC one has it
  if ((!tls_client_ca.empty() || !auth_config_path.empty()) && tls_cert.empty()) {
    return Usage(err, "serve", "--tls-client-ca and --auth-config need TLS (--tls-cert, --tls-key)");
  }
  std::unique_ptr<auth::Authorizer> authorizer;
  std::shared_ptr<auth::TokenProcessor> token_processor;
  v1::AuthConfig auth_config;
  // Every denial (gRPC token, role, worker certificate, HTTP) is counted and
  // logged once, by principal or peer, never with the token. The counter is
  // set below, before any listener starts.
  std::atomic<coordinator::CoordinatorMetrics*> denial_metrics{nullptr};
  const auth::DenialHook on_denied = [&denial_metrics, &err](const std::string& reason, const std::string& method,
                                                             const std::string& who) {
    if (coordinator::CoordinatorMetrics* m = denial_metrics.load(); m != nullptr) m->AuthDenied(reason);
    // Method (a call's :path) and principal or peer are caller-supplied: escaped.
    err << "mxval serve: denied " << absl::CHexEscape(method.substr(0, 256)) << " for "
        << absl::CHexEscape(who.substr(0, 256)) << " (" << reason << ")\n";
  };
  // Worker ids are bound to certificates by the authorizer, which needs the
  // auth config: a client CA alone would accept any worker id.
  if (!tls_client_ca.empty() && auth_config_path.empty()) {
    return Usage(err, "serve", "--tls-client-ca needs --auth-config (worker ids are checked against certificates by it)");
  }
  if (!auth_config_path.empty()) {
    auto c = auth::LoadConfig(auth_config_path);
    if (!c.ok()) return Usage(err, "serve", absl::StrCat("--auth-config: ", c.status().message()));
    if (tls_client_ca.empty()) return Usage(err, "serve", "--auth-config needs --tls-client-ca: workers authenticate with certificates");
    auth_config = *c;
    token_processor = std::make_shared<auth::TokenProcessor>(auth_config, on_denied);
  }
  std::shared_ptr<grpc::ServerCredentials> server_creds;
  if (!tls_cert.empty()) {
    auto sc = auth::ServerCredentials({tls_cert, tls_key, tls_client_ca}, token_processor);
    if (!sc.ok()) return Usage(err, "serve", std::string(sc.status().message()));
    server_creds = *sc;
  }
  std::unique_ptr<triage::LogClassifier> rules;
  if (!rules_path.empty()) {
    auto r = triage::LoadLogRules(rules_path);
    if (!r.ok()) return Usage(err, "serve", absl::StrCat("--triage-rules: ", r.status().message()));
    auto c = triage::LogClassifier::Create(*r);
    if (!c.ok()) return Usage(err, "serve", absl::StrCat("--triage-rules: ", c.status().message()));
    rules = std::move(*c);
  }
  std::unique_ptr<triage::Ownership> ownership;
  if (!ownership_path.empty()) {
    auto m = triage::LoadOwnership(ownership_path);
    if (!m.ok()) return Usage(err, "serve", absl::StrCat("--ownership: ", m.status().message()));
    auto o = triage::Ownership::Create(*m);
    if (!o.ok()) return Usage(err, "serve", absl::StrCat("--ownership: ", o.status().message()));
    ownership = std::move(*o);
  }
  auto grpc_listen = auth::ParseListenAddress("--listen", listen);
  if (!grpc_listen.ok()) return Usage(err, "serve", std::string(grpc_listen.status().message()));
  if (!grpc_listen->is_loopback && auth_config_path.empty() && !allow_remote) {
    return Usage(err, "serve", absl::StrCat("--listen ", listen, " is not a loopback address: configure TLS and "
                                            "authentication (--tls-cert, --tls-key, --tls-client-ca, --auth-config) "
                                            "or pass --insecure-allow-remote"));
  }
  for (const auto& [flag, addr] : {std::pair{"--metrics-listen", &metrics_listen}, {"--http-listen", &http_listen}}) {
    if (absl::Status st = CheckHttpListen(flag, addr, http_tls, allow_remote,
                                          "give it TLS (--tls-cert or --http-tls-cert) or pass --insecure-allow-remote "
                                          "for plaintext HTTP");
        !st.ok()) {
      return Usage(err, "serve", std::string(st.message()));
    }
  }
  if (workers < 0 || workers > 256) return Usage(err, "serve", "--workers must be in [0, 256]");
  if (lease_seconds < 1 || lease_seconds > 3600) return Usage(err, "serve", "--lease-seconds must be in [1, 3600]");
  if (max_library_mib < 1 || max_library_mib > (1 << 20)) return Usage(err, "serve", "--max-library-mib must be in [1, 1048576]");
  if (library_cache_mib < 1 || library_cache_mib > (int64_t{1} << 24)) {
    return Usage(err, "serve", "--library-cache-mib must be in [1, 16777216]");
  }
  auto store = coordinator::OpenStore(db);
  if (!store.ok()) return Usage(err, "serve", absl::StrCat("--db: ", store.status().message()));
  err << "mxval serve: state in " << coordinator::DescribeStore(db) << "\n";
  coordinator::SchedulerOptions so;
  so.lease_duration = absl::Seconds(lease_seconds);
  so.max_queued_tasks = max_queued;
  // A full disk or a lost database is logged and counted, not only returned to callers.
  coordinator::StoreErrorReporter store_errors(RealClock::Get(),
                                               [&err](const std::string& line) { err << "mxval serve: " << line << "\n"; });
  so.on_store_error = [&store_errors](const absl::Status& st) { store_errors.Report(st); };
  auto scheduler = coordinator::Scheduler::Create(RealClock::Get(), coordinator::WithFailurePredicate(so), store->get());
  if (!scheduler.ok()) {
    err << "mxval serve: " << scheduler.status().message() << "\n";
    return kInternal;
  }
  coordinator::CoordinatorOptions co;
  co.lease_duration = so.lease_duration;
  co.log_rules = rules.get();
  if (max_inflight < 0 || submit_rate < 0 || rpc_rate < 0) {
    return Usage(err, "serve",
                 "--max-inflight-jobs-per-client, --submit-rate-per-minute and --rpc-rate-per-second must be >= 0");
  }
  co.max_inflight_jobs_per_client = static_cast<int>(max_inflight);
  co.submit_rate_per_minute = static_cast<double>(submit_rate);
  co.rpc_rate_per_second = static_cast<double>(rpc_rate);
  auto libraries = coordinator::LibraryRegistry::Create(store->get());  // admin registrations survive restarts
  if (!libraries.ok()) {
    err << "mxval serve: " << libraries.status().message() << "\n";
    return kInternal;
  }
  co.libraries = libraries->get();
  coordinator::LibraryContentOptions content_options;
  content_options.max_bytes = max_library_mib << 20;
  coordinator::LibraryContent library_content(store->get(), content_options);  // uploads live in the store
  co.library_content = &library_content;
  co.ownership = ownership.get();
  auto registry = std::make_shared<prometheus::Registry>();
  coordinator::CoordinatorMetrics metrics(*registry);
  co.metrics = &metrics;
  store_errors.set_metrics(&metrics);
  co.log = [&err](const std::string& line) { err << "mxval serve: " << line << "\n"; };
  denial_metrics = &metrics;
  // The web page and /metrics take the gRPC listener's tokens (http_auth.h);
  // only the web page has browser sessions.
  std::unique_ptr<auth::HttpAuth> web_auth, metrics_auth;
  if (token_processor) {
    authorizer = std::make_unique<auth::Authorizer>(auth_config, on_denied);
    co.authorizer = authorizer.get();
    auth::HttpAuthOptions wo;
    wo.https = http_tls.on();
    web_auth = std::make_unique<auth::HttpAuth>(auth_config, RealClock::Get(), wo, on_denied);
    wo.sessions = false;
    metrics_auth = std::make_unique<auth::HttpAuth>(auth_config, RealClock::Get(), wo, on_denied);
  }
  std::unique_ptr<web::MetricsServer> exposer;
  std::unique_ptr<auth::TlsFront> metrics_front;
  if (!metrics_listen.empty()) {
    if (absl::Status st = ServeMetrics(metrics_listen, http_tls, registry, metrics_auth.get(), &exposer, &metrics_front,
                                       out);
        !st.ok()) {
      return Usage(err, "serve", absl::StrCat("--metrics-listen: ", st.message()));
    }
  }
  coordinator::Coordinator coord(RealClock::Get(), scheduler->get(), co);
  std::atomic<bool> stop{false};
  std::unique_ptr<grpc::Server> server;
  // Embedded workers, appended by this thread while the signal thread may
  // drain them: guarded, and a worker created after the signal is drained at once.
  absl::Mutex local_mu;
  std::vector<std::unique_ptr<worker::Worker>> local;
  std::thread signals = SignalWatcher(&stop, [&] {
    absl::MutexLock l(&local_mu);
    stop = true;
    for (auto& w : local) w->Drain();
  });
  int port = 0;
  server = coordinator::StartServer(listen, &coord, &port, 16 << 20, server_creds);
  if (server == nullptr) {
    stop = true;
    signals.join();
    return Usage(err, "serve", absl::StrCat("--listen: cannot listen on ", listen));
  }
  const std::string bound = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
  std::unique_ptr<web::WebServer> web_ui;
  std::unique_ptr<auth::TlsFront> web_front;
  if (!http_listen.empty()) {
    auto w = web::WebServer::Start(&coord, http_tls.on() ? "127.0.0.1:0" : http_listen, web_auth.get());
    absl::Status st = w.status();
    if (w.ok() && http_tls.on()) {
      auto f = StartTlsFront(http_listen, http_tls, (*w)->port());
      st = f.status();
      if (f.ok()) web_front = std::move(*f);
    }
    if (!st.ok()) {
      stop = true;
      signals.join();
      return Usage(err, "serve", absl::StrCat("--http-listen: ", st.message()));
    }
    web_ui = std::move(*w);
    out << "web UI on " << (http_tls.on() ? "https" : "http") << "://" << http_listen.substr(0, http_listen.rfind(':'))
        << ":" << (web_front ? web_front->port() : web_ui->port()) << "/\n";
  }
  if (server_creds == nullptr) {
    if (!grpc_listen->is_loopback) err << "mxval serve: WARNING: listening on " << bound << " without TLS or authentication\n";
    else err << "mxval serve: loopback only, no TLS (the embedded default)\n";
  } else {
    err << "mxval serve: TLS" << (tls_client_ca.empty() ? "" : ", worker client certificates")
        << (authorizer ? ", bearer tokens with roles" : ", no authorization (no --auth-config)") << "\n";
  }
  out << "listening on " << bound << "\n";
  out.flush();
  std::vector<std::thread> worker_threads;
  for (int i = 0; i < workers; ++i) {
    worker::WorkerOptions wo;
    wo.coordinator = bound;
    wo.worker_id = absl::StrCat("local-", i, "-", getpid());
    if (server_creds != nullptr) {  // embedded workers over TLS: MXVAL_TLS_CA / _CERT / _KEY
      auto wc = EnvCredentials();
      if (wc.ok()) wo.credentials = *wc;
    }
    wo.child_argv = {SelfExePath(), "__run-task", "--threads", "1"};
    if (!kernel_dir.empty()) {
      wo.child_argv.push_back("--kernel-dir");
      wo.child_argv.push_back(kernel_dir);
    }
    (void)ConfigureLibraryCache(library_cache, library_cache_mib, kernel_dir, &wo);  // the size was checked above
    if (!python.empty()) ConfigurePython(python, python_cache_dir, "serve", &wo, err);
    auto w = worker::Worker::Create(wo);
    if (!w.ok()) continue;
    absl::MutexLock l(&local_mu);
    if (stop) (*w)->Drain();
    local.push_back(std::move(*w));
  }
  for (auto& w : local) worker_threads.emplace_back([&w] { (void)w->Run(); });  // `local` no longer grows
  // Lease expiry, deadlines and gauges even when nobody polls; on a shared
  // store also what the other coordinators wrote (their jobs, leases,
  // results and cancels), so watches and long polls here see them.
  const bool shared_store = (*store)->shared();
  std::thread ticker([&] {
    while (!stop) {
      if (shared_store) (void)(*scheduler)->Sync();
      (*scheduler)->Tick();
      coord.RefreshMetrics();
      absl::SleepFor(absl::Milliseconds(shared_store ? 100 : 250));
    }
  });
  signals.join();
  // Draining: health probes (every service name) answer NOT_SERVING from now on.
  if (server->GetHealthCheckService() != nullptr) server->GetHealthCheckService()->SetServingStatus(false);
  for (auto& t : worker_threads) t.join();
  ticker.join();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  err << "mxval serve: stopped\n";
  return kOk;
}

int WorkerVerb(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string coordinator, id, kernel_dir;
  int64_t task_timeout = 600, unhealthy_after = 3;
  FlagSet f("worker", "Runs a worker daemon for the coordinator at --coordinator: one executor per discovered device\n"
                      "(CUDA or HIP GPUs, else the CPU). SIGTERM finishes running tasks and exits 0;\n"
                      "`mxval drain --worker ID` only idles it (it keeps heartbeating; --undrain resumes it).");
  f.String("coordinator", &coordinator, "coordinator address host:port", true);
  f.String("id", &id, "worker id (default: hostname-pid)");
  f.String("kernel-dir", &kernel_dir,
           "directory of external kernel libraries (lib<name>.so, <name>/ for Python): a pre-seeded cache, used\n"
           "without fetching when a library there has the registered digest");
  std::string library_cache;
  int64_t library_cache_mib = 4096;
  f.String("library-cache", &library_cache,
           "where registered libraries fetched from the coordinator are kept, by digest\n"
           "(default: $XDG_CACHE_HOME/mxval/libraries)");
  f.Int("library-cache-mib", &library_cache_mib, "the library cache's size; the least recently used go first");
  std::string python = "python3", python_cache_dir;
  f.String("python", &python, "interpreter for Python kernel libraries (with PyTorch; a path, or a name in PATH)");
  f.String("python-cache-dir", &python_cache_dir,
           "compile cache of Python kernel libraries, one per library build (default: $XDG_CACHE_HOME/mxval)");
  f.Int("task-timeout", &task_timeout, "seconds before a task's child process is killed");
  f.Int("unhealthy-after", &unhealthy_after, "consecutive infrastructure failures that mark the device unhealthy");
  std::string metrics_listen, devices = "auto";
  bool allow_remote = false;
  HttpTls http_tls;
  f.String("metrics-listen", &metrics_listen, "serve Prometheus metrics at http://ADDR/metrics");
  f.String("http-tls-cert", &http_tls.cert, "serve metrics over HTTPS only, with this certificate (PEM)");
  f.String("http-tls-key", &http_tls.key, "its private key (PEM)");
  f.Bool("insecure-allow-remote", &allow_remote, "serve metrics on a non-loopback address over plaintext HTTP");
  std::string tls_ca, tls_cert, tls_key;
  f.String("tls-ca", &tls_ca, "the coordinator's CA certificate (enables TLS; or MXVAL_TLS_CA)");
  f.String("tls-cert", &tls_cert, "this worker's client certificate (its common name is the worker id; or MXVAL_TLS_CERT)");
  f.String("tls-key", &tls_key, "the client certificate's key (or MXVAL_TLS_KEY)");
  f.String("devices", &devices,
           "auto (CUDA, then HIP, else the CPU), cpu, cuda, hip; append :0,2 to pick device indexes (cuda:0,2)");
  if (int rc = ParseFlags(f, args, "worker", out, err); rc >= 0) return rc;
  BlockTerminationSignals();
  if (task_timeout < 1) return Usage(err, "worker", "--task-timeout must be >= 1");
  if (http_tls.cert.empty() != http_tls.key.empty()) {
    return Usage(err, "worker", "--http-tls-cert and --http-tls-key go together");
  }
  if (absl::Status st = CheckHttpListen("--metrics-listen", &metrics_listen, http_tls, allow_remote,
                                        "give it TLS (--http-tls-cert) or pass --insecure-allow-remote for plaintext HTTP");
      !st.ok()) {
    return Usage(err, "worker", std::string(st.message()));
  }
  auto creds = EnvCredentials(tls_ca, tls_cert, tls_key);
  if (!creds.ok()) return Usage(err, "worker", std::string(creds.status().message()));
  auto discovered = worker::DiscoverDevices(devices);
  if (!discovered.ok()) {
    if (discovered.status().code() == absl::StatusCode::kInvalidArgument) {
      return Usage(err, "worker", absl::StrCat("--devices: ", discovered.status().message()));
    }
    err << "mxval worker: " << discovered.status().message() << "\n";
    return kInternal;
  }
  for (const v1::DeviceInfo& d : discovered->devices) {
    err << "mxval worker: device " << d.index() << " " << d.arch() << " " << d.name() << " ("
        << d.memory_bytes() / (1 << 20) << " MiB)\n";
  }
  worker::WorkerOptions wo;
  wo.coordinator = coordinator;
  wo.worker_id = id;
  wo.task_timeout = absl::Seconds(task_timeout);
  wo.unhealthy_after = static_cast<int>(unhealthy_after);
  wo.devices = discovered->devices;
  wo.credentials = *creds;
  wo.device_runtime = discovered->runtime;
  wo.child_argv = {SelfExePath(), "__run-task"};
  if (!kernel_dir.empty()) {
    wo.child_argv.push_back("--kernel-dir");
    wo.child_argv.push_back(kernel_dir);
  }
  if (absl::Status st = ConfigureLibraryCache(library_cache, library_cache_mib, kernel_dir, &wo); !st.ok()) {
    return Usage(err, "worker", std::string(st.message()));
  }
  ConfigurePython(python, python_cache_dir, "worker", &wo, err);
  auto registry = std::make_shared<prometheus::Registry>();
  worker::WorkerMetrics metrics(*registry);
  wo.metrics = &metrics;
  std::unique_ptr<web::MetricsServer> exposer;
  std::unique_ptr<auth::TlsFront> metrics_front;
  if (!metrics_listen.empty()) {
    if (absl::Status st = ServeMetrics(metrics_listen, http_tls, registry, nullptr, &exposer, &metrics_front, out);
        !st.ok()) {
      return Usage(err, "worker", absl::StrCat("--metrics-listen: ", st.message()));
    }
  }
  auto w = worker::Worker::Create(wo);
  if (!w.ok()) return Usage(err, "worker", std::string(w.status().message()));
  std::atomic<bool> stop{false};
  std::thread signals = SignalWatcher(&stop, [&] { (*w)->Drain(); });
  const absl::Status st = (*w)->Run();
  stop = true;
  signals.join();
  err << "mxval worker: drained after " << (*w)->tasks_completed() << " tasks\n";
  return st.ok() ? kOk : kInternal;
}

namespace {

// Streams WatchJob for `job_id` until the job is final or `deadline`
// passes. When the coordinator goes away (UNAVAILABLE) the stream is opened
// again, with backoff, for up to retry.budget of outage; a stream that
// delivered events starts a fresh budget. Every stream replays the job's
// results from the start, so `on_stream` runs before each (to drop what the
// last one delivered). Returns the last stream's status.
grpc::Status WatchWithRetry(v1::ValidationService::Stub& stub, const std::string& job_id, absl::Time deadline,
                            RetryOptions retry, const std::string& verb, std::ostream& err,
                            const std::function<void()>& on_stream,
                            const std::function<void(const v1::JobEvent&)>& on_event) {
  retry.retry_deadline_exceeded = false;  // the watch's own deadline
  for (;;) {
    bool progressed = false;
    const grpc::Status st = CallWithRetry(verb, retry, err, [&] {
      on_stream();
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(deadline));
      v1::WatchJobRequest w;
      w.set_job_id(job_id);
      auto reader = stub.WatchJob(&ctx, w);
      v1::JobEvent ev;
      while (reader->Read(&ev)) {
        progressed = true;
        on_event(ev);
      }
      return reader->Finish();
    });
    if (st.ok() || !progressed || !RetryableStatus(retry, st) || retry.budget <= absl::ZeroDuration() ||
        absl::Now() >= deadline) {
      return st;
    }
  }
}

}  // namespace

int SubmitVerb(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string coordinator = "127.0.0.1:50051", spec_path, preset, m_text, request_id, format = "table", out_path;
  bool wait = false;
  int64_t timeout_s = 3600;
  FlagSet f("submit", "Submits a validation job (a JSON/YAML JobSpec file, or --preset/--m) and optionally waits for it.\n"
                      "Exit codes: 0 submitted (with --wait: nothing that --fail-on gates and every task validated),\n"
                      "1 a gating failure or an unfinished job, 2 bad spec, 3 unavailable, 4 (with --wait) NOT VALIDATED:\n"
                      "a side could not run, 5 refused for a rate or quota limit (retry later).");
  f.String("coordinator", &coordinator, "coordinator address host:port");
  f.String("spec", &spec_path, "JobSpec file: .json (proto3 JSON mapping) or .yaml/.yml (same structure)");
  f.String("preset", &preset, "shape preset (instead of --spec)");
  f.String("m", &m_text, "M values with --preset, e.g. 1,64,1024");
  f.String("request-id", &request_id, "idempotency key: a retry returns the same job");
  f.Bool("wait", &wait, "stream progress and print the report when done");
  f.String("format", &format, "report format with --wait: table | json | junit | markdown");
  f.String("out", &out_path, "write the report to this file instead of stdout");
  f.Int("timeout", &timeout_s, "seconds to wait with --wait");
  std::string fail_on = "pr-touched,untouched";
  f.String("fail-on", &fail_on, "with --wait: triage classes that make the exit code 1: pr-touched | "
                                "pr-touched,untouched | any");
  int64_t retry_seconds = 30;
  f.Int("retry-seconds", &retry_seconds,
        "how long to ride out an unavailable coordinator (a restart), retrying with backoff: the submit itself\n"
        "only with --request-id (without one a retry could submit the job twice), and with --wait the watch and\n"
        "the report (0: no retries)");
  std::string example;
  f.String("example-spec", &example, "print a commented example spec and exit: retune | pr-library | custom-shapes | "
                                     "strided-x (docs/job_spec.md explains every field)");
  std::string launch, candidate_launch;
  f.String("launch", &launch, "plain | pdl: how GPU kernels are launched (overrides the spec's launch; default plain)");
  f.String("candidate-launch", &candidate_launch,
           "plain | pdl: the candidate side's launch (overrides the spec's candidate_launch; default: --launch), "
           "e.g. --candidate-launch pdl to measure what PDL buys");
  if (int rc = ParseFlags(f, args, "submit", out, err); rc >= 0) return rc;
  if (!example.empty()) {
    std::string names;
    for (const ExampleSpec& e : kExampleSpecs) {
      if (example == e.name) {
        out << e.yaml;
        return 0;
      }
      absl::StrAppend(&names, "\n  ", absl::StrFormat("%-14s", e.name), " ", e.what);
    }
    return Usage(err, "submit", absl::StrCat("--example-spec: no example '", absl::CHexEscape(example.substr(0, 64)), "'; there are:", names));
  }
  if (!launch.empty() && launch != "plain" && launch != "pdl") return Usage(err, "submit", "--launch must be plain or pdl");
  if (!candidate_launch.empty() && candidate_launch != "plain" && candidate_launch != "pdl") {
    return Usage(err, "submit", "--candidate-launch must be plain or pdl");
  }
  GatePolicy gate;
  if (!ParseGatePolicy(fail_on, &gate)) return Usage(err, "submit", "--fail-on must be pr-touched, pr-touched,untouched or any");
  if (!IsReportFormat(format)) return Usage(err, "submit", "--format must be table, json, junit or markdown");
  if (retry_seconds < 0 || retry_seconds > 86400) return Usage(err, "submit", "--retry-seconds must be in [0, 86400]");
  v1::SubmitJobRequest req;
  req.set_request_id(request_id);
  if (!spec_path.empty()) {
    auto spec = LoadJobSpec(spec_path);
    if (!spec.ok()) return Usage(err, "submit", absl::StrCat("--spec: ", spec.status().message()));
    *req.mutable_spec() = std::move(*spec);
  } else if (!preset.empty()) {
    req.mutable_spec()->add_presets(preset);
    auto ms = ParseIntList(m_text.empty() ? "1,64,1024" : m_text, "--m");
    if (!ms.ok()) return Usage(err, "submit", std::string(ms.status().message()));
    for (int64_t m : *ms) req.mutable_spec()->add_m_values(m);
    req.mutable_spec()->set_name(absl::StrCat(preset, " sweep"));
  } else {
    return Usage(err, "submit", "give --spec FILE or --preset NAME");
  }
  if (!launch.empty()) req.mutable_spec()->set_launch(launch == "pdl" ? v1::LAUNCH_MODE_PDL : v1::LAUNCH_MODE_PLAIN);
  if (!candidate_launch.empty()) {
    req.mutable_spec()->set_candidate_launch(candidate_launch == "pdl" ? v1::LAUNCH_MODE_PDL : v1::LAUNCH_MODE_PLAIN);
  }
  auto creds = EnvCredentials();
  if (!creds.ok()) return Usage(err, "submit", std::string(creds.status().message()));
  auto channel = ClientChannel(coordinator, *creds);
  auto stub = v1::ValidationService::NewStub(channel);
  v1::SubmitJobResponse resp;
  RetryOptions retry;
  retry.budget = absl::Seconds(retry_seconds);
  // Only a request id makes a repeated submit return the same job.
  RetryOptions submit_retry = retry;
  if (request_id.empty()) submit_retry.budget = absl::ZeroDuration();
  std::unique_ptr<grpc::ClientContext> submit_ctx;
  grpc::Status st = CallWithRetry("submit", submit_retry, err, [&] {
    submit_ctx = Ctx(absl::Seconds(30));
    return stub->SubmitJob(submit_ctx.get(), req, &resp);
  });
  if (!st.ok()) {
    if (request_id.empty() && RetryableStatus(retry, st)) {
      err << "mxval submit: not retried: without --request-id a retry could submit the job twice\n";
    }
    return GrpcExit(err, "submit", st, submit_ctx.get());
  }
  const std::string job_id = resp.job().job_id();
  err << "submitted " << SanitizeForTerminal(job_id) << " (" << resp.job().progress().tasks_total() << " tasks)\n";
  if (!wait) {
    out << SanitizeForTerminal(job_id) << "\n";
    return kOk;
  }
  const bool tty = isatty(2);
  st = WatchWithRetry(*stub, job_id, absl::Now() + absl::Seconds(timeout_s), retry, "submit", err, [] {},
                      [&](const v1::JobEvent& ev) {
                        const auto& p = ev.job().progress();
                        const std::string line =
                            absl::StrFormat("%s %d/%d done, %d running, %d failed", v1::JobState_Name(ev.job().state()),
                                            p.tasks_done(), p.tasks_total(), p.tasks_running(), p.tasks_failed());
                        if (tty) err << "\r" << line << "   " << std::flush;
                        else if (!ev.has_result()) err << line << "\n";
                      });
  if (tty) err << "\n";
  if (!st.ok()) return GrpcExit(err, "submit", st);
  return GetVerb({"--coordinator", coordinator, "--job", job_id, "--format", format, "--out", out_path.empty() ? "-" : out_path,
                  "--fail-on", fail_on, "--retry-seconds", absl::StrCat(retry_seconds)},
                 out, err);
}

int GetVerb(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string coordinator = "127.0.0.1:50051", job_id, format = "table", out_path = "-";
  FlagSet f("get", "Prints a job's report with its triage. Exit codes: 0 nothing that --fail-on gates and every task\n"
                   "validated, 1 a gating failure (default: PR_TOUCHED or UNTOUCHED_FAILURE) or an unfinished job,\n"
                   "2 unknown job, 3 coordinator unavailable or a report that cannot be printed, 4 NOT VALIDATED (a\n"
                   "side could not run, an infrastructure failure, a task without a result), 5 refused for a limit.");
  int64_t retry_seconds = 0;
  f.Int("retry-seconds", &retry_seconds, "how long to ride out an unavailable coordinator, retrying with backoff (0: no retries)");
  std::string fail_on = "pr-touched,untouched";
  f.String("fail-on", &fail_on, "triage classes that make the exit code 1: pr-touched | pr-touched,untouched | any");
  f.String("coordinator", &coordinator, "coordinator address host:port");
  f.String("job", &job_id, "job id", true);
  f.String("format", &format, "table | json | junit | markdown");
  f.String("out", &out_path, "file to write ('-': stdout)");
  if (int rc = ParseFlags(f, args, "get", out, err); rc >= 0) return rc;
  if (!IsReportFormat(format)) return Usage(err, "get", "--format must be table, json, junit or markdown");
  GatePolicy gate;
  if (!ParseGatePolicy(fail_on, &gate)) return Usage(err, "get", "--fail-on must be pr-touched, pr-touched,untouched or any");
  if (retry_seconds < 0 || retry_seconds > 86400) return Usage(err, "get", "--retry-seconds must be in [0, 86400]");
  auto creds = EnvCredentials();
  if (!creds.ok()) return Usage(err, "get", std::string(creds.status().message()));
  auto stub = v1::ValidationService::NewStub(ClientChannel(coordinator, *creds));
  v1::GetJobRequest g;
  g.set_job_id(job_id);
  g.set_include_results(true);
  v1::Job job;
  RetryOptions retry;  // a read: safe to repeat
  retry.budget = absl::Seconds(retry_seconds);
  std::unique_ptr<grpc::ClientContext> ctx;
  const grpc::Status st = CallWithRetry("get", retry, err, [&] {
    ctx = Ctx(absl::Seconds(30));
    return stub->GetJob(ctx.get(), g, &job);
  });
  if (!st.ok()) return GrpcExit(err, "get", st, ctx.get());
  absl::StatusOr<std::string> report = RenderReport(job, format);
  if (!report.ok()) {
    err << "mxval get: " << SanitizeForTerminal(report.status().message()) << "\n";
    return kInternal;
  }
  if (int rc = WriteOutput("get", out_path, *report, out, err); rc != kOk) return rc;
  return JobExitCode(job, gate);
}

}  // namespace mxval

namespace mxval {

int DemoVerb(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string db = "mxval-demo.db", m_text = "1,16,64,256,1024", format = "markdown";
  int64_t workers = 2;
  FlagSet f("demo",
            "The embedded single-machine service: a coordinator and local CPU workers in this process on a SQLite\n"
            "file, running the GLM-5 TP4 K-up/V-up sweep of an untuned baseline table (kernels/configs/cpu_naive.json)\n"
            "against the tuned one (kernels/configs/cpu.json); streams progress and prints the report.");
  f.String("db", &db, "SQLite file (reused across runs: identical tasks are not rerun)");
  f.String("m", &m_text, "M values");
  f.Int("workers", &workers, "local workers");
  f.String("format", &format, "report format: table | json | junit | markdown");
  if (int rc = ParseFlags(f, args, "demo", out, err); rc >= 0) return rc;
  if (!IsReportFormat(format)) return Usage(err, "demo", "--format must be table, json, junit or markdown");
  auto ms = ParseIntList(m_text, "--m");
  if (!ms.ok()) return Usage(err, "demo", std::string(ms.status().message()));
  if (workers < 1 || workers > 64) return Usage(err, "demo", "--workers must be in [1, 64]");
  BlockTerminationSignals();
  auto store = coordinator::SqliteStore::Open(db);
  if (!store.ok()) return Usage(err, "demo", absl::StrCat("--db: ", store.status().message()));
  auto scheduler = coordinator::Scheduler::Create(RealClock::Get(), coordinator::WithFailurePredicate(coordinator::SchedulerOptions{}), store->get());
  if (!scheduler.ok()) {
    err << "mxval demo: " << scheduler.status().message() << "\n";
    return kInternal;
  }
  coordinator::Coordinator coord(RealClock::Get(), scheduler->get(), coordinator::CoordinatorOptions{});
  int port = 0;
  auto server = coordinator::StartServer("127.0.0.1:0", &coord, &port);
  if (!server) return Usage(err, "demo", "cannot listen on 127.0.0.1");
  const std::string addr = absl::StrCat("127.0.0.1:", port);
  err << "mxval demo: coordinator on " << addr << " (loopback, no TLS), state in " << db << ", " << workers
      << " local workers\n";
  std::vector<std::unique_ptr<worker::Worker>> local;
  std::vector<std::thread> threads;
  for (int i = 0; i < workers; ++i) {
    worker::WorkerOptions wo;
    wo.coordinator = addr;
    wo.worker_id = absl::StrCat("demo-", i);
    wo.child_argv = {SelfExePath(), "__run-task", "--threads", "1"};
    wo.long_poll = absl::Seconds(1);
    auto w = worker::Worker::Create(wo);
    if (w.ok()) local.push_back(std::move(*w));
  }
  for (auto& w : local) threads.emplace_back([&w] { (void)w->Run(); });
  v1::JobSpec spec;
  spec.set_name("glm5-tp4: untuned baseline vs tuned cpu.json");
  spec.add_presets("glm5-tp4");
  for (int64_t m : *ms) spec.add_m_values(m);
  spec.set_repetitions(3);
  spec.set_reuse_results(true);
  spec.mutable_baseline_table()->set_name("kernels/configs/cpu_naive.json");
  spec.mutable_baseline_table()->set_json(kCpuNaiveTableJson);
  spec.mutable_candidate_table()->set_name("kernels/configs/cpu.json");
  spec.mutable_candidate_table()->set_json(kDefaultCpuTableJson);
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(spec, &json);
  const std::string spec_path = db + ".spec.json";
  std::ofstream(spec_path) << json;
  const int rc = SubmitVerb({"--coordinator", addr, "--spec", spec_path, "--wait", "--format", format}, out, err);
  for (auto& w : local) w->Drain();
  for (auto& t : threads) t.join();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return rc;
}

}  // namespace mxval

namespace mxval {

namespace {
// `--json` output of the list verbs: the response in proto3 JSON, or
// nothing and kInternal when it cannot be printed whole (a Duration outside
// its range).
int PrintJson(const google::protobuf::Message& m, const std::string& verb, std::ostream& out, std::ostream& err) {
  absl::StatusOr<std::string> s = ToJson(m);
  if (!s.ok()) {
    err << "mxval " << verb << ": " << SanitizeForTerminal(s.status().message()) << "\n";
    return kInternal;
  }
  out << *s << "\n";
  return kOk;
}

// A table cell of caller text: at most `max_bytes` of it (whole UTF-8
// characters, "..." when cut), control characters escaped.
std::string Cell(const std::string& s, size_t max_bytes = 120) {
  if (s.size() <= max_bytes) return SanitizeForTerminal(s);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return SanitizeForTerminal(s.substr(0, cut)) + "...";
}
}  // namespace

namespace {

// A Python kernel library's registration, read from its directory without
// running any of it: the tree's digest, the manifest, each kernel's config
// table (checked as a job's table would be). `name` / `build_id`, when
// given, must be the manifest's.
absl::StatusOr<v1::KernelLibraryRegistration> PythonRegistration(const std::string& dir, const std::string& name,
                                                                  const std::string& build_id) {
  // The digest's walk first: it refuses symlinks and special files anywhere
  // in the tree, so the files read below are the tree's own regular files.
  MXVAL_ASSIGN_OR_RETURN(std::string sha, TreeSha256(dir));
  MXVAL_ASSIGN_OR_RETURN(const python::Manifest m, python::LoadManifest(dir));
  if (!name.empty() && name != m.name) {
    return absl::InvalidArgumentError(absl::StrCat("--name '", name, "' but the manifest names '", m.name, "'"));
  }
  if (!build_id.empty() && build_id != m.build_id) {
    return absl::InvalidArgumentError(absl::StrCat("--build-id '", build_id, "' but the manifest says '", m.build_id, "'"));
  }
  v1::KernelLibraryRegistration reg;
  reg.set_name(m.name);
  reg.set_build_id(m.build_id);
  reg.set_format(v1::LIBRARY_FORMAT_PYTHON);
  MXVAL_ASSIGN_OR_RETURN(std::string text, ReadFileBytes(absl::StrCat(dir, "/", python::kManifestFile)));
  reg.set_manifest_json(text);
  for (const python::KernelEntry& k : m.kernels) {
    if (k.config_table.empty()) continue;
    const std::string path = absl::StrCat(dir, "/", k.config_table);
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec || size > python::kMaxManifestBytes) {
      return absl::InvalidArgumentError(absl::StrCat(k.config_table, ": ", ec ? ec.message() : "over 1 MiB"));
    }
    MXVAL_ASSIGN_OR_RETURN(std::string table, ReadFileBytes(path));
    ConfigTableOptions to;
    to.allow_unknown_keys = true;
    if (auto t = ConfigTable::FromJsonText(table, to); !t.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("kernel ", k.name, ": ", k.config_table, ": ", t.status().message()));
    }
    (*reg.mutable_kernel_tables())[k.name] = table;
  }
  reg.set_sha256(sha);
  return reg;
}

// Streams the library's content (UploadKernelLibrary): the file as is, or
// the directory as a tree archive (common/tree_archive.h), in 1 MiB chunks.
// A local read error is INVALID_ARGUMENT naming the flag.
grpc::Status UploadLibrary(v1::AdminService::Stub& admin, const v1::KernelLibraryRegistration& reg,
                           const std::string& file, const std::string& dir, v1::RegisterKernelLibraryResponse* resp) {
  int64_t size = 0;
  if (!file.empty()) {
    std::error_code ec;
    size = static_cast<int64_t>(std::filesystem::file_size(file, ec));
    if (ec) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("--file: ", ec.message()));
  } else {
    auto listing = ListTree(dir);
    if (!listing.ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("--dir: ", listing.status().message()));
    }
    for (const TreeFile& f : listing->files) size += static_cast<int64_t>(f.path.size()) + 2 + absl::StrCat(f.size).size() + f.size;
  }
  auto ctx = Ctx(absl::Hours(1));
  auto writer = admin.UploadKernelLibrary(ctx.get(), resp);
  v1::UploadKernelLibraryRequest first;
  *first.mutable_library() = reg;
  first.set_content_bytes(size);
  bool open = writer->Write(first);
  std::string pending;
  auto send = [&](absl::string_view bytes) -> absl::Status {
    pending.append(bytes.data(), bytes.size());
    while (open && static_cast<int64_t>(pending.size()) >= coordinator::kBlobChunkBytes) {
      v1::UploadKernelLibraryRequest m;
      m.set_chunk(pending.substr(0, coordinator::kBlobChunkBytes));
      pending.erase(0, coordinator::kBlobChunkBytes);
      open = writer->Write(m);
    }
    // The coordinator refused (its status comes from Finish).
    return open ? absl::OkStatus() : absl::CancelledError("stream closed");
  };
  absl::Status local;
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    std::vector<char> buf(1 << 20);
    while (open && in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      if (in.gcount() > 0) (void)send(absl::string_view(buf.data(), static_cast<size_t>(in.gcount())));
    }
    if (open && in.bad()) local = absl::InvalidArgumentError(absl::StrCat("--file: cannot read '", file, "'"));
  } else {
    auto sent = WriteTreeArchive(dir, send);
    if (!sent.ok() && !absl::IsCancelled(sent.status())) {
      local = absl::InvalidArgumentError(absl::StrCat("--dir: ", sent.status().message()));
    }
  }
  if (!local.ok()) {
    ctx->TryCancel();
    (void)writer->Finish();
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(local.message()));
  }
  if (open && !pending.empty()) {
    v1::UploadKernelLibraryRequest m;
    m.set_chunk(pending);
    open = writer->Write(m);
  }
  if (open) writer->WritesDone();
  return writer->Finish();
}

}  // namespace

// watch, cancel, jobs, workers, drain: thin clients of the coordinator.
int AdminVerb(const std::string& verb, const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string coordinator = "127.0.0.1:50051", job_id, worker_id;
  bool undrain = false, json = false;
  int64_t limit = 50;
  FlagSet f(verb, verb == "watch"     ? "Streams a job's progress until it finishes."
                  : verb == "cancel"  ? "Cancels a job's unfinished tasks."
                  : verb == "jobs"    ? "Lists jobs, newest first."
                  : verb == "workers" ? "Lists workers with their state and devices."
                  : verb == "register-library"
                      ? "Registers an external kernel library (admin only) and uploads its bytes: jobs may then name\n"
                        "it, and workers fetch lib<name>.so (--file) or the Python library <name>/ (--dir) from the\n"
                        "coordinator by digest (or find it in their --kernel-dir) and load it only if its SHA-256 is\n"
                        "the one registered here. Nothing of the library runs here."
                  : verb == "unregister-library" ? "Removes a kernel library registration (admin only)."
                  : verb == "libraries"          ? "Lists registered kernel libraries."
                                                 : "Drains a worker (no new tasks) or undrains it.");
  f.String("coordinator", &coordinator, "coordinator address host:port");
  if (verb == "watch" || verb == "cancel") f.String("job", &job_id, "job id", true);
  if (verb == "drain") {
    f.String("worker", &worker_id, "worker id", true);
    f.Bool("undrain", &undrain, "take the worker back into service");
  }
  if (verb == "jobs") f.Int("limit", &limit, "jobs to list (1..100000), newest first, fetched in pages");
  int64_t retry_seconds = 30;
  std::string fail_on = "pr-touched,untouched";
  if (verb == "watch") {
    f.Int("retry-seconds", &retry_seconds,
          "how long to ride out an unavailable coordinator (a restart), reopening the watch with backoff (0: no retries)");
    f.String("fail-on", &fail_on,
             "triage classes that make the exit code 1: pr-touched | pr-touched,untouched | any (then 4: NOT VALIDATED)");
  }
  std::string lib_file, lib_dir, lib_name, lib_build;
  bool no_upload = false;
  if (verb == "register-library") {
    f.Bool("no-upload", &no_upload,
           "register the digest only: workers then load the library only from a pre-seeded --kernel-dir");
    f.String("file", &lib_file, "a compiled library to register, lib<name>.so (its SHA-256 is computed here)");
    f.String("dir", &lib_dir, "or a Python kernel library's directory (mxval_library.json; its tree's SHA-256)");
    f.String("name", &lib_name, "library name (default: from the file name lib<name>.so)");
    f.String("build-id", &lib_build, "build id (default: the one the library's table reports)");
  }
  if (verb == "unregister-library") f.String("name", &lib_name, "library name", true);
  if (verb == "jobs" || verb == "workers" || verb == "libraries") f.Bool("json", &json, "print JSON");
  if (int rc = ParseFlags(f, args, verb, out, err); rc >= 0) return rc;
  v1::KernelLibraryRegistration reg;
  if (verb == "register-library" && lib_file.empty() == lib_dir.empty()) {
    return Usage(err, verb, "give one of --file (lib<name>.so) and --dir (a Python kernel library)");
  }
  if (verb == "register-library" && !lib_dir.empty()) {
    auto r = PythonRegistration(lib_dir, lib_name, lib_build);
    if (!r.ok()) return Usage(err, verb, absl::StrCat("--dir: ", r.status().message()));
    reg = *r;
  } else if (verb == "register-library") {  // everything local is checked before anything is sent
    const std::string base = lib_file.substr(lib_file.rfind('/') + 1);
    if (lib_name.empty()) {
      if (base.size() <= 6 || base.rfind("lib", 0) != 0 || base.substr(base.size() - 3) != ".so") {
        return Usage(err, verb, absl::StrCat("--file: '", base, "' is not lib<name>.so; pass --name"));
      }
      lib_name = base.substr(3, base.size() - 6);
    }
    if (absl::Status st = CheckExternalLibraryName(lib_name); !st.ok()) return Usage(err, verb, absl::StrCat("--name: ", st.message()));
    auto sha = Sha256HexOfFile(lib_file);
    if (!sha.ok()) return Usage(err, verb, absl::StrCat("--file: ", sha.status().message()));
    // What it declares, read in a child: none of its code runs in this process.
    auto declared = DescribeLibraryInChild(lib_file);
    if (!declared.ok()) return Usage(err, verb, absl::StrCat("--file: ", declared.status().message()));
    const std::string table_build = nlohmann::json::parse(*declared).value("build_id", "");
    if (lib_build.empty()) lib_build = table_build;
    if (lib_build != table_build) {
      return Usage(err, verb, absl::StrCat("--build-id '", lib_build, "' but the library's table says '", table_build, "'"));
    }
    reg.set_name(lib_name);
    reg.set_build_id(lib_build);
    reg.set_sha256(*sha);
    reg.set_declared_json(*declared);
  }
  auto creds = EnvCredentials();
  if (!creds.ok()) return Usage(err, verb, std::string(creds.status().message()));
  auto channel = ClientChannel(coordinator, *creds);
  if (verb == "watch") {
    if (retry_seconds < 0 || retry_seconds > 86400) return Usage(err, verb, "--retry-seconds must be in [0, 86400]");
    GatePolicy gate;
    if (!ParseGatePolicy(fail_on, &gate)) return Usage(err, verb, "--fail-on must be pr-touched, pr-touched,untouched or any");
    auto stub = v1::ValidationService::NewStub(channel);
    RetryOptions retry;  // a read: safe to repeat
    retry.budget = absl::Seconds(retry_seconds);
    v1::Job last;
    std::vector<v1::TaskResult> results;
    std::set<std::string> printed;  // a reopened watch replays results already printed
    const grpc::Status st = WatchWithRetry(
        *stub, job_id, absl::Now() + absl::Hours(24), retry, verb, err, [&] { results.clear(); },
        [&](const v1::JobEvent& ev) {
          last = ev.job();
          if (ev.has_result()) results.push_back(ev.result());
          const auto& p = ev.job().progress();
          if (ev.has_result()) {
            if (!printed.insert(ev.result().task_id()).second) return;
            const v1::TriageClass tc = ev.result().triage().triage_class();
            out << "  " << Cell(ev.result().task_id()) << " M=" << ev.result().m() << " done"
                << (tc == v1::TRIAGE_CLASS_PASS || tc == v1::TRIAGE_CLASS_UNSPECIFIED
                        ? std::string()
                        : absl::StrCat(" ", triage::TriageClassName(tc), ": ", Cell(ev.result().triage().reason(), 400)))
                << "\n";
          } else {
            out << v1::JobState_Name(ev.job().state()) << " " << p.tasks_done() << "/" << p.tasks_total() << " done, "
                << p.tasks_failed() << " failed\n";
          }
          out.flush();
        });
    if (!st.ok()) return GrpcExit(err, verb, st);
    for (v1::TaskResult& r : results) *last.add_results() = std::move(r);
    return JobExitCode(last, gate);
  }
  if (verb == "cancel") {
    v1::CancelJobRequest r;
    r.set_job_id(job_id);
    v1::CancelJobResponse resp;
    const grpc::Status st = v1::ValidationService::NewStub(channel)->CancelJob(Ctx(absl::Seconds(30)).get(), r, &resp);
    if (!st.ok()) return GrpcExit(err, verb, st);
    out << Cell(job_id) << " " << v1::JobState_Name(resp.job().state()) << "\n";
    return kOk;
  }
  if (verb == "jobs") {
    if (limit < 1 || limit > 100000) return Usage(err, verb, "--limit must be in [1, 100000]");
    // Pages of at most kJobsPage jobs; a page the channel cannot receive
    // (jobs with large specs) is asked again at half the size.
    constexpr int kJobsPage = 50;
    auto stub = v1::ValidationService::NewStub(channel);
    v1::ListJobsResponse all;
    std::string token;
    int page = kJobsPage;
    while (all.jobs_size() < limit) {
      v1::ListJobsRequest r;
      r.set_page_size(static_cast<int>(std::min<int64_t>(page, limit - all.jobs_size())));
      r.set_page_token(token);
      v1::ListJobsResponse resp;
      auto ctx = Ctx(absl::Seconds(30));
      const grpc::Status st = stub->ListJobs(ctx.get(), r, &resp);
      if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && r.page_size() > 1 &&
          absl::StrContains(st.error_message(), "larger than max")) {
        page = r.page_size() / 2;
        continue;
      }
      if (!st.ok()) return GrpcExit(err, verb, st, ctx.get());
      for (v1::Job& j : *resp.mutable_jobs()) *all.add_jobs() = std::move(j);
      token = resp.next_page_token();
      if (token.empty() || resp.jobs_size() == 0) break;
    }
    all.set_next_page_token(token);  // non-empty: more jobs than --limit
    if (json) return PrintJson(all, verb, out, err);
    out << absl::StrFormat("%-10s %-20s %9s %6s  %s\n", "job", "state", "done", "failed", "name");
    for (const v1::Job& j : all.jobs()) {
      out << absl::StrFormat("%-10s %-20s %4d/%-4d %6d  %s\n", Cell(j.job_id()), v1::JobState_Name(j.state()),
                             j.progress().tasks_done(), j.progress().tasks_total(), j.progress().tasks_failed(),
                             Cell(j.spec().name()));
    }
    return kOk;
  }
  auto admin = v1::AdminService::NewStub(channel);
  if (verb == "workers") {
    v1::ListWorkersResponse resp;
    auto ctx = Ctx(absl::Seconds(30));
    const grpc::Status st = admin->ListWorkers(ctx.get(), v1::ListWorkersRequest(), &resp);
    if (!st.ok()) return GrpcExit(err, verb, st, ctx.get());
    if (json) return PrintJson(resp, verb, out, err);
    out << absl::StrFormat("%-24s %-24s %7s  %s\n", "worker", "state", "running", "devices");
    for (const v1::WorkerStatus& w : resp.workers()) {
      std::string devs;
      for (const v1::DeviceInfo& d : w.capabilities().devices())
        absl::StrAppend(&devs, d.index(), ":", Cell(d.arch(), 32), d.healthy() ? "" : "(unhealthy)", " ");
      out << absl::StrFormat("%-24s %-24s %7d  %s\n", Cell(w.worker_id()), v1::WorkerState_Name(w.state()),
                             w.running_tasks(), Cell(devs, 4000));
    }
    return kOk;
  }
  if (verb == "register-library") {
    v1::RegisterKernelLibraryRequest r;
    *r.mutable_library() = reg;
    r.set_require_content(!no_upload);  // content already stored under this digest: no upload
    v1::RegisterKernelLibraryResponse resp;
    grpc::Status st = admin->RegisterKernelLibrary(Ctx(absl::Seconds(30)).get(), r, &resp);
    bool uploaded = false;
    if (st.error_code() == grpc::StatusCode::NOT_FOUND && !no_upload) {
      st = UploadLibrary(*admin, reg, lib_file, lib_dir, &resp);
      uploaded = st.ok();
    }
    if (!st.ok()) return GrpcExit(err, verb, st);
    out << "registered " << Cell(resp.library().name()) << " build " << Cell(resp.library().build_id()) << " sha256 "
        << Cell(resp.library().sha256()) << "\n"
        << (!resp.library().content_stored() ? std::string("content: not uploaded; workers need it in their --kernel-dir")
            : uploaded ? absl::StrCat("content: uploaded ", resp.library().content_bytes(), " bytes")
                       : absl::StrCat("content: already stored (", resp.library().content_bytes(), " bytes), not sent again"))
        << "\n";
    return kOk;
  }
  if (verb == "unregister-library") {
    v1::UnregisterKernelLibraryRequest r;
    r.set_name(lib_name);
    v1::UnregisterKernelLibraryResponse resp;
    const grpc::Status st = admin->UnregisterKernelLibrary(Ctx(absl::Seconds(30)).get(), r, &resp);
    if (!st.ok()) return GrpcExit(err, verb, st);
    out << "unregistered " << Cell(lib_name) << "\n";
    return kOk;
  }
  if (verb == "libraries") {
    v1::ListKernelLibrariesResponse resp;
    auto ctx = Ctx(absl::Seconds(30));
    const grpc::Status st = admin->ListKernelLibraries(ctx.get(), v1::ListKernelLibrariesRequest(), &resp);
    if (!st.ok()) return GrpcExit(err, verb, st, ctx.get());
    if (json) return PrintJson(resp, verb, out, err);
    out << absl::StrFormat("%-28s %-24s %-16s %s\n", "library", "build", "registered by", "sha256");
    for (const v1::KernelLibraryRegistration& l : resp.libraries()) {
      out << absl::StrFormat("%-28s %-24s %-16s %s\n", Cell(l.name()), Cell(l.build_id()), Cell(l.registered_by()),
                             Cell(l.sha256()));
    }
    return kOk;
  }
  v1::DrainWorkerRequest r;
  r.set_worker_id(worker_id);
  r.set_undrain(undrain);
  v1::DrainWorkerResponse resp;
  const grpc::Status st = admin->DrainWorker(Ctx(absl::Seconds(30)).get(), r, &resp);
  if (!st.ok()) return GrpcExit(err, verb, st);
  out << Cell(worker_id) << " " << v1::WorkerState_Name(resp.worker().state()) << "\n";
  return kOk;
}

}  // namespace mxval
