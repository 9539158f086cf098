// The byte sources, copies and their run (weights_source.h): shared by every format
// weights_import.cpp reads.
#include "core/engine/weights_source.h"

#include <algorithm>
#include <fstream>
#include <optional>

namespace napkin::weights_detail {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
    throw InputError(path + ": " + what);
}

int element_bytes(DType t) {
    return dtype_bits(t) / 8;
}

namespace {

// src: (rows, cols) in the file, row-major; dst: (cols, rows). Blocks of rows are widened to fp32
// first so the scattered writes go to a few cache lines at a time.
void transpose_to_f32(DType dt, const unsigned char* src, std::int64_t rows, std::int64_t cols,
                      float* dst) {
    constexpr std::int64_t kBlock = 32;
    std::vector<float> block(static_cast<std::size_t>(kBlock * cols));
    const auto row_bytes = static_cast<std::size_t>(cols * element_bytes(dt));
    for (std::int64_t r0 = 0; r0 < rows; r0 += kBlock) {
        const std::int64_t nr = std::min(kBlock, rows - r0);
        convert_to_f32(dt, src + static_cast<std::size_t>(r0) * row_bytes,
                       static_cast<std::size_t>(nr * cols), block.data());
        for (std::int64_t c = 0; c < cols; ++c) {
            float* d = dst + c * rows + r0;
            for (std::int64_t r = 0; r < nr; ++r) {
                d[r] = block[static_cast<std::size_t>(r * cols + c)];
            }
        }
    }
}

}  // namespace

void run_copies(Gpt& model, std::vector<Copy> copies, ByteSource& source) {
    std::sort(copies.begin(), copies.end(),
              [](const Copy& a, const Copy& b) { return a.offset < b.offset; });
    // fp32, as large as the largest parameter so far; pages only count once written, so a copy
    // that goes straight from the source to the model costs nothing here.
    PageBuffer staging;
    for (const Copy& c : copies) {
        const auto numel = static_cast<std::size_t>(model.params()[c.param].numel);
        unsigned char* stage = staging.ensure(numel * sizeof(float));
        auto* dst = reinterpret_cast<float*>(stage);
        if (c.dtype == DType::f32 && !c.transpose) {
            // sequential reads straight into the staging buffer; read_all and mmap hand back
            // their own bytes, used in place when they are the whole, aligned parameter.
            const unsigned char* p = source.get(c.offset, c.bytes(), stage);
            if (c.count() == numel && reinterpret_cast<std::uintptr_t>(p) % alignof(float) == 0) {
                model.set_param(c.param, reinterpret_cast<const float*>(p));
                continue;
            }
            if (p != stage) convert_to_f32(DType::f32, p, c.count(), dst);
        } else if (c.transpose) {
            const unsigned char* p = source.get(c.offset, c.bytes(), nullptr);
            transpose_to_f32(c.dtype, p, c.rows, c.cols, dst);
        } else {
            convert_to_f32(c.dtype, source.get(c.offset, c.bytes(), nullptr), c.count(), dst);
        }
        std::fill(dst + c.count(), dst + numel, 0.0f);
        model.set_param(c.param, dst);
    }
}

std::size_t param_index(const std::unordered_map<std::string, std::size_t>& index,
                        const std::string& name) {
    const auto it = index.find(name);
    NAPKIN_ASSERT(it != index.end(), "the GPT-2-shaped model has no parameter '" << name << "'");
    return it->second;
}

std::unordered_map<std::string, std::size_t> param_indices(Gpt& model) {
    std::unordered_map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < model.params().size(); ++i) {
        index.emplace(model.params()[i].name, i);
    }
    return index;
}

// Every parameter exactly once, with as many elements as the copy fills or fewer padding rows;
// LoRA adapters never (they keep their initialization: B = 0, the imported model unchanged).
void check_coverage(Gpt& model, const std::vector<Copy>& copies) {
    std::vector<int> seen(model.params().size(), 0);
    for (const Copy& c : copies) {
        ++seen[c.param];
        NAPKIN_ASSERT(static_cast<std::int64_t>(c.count()) <= model.params()[c.param].numel,
                      "copy into '" << model.params()[c.param].name << "' overflows it");
    }
    for (std::size_t i = 0; i < seen.size(); ++i) {
        const int want = model.params()[i].adapter ? 0 : 1;
        NAPKIN_ASSERT(seen[i] == want, "parameter '" << model.params()[i].name << "' filled "
                                                     << seen[i] << " times");
    }
}

// Values in kB from /proc/self/status ("VmRSS:", "VmHWM:").
std::optional<std::int64_t> status_kb(const char* key) {
    std::ifstream in("/proc/self/status");
    std::string line;
    const std::size_t klen = std::strlen(key);
    while (std::getline(in, line)) {
        if (line.compare(0, klen, key) == 0) {
            try {
                return std::stoll(line.substr(klen));
            } catch (const std::exception&) {
                return std::nullopt;
            }
        }
    }
    return std::nullopt;
}

RssProbe start_rss_probe() {
    RssProbe p;
    // "5" resets the peak resident set size (VmHWM) to the current one (Linux >= 4.0).
    if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
        p.reset = std::fputs("5", f) >= 0;
        p.reset = (std::fclose(f) == 0) && p.reset;
    }
    p.rss_before_kb = status_kb("VmRSS:");
    return p;
}

void finish_rss_probe(const RssProbe& p, ImportReport& r) {
    const auto hwm = status_kb("VmHWM:");
    r.peak_rss_reset = p.reset;
    if (!hwm || !p.rss_before_kb) {
        r.peak_rss_increase_bytes = -1;
        return;
    }
    r.peak_rss_increase_bytes = std::max<std::int64_t>(0, *hwm - *p.rss_before_kb) * 1024;
}

void execute(Gpt& model, const ImportPlan& plan, int fd, std::uint64_t file_bytes,
             const std::string& path, LoadStrategy strategy, ImportReport& r) {
    check_coverage(model, plan.copies);
    std::uint64_t bytes = plan.extra_bytes_read;
    for (const Copy& c : plan.copies) {
        bytes += c.bytes();
    }
    switch (strategy) {
        case LoadStrategy::read_all: {
            ReadAllSource src(fd, file_bytes, path);
            run_copies(model, plan.copies, src);
            break;
        }
        case LoadStrategy::sequential: {
            SequentialSource src(fd, path);
            run_copies(model, plan.copies, src);
            break;
        }
        case LoadStrategy::mmap: {
            MmapSource src(fd, file_bytes, path);
            run_copies(model, plan.copies, src);
            break;
        }
    }
    r.format = plan.format;
    r.tensors = static_cast<std::int64_t>(plan.copies.size());
    r.bytes_read = static_cast<std::int64_t>(bytes);
}

}  // namespace napkin::weights_detail
