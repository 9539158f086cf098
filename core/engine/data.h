// Training data: batches of (inputs, targets) token ids, targets shifted by one.
//   SyntheticCorpus  the default: a deterministic Markov chain over 256 byte tokens whose
//                    entropy rate is known exactly, so a run can say how much it learned
//   TextFile         any file as bytes (vocabulary 256)
//   TokenShards      llm.c's .bin format: a 256 x int32 header (magic 20240520, version 1,
//                    token count), then uint16 tokens; memory-mapped
// Every source is deterministic given its position, which checkpoints save and restore.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace napkin {

class TokenSource {
public:
    virtual ~TokenSource() = default;
    // Fills inputs and targets, each (B, T).
    virtual void next_batch(std::int32_t* inputs, std::int32_t* targets, std::int64_t B, std::int64_t T) = 0;
    virtual std::int64_t vocab_size() const = 0;  // the largest token id + 1 the source can produce
    virtual std::uint64_t position() const = 0;
    virtual void set_position(std::uint64_t pos) = 0;
    virtual std::string describe() const = 0;
    // The tokens the source holds before it starts over (a file's count, the shards' sum); 0 for
    // the synthetic corpus, which never repeats.
    virtual std::uint64_t tokens() const { return 0; }
    // What a checkpoint's position refers to, compared on resume: "" for the synthetic corpus
    // (its seed is among the run's options); for files their sizes and an FNV-1a 64 of their first
    // and last MiB, so a file replaced or grown under a run is caught without reading it whole.
    virtual std::string fingerprint() const = 0;
};

// Each token t has 4 possible successors with probabilities 1/2, 1/4, 1/8, 1/8 (which four is
// a fixed function of t and the seed): entropy rate exactly 1.75 bits = 1.2130 nats per token.
class SyntheticCorpus final : public TokenSource {
public:
    explicit SyntheticCorpus(std::uint64_t seed = 1337);
    void next_batch(std::int32_t* inputs, std::int32_t* targets, std::int64_t B, std::int64_t T) override;
    std::int64_t vocab_size() const override { return 256; }
    std::uint64_t position() const override { return pos_; }
    void set_position(std::uint64_t pos) override { pos_ = pos; }
    std::string describe() const override;
    std::string fingerprint() const override { return ""; }
    static double entropy_nats();  // 1.75 * ln 2

    std::int32_t token_at(std::uint64_t i) const;  // the i-th token of the infinite stream

private:
    std::uint64_t seed_;
    std::uint64_t pos_ = 0;
    std::int32_t successor_[256][4];
};

// Opens PATH: a folder of llm.c .bin shards (read in name order, one after another), a .bin
// file in llm.c's format, else any file as bytes. Throws InputError naming
// the file when it is missing, unreadable, too short for one batch, or a malformed .bin.
std::unique_ptr<TokenSource> open_token_source(const std::string& path);

}  // namespace napkin
