// JSON mapping of the control-plane messages (included by codec.h only).
//
// The field names on the wire are the struct member names. Every mapping
// uses defaults for missing fields, so an older peer's message still decodes.
// Store values are bytes (an NCCL unique id is not text), so they travel as
// base64; log lines are text and invalid UTF-8 is replaced when encoding.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

#include "protocol/messages.h"

namespace cohort::protocol {

std::string base64_encode(const std::string& bytes);
// False when `text` is not valid base64.
bool base64_decode(const std::string& text, std::string* bytes);

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GpuDesc, index, uuid, pci_bus_id, name, memory_bytes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RootCause, rank, node, exit_code, signal, reason,
                                                last_lines)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AttemptInfo, number, state, nodes, world_size,
                                                started_ms, ended_ms, reason, has_root_cause,
                                                root_cause, counts_as_restart)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(EventInfo, time_ms, text)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TrainingProgress, step, total_steps, loss,
                                                tokens_per_s, eta_s, age_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(JobInfo, id, name, kind, state, priority, nodes_min,
                                                nodes_max, gpus_per_node, max_restarts,
                                                restarts_used, output_dir, owner, submitted_ms, ended_ms,
                                                message, has_root_cause, root_cause, attempts,
                                                events, elapsed_ms, gpu_hours, has_progress,
                                                progress)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GpuSample, index, utilization, memory_used_bytes, fault)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MetricRow, step, time, values)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NodeInfo, name, address, state, gpus, gpu_samples,
                                                gpus_free, heartbeat_age_ms, jobs, drain_reason)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LogLine, seq, attempt, rank, text)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RunningWorker, job_id, attempt, rank, pid)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RegisterNode, node, address, gpus, running, fenced,
                                                fence_reason)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Heartbeat, node, running)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GpuReport, node, samples)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NodeLeaving, node, reason)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NodeLeft, node)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DrainNode, node, stop_running)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(UndrainNode, node)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(WorkerExit, job_id, attempt, node, rank, exit_code,
                                                signal, stopped, failure, last_lines)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LogBatch, job_id, lines)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(WorkersStarted, job_id, attempt, node, master_port)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MetricBatch, job_id, attempt, node, rows,
                                                total_steps, eta_s)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RegisterAck, heartbeat_interval_ms, heartbeat_timeout_ms,
                                                recovery_grace_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LaunchOrder, job_id, attempt, restart_count,
                                                node_rank, num_nodes, world_size, gpu_indices,
                                                master_addr, master_port, job_toml, store_token)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(StopOrder, job_id, attempt, reason)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SubmitJob, job_toml)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SubmitReply, job_id)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(JobQuery, job_id, limit, state)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(JobList, jobs, more, total)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RemoveJob, job_id)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RemoveNode, node)
inline void to_json(nlohmann::json& j, const NodeQuery&) { j = nlohmann::json::object(); }
inline void from_json(const nlohmann::json&, NodeQuery&) {}
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NodeList, nodes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CancelJob, job_id)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LogQuery, job_id, rank, attempt, after_seq,
                                                max_lines, tail)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LogReply, lines, last_seq, job_finished, job_state, note)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Ack, text)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ErrorReply, code, message)

void to_json(nlohmann::json& j, const StoreRequest& m);
void from_json(const nlohmann::json& j, StoreRequest& m);
void to_json(nlohmann::json& j, const StoreReply& m);
void from_json(const nlohmann::json& j, StoreReply& m);

}  // namespace cohort::protocol
