#include "core/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <new>
#include <sstream>
#include <utility>

#include "core/check.h"

namespace napkin {

namespace {

constexpr std::size_t kHostAlign = 64;

std::size_t host_rounded(std::size_t bytes) {
    return (bytes + kHostAlign - 1) / kHostAlign * kHostAlign;
}

}  // namespace

HostMemory::~HostMemory() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cache_locked();
}

void* HostMemory::allocate(std::size_t bytes) {
    const std::size_t rounded = host_rounded(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(rounded);
    if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= rounded;
        return p;
    }
    void* p = std::aligned_alloc(kHostAlign, rounded);
    if (p == nullptr && cached_bytes_ > 0) {  // the cache's blocks may be what is missing
        release_cache_locked();
        p = std::aligned_alloc(kHostAlign, rounded);
    }
    if (p == nullptr) throw std::bad_alloc();
    return p;
}

void HostMemory::deallocate(void* ptr, std::size_t bytes) noexcept {
    if (ptr == nullptr) return;
    const std::size_t rounded = host_rounded(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    try {
        free_[rounded].push_back(ptr);
        cached_bytes_ += rounded;
    } catch (...) {  // no room to remember it: give it back instead
        std::free(ptr);
    }
}

std::size_t HostMemory::cached_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_bytes_;
}

void HostMemory::release_cache_locked() noexcept {
    for (auto& [size, blocks] : free_) {
        for (void* p : blocks)
            std::free(p);
    }
    free_.clear();
    cached_bytes_ = 0;
}

AccountingAllocator::AccountingAllocator(RawMemory& raw)
    : raw_(raw), start_(std::chrono::steady_clock::now()) {
    names_.emplace_back("");  // id 0: unnamed
}

AccountingAllocator::~AccountingAllocator() = default;

std::int64_t AccountingAllocator::now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                start_)
        .count();
}

std::uint32_t AccountingAllocator::intern(std::string_view name) {
    auto it = name_ids_.find(std::string(name));
    if (it != name_ids_.end()) return it->second;
    const auto id = static_cast<std::uint32_t>(names_.size());
    names_.emplace_back(name);
    name_ids_.emplace(std::string(name), id);
    return id;
}

MemBlock AccountingAllocator::allocate(std::string_view name, MemCategory category,
                                       std::size_t bytes) {
    MemBlock b;
    b.category = category;
    if (bytes == 0) return b;
    void* p = nullptr;
    try {
        p = raw_.allocate(bytes);
    } catch (const std::bad_alloc&) {
        throw OutOfMemory(out_of_memory_message(name, category, bytes));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    b.ptr = p;
    b.bytes = bytes;
    b.name_id = intern(name);
    const auto c = static_cast<std::size_t>(category);
    const auto n = static_cast<std::int64_t>(bytes);
    current_[c] += n;
    if (current_[c] > peak_[c]) peak_[c] = current_[c];
    current_total_ += n;
    if (current_total_ > peak_total_) peak_total_ = current_total_;
    ++live_;
    if (record_events_ || taping_) {
        const MemEvent e{now_ns(), n, reinterpret_cast<std::uint64_t>(p), b.name_id, category};
        if (record_events_) events_.push_back(e);
        if (taping_) tape_.push_back(e);
    }
    return b;
}

std::string AccountingAllocator::out_of_memory_message(std::string_view name, MemCategory category,
                                                       std::size_t bytes) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::ostringstream os;
    os << std::fixed << std::setprecision(2) << "out of "
       << (raw_.device() == DeviceKind::cuda ? "device" : "host") << " memory allocating " << name
       << " (" << enum_name(kMemCategoryNames, category) << ", " << static_cast<double>(bytes) / 1e9
       << " GB) with " << static_cast<double>(current_total_) / 1e9 << " GB live";
    const char* sep = ": ";
    for (std::size_t c = 0; c < kMemCategoryCount; ++c) {
        if (current_[c] == 0) continue;
        os << sep << enum_name(kMemCategoryNames, static_cast<MemCategory>(c)) << ' '
           << static_cast<double>(current_[c]) / 1e9;
        sep = ", ";
    }
    return os.str();
}

void AccountingAllocator::free(MemBlock& b) noexcept {
    if (b.ptr == nullptr) return;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto c = static_cast<std::size_t>(b.category);
        const auto n = static_cast<std::int64_t>(b.bytes);
        current_[c] -= n;
        current_total_ -= n;
        --live_;
        if (record_events_ || taping_) {
            const MemEvent e{now_ns(), -n, reinterpret_cast<std::uint64_t>(b.ptr), b.name_id,
                             b.category};
            if (record_events_) events_.push_back(e);
            if (taping_) tape_.push_back(e);
        }
    }
    raw_.deallocate(b.ptr, b.bytes);
    b = MemBlock{};
}

void AccountingAllocator::begin_tape() {
    std::lock_guard<std::mutex> lock(mutex_);
    taping_ = true;
    tape_.clear();
}

std::vector<MemEvent> AccountingAllocator::end_tape() {
    std::lock_guard<std::mutex> lock(mutex_);
    taping_ = false;
    return std::move(tape_);
}

void AccountingAllocator::replay(const std::vector<MemEvent>& tape) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::int64_t t = now_ns();
    for (const MemEvent& e : tape) {
        const auto c = static_cast<std::size_t>(e.category);
        current_[c] += e.bytes;
        peak_[c] = std::max(peak_[c], current_[c]);
        current_total_ += e.bytes;
        peak_total_ = std::max(peak_total_, current_total_);
        live_ += e.bytes > 0 ? 1 : -1;
        if (record_events_) {
            // 1 ns apart at least: events at one instant make one sample of the trace's memory
            // counters (profiler::memory_counter_events), which would hide the tape's peak.
            if (!events_.empty() && t <= events_.back().t_ns) t = events_.back().t_ns + 1;
            events_.push_back(MemEvent{t, e.bytes, e.address, e.name_id, e.category});
        }
    }
}

void AccountingAllocator::set_record_events(bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    record_events_ = on;
}

void AccountingAllocator::clear_events() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<MemEvent>().swap(events_);
}

std::int64_t AccountingAllocator::current_bytes(MemCategory c) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_[static_cast<std::size_t>(c)];
}

std::int64_t AccountingAllocator::peak_bytes(MemCategory c) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_[static_cast<std::size_t>(c)];
}

std::int64_t AccountingAllocator::current_total_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_total_;
}

std::int64_t AccountingAllocator::peak_total_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_total_;
}

std::int64_t AccountingAllocator::live_blocks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_;
}

void AccountingAllocator::reset_peaks() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = current_;
    peak_total_ = current_total_;
}

}  // namespace napkin
