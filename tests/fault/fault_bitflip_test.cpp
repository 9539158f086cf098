// The fault suite's bit flips: one bit flipped in every class of byte of every file napkin reads
// (a checkpoint's header length, tensor table, metadata, padding and data; a sharded
// checkpoint's manifest and shard; report.json, trace.json, a device profile, a model config in
// napkin's and Hugging Face's format; a token file's header and tokens), then the file read by
// the command that reads it. Each case must end in a clean one-line error or a correct load:
// never a crash, a hang (kTimeout) or a sanitizer's report (when NAPKIN_UNDER_TEST names a
// sanitized build).
//
// The corpus is deterministic: the flips come from std::mt19937_64 (fully specified by the
// standard) with a fixed seed, taken round-robin over the (file, class) pairs, so a run cut by
// the time budget has still covered every class, and a failure names its file, class, byte and
// bit to replay it.
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "fault_util.h"

namespace {

constexpr std::uint64_t kSeed = 0x6e61706b696e2431;  // "napkin$1"
constexpr int kRounds = 6;                           // flips per (file, class) at most
constexpr double kBudgetSeconds = 20;  // per test, past the first round; ctest's limit is 120

// The bytes of one class of a file: ranges [begin, end).
struct ByteClass {
    std::string name;
    std::vector<std::pair<std::size_t, std::size_t>> ranges;

    std::size_t size() const {
        std::size_t n = 0;
        for (const auto& [b, e] : ranges)
            n += e - b;
        return n;
    }
    std::size_t at(std::size_t i) const {  // the i-th byte of the class, 0 <= i < size()
        for (const auto& [b, e] : ranges) {
            if (i < e - b) return b + i;
            i -= e - b;
        }
        return ranges.back().second - 1;
    }
};

// A safetensors file's classes: the 8-byte header length, the tensor table, the "__metadata__"
// object, the header's space padding, the data.
std::vector<ByteClass> safetensors_classes(const std::string& bytes) {
    std::uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    const std::size_t header_end = 8 + n;
    std::size_t json_end = header_end;
    while (json_end > 8 && bytes[json_end - 1] == ' ')
        --json_end;
    const std::size_t meta = bytes.find("\"__metadata__\"", 8);
    // The metadata object ends at its closing brace: strings (escaped quotes included) skipped.
    std::size_t meta_end = meta;
    bool in_string = false;
    for (int depth = 0; meta_end < json_end; ++meta_end) {
        const char c = bytes[meta_end];
        if (in_string) {
            if (c == '\\')
                ++meta_end;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{') {
            ++depth;
        } else if (c == '}' && --depth == 0) {
            ++meta_end;
            break;
        }
    }
    std::vector<ByteClass> classes = {{"header length", {{0, 8}}},
                                      {"tensor table", {{8, meta}, {meta_end, json_end}}},
                                      {"metadata", {{meta, meta_end}}},
                                      {"data", {{header_end, bytes.size()}}}};
    if (json_end < header_end) classes.push_back({"header padding", {{json_end, header_end}}});
    return classes;
}

// A JSON file's classes: structure ({}[]:, and the quotes), string contents, numbers and
// literals, white space.
std::vector<ByteClass> json_classes(const std::string& bytes) {
    std::vector<ByteClass> classes = {
        {"json structure", {}}, {"json strings", {}}, {"json numbers", {}}, {"json space", {}}};
    bool in_string = false;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        const char c = bytes[i];
        int k = 0;
        if (in_string) {
            k = c == '"' ? 0 : 1;
            if (c == '\\' && i + 1 < bytes.size()) {
                classes[1].ranges.emplace_back(i, i + 2);
                ++i;
                continue;
            }
            if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (std::strchr("{}[]:,", c) == nullptr) {
            k = std::strchr(" \t\r\n", c) != nullptr ? 3 : 2;
        }
        auto& r = classes[static_cast<std::size_t>(k)].ranges;
        if (!r.empty() && r.back().second == i)
            ++r.back().second;
        else
            r.emplace_back(i, i + 1);
    }
    std::erase_if(classes, [](const ByteClass& c) { return c.size() == 0; });
    return classes;
}

// A command that reads a file (napkin's arguments, `{}` standing for the case's folder) and, for
// a checksummed file, what it writes from it (relative to the case's folder): a load must write
// what it writes from the pristine file.
struct Reader {
    std::string args;
    std::string output;
};

// One file napkin reads: `file` inside the pristine folder `source`, its classes, its readers.
struct Target {
    std::string label;
    fs::path source;
    fs::path file;  // relative to source
    std::vector<ByteClass> classes;
    std::vector<Reader> readers;
    // A checkpoint's checksums cover its header and data, so a flipped bit is refused or (in the
    // header's padding, a space turned NUL; a manifest's informative fields) reads as the
    // pristine file does. A JSON input may read back as another valid value.
    bool checksummed = false;
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
    return s;
}

// A clean outcome: success, or exit code 1 or 2 with one error line and no sanitizer's report.
void expect_clean(const CliRun& r, const std::string& what) {
    EXPECT_TRUE(r.rc == 0 || r.rc == 1 || r.rc == 2) << what << ": rc " << r.rc << "\n" << r.err;
    for (const char* bad : {"Sanitizer", "runtime error", "terminate called", "Assertion"})
        EXPECT_EQ(r.err.find(bad), std::string::npos) << what << ":\n" << r.err;
    if (r.rc == 0) return;
    std::size_t lines = 0;
    for (std::size_t at = r.err.find("error:"); at != std::string::npos;
         at = r.err.find("error:", at + 1))
        ++lines;
    EXPECT_EQ(lines, 1u) << what << ":\n" << r.err;
}

class FaultFlips : public Fault {
protected:
    // Flips the corpus's bits in `targets` round-robin until every class had kRounds cases or
    // the budget is spent (after the first round); returns the cases run.
    std::size_t flip_all(const std::vector<Target>& targets) {
        for (const Target& t : targets)
            pristine_outputs(t);
        std::mt19937_64 gen(kSeed);
        const auto t0 = std::chrono::steady_clock::now();
        std::size_t cases = 0;
        for (int round = 0; round < kRounds; ++round) {
            for (const Target& t : targets) {
                for (const ByteClass& c : t.classes) {
                    const std::size_t byte = c.at(gen() % c.size());
                    const int bit = static_cast<int>(gen() % 8);
                    // The first round runs whole: every class is flipped at least once.
                    if (round > 0 &&
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                                .count() > kBudgetSeconds)
                        return cases;
                    run_case(t, c.name, byte, bit, cases++);
                }
            }
        }
        return cases;
    }

private:
    // Copies the target's folder to a case folder, flipping `bit` of `byte` (none: bit < 0).
    fs::path case_folder(const Target& t, std::size_t byte, int bit, const std::string& name) {
        const fs::path copy = dir_ / name;
        fs::copy(t.source, copy, fs::copy_options::recursive);
        if (bit < 0) return copy;
        const fs::path file = copy / t.file;
        std::string bytes = slurp(file.string());
        bytes[byte] = static_cast<char>(bytes[byte] ^ (1 << bit));
        std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
        return copy;
    }

    void pristine_outputs(const Target& t) {
        if (!t.checksummed) return;
        const fs::path copy = case_folder(t, 0, -1, "pristine");
        for (const Reader& reader : t.readers) {
            const CliRun r = napkin(replace_all(reader.args, "{}", copy.string()), kTimeout);
            ASSERT_EQ(r.rc, 0) << t.label << ": " << reader.args << "\n" << r.err;
            expected_[t.label + reader.args] = slurp((copy / reader.output).string());
        }
        fs::remove_all(copy);
    }

    void run_case(const Target& t, const std::string& cls, std::size_t byte, int bit,
                  std::size_t n) {
        const fs::path copy = case_folder(t, byte, bit, "case" + std::to_string(n));
        const std::string what =
            t.label + ", " + cls + ": byte " + std::to_string(byte) + " bit " + std::to_string(bit);
        for (const Reader& reader : t.readers) {
            const CliRun r = napkin(replace_all(reader.args, "{}", copy.string()), kTimeout);
            expect_clean(r, what);
            if (t.checksummed && r.rc == 0) {
                EXPECT_TRUE(slurp((copy / reader.output).string()) ==
                            expected_[t.label + reader.args])
                    << what << ": loaded, and " << reader.output
                    << " differs from the pristine file's";
            }
        }
        fs::remove_all(copy);
    }

    std::map<std::string, std::string> expected_;  // a checksummed target's reader: its output
};

std::size_t class_count(const std::vector<Target>& targets) {
    std::size_t n = 0;
    for (const Target& t : targets)
        n += t.classes.size();
    return n;
}

Target file_target(const std::string& label, const fs::path& source, const fs::path& file,
                   bool safetensors, std::vector<Reader> readers) {
    const std::string bytes = slurp((source / file).string());
    return {label,
            source,
            file,
            safetensors ? safetensors_classes(bytes) : json_classes(bytes),
            std::move(readers),
            safetensors};
}

TEST_F(FaultFlips, CheckpointsAndTheirManifests) {
    const fs::path run = dir_ / "run", zrun = dir_ / "zrun";
    ASSERT_EQ(napkin("train --steps 2 --stop-after 1 --micro-batch 2 --seq-len 16 --quiet --out " +
                         run.string(),
                     kTimeout)
                  .rc,
              0);
    ASSERT_EQ(napkin("train" + kTinyRun + " --zero 2 --out " + zrun.string(), kTimeout).rc, 0);
    const fs::path step = fs::path("checkpoints") / "step-00000001";
    const Reader consolidate = {"ckpt consolidate {} -o {}/one.safetensors", "one.safetensors"};
    std::vector<Target> targets = {
        file_target("checkpoint.safetensors", run, "checkpoint.safetensors", true,
                    {{"train --resume {} --quiet", "checkpoint.safetensors"},
                     {"train" + kTinyRun + " --init-from {}/checkpoint.safetensors --out {}/next",
                      "next/checkpoint.safetensors"}}),
        file_target("rank0.safetensors", zrun, step / "rank0.safetensors", true, {consolidate}),
        file_target("manifest.json", zrun, step / "manifest.json", false, {consolidate})};
    targets.back().checksummed = true;  // its shards' checksums: read against the manifest
    const std::size_t cases = flip_all(targets);
    EXPECT_GE(cases, class_count(targets)) << "at least one flip in every class";
    RecordProperty("cases", static_cast<int>(cases));
}

TEST_F(FaultFlips, ReportsTracesProfilesConfigsAndTokens) {
    const fs::path run = dir_ / "run", inputs = dir_ / "inputs";
    ASSERT_EQ(napkin("train --steps 1 --micro-batch 1 --seq-len 8 --quiet --profile all --out " +
                         run.string(),
                     kTimeout)
                  .rc,
              0);
    fs::create_directories(inputs);
    ASSERT_EQ(napkin("calibrate --quick --steps 1 --warmup 1 --precisions fp32 -o " +
                         (inputs / "profile.json").string(),
                     kLongTimeout)
                  .rc,
              0);
    fs::copy(fs::path(NAPKIN_TEST_DATA) / "napkin_tiny.json", inputs / "napkin.json");
    fs::copy(fs::path(NAPKIN_TEST_DATA) / "hf_gpt2_config.json", inputs / "hf.json");
    write_token_file(inputs / "tokens.bin", 4096);
    const Reader export_run = {"export {} -o {}/merged.json", ""}, report = {"report {}", ""};
    std::vector<Target> targets = {
        file_target("report.json", run, "report.json", false, {report, export_run}),
        file_target("trace.json", run, "trace.json", false, {report, export_run}),
        file_target(
            "device profile", inputs, "profile.json", false,
            {{"estimate --gpu h100-sxm --profile-force --device-profile {}/profile.json", ""}}),
        file_target("napkin config", inputs, "napkin.json", false,
                    {{"estimate --config {}/napkin.json", ""}}),
        file_target("hf config", inputs, "hf.json", false, {{"estimate --config {}/hf.json", ""}})};
    targets.push_back({"tokens.bin",
                       inputs,
                       "tokens.bin",
                       {{"token header", {{0, 12}}},
                        {"header padding", {{12, 1024}}},
                        {"tokens", {{1024, 1024 + 2 * 4096}}}},
                       {{"train --data {}/tokens.bin" + kTinyRun + " --out {}/run", ""}},
                       false});
    const std::size_t cases = flip_all(targets);
    EXPECT_GE(cases, class_count(targets)) << "at least one flip in every class";
    RecordProperty("cases", static_cast<int>(cases));
}

}  // namespace
