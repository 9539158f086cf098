// The durable writer: whole files or none, never a temporary left behind, one line with errno's
// text on each failure path (a read-only folder, a full file system, a rename that cannot
// happen), and two writers of one target that never share a temporary.
#include "core/durable_file.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "tests/profiler/temp_dir.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;
using profiler::test::folder_entries;
using profiler::test::TempDir;

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A tmpfs of `bytes` mounted on `dir` for the test (root only); read-only when asked.
class ScopedTmpfs {
public:
    ScopedTmpfs(const fs::path& dir, std::size_t bytes, bool read_only) : dir_(dir) {
        const std::string opts = "size=" + std::to_string(bytes);
        const unsigned long flags = read_only ? MS_RDONLY : 0;
        if (::mount("tmpfs", dir.c_str(), "tmpfs", flags, opts.c_str()) == 0) {
            mounted_ = true;
        } else {
            why_ = std::strerror(errno);
        }
    }
    ~ScopedTmpfs() {
        if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    }
    ScopedTmpfs(const ScopedTmpfs&) = delete;
    ScopedTmpfs& operator=(const ScopedTmpfs&) = delete;
    bool mounted() const { return mounted_; }
    const std::string& why() const { return why_; }

private:
    fs::path dir_;
    bool mounted_ = false;
    std::string why_;
};

TEST(DurableFile, WritesTheWholeFileUnderATemporaryName) {
    TempDir dir;
    const fs::path path = dir.path() / "out.json";
    DurableFile f(path);
    ASSERT_TRUE(f.ok()) << f.error();
    EXPECT_EQ(f.tmp_path().parent_path(), dir.path());
    EXPECT_TRUE(is_durable_temporary(f.tmp_path().filename().string())) << f.tmp_path();
    const std::string big(3 << 20, 'x');  // past the buffer: written straight through
    f.write("{\"a\":");
    f.write(big);
    f.write("}");
    EXPECT_FALSE(fs::exists(path)) << "the target appears only on commit";
    EXPECT_TRUE(fs::exists(f.tmp_path()));
    ASSERT_TRUE(f.commit()) << f.error();
    EXPECT_TRUE(f.commit()) << "a second commit reports the first";
    EXPECT_EQ(f.bytes_written(), big.size() + 6);
    EXPECT_EQ(slurp(path), "{\"a\":" + big + "}");
    EXPECT_EQ(folder_entries(dir.path()), std::vector<std::string>{"out.json"});
}

TEST(DurableFile, UncommittedLeavesTheOldFileAndNoTemporary) {
    TempDir dir;
    const fs::path path = dir.path() / "report.json";
    write_file_durably(path, "old");
    {
        DurableFile f(path);
        f.write("new, never committed");
        f.flush();
        EXPECT_TRUE(fs::exists(f.tmp_path()));
    }
    EXPECT_EQ(slurp(path), "old");
    EXPECT_EQ(folder_entries(dir.path()), std::vector<std::string>{"report.json"});
}

TEST(DurableFile, TwoWritersOfOneTargetNeverShareATemporary) {
    TempDir dir;
    const fs::path path = dir.path() / "checkpoint.safetensors";
    DurableFile a(path), b(path);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NE(a.tmp_path(), b.tmp_path());
    a.write("from a");
    b.write("from b");
    ASSERT_TRUE(a.commit()) << a.error();
    ASSERT_TRUE(b.commit()) << b.error();
    EXPECT_EQ(slurp(path), "from b");

    // Many writers at once: every commit succeeds and the file is always one of them, whole.
    const std::string one(100000, '1'), two(200000, '2');
    std::vector<std::thread> threads;
    std::vector<int> failures(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 20; ++i) {
                DurableFile f(path);
                f.write(t % 2 == 0 ? one : two);
                failures[static_cast<std::size_t>(t)] += f.commit() ? 0 : 1;
            }
        });
    }
    for (std::thread& t : threads)
        t.join();
    EXPECT_EQ(failures, std::vector<int>(4, 0));
    const std::string last = slurp(path);
    EXPECT_TRUE(last == one || last == two) << last.size() << " bytes";
    EXPECT_EQ(folder_entries(dir.path()), std::vector<std::string>{"checkpoint.safetensors"});
}

TEST(DurableFile, AMissingFolderIsOneLineNamingTheFile) {
    TempDir dir;
    const fs::path path = dir.path() / "no-such-folder" / "trace.json";
    DurableFile f(path);
    EXPECT_FALSE(f.ok());
    f.write("ignored");
    EXPECT_FALSE(f.commit());
    EXPECT_EQ(f.error().rfind(path.string() + ": cannot create a file in ", 0), 0u) << f.error();
    EXPECT_NE(f.error().find("(No such file or directory)"), std::string::npos) << f.error();
    EXPECT_EQ(f.error().find('\n'), std::string::npos);
    EXPECT_TRUE(folder_entries(dir.path()).empty());
    try {
        write_file_durably(path, "x");
        ADD_FAILURE() << "no InputError";
    } catch (const InputError& e) {
        EXPECT_EQ(std::string(e.what()), f.error());
    }
}

TEST(DurableFile, ARenameThatCannotHappenRemovesTheTemporary) {
    TempDir dir;
    const fs::path busy = dir.path() / "busy";
    fs::create_directories(busy / "inside");  // a non-empty folder where the file should go
    DurableFile f(busy);
    f.write("data");
    EXPECT_FALSE(f.commit());
    EXPECT_NE(f.error().find("cannot rename"), std::string::npos) << f.error();
    EXPECT_TRUE(fs::is_directory(busy / "inside"));
    EXPECT_EQ(folder_entries(dir.path()), std::vector<std::string>{"busy"});
}

TEST(DurableFile, AReadOnlyFolderIsRefusedAndLeavesNothing) {
    TempDir dir;
    const fs::path ro = dir.path() / "ro";
    fs::create_directories(ro);
    std::optional<ScopedTmpfs> mount;
    if (::geteuid() == 0) {  // root writes through permissions: a read-only mount instead
        mount.emplace(ro, 1 << 16, true);
        if (!mount->mounted()) GTEST_SKIP() << "cannot mount a read-only tmpfs: " << mount->why();
    } else {
        fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    }
    DurableFile f(ro / "memory.json");
    f.write("x");
    EXPECT_FALSE(f.commit());
    EXPECT_EQ(f.error().rfind((ro / "memory.json").string() + ": cannot create a file in ", 0), 0u)
        << f.error();
    const bool named = f.error().find("Read-only file system") != std::string::npos ||
                       f.error().find("Permission denied") != std::string::npos;
    EXPECT_TRUE(named) << f.error();
    EXPECT_TRUE(folder_entries(ro).empty());
}

TEST(DurableFile, AFullFileSystemKeepsTheOldFileAndNoTemporary) {
    if (::geteuid() != 0) GTEST_SKIP() << "mounting a size-limited tmpfs needs root";
    TempDir dir;
    const fs::path small = dir.path() / "small";
    fs::create_directories(small);
    ScopedTmpfs mount(small, 64 << 10, false);
    if (!mount.mounted()) GTEST_SKIP() << "cannot mount a tmpfs: " << mount.why();
    const fs::path path = small / "trace.json";
    write_file_durably(path, "the old trace");
    for (const std::size_t bytes : {std::size_t{200} << 10, std::size_t{4} << 20}) {
        DurableFile f(path);
        ASSERT_TRUE(f.ok()) << f.error();
        f.write(std::string(bytes, 'z'));  // buffered (200 KiB) or straight through (4 MiB)
        EXPECT_FALSE(f.commit()) << bytes;
        EXPECT_EQ(f.error(), path.string() + ": write failed (No space left on device)");
        EXPECT_EQ(slurp(path), "the old trace");
        EXPECT_EQ(folder_entries(small), std::vector<std::string>{"trace.json"});
    }
}

TEST(DurableFile, RecognizesItsTemporaries) {
    EXPECT_TRUE(is_durable_temporary("trace.json.tmp-4242-1f2e3d4c5b6a7988"));
    EXPECT_TRUE(is_durable_temporary("a.tmp-1-0000000000000000"));
    EXPECT_FALSE(is_durable_temporary("trace.json.tmp"));
    EXPECT_FALSE(is_durable_temporary("trace.json"));
    EXPECT_FALSE(is_durable_temporary(".tmp-1-0000000000000000"));
    EXPECT_FALSE(is_durable_temporary("a.tmp-x-0000000000000000"));
    EXPECT_FALSE(is_durable_temporary("a.tmp-1-000000000000000"));
    EXPECT_FALSE(is_durable_temporary("a.tmp-1-000000000000000G"));
    EXPECT_FALSE(is_durable_temporary("a.tmp--0000000000000000"));
}

}  // namespace
}  // namespace napkin
