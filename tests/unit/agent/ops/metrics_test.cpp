// /metrics text (Prometheus exposition format 0.0.4) for a registry with
// known values, line for line; and how an incident maps onto the fixed
// label values (incident_metrics.h).
#include <gtest/gtest.h>

#include "agent/incident/incident_metrics.h"
#include "agent/ops/metrics.h"

using namespace oomsnap;

namespace {

LoopTotals some_totals() {
  LoopTotals t;
  t.bpf_ring_drops = 3;
  t.pressure_events_suppressed = 4;
  t.queue_overflows = 5;
  t.watched_cgroups = 7;
  t.last_event_unix_seconds = 1700000000.5;
  t.sinks = {{"stdout", 9, 1}, {"file", 8, 0}};
  return t;
}

}  // namespace

TEST(Metrics, RendersEveryFamilyExactly) {
  MetricsRegistry m("1.2.3");
  m.count_incident("oom_kill", "collected");
  m.count_incident("oom_kill", "collected");
  m.count_incident("psi", "failed", 0);  // declared, not counted
  m.count_oom_kill("before_kill");
  m.observe_capture_duration("go", 0.5);
  m.observe_capture_duration("go", 3);
  m.observe_capture_lead(1.5);
  m.count_capture_failure("timeout");
  m.publish(some_totals());
  ContainerCharge charge;
  charge.pod_namespace = "shop";
  charge.pod = "cart-1";
  charge.container = "cart";
  charge.unix_seconds = 1700000000.25;
  charge.usage_bytes = 1000;
  charge.kinds = {{"heap", 600}, {"unexplained", 400}};
  charge.largest_kind = "heap";
  m.publish_charge(charge);

  const std::string expected =
      "# HELP oomsnap_build_info The running agent's version (always 1).\n"
      "# TYPE oomsnap_build_info gauge\n"
      "oomsnap_build_info{version=\"1.2.3\"} 1\n"
      "# HELP oomsnap_incidents_total Incident records written, by first trigger and collection status.\n"
      "# TYPE oomsnap_incidents_total counter\n"
      "oomsnap_incidents_total{trigger=\"oom_kill\",status=\"collected\"} 2\n"
      "oomsnap_incidents_total{trigger=\"psi\",status=\"failed\"} 0\n"
      "# HELP oomsnap_oom_kills_total OOM kills recorded, by whether the container's snapshot completed before the kill.\n"
      "# TYPE oomsnap_oom_kills_total counter\n"
      "oomsnap_oom_kills_total{snapshot=\"before_kill\"} 1\n"
      "# HELP oomsnap_capture_duration_seconds Wall time of one heap capture, by language.\n"
      "# TYPE oomsnap_capture_duration_seconds histogram\n"
      "oomsnap_capture_duration_seconds_bucket{language=\"go\",le=\"0.01\"} 0\n"
      "oomsnap_capture_duration_seconds_bucket{language=\"go\",le=\"0.025\"} 0\n"
      "oomsnap_capture_duration_seconds_bucket{language=\"go\",le=\"0.05\"} 0\n"
      "oomsnap_capture_duration_seconds_bucket{language=\"go\",le=\"0.1\"} 0\n"
      "oomsnap_capture_duration_seconds_bucket{language=\"go\",le=\"0.25\"} 0\n"
      "oomsnap_capture_duration_seconds_bucket{language=\"go\",le=\"0.5\"} 1\n"
      "oomsnap_capture_duration_seconds_bucket{language=\"go\",le=\"1\"} 1\n"
      "oomsnap_capture_duration_seconds_bucket{language=\"go\",le=\"2.5\"} 1\n"
      "oomsnap_capture_duration_seconds_bucket{language=\"go\",le=\"5\"} 2\n"
      "oomsnap_capture_duration_seconds_bucket{language=\"go\",le=\"10\"} 2\n"
      "oomsnap_capture_duration_seconds_bucket{language=\"go\",le=\"+Inf\"} 2\n"
      "oomsnap_capture_duration_seconds_sum{language=\"go\"} 3.5\n"
      "oomsnap_capture_duration_seconds_count{language=\"go\"} 2\n"
      "# HELP oomsnap_capture_lead_seconds Time from a completed snapshot to the OOM kill of its container (kills "
      "after their snapshot only).\n"
      "# TYPE oomsnap_capture_lead_seconds histogram\n"
      "oomsnap_capture_lead_seconds_bucket{le=\"0.1\"} 0\n"
      "oomsnap_capture_lead_seconds_bucket{le=\"0.5\"} 0\n"
      "oomsnap_capture_lead_seconds_bucket{le=\"1\"} 0\n"
      "oomsnap_capture_lead_seconds_bucket{le=\"2.5\"} 1\n"
      "oomsnap_capture_lead_seconds_bucket{le=\"5\"} 1\n"
      "oomsnap_capture_lead_seconds_bucket{le=\"10\"} 1\n"
      "oomsnap_capture_lead_seconds_bucket{le=\"30\"} 1\n"
      "oomsnap_capture_lead_seconds_bucket{le=\"60\"} 1\n"
      "oomsnap_capture_lead_seconds_bucket{le=\"120\"} 1\n"
      "oomsnap_capture_lead_seconds_bucket{le=\"300\"} 1\n"
      "oomsnap_capture_lead_seconds_bucket{le=\"+Inf\"} 1\n"
      "oomsnap_capture_lead_seconds_sum 1.5\n"
      "oomsnap_capture_lead_seconds_count 1\n"
      "# HELP oomsnap_capture_failures_total Heap captures that gave no complete or partial snapshot, by reason.\n"
      "# TYPE oomsnap_capture_failures_total counter\n"
      "oomsnap_capture_failures_total{reason=\"timeout\"} 1\n"
      "# HELP oomsnap_incident_largest_kind_total Incident records by the kind that held the most of the container's "
      "usage (heap, native, page_cache, ...).\n"
      "# TYPE oomsnap_incident_largest_kind_total counter\n"
      "oomsnap_incident_largest_kind_total{kind=\"heap\"} 1\n"
      "# HELP oomsnap_last_incident_memory_bytes Where the container's memory went at its last incident, by kind (the "
      "record's container.explained).\n"
      "# TYPE oomsnap_last_incident_memory_bytes gauge\n"
      "oomsnap_last_incident_memory_bytes{namespace=\"shop\",pod=\"cart-1\",container=\"cart\",kind=\"heap\"} 600\n"
      "oomsnap_last_incident_memory_bytes{namespace=\"shop\",pod=\"cart-1\",container=\"cart\",kind=\"unexplained\"} 400\n"
      "# HELP oomsnap_last_incident_usage_bytes The container's memory usage at its last incident.\n"
      "# TYPE oomsnap_last_incident_usage_bytes gauge\n"
      "oomsnap_last_incident_usage_bytes{namespace=\"shop\",pod=\"cart-1\",container=\"cart\"} 1000\n"
      "# HELP oomsnap_last_incident_timestamp_seconds Unix time of the container's last incident.\n"
      "# TYPE oomsnap_last_incident_timestamp_seconds gauge\n"
      "oomsnap_last_incident_timestamp_seconds{namespace=\"shop\",pod=\"cart-1\",container=\"cart\"} 1700000000.25\n"
      "# HELP oomsnap_bpf_ring_drops_total BPF events lost because a ring buffer was full.\n"
      "# TYPE oomsnap_bpf_ring_drops_total counter\n"
      "oomsnap_bpf_ring_drops_total 3\n"
      "# HELP oomsnap_pressure_events_suppressed_total Memory cgroup reclaim events the BPF per-memcg rate limit did "
      "not send.\n"
      "# TYPE oomsnap_pressure_events_suppressed_total counter\n"
      "oomsnap_pressure_events_suppressed_total 4\n"
      "# HELP oomsnap_queue_overflows_total Collections refused because the capture queue was full.\n"
      "# TYPE oomsnap_queue_overflows_total counter\n"
      "oomsnap_queue_overflows_total 5\n"
      "# HELP oomsnap_records_written_total Records written, by sink.\n"
      "# TYPE oomsnap_records_written_total counter\n"
      "oomsnap_records_written_total{sink=\"stdout\"} 9\n"
      "oomsnap_records_written_total{sink=\"file\"} 8\n"
      "# HELP oomsnap_sink_errors_total Failed record writes (each attempt), by sink.\n"
      "# TYPE oomsnap_sink_errors_total counter\n"
      "oomsnap_sink_errors_total{sink=\"stdout\"} 1\n"
      "oomsnap_sink_errors_total{sink=\"file\"} 0\n"
      "# HELP oomsnap_watched_cgroups Memory cgroups the agent watches.\n"
      "# TYPE oomsnap_watched_cgroups gauge\n"
      "oomsnap_watched_cgroups 7\n"
      "# HELP oomsnap_last_event_timestamp_seconds Unix time of the last kernel or cgroup event the agent took in (0: "
      "none yet).\n"
      "# TYPE oomsnap_last_event_timestamp_seconds gauge\n"
      "oomsnap_last_event_timestamp_seconds 1700000000.5\n";
  EXPECT_EQ(m.render(), expected);
}

TEST(Metrics, HistogramBucketsAreCumulativeAndInclusive) {
  Histogram h({1, 2});
  for (double v : {0.5, 1.0, 1.5, 2.0, 7.0}) h.observe(v);  // "le": a value on a bound counts in its bucket
  EXPECT_EQ(h.counts, (std::vector<uint64_t>{2, 2, 1}));
  EXPECT_EQ(h.count, 5u);
  EXPECT_DOUBLE_EQ(h.sum, 12.0);
  MetricsRegistry m("v");
  for (double v : {0.05, 0.1, 200.0, 1000.0}) m.observe_capture_lead(v);
  const std::string text = m.render();
  EXPECT_NE(text.find("oomsnap_capture_lead_seconds_bucket{le=\"0.1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("oomsnap_capture_lead_seconds_bucket{le=\"120\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("oomsnap_capture_lead_seconds_bucket{le=\"300\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("oomsnap_capture_lead_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("oomsnap_capture_lead_seconds_count 4\n"), std::string::npos) << text;
}

TEST(Metrics, LabelValuesAreEscaped) {
  EXPECT_EQ(escape_label_value("plain"), "plain");
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  MetricsRegistry m("1.0 \"dev\"\n\\");
  EXPECT_NE(m.render().find("oomsnap_build_info{version=\"1.0 \\\"dev\\\"\\n\\\\\"} 1\n"), std::string::npos)
      << m.render();
}

TEST(Metrics, DeclaredSeriesAreScrapedAtZeroFromTheStart) {
  MetricsRegistry m("v");
  declare_incident_series(m);
  const std::string text = m.render();
  for (const char* line : {"oomsnap_incidents_total{trigger=\"oom_kill\",status=\"collected\"} 0\n",
                           "oomsnap_incidents_total{trigger=\"memcg_pressure\",status=\"queue_full\"} 0\n",
                           "oomsnap_oom_kills_total{snapshot=\"before_kill\"} 0\n",
                           "oomsnap_oom_kills_total{snapshot=\"after_kill\"} 0\n",
                           "oomsnap_oom_kills_total{snapshot=\"none\"} 0\n",
                           "oomsnap_capture_failures_total{reason=\"memory_cap\"} 0\n",
                           "oomsnap_capture_duration_seconds_count{language=\"java\"} 0\n",
                           "oomsnap_capture_duration_seconds_count{language=\"unknown\"} 0\n",
                           "oomsnap_incident_largest_kind_total{kind=\"page_cache\"} 0\n",
                           "oomsnap_incident_largest_kind_total{kind=\"unexplained\"} 0\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
}

// ------------------------------------------------------------------ incident -> labels

namespace {

CaptureRecord failed_capture(SnapshotStatus status, const std::string& reason, bool by_process) {
  CaptureRecord c;
  c.result.language = "go";
  c.result.snapshot.set_status(status, reason);
  if (by_process) c.process_failure = reason;
  return c;
}

}  // namespace

TEST(IncidentMetrics, CaptureFailureReasonsFromTheSandboxWording) {
  auto why = [](SnapshotStatus s, const std::string& reason, bool by_process) {
    CaptureRecord c = failed_capture(s, reason, by_process);
    return capture_failure_reason(CollectionOutcome::kFailed, &c).value_or("-");
  };
  using S = SnapshotStatus;
  EXPECT_EQ(why(S::kFailed, "capture process killed after 3.0 s (hard deadline 3.0 s): no result", true), "timeout");
  EXPECT_EQ(why(S::kFailed, "capture process exceeded its CPU time cap of 4 s", true), "timeout");
  EXPECT_EQ(why(S::kFailed, "capture process stopped after 2.5 s: target read stalled: process_vm_readv", true),
            "timeout");
  EXPECT_EQ(why(S::kFailed, "capture process died: SIGSEGV", true), "crashed");
  EXPECT_EQ(why(S::kFailed, "capture process wrote an invalid result: bad frame", true), "crashed");
  EXPECT_EQ(why(S::kFailed, "capture process exceeded its 1024 MiB memory cap", true), "memory_cap");
  EXPECT_EQ(why(S::kFailed, "target exited during the capture (capture process died: SIGKILL)", true), "target_exited");
  EXPECT_EQ(why(S::kUnavailable, "no supported runtime", false), "unavailable");
  EXPECT_EQ(why(S::kFailed, "no mbuckets symbol", false), "unavailable");
  // A snapshot with evidence is no failure; nor is no capture tried.
  CaptureRecord partial = failed_capture(S::kPartial, "budget spent", false);
  EXPECT_FALSE(capture_failure_reason(CollectionOutcome::kCollected, &partial));
  EXPECT_FALSE(capture_failure_reason(CollectionOutcome::kNoVictim, nullptr));
  EXPECT_EQ(capture_failure_reason(CollectionOutcome::kVictimGone, nullptr).value_or("-"), "target_exited");
}

TEST(IncidentMetrics, OneRecordCountsItsIncidentKillLeadAndCapture) {
  Incident inc;
  inc.trigger.type = "memcg_pressure";
  inc.outcome = CollectionOutcome::kCollected;
  inc.capture = CaptureRecord{};
  inc.capture->result.language = "go";
  inc.capture->result.snapshot.status = SnapshotStatus::kComplete;
  inc.timeline.collection_start = 1'000'000'000;
  inc.timeline.snapshot_complete = 1'250'000'000;  // 0.25 s capture
  inc.timeline.oom_kill = 3'250'000'000;           // 2 s lead
  inc.oom_kill = OomKillInfo{};
  EXPECT_EQ(oom_kill_snapshot_label(inc), "before_kill");
  MetricsRegistry m("v");
  count_incident(m, inc);
  const std::string text = m.render();
  for (const char* line : {"oomsnap_incidents_total{trigger=\"memcg_pressure\",status=\"collected\"} 1\n",
                           "oomsnap_oom_kills_total{snapshot=\"before_kill\"} 1\n",
                           "oomsnap_capture_lead_seconds_sum 2\n",
                           "oomsnap_capture_duration_seconds_bucket{language=\"go\",le=\"0.25\"} 1\n",
                           "oomsnap_capture_duration_seconds_sum{language=\"go\"} 0.25\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
  EXPECT_EQ(text.find("oomsnap_capture_failures_total{"), std::string::npos) << text;

  inc.timeline.oom_kill = 1'100'000'000;  // during the capture
  EXPECT_EQ(oom_kill_snapshot_label(inc), "after_kill");
  inc.capture.reset();
  inc.outcome = CollectionOutcome::kNotAttempted;
  EXPECT_EQ(oom_kill_snapshot_label(inc), "none");
  inc.trigger.type = "something_new";  // never a free-form label
  MetricsRegistry m2("v");
  count_incident(m2, inc);
  EXPECT_NE(m2.render().find("oomsnap_incidents_total{trigger=\"other\",status=\"not_attempted\"} 1\n"),
            std::string::npos);
}

// The last incident's charge: one set of gauges per container, replaced by
// its next incident, for at most kMaxChargedContainers containers (the
// oldest go), labels cut: the series stay bounded whatever the node runs.
TEST(Metrics, ContainerChargesAreBoundedAndReplaced) {
  MetricsRegistry m("v");
  auto charge = [](const std::string& pod, uint64_t usage) {
    ContainerCharge c;
    c.pod_namespace = "ns";
    c.pod = pod;
    c.container = "app";
    c.usage_bytes = usage;
    c.kinds = {{"native", usage}};
    c.largest_kind = "native";
    return c;
  };
  for (int i = 0; i < 40; ++i) m.publish_charge(charge("pod-" + std::to_string(i), 100));
  m.publish_charge(charge("pod-39", 200));  // the same container again: replaced
  m.publish_charge(charge(std::string(1000, 'p'), 300));
  const std::string text = m.render();
  size_t series = 0;
  for (size_t at = 0; (at = text.find("\noomsnap_last_incident_usage_bytes{", at)) != std::string::npos; ++at) ++series;
  EXPECT_EQ(series, MetricsRegistry::kMaxChargedContainers);
  EXPECT_EQ(text.find("pod=\"pod-8\""), std::string::npos) << "the oldest containers go first";
  EXPECT_NE(text.find("oomsnap_last_incident_usage_bytes{namespace=\"ns\",pod=\"pod-39\",container=\"app\"} 200\n"),
            std::string::npos);
  EXPECT_EQ(text.find("pod=\"pod-39\",container=\"app\"} 100\n"), std::string::npos);
  EXPECT_NE(text.find("pod=\"" + std::string(MetricsRegistry::kMaxLabelBytes, 'p') + "\""), std::string::npos);
  EXPECT_NE(text.find("oomsnap_incident_largest_kind_total{kind=\"native\"} 42\n"), std::string::npos);
}

// An incident's explained charge as its container's gauges: labelled by the
// pod's names, or by the cgroup's leaf outside Kubernetes; none without a
// collection that looked at the container.
TEST(IncidentMetrics, ContainerChargeFromTheExplainedRecord) {
  Incident inc;
  inc.trigger.type = "memcg_pressure";
  inc.container.cgroup_path = "/system.slice/ingest.service";
  EXPECT_FALSE(container_charge(inc, 1));
  inc.container.memory_stat = parse_memory_stat(2, "anon 100\nfile 300\nshmem 200\nkernel 10\n", std::nullopt, 0);
  inc.container.memory_stat->usage_bytes = 400;
  auto c = container_charge(inc, 1700000000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->container, "ingest.service");
  EXPECT_EQ(c->pod, "");
  EXPECT_EQ(c->usage_bytes, 400u);
  EXPECT_EQ(c->largest_kind, "tmpfs");
  const std::vector<std::pair<std::string, uint64_t>> want = {
      {"heap", 0},  {"heap_free", 0}, {"runtime", 0}, {"stacks", 0},     {"native", 0},  {"anon", 0},
      {"file", 0},  {"shmem", 0},     {"tmpfs", 200}, {"page_cache", 100}, {"kernel", 10}, {"unexplained", 90}};
  EXPECT_EQ(c->kinds, want);
  inc.container.pod = PodIdentity{"shop", "cart-1", "cart"};
  MetricsRegistry m("v");
  count_incident(m, inc);
  EXPECT_NE(m.render().find("oomsnap_last_incident_memory_bytes{namespace=\"shop\",pod=\"cart-1\",container=\"cart\","
                            "kind=\"tmpfs\"} 200\n"),
            std::string::npos)
      << m.render();
}
