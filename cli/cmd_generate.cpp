// napkin generate: runs a GPT forward with a KV cache (core/engine/generate.h) from a prompt,
// greedy or sampled, and writes RUN_DIR/generate.json with the estimator's prediction for the
// run (estimator/inference.h) beside the measured memory per category and time per token
// (docs/INFERENCE.md, "Measured: napkin generate").
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/generate_report.h"
#include "cli/timing.h"
#include "cli/train_out_dir.h"
#include "core/bounded_read.h"
#include "core/check.h"
#include "core/config_json.h"
#include "core/durable_file.h"
#include "core/engine/engine_device.h"
#include "core/engine/generate.h"
#include "core/engine/weights_import.h"
#include "profiler/chrome_trace_writer.h"
#include "profiler/event.h"
#include "profiler/memory_snapshot.h"

namespace napkin::cli {

namespace {

namespace fs = std::filesystem;

struct GenerateFlags {
    std::string model = "tiny", config, init_from, prompt_tokens, prompt_file, out;
    std::string precision = "fp32", device = "cpu", flash_decoding = "on";
    std::int64_t synthetic = 0, batch = 1, max_new_tokens = 16;
    double temperature = 0;
    std::uint64_t seed = 1337;
    bool json = false, profile = false;
};

// Token ids separated by commas or white space; `what` names the flag or file in errors.
std::vector<std::int32_t> parse_ids(const std::string& text, const std::string& what) {
    std::vector<std::int32_t> ids;
    std::string word;
    std::istringstream in(text);
    while (std::getline(in, word, ',')) {
        std::istringstream words(word);
        std::string w;
        while (words >> w) {
            std::size_t used = 0;
            long long v = -1;
            try {
                v = std::stoll(w, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != w.size() || v < 0 || v > INT32_MAX)
                throw UsageError(what + ": '" + w + "' is not a token id (a non-negative integer)");
            ids.push_back(static_cast<std::int32_t>(v));
        }
    }
    return ids;
}

// The prompts, (B, Tp): one given prompt for every sequence, a file's lines (one prompt each, 1
// or B of them, of one length), or --synthetic-prompt's random ids.
std::vector<std::int32_t> read_prompts(const GenerateFlags& f, const ModelConfig& cfg,
                                       GenerateOptions& o) {
    const int given = !f.prompt_tokens.empty() + !f.prompt_file.empty() + (f.synthetic > 0);
    if (given != 1) {
        throw UsageError("give one prompt: --prompt-tokens, --prompt-file or --synthetic-prompt");
    }
    std::vector<std::vector<std::int32_t>> rows;
    if (f.synthetic > 0) {
        o.prompt = "synthetic";
        std::mt19937_64 rng(f.seed);
        std::uniform_int_distribution<std::int32_t> id(
            0, static_cast<std::int32_t>(cfg.vocab_size - 1));
        for (std::int64_t b = 0; b < o.batch; ++b) {
            auto& r = rows.emplace_back(static_cast<std::size_t>(f.synthetic));
            for (auto& t : r)
                t = id(rng);
        }
    } else if (!f.prompt_tokens.empty()) {
        rows.push_back(parse_ids(f.prompt_tokens, "--prompt-tokens"));
    } else {
        o.prompt = "file";
        // Bounded and never blocking (core/bounded_read.h): a FIFO or /dev/zero is refused.
        std::string text;
        if (std::string err = read_bounded_file(f.prompt_file, kMaxPromptBytes, text); !err.empty())
            throw InputError("--prompt-file " + f.prompt_file + ": " + err);
        std::istringstream in(text);
        for (std::string line; std::getline(in, line);) {
            auto ids = parse_ids(line, "--prompt-file " + f.prompt_file);
            if (!ids.empty()) rows.push_back(std::move(ids));
        }
    }
    if (rows.empty() || rows[0].empty()) throw UsageError("the prompt holds no token ids");
    if (rows.size() != 1 && static_cast<std::int64_t>(rows.size()) != o.batch) {
        throw UsageError("--prompt-file: " + std::to_string(rows.size()) + " prompts for --batch " +
                         std::to_string(o.batch) + " (give 1 or B)");
    }
    std::vector<std::int32_t> prompts;
    for (std::int64_t b = 0; b < o.batch; ++b) {
        const auto& r = rows[rows.size() == 1 ? 0 : static_cast<std::size_t>(b)];
        if (r.size() != rows[0].size())
            throw UsageError("--prompt-file: the prompts must have one length");
        for (std::int32_t t : r) {
            if (t >= cfg.vocab_size) {
                throw UsageError("the prompt: token id " + std::to_string(t) +
                                 " is outside the vocabulary [0, " +
                                 std::to_string(cfg.vocab_size) + ")");
            }
        }
        prompts.insert(prompts.end(), r.begin(), r.end());
    }
    o.prompt_len = static_cast<std::int64_t>(rows[0].size());
    return prompts;
}

// --init-from: a file, or a run folder's checkpoint.safetensors.
std::string weights_path(const std::string& given) {
    fs::path p(given);
    if (fs::is_directory(p)) p /= "checkpoint.safetensors";
    if (!fs::exists(p)) throw InputError("--init-from " + given + ": no such file or run folder");
    return p.string();
}

GenerateOptions options(const GenerateFlags& f, const CLI::App& cmd) {
    GenerateOptions o;
    if (cmd.count("--config") > 0 && cmd.count("--model") > 0)
        throw UsageError("give one model: --model or --config");
    if (!f.init_from.empty()) {
        if (cmd.count("--model") > 0 || cmd.count("--config") > 0)
            throw UsageError(
                "--init-from: the weights' file gives the model; drop --model/--config");
        o.weights = weights_path(f.init_from);
        o.model = config_from_weights(o.weights);
    } else {
        o.model =
            cmd.count("--config") > 0 ? load_model_config(f.config) : preset_or_throw(f.model);
    }
    if (f.precision != "fp32" && f.precision != "bf16")
        throw UsageError("--precision: unknown value '" + f.precision + "' (expected fp32|bf16)");
    o.storage = f.precision == "bf16" ? DType::bf16 : DType::f32;
    if (f.device != "cpu" && f.device != "cuda")
        throw UsageError("--device: unknown value '" + f.device + "' (expected cpu|cuda)");
    o.device = f.device == "cuda" ? DeviceKind::cuda : DeviceKind::cpu;
    if (f.flash_decoding != "on" && f.flash_decoding != "off") {
        throw UsageError("--flash-decoding: unknown value '" + f.flash_decoding +
                         "' (expected on|off)");
    }
    // A no-op on the CPU: its engine has one attention kernel (docs/INFERENCE.md).
    o.flash_decoding = o.device == DeviceKind::cuda && f.flash_decoding == "on";
    if (f.batch <= 0)
        throw UsageError("--batch: must be a positive integer (got " + std::to_string(f.batch) +
                         ")");
    if (f.max_new_tokens <= 0) {
        throw UsageError("--max-new-tokens: must be a positive integer (got " +
                         std::to_string(f.max_new_tokens) + ")");
    }
    if (!(f.temperature >= 0) || !std::isfinite(f.temperature))
        throw UsageError("--temperature: must be 0 (greedy) or positive");
    o.batch = f.batch;
    o.gen_len = f.max_new_tokens;
    o.temperature = f.temperature;
    o.seed = f.seed;
    return o;
}

// The next token of each sequence from its logits (B, V): the argmax (the lowest id on a tie),
// or a draw from softmax(logits / T).
void pick_tokens(const std::vector<float>& logits, std::int64_t V, double temperature,
                 std::mt19937_64& rng, std::vector<std::int32_t>& out) {
    const std::size_t B = out.size();
    std::vector<double> p(static_cast<std::size_t>(V));
    for (std::size_t b = 0; b < B; ++b) {
        const float* row = logits.data() + b * static_cast<std::size_t>(V);
        const auto best = std::max_element(row, row + V) - row;
        if (temperature == 0) {
            out[b] = static_cast<std::int32_t>(best);
            continue;
        }
        double sum = 0;
        for (std::int64_t v = 0; v < V; ++v)
            sum += p[static_cast<std::size_t>(v)] = std::exp((row[v] - row[best]) / temperature);
        double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
        std::int64_t v = 0;
        while (v + 1 < V && (u -= p[static_cast<std::size_t>(v)]) > 0)
            ++v;
        out[b] = static_cast<std::int32_t>(v);
    }
}

// The prefill, then G - 1 decode steps, each timed whole (its logits read back, so the device
// has finished). A progress line to stderr every 5 s on long runs.
void run_generation(Generator& gen, const GenerateOptions& o, std::vector<std::int32_t> prompts,
                    GenerateMeasurement& m) {
    std::mt19937_64 rng(o.seed);
    std::vector<float> logits;
    std::vector<std::int32_t> next(static_cast<std::size_t>(o.batch));
    m.tokens.assign(static_cast<std::size_t>(o.batch), {});
    const auto start = std::chrono::steady_clock::now();
    auto t0 = start;
    gen.prefill(prompts.data(), logits);
    m.prefill_seconds = seconds_since(t0);
    double last_progress = 0;
    for (std::int64_t j = 0;; ++j) {
        pick_tokens(logits, o.model.vocab_size, o.temperature, rng, next);
        for (std::size_t b = 0; b < next.size(); ++b)
            m.tokens[b].push_back(next[b]);
        if (j + 1 == o.gen_len) break;
        t0 = std::chrono::steady_clock::now();
        gen.decode(next.data(), logits);
        m.decode_seconds.push_back(seconds_since(t0));
        if (seconds_since(start) - last_progress > 5) {
            last_progress = seconds_since(start);
            std::fprintf(stderr, "decode step %lld of %lld\n", static_cast<long long>(j + 1),
                         static_cast<long long>(o.gen_len - 1));
        }
    }
}

// --profile: trace.json (prefill and each decode step as spans, their ops and kernels, memory
// counters) and memory.json in the run folder.
void write_profile(profiler::Recorder& rec, const AccountingAllocator& alloc, const fs::path& dir) {
    profiler::ChromeTraceWriter trace(dir / "trace.json");
    if (!trace.ok()) throw InputError(trace.error());
    trace.write(rec.take());
    for (const profiler::CounterEvent& c : profiler::memory_counter_events(alloc.events()))
        trace.write_counter(c);
    trace.write_tracks(rec.tracks());
    trace.set_other_data("dropped_events", rec.dropped());
    if (const profiler::WriteResult r = trace.close(); !r) throw InputError(r.error);
    if (const profiler::WriteResult r = profiler::write_memory_snapshot(alloc, dir / "memory.json");
        !r)
        throw InputError(r.error);
}

void generate(const GenerateFlags& f, const CLI::App& cmd) {
    GenerateOptions o = options(f, cmd);
    const std::vector<std::int32_t> prompts = read_prompts(f, o.model, o);
    std::optional<OutDir> out;
    if (!f.out.empty()) {
        if (fs::exists(fs::path(f.out) / "generate.json"))
            throw UsageError("--out " + f.out + ": already holds a generate.json");
        out.emplace(f.out);
    } else if (f.profile) {
        throw UsageError("--profile: needs a run folder (--out DIR) for trace.json");
    }
    std::unique_ptr<EngineDevice> device;
    HostMemory host;
    if (o.device == DeviceKind::cuda) {
        device = open_engine_device(DeviceKind::cuda);
        o.device_name = device->name();
    }
    AccountingAllocator alloc(device != nullptr ? device->memory() : host);
    alloc.set_record_events(f.profile);
    std::unique_ptr<profiler::Recorder> rec;
    if (f.profile) {
        rec = std::make_unique<profiler::Recorder>(profiler::Recorder::kDefaultCapacity,
                                                   alloc.start());
    }
    const GenerateShape shape{o.batch, o.prompt_len, o.gen_len, o.flash_decoding};
    std::unique_ptr<Generator> gen =
        Generator::create(o.model, o.storage, shape, alloc, o.seed, device.get());
    if (!f.init_from.empty()) {  // through a training model on the host, then copied
        HostMemory staging_memory;
        AccountingAllocator staging(staging_memory);
        PlanInputs in;  // fp32: the file's values reach the generator rounded once, if at all
        in.precision = Precision::fp32;
        in.micro_batch = 1;
        in.seq_len = 1;
        const std::unique_ptr<Gpt> staged = Gpt::create(o.model, in, staging, o.seed);
        import_weights(o.weights, *staged, LoadStrategy::sequential);
        copy_weights(*staged, *gen);
    }
    gen->set_recorder(rec.get());
    GenerateMeasurement m;
    run_generation(*gen, o, prompts, m);
    gen->set_recorder(nullptr);
    for (std::size_t c = 0; c < kMemCategoryCount; ++c)
        m.peak_bytes[c] = alloc.peak_bytes(static_cast<MemCategory>(c));
    m.peak_total_bytes = alloc.peak_total_bytes();
    const GeneratePrediction p = predict_generate(o);
    const std::string report = generate_json(o, p, m);
    if (out) {
        if (rec) write_profile(*rec, alloc, f.out);
        write_file_durably(fs::path(f.out) / "generate.json", report);
    }
    if (f.json) {
        std::fputs(report.c_str(), stdout);
    } else {
        print_generate_summary(o, p, m);
        if (out) std::printf("  report: %s\n", (fs::path(f.out) / "generate.json").c_str());
    }
}

}  // namespace

void add_generate_command(CLI::App& app) {
    auto f = std::make_shared<GenerateFlags>();
    CLI::App* cmd = app.add_subcommand(
        "generate",
        "Generate tokens with a KV cache and compare memory and time per token with "
        "napkin estimate --inference");
    cmd->add_option("--model", f->model, "model preset (random weights from --seed)")
        ->capture_default_str();
    cmd->add_option("--config", f->config, "model config JSON (docs/CONFIG.md)");
    cmd->add_option("--init-from", f->init_from,
                    "weights: llm.c .bin, Hugging Face GPT-2 .safetensors, or a napkin run folder "
                    "or its checkpoint.safetensors");
    cmd->add_option("--prompt-tokens", f->prompt_tokens, "the prompt's token ids: 1,2,3");
    cmd->add_option("--prompt-file", f->prompt_file,
                    "token ids, one prompt per line (1 line, or one per sequence)");
    cmd->add_option("--synthetic-prompt", f->synthetic, "N random token ids per sequence (timing)");
    cmd->add_option("--batch", f->batch, "B sequences generated together")->capture_default_str();
    cmd->add_option("--max-new-tokens", f->max_new_tokens, "G tokens generated per sequence")
        ->capture_default_str();
    cmd->add_option("--temperature", f->temperature, "0: greedy; > 0: sampled from softmax(z / T)")
        ->capture_default_str();
    cmd->add_option("--seed", f->seed, "random weights, synthetic prompts and sampling")
        ->check(non_negative_integer())
        ->capture_default_str();
    cmd->add_option("--precision", f->precision, "fp32|bf16: weights, cache and activations")
        ->capture_default_str();
    cmd->add_option("--device", f->device, "cpu|cuda")->capture_default_str();
    cmd->add_option("--flash-decoding", f->flash_decoding,
                    "on|off: on CUDA, the decode steps' attention splits each sequence's keys "
                    "into chunks of 128 across blocks, then combines them (a workspace among the "
                    "temporaries); off: one block per head streams the whole cache. No effect on "
                    "the CPU")
        ->capture_default_str();
    cmd->add_option("-o,--out", f->out,
                    "run folder for generate.json (and trace.json, memory.json)");
    cmd->add_flag("--json", f->json, "print generate.json instead of the summary");
    cmd->add_flag("--profile", f->profile,
                  "write RUN_DIR/trace.json: the prefill and each decode step, their ops");
    cmd->callback([f, cmd] { generate(*f, *cmd); });
}

}  // namespace napkin::cli
