// Token sources: the synthetic corpus is deterministic and seekable; llm.c shards in a folder
// are read one after another; positions round-trip (checkpoints rely on it).
#include "core/engine/data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/check.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;

void write_shard(const fs::path& p, std::uint16_t base, int n) {
    std::int32_t header[256] = {};
    header[0] = 20240520;
    header[1] = 1;
    header[2] = n;
    std::vector<std::uint16_t> tokens;
    for (int i = 0; i < n; ++i) tokens.push_back(static_cast<std::uint16_t>(base + i % 7));
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(header), sizeof header);
    f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

TEST(Data, ShardFolderReadsShardsInOrder) {
    const fs::path dir =
        fs::path(testing::TempDir()) / ("napkin_shards_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    write_shard(dir / "train_000.bin", 10, 21);  // 4 sequences of T = 4 (+1) fit
    write_shard(dir / "train_001.bin", 100, 21);
    auto src = open_token_source(dir.string());
    EXPECT_EQ(src->vocab_size(), 107);
    std::vector<std::int32_t> in(4), tg(4);
    std::vector<int> shard_of_batch;
    for (int i = 0; i < 12; ++i) {
        src->next_batch(in.data(), tg.data(), 1, 4);
        shard_of_batch.push_back(in[0] >= 100 ? 1 : 0);
        for (int t = 0; t < 3; ++t) EXPECT_EQ(tg[static_cast<std::size_t>(t)], in[static_cast<std::size_t>(t) + 1]);
    }
    // Shard 0 gives its sequences, then shard 1, then shard 0 again.
    EXPECT_EQ(shard_of_batch[0], 0);
    EXPECT_NE(std::find(shard_of_batch.begin(), shard_of_batch.end(), 1), shard_of_batch.end());
    EXPECT_EQ(shard_of_batch.back(), shard_of_batch[shard_of_batch.size() % 2]);
    // Position round trip: the same batch comes out again.
    const std::uint64_t pos = src->position();
    src->next_batch(in.data(), tg.data(), 1, 4);
    const auto first = in;
    src->set_position(pos);
    src->next_batch(in.data(), tg.data(), 1, 4);
    EXPECT_EQ(in, first);
}

TEST(Data, EmptyFolderIsRefused) {
    const fs::path dir =
        fs::path(testing::TempDir()) / ("napkin_no_shards_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    EXPECT_THROW(open_token_source(dir.string()), InputError);
}

TEST(Data, SyntheticCorpusIsSeekable) {
    SyntheticCorpus a(7), b(7);
    std::vector<std::int32_t> in(64), tg(64), in2(64), tg2(64);
    a.next_batch(in.data(), tg.data(), 2, 32);
    b.set_position(0);
    b.next_batch(in2.data(), tg2.data(), 2, 32);
    EXPECT_EQ(in, in2);
    EXPECT_EQ(tg, tg2);
    for (std::size_t i = 0; i < 64; ++i) EXPECT_EQ(a.token_at(i % 32 + (i / 32) * 32 + 1), tg[i]);
}

}  // namespace
}  // namespace napkin
