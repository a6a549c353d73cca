// Authentication and authorization end to end: a coordinator with TLS,
// worker client certificates and bearer tokens with roles, on loopback, and
// clients of each kind. Certificates come from scripts/gen_test_certs.sh.
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "service/auth/auth.h"
#include "service/coordinator/coordinator_service.h"

namespace mxval {
namespace {

using coordinator::Coordinator;

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/mxval_auth_" + std::to_string(getpid());
    ASSERT_EQ(std::system(("bash " MXVAL_SOURCE_DIR "/scripts/gen_test_certs.sh " + dir_ + " w1 >/dev/null").c_str()), 0);
    v1::AuthConfig cfg;
    for (auto [name, token, role] : {std::tuple{"dash", "view-secret", v1::ROLE_VIEWER},
                                     std::tuple{"bot-a", "submit-a-secret", v1::ROLE_SUBMITTER},
                                     std::tuple{"bot-b", "submit-b-secret", v1::ROLE_SUBMITTER},
                                     std::tuple{"ops", "admin-secret", v1::ROLE_ADMIN}}) {
      v1::AuthToken* t = cfg.add_tokens();
      t->set_name(name);
      t->set_sha256(auth::Sha256Hex(token));
      t->set_role(role);
    }
    ASSERT_TRUE(auth::ValidateConfig(cfg).ok());
    const auth::DenialHook hook = [this](const std::string& reason, const std::string& method, const std::string& who) {
      metrics_.AuthDenied(reason);
      absl::MutexLock l(&log_mu_);  // called on gRPC server threads
      log_ += method + " " + who + " " + reason + "\n";
    };
    authorizer_ = std::make_unique<auth::Authorizer>(cfg, hook);
    coordinator::CoordinatorOptions o;
    o.authorizer = authorizer_.get();
    o.metrics = &metrics_;
    o.max_long_poll = absl::Milliseconds(100);
    o.rpc_rate_per_second = rpc_rate_;
    coord_ = std::make_unique<Coordinator>(&clock_, &scheduler_, o);
    auto creds = auth::ServerCredentials({dir_ + "/server.crt", dir_ + "/server.key", dir_ + "/ca.crt"},
                                         std::make_shared<auth::TokenProcessor>(cfg, hook));
    ASSERT_TRUE(creds.ok()) << creds.status();
    server_ = coordinator::StartServer("127.0.0.1:0", coord_.get(), &port_, 16 << 20, *creds);
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    server_->Shutdown();
    std::system(("rm -rf " + dir_).c_str());
  }

  std::shared_ptr<grpc::Channel> Channel(const std::string& token, bool worker_cert = false) {
    auth::ClientTlsFiles f{dir_ + "/ca.crt", worker_cert ? dir_ + "/w1.crt" : "", worker_cert ? dir_ + "/w1.key" : "",
                           token};
    auto c = auth::ChannelCredentials(f);
    EXPECT_TRUE(c.ok()) << c.status();
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), *c);
  }
  std::unique_ptr<grpc::ClientContext> Ctx() {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  }
  grpc::Status Submit(const std::string& token, std::string* job_id, const std::string& claimed_owner = "") {
    auto stub = v1::ValidationService::NewStub(Channel(token));
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_presets("dsv3-tp8");
    req.mutable_spec()->add_m_values(1);
    req.mutable_spec()->set_owner(claimed_owner);
    v1::SubmitJobResponse resp;
    grpc::Status st = stub->SubmitJob(Ctx().get(), req, &resp);
    if (job_id) *job_id = resp.job().job_id();
    return st;
  }
  grpc::Status Cancel(const std::string& token, const std::string& job_id) {
    auto stub = v1::ValidationService::NewStub(Channel(token));
    v1::CancelJobRequest req;
    req.set_job_id(job_id);
    v1::CancelJobResponse resp;
    return stub->CancelJob(Ctx().get(), req, &resp);
  }
  grpc::Status Register(bool cert, const std::string& worker_id, const std::string& token = "") {
    auto stub = v1::WorkerService::NewStub(Channel(token, cert));
    v1::RegisterWorkerRequest req;
    req.set_worker_id(worker_id);
    v1::DeviceInfo* d = req.mutable_capabilities()->add_devices();
    d->set_arch("cpu");
    d->set_healthy(true);
    v1::RegisterWorkerResponse resp;
    return stub->RegisterWorker(Ctx().get(), req, &resp);
  }

  std::string Log() {
    absl::MutexLock l(&log_mu_);
    return log_;
  }

  double rpc_rate_ = 0;
  std::string dir_;
  absl::Mutex log_mu_;
  std::string log_ ABSL_GUARDED_BY(log_mu_);
  FakeClock clock_;
  coordinator::Scheduler scheduler_{&clock_, coordinator::WithFailurePredicate(coordinator::SchedulerOptions{})};
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  coordinator::CoordinatorMetrics metrics_{*registry_};
  std::unique_ptr<auth::Authorizer> authorizer_;
  std::unique_ptr<Coordinator> coord_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(AuthTest, TokensAndRoles) {
  std::string job;
  EXPECT_EQ(Submit("", &job).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Submit("not-a-token", &job).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Submit("view-secret", &job).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // A submitter's job is its own, whatever owner the spec claims.
  ASSERT_TRUE(Submit("submit-a-secret", &job, /*claimed_owner=*/"ops").ok());
  auto status = scheduler_.GetJob(job);
  ASSERT_TRUE(status.ok());
  v1::JobSpec spec;
  spec.ParseFromString(status->payload);
  EXPECT_EQ(spec.owner(), "bot-a");
  // Viewers read; others' jobs cannot be cancelled by a submitter; admins can.
  auto viewer = v1::ValidationService::NewStub(Channel("view-secret"));
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(viewer->ListJobs(Ctx().get(), v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 1);
  EXPECT_EQ(Cancel("view-secret", job).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Cancel("submit-b-secret", job).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Cancel("submit-a-secret", job).ok());
  ASSERT_TRUE(Submit("submit-b-secret", &job).ok());
  EXPECT_TRUE(Cancel("admin-secret", job).ok());
  // Draining a worker is an admin's call.
  ASSERT_TRUE(Register(true, "w1").ok());
  auto drain = [&](const std::string& token) {
    auto stub = v1::AdminService::NewStub(Channel(token));
    v1::DrainWorkerRequest req;
    req.set_worker_id("w1");
    v1::DrainWorkerResponse resp;
    return stub->DrainWorker(Ctx().get(), req, &resp);
  };
  EXPECT_EQ(drain("submit-a-secret").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(drain("admin-secret").ok());
  // Denials are counted by reason and logged by principal, never with a token.
  prometheus::TextSerializer text;
  const std::string scrape = text.Serialize(registry_->Collect());
  EXPECT_NE(scrape.find("mxval_coordinator_auth_denied_total{reason=\"role\"} 3"), std::string::npos) << scrape;
  EXPECT_NE(scrape.find("mxval_coordinator_auth_denied_total{reason=\"missing_token\"} 1"), std::string::npos);
  EXPECT_NE(scrape.find("mxval_coordinator_auth_denied_total{reason=\"not_owner\"} 1"), std::string::npos);
  for (const char* secret : {"view-secret", "submit-a-secret", "submit-b-secret", "admin-secret", "not-a-token"}) {
    EXPECT_EQ(Log().find(secret), std::string::npos) << Log();
  }
  EXPECT_NE(Log().find("CancelJob bot-b not_owner"), std::string::npos) << Log();
}

// A refused token is a denial like any other: counted by reason and logged
// with the method, never with the token.
TEST_F(AuthTest, WrongTokensAreCountedAndLogged) {
  std::string job;
  EXPECT_EQ(Submit("not-a-token", &job).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Submit("also-not-a-token", &job).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto stub = v1::ValidationService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), *auth::ChannelCredentials({dir_ + "/ca.crt", "", "", ""})));
  auto ctx = Ctx();
  ctx->AddMetadata("authorization", "Basic dXNlcjpwYXNz");
  v1::ListJobsResponse jobs;
  EXPECT_EQ(stub->ListJobs(ctx.get(), v1::ListJobsRequest(), &jobs).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  prometheus::TextSerializer text;
  const std::string scrape = text.Serialize(registry_->Collect());
  EXPECT_NE(scrape.find("mxval_coordinator_auth_denied_total{reason=\"unknown_token\"} 2"), std::string::npos) << scrape;
  EXPECT_NE(scrape.find("mxval_coordinator_auth_denied_total{reason=\"bad_scheme\"} 1"), std::string::npos) << scrape;
  const std::string log = Log();
  EXPECT_NE(log.find("/mxval.v1.ValidationService/SubmitJob unauthenticated peer unknown_token"), std::string::npos) << log;
  EXPECT_NE(log.find("/mxval.v1.ValidationService/ListJobs unauthenticated peer bad_scheme"), std::string::npos) << log;
  for (const char* secret : {"not-a-token", "also-not-a-token", "dXNlcjpwYXNz"}) {
    EXPECT_EQ(log.find(secret), std::string::npos) << log;
  }
}

// One unary call with raw request bytes (no generated stub): the status and
// the response bytes.
std::pair<grpc::Status, std::string> RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                                             const std::string& request_bytes) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  auto call = stub.PrepareUnaryCall(&ctx, method, request, &cq);
  call->StartCall();
  grpc::Status st;
  call->Finish(&response, &st, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  EXPECT_TRUE(cq.Next(&tag, &ok));
  std::string bytes;
  std::vector<grpc::Slice> slices;
  if (st.ok() && response.Dump(&slices).ok()) {
    for (const grpc::Slice& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return {st, bytes};
}

// grpc.health.v1.Health/Check by service name (a HealthCheckRequest is field
// 1, the name; the response's field 1 is SERVING = 1 or NOT_SERVING = 2).
TEST_F(AuthTest, HealthPerServiceName) {
  auto check = [&](const std::string& service) {
    const std::string req = service.empty() ? "" : std::string("\x0a") + static_cast<char>(service.size()) + service;
    return RawCall(Channel(""), "/grpc.health.v1.Health/Check", req);
  };
  for (const char* service : {"", "mxval.v1.ValidationService", "mxval.v1.WorkerService", "mxval.v1.AdminService",
                              "mxval.v1.TriageService"}) {
    auto [st, bytes] = check(service);
    ASSERT_TRUE(st.ok()) << service << ": " << st.error_code() << " " << st.error_message();
    EXPECT_EQ(bytes, std::string("\x08\x01", 2)) << service;
  }
  EXPECT_EQ(check("mxval.v1.NoSuchService").first.error_code(), grpc::StatusCode::NOT_FOUND);
  server_->GetHealthCheckService()->SetServingStatus(false);  // what serve does when a drain starts
  auto [st, bytes] = check("mxval.v1.ValidationService");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(bytes, std::string("\x08\x02", 2));
}

// Request bytes that are not the method's message.
TEST_F(AuthTest, UndecodableRequests) {
  for (const char* method : {"/mxval.v1.ValidationService/ListJobs", "/mxval.v1.ValidationService/SubmitJob"}) {
    auto [st, bytes] = RawCall(Channel("admin-secret"), method, std::string("\xff\xff\xff\xff\x0a\x80", 6));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method << ": " << st.error_code() << " '"
                                                                   << st.error_message() << "'";
    EXPECT_NE(st.error_message().find("request: cannot be parsed"), std::string::npos) << st.error_message();
  }
  // Well-formed bytes still reach the handler.
  auto [st, bytes] = RawCall(Channel("view-secret"), "/mxval.v1.ValidationService/ListJobs", "");
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST_F(AuthTest, WorkersAuthenticateWithCertificates) {
  EXPECT_EQ(Register(false, "w1", "admin-secret").error_code(), grpc::StatusCode::UNAUTHENTICATED);  // tokens do not make a worker
  EXPECT_EQ(Register(true, "w2").error_code(), grpc::StatusCode::PERMISSION_DENIED);  // the certificate says w1
  EXPECT_TRUE(Register(true, "w1").ok());
  auto stub = v1::WorkerService::NewStub(Channel("", true));
  v1::LeaseTaskRequest lr;
  lr.set_worker_id("w1");
  v1::LeaseTaskResponse lease;
  EXPECT_TRUE(stub->LeaseTask(Ctx().get(), lr, &lease).ok());
  // Library content is served only to a worker under its own certificate name.
  auto fetch = [&](v1::WorkerService::Stub* s, const std::string& id) {
    v1::FetchKernelLibraryRequest fr;
    fr.set_worker_id(id);
    fr.set_sha256(std::string(64, 'a'));
    auto ctx = Ctx();
    auto reader = s->FetchKernelLibrary(ctx.get(), fr);
    v1::FetchKernelLibraryResponse m;
    while (reader->Read(&m)) {
    }
    return reader->Finish().error_code();
  };
  EXPECT_EQ(fetch(stub.get(), "w1"), grpc::StatusCode::NOT_FOUND);  // allowed; nothing stored
  EXPECT_EQ(fetch(stub.get(), "w2"), grpc::StatusCode::PERMISSION_DENIED);
  auto admin_only = v1::WorkerService::NewStub(Channel("admin-secret"));
  EXPECT_EQ(fetch(admin_only.get(), "w1"), grpc::StatusCode::UNAUTHENTICATED);  // a token does not make a worker
}

TEST_F(AuthTest, PlaintextAndUnknownCaAreRefused) {
  auto plain = v1::ValidationService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  v1::ListJobsResponse jobs;
  EXPECT_EQ(plain->ListJobs(Ctx().get(), v1::ListJobsRequest(), &jobs).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A client that does not trust the server's CA does not connect.
  const std::string other = dir_ + "/other";
  ASSERT_EQ(std::system(("bash " MXVAL_SOURCE_DIR "/scripts/gen_test_certs.sh " + other + " x >/dev/null").c_str()), 0);
  auto creds = auth::ChannelCredentials({other + "/ca.crt", "", "", "view-secret"});
  ASSERT_TRUE(creds.ok());
  auto wrong = v1::ValidationService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), *creds));
  EXPECT_EQ(wrong->ListJobs(Ctx().get(), v1::ListJobsRequest(), &jobs).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(AuthConfig, Validation) {
  v1::AuthConfig c;
  v1::AuthToken* t = c.add_tokens();
  t->set_name("x");
  t->set_sha256("ABC");
  t->set_role(v1::ROLE_VIEWER);
  EXPECT_NE(auth::ValidateConfig(c).message().find("tokens[0].sha256"), std::string::npos);
  t->set_sha256(auth::Sha256Hex("s"));
  EXPECT_TRUE(auth::ValidateConfig(c).ok());
  *c.add_tokens() = *t;
  EXPECT_NE(auth::ValidateConfig(c).message().find("tokens[1].name"), std::string::npos);
  EXPECT_EQ(auth::Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_FALSE(auth::ChannelCredentials({"", "", "", "token-without-tls"}).ok());
  EXPECT_EQ(auth::LoadConfig("/nonexistent.yaml").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(AuthTest, OnlyAdminsRegisterKernelLibraries) {
  v1::RegisterKernelLibraryRequest req;
  req.mutable_library()->set_name("pr-kernels");
  req.mutable_library()->set_build_id("b1");
  req.mutable_library()->set_sha256(auth::Sha256Hex("library bytes"));
  v1::RegisterKernelLibraryResponse resp;
  for (const char* token : {"view-secret", "submit-a-secret"}) {
    EXPECT_EQ(v1::AdminService::NewStub(Channel(token))->RegisterKernelLibrary(Ctx().get(), req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED)
        << token;
  }
  // A worker certificate is not an admin either.
  EXPECT_NE(v1::AdminService::NewStub(Channel("", true))->RegisterKernelLibrary(Ctx().get(), req, &resp).error_code(),
            grpc::StatusCode::OK);
  ASSERT_TRUE(v1::AdminService::NewStub(Channel("admin-secret"))->RegisterKernelLibrary(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.library().registered_by(), "ops");
  v1::ListKernelLibrariesResponse list;
  ASSERT_TRUE(v1::AdminService::NewStub(Channel("view-secret"))
                  ->ListKernelLibraries(Ctx().get(), v1::ListKernelLibrariesRequest(), &list)
                  .ok());
  ASSERT_EQ(list.libraries_size(), 1);
  v1::UnregisterKernelLibraryRequest ur;
  ur.set_name("pr-kernels");
  v1::UnregisterKernelLibraryResponse uresp;
  EXPECT_EQ(v1::AdminService::NewStub(Channel("submit-a-secret"))->UnregisterKernelLibrary(Ctx().get(), ur, &uresp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(Log().find("RegisterKernelLibrary bot-a"), std::string::npos) << Log();
}

class AuthRateTest : public AuthTest {
 protected:
  AuthRateTest() { rpc_rate_ = 1; }  // burst 10
};

TEST_F(AuthRateTest, CallRateIsPerPrincipalWithARetryTrailer) {
  auto a = v1::ValidationService::NewStub(Channel("submit-a-secret"));
  auto b = v1::ValidationService::NewStub(Channel("submit-b-secret"));
  v1::ListJobsResponse resp;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(a->ListJobs(Ctx().get(), v1::ListJobsRequest(), &resp).ok()) << i;
  auto ctx = Ctx();
  const grpc::Status st = a->ListJobs(ctx.get(), v1::ListJobsRequest(), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("client 'bot-a'"), std::string::npos) << st.error_message();
  auto trailer = ctx->GetServerTrailingMetadata().find("retry-after-ms");
  ASSERT_NE(trailer, ctx->GetServerTrailingMetadata().end());
  EXPECT_EQ(std::string(trailer->second.data(), trailer->second.size()), "1000");
  // Another principal has its own budget.
  EXPECT_TRUE(b->ListJobs(Ctx().get(), v1::ListJobsRequest(), &resp).ok());
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(a->ListJobs(Ctx().get(), v1::ListJobsRequest(), &resp).ok());
}

// A request id belongs to its owner: another submitter's equal id is another
// job (its spec is not dropped for the first owner's), and the first owner's
// retry still returns the first job.
TEST_F(AuthTest, RequestIdsBelongToTheirOwner) {
  auto submit = [&](const std::string& token, int64_t m, v1::Job* job) {
    auto stub = v1::ValidationService::NewStub(Channel(token));
    v1::SubmitJobRequest req;
    req.set_request_id("pr-1-run-1");
    req.mutable_spec()->add_presets("dsv3-tp8");
    req.mutable_spec()->add_m_values(m);
    v1::SubmitJobResponse resp;
    grpc::Status st = stub->SubmitJob(Ctx().get(), req, &resp);
    *job = resp.job();
    return st;
  };
  v1::Job a, b, again;
  ASSERT_TRUE(submit("submit-a-secret", 1, &a).ok());
  ASSERT_TRUE(submit("submit-b-secret", 2, &b).ok());
  EXPECT_NE(b.job_id(), a.job_id());
  EXPECT_EQ(b.spec().owner(), "bot-b");
  ASSERT_EQ(b.spec().m_values_size(), 1);
  EXPECT_EQ(b.spec().m_values(0), 2);
  EXPECT_EQ(b.request_id(), "pr-1-run-1");
  ASSERT_TRUE(submit("submit-a-secret", 1, &again).ok());
  EXPECT_EQ(again.job_id(), a.job_id());
  EXPECT_EQ(again.spec().owner(), "bot-a");
  // The same owner with another spec under the same id: refused, naming it.
  const grpc::Status st = submit("submit-a-secret", 4, &again);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(st.error_message().find("m_values"), std::string::npos) << st.error_message();
}

}  // namespace
}  // namespace mxval
