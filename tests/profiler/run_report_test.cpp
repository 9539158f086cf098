// RunReport: report.json's one writer and one reader. A report goes through to_json and
// from_json unchanged; the committed sample runs read back to the values they hold and write
// back to the same text; a newer schema and a wrongly typed field are refused with one line
// naming them.
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/model_config.h"
#include "profiler/run_report.h"
#include "tests/profiler/error_of.h"

namespace p = napkin::profiler;
namespace fs = std::filesystem;
using napkin::profiler::test::error_of;
using nlohmann::json;

namespace {

const fs::path kTraces = fs::path(NAPKIN_SOURCE_DIR) / "traces";

std::string slurp(const fs::path& f) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// A report with every optional section and field set, each to a value of its own.
p::RunReport full_report() {
    p::RunReport r;
    r.model = napkin::preset_or_throw("tiny");
    r.run = {.steps = 20,
             .micro_batch = 4,
             .seq_len = 32,
             .grad_accum = 2,
             .precision = "bf16-amp",
             .optimizer = "adamw",
             .checkpointing = "full",
             .attention = "flash",
             .finetune = "qlora",
             .lora_rank = 16,
             .lora_alpha = 32.0,
             .lr = 3e-4,
             .seed = 7,
             .first_step = 5,
             .checkpoint = "runs/a/checkpoints/step-00000020",
             .data = "tokens.bin",
             .device = "cuda: NVIDIA H200",
             .data_entropy_nats = 1.25,
             .offload = "optimizer",
             .fp8_amax_history = 4,
             .loss_chunk = 512,
             .cuda_graph = false,
             .cuda_graph_off = "--cuda-graph off",
             .attention_candidates = "f64-wgmma-pp,b64-wgmma-kpp@1,b64-wgmma-qpp@2"};
    r.init = p::InitReport{"gpt2_124M.bin", "llm.c", "mmap", 148, 497759232, 0.42, 1 << 20, true};
    r.predicted.bytes = {1e6, 2e6, 3e6, 4e6, 5e6, 6e6};
    r.predicted.data = 8192;
    r.predicted.model_flops_per_step = 1.5e12;
    r.predicted.hardware_flops_per_step = 2e12;
    r.predicted.closed_form = p::ClosedForm{1.4e12, 9e6, 16, 4.5e6};
    r.predicted.host_memory = p::HostStateBytes<double>{1e6, 1e6, 2e6};
    r.predicted.paged_optimizer = p::PagedPrediction{2e6, 3.5e6, 4e6, 1.6e-4, true};
    p::TimePrediction time;
    time.profile = "profile h200.json (shipped)";
    time.step_seconds = 0.21;
    time.tokens_per_s = 39000;
    time.mfu = 0.45;
    time.seconds_by_bucket = {{"gemm", 0.15}, {"attention", 0.03}, {"overhead", 0.01}};
    time.communication_seconds = 0.02;
    time.communication_exposed_seconds = 0.005;
    time.ops = {{"attn.qkv", "gemm", 12, 0.011}, {"attn.core backward", "attention", 12, 0.02}};
    time.notes = {"no fp8 GEMM table: bf16's at 2x"};
    r.predicted.time = time;
    for (std::size_t c = 0; c < napkin::kMemCategoryCount; ++c)
        r.measured.peak_bytes[c] = static_cast<std::int64_t>(1000 * (c + 1));
    r.measured.peak_total_bytes = 36000;
    r.measured.peak_rss_bytes = 3e8;
    r.measured.seconds = 2.5;
    r.measured.tokens_per_s = 2048;
    r.measured.model_flops_per_s = 6e11;
    r.measured.mfu = 0.4;
    r.measured.hardware_flops_per_s = 8e11;
    r.measured.hfu = 0.5;
    r.measured.peak_flops_per_s = 9.895e14;
    r.measured.peak_source = "h200 datasheet, bf16 dense";
    r.measured.host_peak_bytes = p::HostStateBytes<std::int64_t>{1000000, 1000000, 2000000};
    r.measured.device_memory = p::DeviceMemory{3ull << 30, 6ull << 30, 150000000000};
    r.measured.paged_optimizer = p::PagedMeasurement{2000000, 2e6, 2e6, 2.5e-4};
    for (int s = 0; s < 3; ++s) {
        r.steps.push_back({s, 5.5 - s, 1e-4, 0.9, 65536, s == 1, 0.2, 4096, 0.4, 0.5, 0.19,
                           p::StepTraffic{100, 200, 300, 400, 0.01 * s}});
    }
    p::ProfileReport prof;
    prof.steps_profiled = 2;
    prof.roofline = {9.895e14, 4.8e12};
    prof.steps = {{"step 1", 0.2, 0.19, 0.95, 0.18, 0.05}, {"step 2", 0.21, 0.2, 0.95, 0.19, 0.05}};
    prof.ops = {
        {"attn.qkv", "op", 12, 0.01, 0.002, 1e10, 1e8, 1e12, 1e10, 0.05, 24, 0.009, 1.1e12}};
    prof.kernels = {{"matmul_forward", "kernel", 48, 0.02, 0.004, 2e10, 2e8, 1e12, 1e10, 0.1,
                     std::nullopt, std::nullopt, std::nullopt}};
    prof.gpu_activity = p::GpuActivitySummary{std::nullopt, 8031, 812, 1364, 0, 0, 0, 0};
    r.profile = prof;
    p::CommunicationReport c;
    c.backend = "nccl";
    c.host = "node7";
    c.clock_origin_ns = 123456789;
    c.rank = 1;
    c.local_rank = 1;
    c.world = 4;
    c.zero = 3;
    c.measured_per_step = {10, 20, 10, 10, 30, 40};
    c.measured_total.by_op["all_gather"] = {4, 1, 2, 3, 5, 6};
    c.measured_total.by_op["reduce_scatter"] = {7, 8, 9, 10, 11, 12};
    c.measured_total = {c.measured_total.by_op, 1000, 2000, 0.5};
    c.predicted_per_step = {
        10.0, 20.0, 15.0, 0.0, {{"parameters", "all_gather", "bf16", 4, 1e5, 2e5, 2e5}}};
    r.communication = c;
    return r;
}

}  // namespace

TEST(RunReport, RoundTripsThroughJson) {
    const p::RunReport full = full_report();
    EXPECT_EQ(json(full).get<p::RunReport>(), full);
    EXPECT_EQ(p::parse_run_report(p::run_report_text(full)), full);
    // Every optional left out: the smallest report napkin writes.
    p::RunReport bare = full;
    bare.run.finetune = "full";
    bare.run.lora_rank.reset();
    bare.run.lora_alpha.reset();
    bare.run.data_entropy_nats.reset();
    bare.run.offload.reset();
    bare.run.fp8_amax_history.reset();
    bare.run.loss_chunk.reset();
    bare.init.reset();
    bare.predicted = {bare.predicted.bytes, 1e9,          std::nullopt, std::nullopt,
                      std::nullopt,         std::nullopt, std::nullopt, std::nullopt};
    bare.measured.peak_bytes[static_cast<std::size_t>(napkin::MemCategory::communication)].reset();
    bare.measured.hardware_flops_per_s.reset();
    bare.measured.hfu.reset();
    bare.measured.peak_source.reset();
    bare.measured.host_peak_bytes.reset();
    bare.measured.device_memory.reset();
    bare.measured.paged_optimizer.reset();
    bare.measured.sgemm_peak_flops_per_s = 1e11;
    bare.steps.resize(1);
    bare.steps[0].device_seconds.reset();
    bare.steps[0].comm.reset();
    bare.profile.reset();
    bare.communication.reset();
    const json j = bare;
    EXPECT_TRUE(j["init"].is_null());
    EXPECT_TRUE(j["profile"].is_null());
    EXPECT_TRUE(j["run"]["lora_rank"].is_null());
    EXPECT_FALSE(j.contains("communication"));
    EXPECT_FALSE(j["run"].contains("offload"));
    EXPECT_FALSE(j["run"].contains("fp8_amax_history"));  // not fp8-amp, or an earlier report
    EXPECT_FALSE(j["run"].contains("loss_chunk"));        // an earlier report
    EXPECT_FALSE(j["predicted"].contains("paged_optimizer"));
    EXPECT_FALSE(j["measured"].contains("paged_optimizer"));
    EXPECT_EQ(j.get<p::RunReport>(), bare);
}

// The committed runs (traces/README.md) read back to what they hold, and write back to the same
// text: field names, number types (1.0 against 1) and values as napkin train wrote them.
TEST(RunReport, ReadsTheSampleRuns) {
    const p::RunReport z3 =
        p::parse_run_report(slurp(kTraces / "cpu-tiny-qlora-zero3/report.json"));
    EXPECT_EQ(z3.schema, "napkin-train-report/1");
    EXPECT_EQ(z3.model.name, "tiny");
    EXPECT_EQ(z3.run.finetune, "qlora");
    EXPECT_EQ(z3.run.lora_rank, 16);
    EXPECT_EQ(z3.run.precision, "bf16-amp");
    ASSERT_EQ(z3.steps.size(), 3u);
    EXPECT_EQ(z3.steps[0].loss, 5.567975997924805);
    ASSERT_TRUE(z3.steps[0].comm.has_value());
    EXPECT_EQ(z3.steps[0].comm->state_sent_bytes, 578432u);
    EXPECT_EQ(z3.measured.peak_bytes[static_cast<std::size_t>(napkin::MemCategory::communication)],
              252224);
    EXPECT_EQ(z3.predicted.bytes[static_cast<std::size_t>(napkin::MemCategory::activations)],
              4820992.0);
    ASSERT_TRUE(z3.communication.has_value());
    EXPECT_EQ(z3.communication->world, 2);
    EXPECT_EQ(z3.communication->zero, 3);
    EXPECT_EQ(z3.communication->backend, "mpi (Open MPI v4.1.4)");
    ASSERT_TRUE(z3.profile.has_value());
    EXPECT_EQ(z3.profile->steps_profiled, 3u);
    EXPECT_FALSE(z3.profile->gpu_activity.has_value());

    const p::RunReport gpu = p::parse_run_report(slurp(kTraces / "h200-gpt2/report.json"));
    EXPECT_EQ(gpu.run.device, "cuda: NVIDIA H200");
    EXPECT_EQ(gpu.steps[0].device_seconds, 0.21050125122070312);
    ASSERT_TRUE(gpu.measured.device_memory.has_value());
    EXPECT_EQ(gpu.measured.device_memory->total_bytes, 150109880320u);
    EXPECT_FALSE(gpu.measured.sgemm_peak_flops_per_s.has_value());
    EXPECT_EQ(gpu.measured.mfu_peak_flops_per_s(), 989.5e12);
    ASSERT_TRUE(gpu.profile && gpu.profile->gpu_activity);
    EXPECT_EQ(gpu.profile->gpu_activity->kernels, 812u);

    for (const char* run : {"cpu-tiny", "cpu-tiny-qlora", "cpu-tiny-qlora-zero3",
                            "cpu-tiny-qlora-zero3/rank1", "h200-gpt2"}) {
        const std::string text = slurp(kTraces / run / "report.json");
        EXPECT_EQ(p::run_report_text(p::parse_run_report(text)), text) << run;
    }
}

TEST(RunReport, ANewerSchemaIsRefusedByName) {
    json j = full_report();
    j["schema"] = "napkin-train-report/3";
    EXPECT_EQ(error_of([&] { j.get<p::RunReport>(); }),
              "schema: expected napkin-train-report/1-2, got \"napkin-train-report/3\" (newer "
              "than this napkin reads: update napkin)");
    for (const char* bad :
         {"napkin-train-report/0", "napkin-train-report/x", "napkin-train-report/"}) {
        j["schema"] = bad;
        EXPECT_EQ(error_of([&] { j.get<p::RunReport>(); }),
                  "schema: expected napkin-train-report/1-2, got \"" + std::string(bad) + "\"");
    }
    j["schema"] = "napkin-trace/1";
    EXPECT_EQ(error_of([&] { j.get<p::RunReport>(); }),
              "schema: expected napkin-train-report/1-2, got \"napkin-trace/1\"");
    j.erase("schema");
    EXPECT_EQ(error_of([&] { j.get<p::RunReport>(); }),
              "schema: expected napkin-train-report/1-2, got nothing");
}

// Each problem is one line naming the field by its path in the file.
TEST(RunReport, AWrongOrMissingFieldIsNamed) {
    const json good = full_report();
    auto error_after = [&](auto edit) {
        json j = good;
        edit(j);
        const std::string e = error_of([&] { j.get<p::RunReport>(); });
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
        return e;
    };
    EXPECT_EQ(error_after([](json& j) { j["measured"]["tokens_per_s"] = "fast"; }),
              "measured.tokens_per_s: expected a number, got \"fast\"");
    EXPECT_EQ(error_after([](json& j) { j["steps"][1]["loss"] = nullptr; }),
              "steps[1].loss: expected a number, got null");
    EXPECT_EQ(error_after([](json& j) { j["run"]["steps"] = 2.5; }),
              "run.steps: expected an integer, got 2.5");
    EXPECT_EQ(error_after([](json& j) { j["run"]["seed"] = -1; }),
              "run.seed: expected an integer >= 0, got -1");
    EXPECT_EQ(error_after([](json& j) { j["steps"][0]["skipped"] = 0; }),
              "steps[0].skipped: expected true or false, got 0");
    EXPECT_EQ(error_after([](json& j) { j["run"]["device"] = 3; }),
              "run.device: expected a string, got 3");
    EXPECT_EQ(error_after([](json& j) { j["profile"]["ops"] = json::object(); }),
              "profile.ops: expected an array, got an object");
    EXPECT_EQ(error_after([](json& j) { j["predicted"] = 1; }),
              "predicted: expected an object, got 1");
    EXPECT_EQ(error_after([](json& j) { j["steps"] = json::array(); }),
              "steps: expected at least one step, got an array");
    EXPECT_EQ(error_after([](json& j) { j["measured"]["peak_bytes"].erase("gradients"); }),
              "measured.peak_bytes.gradients: expected an integer, got nothing");
    EXPECT_EQ(error_after([](json& j) {
                  j["communication"]["measured_total"]["by_op"]["all_gather"]["calls"] = "x";
              }),
              "communication.measured_total.by_op.all_gather.calls: expected an integer >= 0, "
              "got \"x\"");
    EXPECT_EQ(error_after([](json& j) { j["communication"]["rank"] = 4; }),
              "communication.rank: expected a rank below the world size 4, got 4");
    EXPECT_EQ(error_after([](json& j) { j["communication"]["world"] = 0; }),
              "communication.world: expected a positive integer, got 0");
    EXPECT_EQ(error_after([](json& j) { j["run"]["lora_rank"] = nullptr; }),
              "run.lora_rank: expected an integer, got null");
    EXPECT_EQ(error_after([](json& j) { j["model"]["n_layers"] = 0; }),
              "model.n_layers: expected an integer in [1, 1000000], got 0");
    EXPECT_EQ(
        error_after([](json& j) { j["predicted"]["time"]["ops"][1]["seconds_per_step"] = "x"; }),
        "predicted.time.ops[1].seconds_per_step: expected a number, got \"x\"");
    EXPECT_EQ(
        error_after([](json& j) { j["predicted"]["time"]["seconds_by_bucket"]["gemm"] = "x"; }),
        "predicted.time.seconds_by_bucket.gemm: expected a number, got \"x\"");
    EXPECT_EQ(error_after([](json& j) { j["predicted"]["time"]["notes"] = {1}; }),
              "predicted.time.notes[0]: expected a string, got 1");
    EXPECT_EQ(error_after([](json& j) { j = json::array(); }), "expected an object, got an array");
}

// Fields added within schema /1 may be absent: reports written before them still read.
TEST(RunReport, EarlierReportsOfTheSameSchemaRead) {
    json j = json::parse(slurp(kTraces / "cpu-tiny/report.json"));
    j["run"].erase("finetune");
    j["run"].erase("lora_rank");
    j["run"].erase("lora_alpha");
    j["predicted"].erase("closed_form");
    j["predicted"].erase("data");
    j["measured"].erase("hfu");
    j["measured"].erase("peak_flops_per_s");
    j["measured"].erase("peak_source");
    j["measured"]["peak_bytes"].erase("communication");
    for (json& o : j["profile"]["ops"])
        o.erase("device_seconds_per_step");
    const p::RunReport r = j.get<p::RunReport>();
    EXPECT_EQ(r.run.finetune, "full");
    EXPECT_FALSE(r.predicted.closed_form.has_value());
    EXPECT_FALSE(r.predicted.data.has_value());
    EXPECT_FALSE(r.measured.hfu.has_value());
    EXPECT_EQ(r.measured.mfu_peak_flops_per_s(), *r.measured.sgemm_peak_flops_per_s);
    j["measured"].erase("sgemm_peak_flops_per_s");
    EXPECT_EQ(
        error_of([&] { j.get<p::RunReport>(); }),
        "measured.peak_flops_per_s: expected a number (or sgemm_peak_flops_per_s), got nothing");
}

// Version 1 (before predicted.time) still reads, and writes back under its own schema; a new
// report is version 2, with or without the time prediction (a GPU the hardware table lacks).
TEST(RunReport, VersionOneReadsAndVersionTwoIsWritten) {
    const p::RunReport v1 = p::parse_run_report(slurp(kTraces / "cpu-tiny/report.json"));
    EXPECT_EQ(v1.schema, "napkin-train-report/1");
    EXPECT_FALSE(v1.predicted.time.has_value());
    EXPECT_EQ(json(v1)["schema"], "napkin-train-report/1");
    p::RunReport fresh = full_report();
    EXPECT_EQ(json(fresh)["schema"], "napkin-train-report/2");
    fresh.predicted.time.reset();
    const json j = fresh;
    EXPECT_FALSE(j["predicted"].contains("time"));
    EXPECT_EQ(j.get<p::RunReport>(), fresh);
}

TEST(RunReport, MalformedAndDeepJsonIsOneLine) {
    EXPECT_EQ(error_of([] { p::parse_run_report("{\"schema\": "); }).rfind("not valid JSON (", 0),
              0u);
    // A number too large for a double is nlohmann's out_of_range, not its parse_error: still
    // one line, never an escaped exception (found by the run_data fuzzer).
    EXPECT_EQ(error_of([] {
                  p::parse_run_report("{\"schema\": 0.36017e74180997086}");
              }).rfind("not valid JSON (number overflow", 0),
              0u);
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    EXPECT_EQ(error_of([&] { p::parse_run_report("{\"run\": " + deep + "}"); }),
              "JSON nested deeper than 64 levels");
}

// --detect-anomaly's record: round-trips, and a run it stopped in its first step (no steps)
// still reads; without it, no steps is refused as before. A bad direction is named.
TEST(RunReport, AnAnomalyRoundTripsEvenWithoutSteps) {
    p::RunReport r = full_report();
    p::AnomalyReport a;
    a.step = 0;
    a.op = "attn.proj";
    a.layer = 3;
    a.direction = "backward";
    a.tensor = "d attn.out";
    a.shape = {4, 64, 768};
    a.nan = 12;
    a.input_max_finite = 3.4e38;
    a.bad_input = p::AnomalyReport::BadInput{"attn.proj.weight", {768, 768}, 1, 0};
    r.anomaly = a;
    r.steps.clear();
    EXPECT_EQ(p::parse_run_report(p::run_report_text(r)), r);
    r.anomaly->layer.reset();
    r.anomaly->input_max_finite.reset();
    r.anomaly->bad_input.reset();
    const json j = r;
    EXPECT_TRUE(j["anomaly"]["layer"].is_null());
    EXPECT_EQ(j.get<p::RunReport>(), r);
    json bad = j;
    bad["anomaly"]["direction"] = "sideways";
    EXPECT_EQ(error_of([&] { bad.get<p::RunReport>(); }),
              "anomaly.direction: expected \"forward\" or \"backward\", got \"sideways\"");
    EXPECT_FALSE(json(full_report()).contains("anomaly"));
}

// Non-finite gradients' record: the same, and a negative step is named.
TEST(RunReport, ADivergedRunRoundTripsEvenWithoutSteps) {
    p::RunReport r = full_report();
    r.diverged = p::DivergedReport{7};
    EXPECT_EQ(p::parse_run_report(p::run_report_text(r)), r);
    r.steps.clear();
    r.diverged->step = 0;
    const json j = r;
    EXPECT_EQ(j["diverged"], json({{"step", 0}}));
    EXPECT_EQ(j.get<p::RunReport>(), r);
    json bad = j;
    bad["diverged"]["step"] = -1;
    EXPECT_EQ(error_of([&] { bad.get<p::RunReport>(); }),
              "diverged.step: expected an integer >= 0, got -1");
    bad.erase("diverged");
    EXPECT_EQ(error_of([&] { bad.get<p::RunReport>(); }),
              "steps: expected at least one step, got an array");
    EXPECT_FALSE(json(full_report()).contains("diverged"));
}
