// libFuzzer: the control-plane envelope decoder and every message body, as
// a daemon receives them from a peer (protocol/codec.h); the job file a
// submit or a launch order carries is read as the coordinator and the agent
// read it (protocol/job_control.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "protocol/codec.h"
#include "protocol/job_control.h"

namespace {

template <typename T>
void body(const cohort::protocol::Envelope& e) {
  cohort::protocol::Envelope copy = e;
  copy.type = T::kType;
  auto m = cohort::protocol::body_as<T>(copy);
  if (!m) return;
  (void)cohort::protocol::encode(*m, copy.id);  // and back, as replies do
  if constexpr (requires { m->job_toml; }) (void)cohort::protocol::job_control_from_toml(m->job_toml);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort::protocol;
  auto e = decode(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!e) return 0;
  body<RegisterNode>(*e);
  body<Heartbeat>(*e);
  body<WorkerExit>(*e);
  body<LogBatch>(*e);
  body<WorkersStarted>(*e);
  body<NodeLeaving>(*e);
  body<NodeLeft>(*e);
  body<DrainNode>(*e);
  body<UndrainNode>(*e);
  body<LaunchOrder>(*e);
  body<StopOrder>(*e);
  body<SubmitJob>(*e);
  body<JobQuery>(*e);
  body<JobList>(*e);
  body<NodeList>(*e);
  body<CancelJob>(*e);
  body<RemoveJob>(*e);
  body<RemoveNode>(*e);
  body<LogQuery>(*e);
  body<LogReply>(*e);
  body<StoreRequest>(*e);
  body<StoreReply>(*e);
  body<ErrorReply>(*e);
  return 0;
}
