#include "core/engine/data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/check.h"
#include "core/engine/checkpoint.h"  // fnv1a64

namespace napkin {

namespace {

// splitmix64: a counter-based generator, so any token of the stream is computable directly.
std::uint64_t mix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

}  // namespace

SyntheticCorpus::SyntheticCorpus(std::uint64_t seed) : seed_(seed) {
    for (int t = 0; t < 256; ++t) {
        // Four distinct successors per token.
        int chosen = 0;
        std::uint64_t k = 0;
        while (chosen < 4) {
            const auto s = static_cast<std::int32_t>(mix(seed ^ (static_cast<std::uint64_t>(t) << 20) ^ k++) % 256);
            bool dup = false;
            for (int j = 0; j < chosen; ++j) dup |= successor_[t][j] == s;
            if (!dup) successor_[t][chosen++] = s;
        }
    }
}

double SyntheticCorpus::entropy_nats() { return 1.75 * std::log(2.0); }

std::string SyntheticCorpus::describe() const {
    return "synthetic Markov corpus (seed " + std::to_string(seed_) + ", entropy 1.213 nats/token)";
}

// The stream restarts from a seeded token every 4096 tokens, so token i depends only on the
// tokens since its segment began and any position can be reached in O(4096).
std::int32_t SyntheticCorpus::token_at(std::uint64_t i) const {
    constexpr std::uint64_t kSegment = 4096;
    const std::uint64_t segment = i / kSegment;
    auto t = static_cast<std::int32_t>(mix(seed_ ^ (segment * 0x100000001b3ull)) % 256);
    for (std::uint64_t j = segment * kSegment + 1; j <= i; ++j) {
        const std::uint64_t r = mix(seed_ * 31 + j) % 8;  // 0-3: 1/2, 4-5: 1/4, 6: 1/8, 7: 1/8
        const int which = r < 4 ? 0 : r < 6 ? 1 : r < 7 ? 2 : 3;
        t = successor_[t][which];
    }
    return t;
}

void SyntheticCorpus::next_batch(std::int32_t* inputs, std::int32_t* targets, std::int64_t B, std::int64_t T) {
    for (std::int64_t b = 0; b < B; ++b) {
        // Each row is T + 1 consecutive tokens; generate them incrementally from the first.
        std::int32_t prev = token_at(pos_);
        for (std::int64_t t = 0; t < T; ++t) {
            const std::uint64_t j = pos_ + static_cast<std::uint64_t>(t) + 1;
            std::int32_t next;
            if (j % 4096 == 0) {
                next = token_at(j);
            } else {
                const std::uint64_t r = mix(seed_ * 31 + j) % 8;
                next = successor_[prev][r < 4 ? 0 : r < 6 ? 1 : r < 7 ? 2 : 3];
            }
            inputs[b * T + t] = prev;
            targets[b * T + t] = next;
            prev = next;
        }
        pos_ += static_cast<std::uint64_t>(T);
    }
}

namespace {

std::string data_fingerprint(std::uint64_t bytes, std::uint64_t hash) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
    return std::to_string(bytes) + " bytes, fnv1a64 of the first and last MiB " + hex;
}

// A memory-mapped file of tokens: bytes (text) or llm.c uint16 shards.
class MappedTokens final : public TokenSource {
public:
    MappedTokens(const std::string& path) : path_(path) {
        // O_NONBLOCK: a FIFO given as --data is refused just below, never waited on.
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd_ < 0) throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
        struct stat st{};
        if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
            ::close(fd_);
            throw InputError(path + ": not a regular file");
        }
        size_ = static_cast<std::size_t>(st.st_size);
        if (size_ == 0) {
            ::close(fd_);
            throw InputError(path + ": empty file");
        }
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
        if (p == MAP_FAILED) {
            ::close(fd_);
            throw InputError(path + ": cannot map (" + std::strerror(errno) + ")");
        }
        base_ = static_cast<const unsigned char*>(p);
        const bool bin = path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0;
        if (bin) parse_llmc_header();
        else {
            count_ = size_;
            vocab_ = 256;
        }
    }
    ~MappedTokens() override {
        ::munmap(const_cast<unsigned char*>(base_), size_);
        ::close(fd_);
    }

    void next_batch(std::int32_t* inputs, std::int32_t* targets, std::int64_t B, std::int64_t T) override {
        const std::uint64_t need = static_cast<std::uint64_t>(T) + 1;
        if (count_ < need) {
            throw InputError(path_ + ": " + std::to_string(count_) + " tokens, fewer than one sequence of " +
                             std::to_string(need));
        }
        for (std::int64_t b = 0; b < B; ++b) {
            if (pos_ + need > count_) pos_ = 0;  // wrap around: the next epoch
            for (std::int64_t t = 0; t < T; ++t) {
                inputs[b * T + t] = token(pos_ + static_cast<std::uint64_t>(t));
                targets[b * T + t] = token(pos_ + static_cast<std::uint64_t>(t) + 1);
            }
            pos_ += static_cast<std::uint64_t>(T);
        }
    }
    std::int64_t vocab_size() const override { return vocab_; }
    std::uint64_t tokens() const override { return count_; }
    std::uint64_t position() const override { return pos_; }
    void set_position(std::uint64_t pos) override { pos_ = pos; }
    std::string describe() const override {
        return path_ + " (" + std::to_string(count_) + (tokens16_ != nullptr ? " uint16 tokens, llm.c .bin)" : " bytes)");
    }
    std::string fingerprint() const override { return data_fingerprint(size_, sample_hash()); }
    // FNV-1a 64 of the first and the last MiB (the whole file when it is shorter than 2 MiB).
    std::uint64_t sample_hash(std::uint64_t seed = kFnv1a64Basis) const {
        constexpr std::size_t kEnd = std::size_t{1} << 20;
        const std::size_t head = std::min(size_, kEnd), tail = std::min(size_ - head, kEnd);
        return fnv1a64(base_ + size_ - tail, tail, fnv1a64(base_, head, seed));
    }
    std::size_t bytes() const { return size_; }

private:
public:
    // Whether one more sequence of T tokens (and its shifted target) fits from the position.
    bool has_room(std::uint64_t T) const { return pos_ + T + 1 <= count_; }

private:
    std::int32_t token(std::uint64_t i) const {
        return tokens16_ != nullptr ? static_cast<std::int32_t>(tokens16_[i]) : static_cast<std::int32_t>(base_[i]);
    }

    void parse_llmc_header() {
        constexpr std::size_t kHeader = 256 * sizeof(std::int32_t);
        if (size_ < kHeader) throw InputError(path_ + ": too short for llm.c's 1024-byte header");
        std::int32_t header[256];
        std::memcpy(header, base_, kHeader);
        if (header[0] != 20240520) {
            throw InputError(path_ + ": bad magic " + std::to_string(header[0]) + " (expected llm.c's 20240520)");
        }
        if (header[1] != 1) throw InputError(path_ + ": unsupported version " + std::to_string(header[1]) + " (expected 1)");
        const auto n = static_cast<std::uint64_t>(static_cast<std::uint32_t>(header[2]));
        if (const std::uint64_t want = kHeader + n * 2; size_ != want) {  // uint16 tokens
            const bool longer = size_ > want;
            throw InputError(path_ + ": header says " + std::to_string(n) + " tokens, a file of " +
                             std::to_string(want) + " bytes; it is " + std::to_string(size_) +
                             " (" + std::to_string(longer ? size_ - want : want - size_) +
                             (longer ? " extra bytes: a wrong count or trailing data)"
                                     : " bytes missing: truncated)"));
        }
        tokens16_ = reinterpret_cast<const std::uint16_t*>(base_ + kHeader);
        count_ = n;
        std::int64_t maxv = 0;
        for (std::uint64_t i = 0; i < n; ++i) maxv = std::max<std::int64_t>(maxv, tokens16_[i]);
        vocab_ = maxv + 1;
    }

    std::string path_;
    int fd_ = -1;
    std::size_t size_ = 0;
    const unsigned char* base_ = nullptr;
    const std::uint16_t* tokens16_ = nullptr;
    std::uint64_t count_ = 0;
    std::uint64_t pos_ = 0;
    std::int64_t vocab_ = 256;
};

}  // namespace

// Several llm.c shards read as one stream: shard after shard, then around again. A sequence
// never spans two shards (llm.c's loader does the same), so each shard is its own document.
class ShardSequence final : public TokenSource {
public:
    ShardSequence(std::string dir, std::vector<std::string> paths) : dir_(std::move(dir)) {
        for (const auto& p : paths) shards_.push_back(std::make_unique<MappedTokens>(p));
        for (const auto& s : shards_) vocab_ = std::max(vocab_, s->vocab_size());
    }
    void next_batch(std::int32_t* inputs, std::int32_t* targets, std::int64_t B, std::int64_t T) override {
        for (std::int64_t b = 0; b < B; ++b) {
            MappedTokens& s = *shards_[shard_];
            const std::uint64_t before = s.position();
            s.next_batch(inputs + b * T, targets + b * T, 1, T);
            // The shard wrapped (or is exhausted next time): move on to the next shard.
            if (s.position() <= before || !s.has_room(static_cast<std::uint64_t>(T))) {
                s.set_position(0);
                shard_ = (shard_ + 1) % shards_.size();
            }
        }
    }
    std::int64_t vocab_size() const override { return vocab_; }
    std::uint64_t tokens() const override {
        std::uint64_t n = 0;
        for (const auto& s : shards_) n += s->tokens();
        return n;
    }
    // Position: shard index in the high 16 bits, token offset in the low 48.
    std::uint64_t position() const override { return (static_cast<std::uint64_t>(shard_) << 48) | shards_[shard_]->position(); }
    void set_position(std::uint64_t pos) override {
        shard_ = static_cast<std::size_t>(pos >> 48) % shards_.size();
        shards_[shard_]->set_position(pos & ((std::uint64_t{1} << 48) - 1));
    }
    std::string fingerprint() const override {  // the shards in order, as one
        std::uint64_t h = kFnv1a64Basis, bytes = 0;
        for (const auto& s : shards_) {
            h = s->sample_hash(h);
            bytes += s->bytes();
        }
        return std::to_string(shards_.size()) + " shards, " + data_fingerprint(bytes, h);
    }
    std::string describe() const override {
        return dir_ + " (" + std::to_string(shards_.size()) + " llm.c .bin shards)";
    }

private:
    std::string dir_;
    std::vector<std::unique_ptr<MappedTokens>> shards_;
    std::size_t shard_ = 0;
    std::int64_t vocab_ = 0;
};

std::unique_ptr<TokenSource> open_token_source(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        std::vector<std::string> shards;
        for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
            if (e.is_regular_file() && e.path().extension() == ".bin") shards.push_back(e.path().string());
        }
        if (ec) throw InputError(path + ": cannot list (" + ec.message() + ")");
        if (shards.empty()) throw InputError(path + ": a folder with no .bin token shards");
        std::sort(shards.begin(), shards.end());
        if (shards.size() > 65535) throw InputError(path + ": more than 65535 shards");
        return std::make_unique<ShardSequence>(path, std::move(shards));
    }
    return std::make_unique<MappedTokens>(path);
}

}  // namespace napkin
