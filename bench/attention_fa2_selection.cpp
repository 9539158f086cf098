// The engine's flash attention on chosen candidates (bench/attention_fa2_candidates.h,
// docs/CUDA.md "The engine on candidates"): NAPKIN_ATTENTION_CANDIDATES parsed into an
// Fa2Selection, and the dispatch that stands in for attention_flash_forward/backward.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "bench/attention_fa2_candidates.h"
#include "core/cuda/cuda_check.h"
#include "core/half.h"

namespace napkin::bench {

namespace {

constexpr const char* kVariable = "NAPKIN_ATTENTION_CANDIDATES";

int hd_index(std::int64_t HD) {
    return HD == 64 ? 0 : HD == 128 ? 1 : -1;
}

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

const Fa2Candidate* find_candidate(const std::string& name) {
    for (const Fa2Candidate& c : fa2_candidates())
        if (name == c.name) return &c;
    return nullptr;
}

std::string candidate_names() {
    std::string names;
    for (const Fa2Candidate& c : fa2_candidates())
        names += (names.empty() ? "" : ", ") + std::string(c.name);
    return names;
}

// Sets `slot` to c, or throws when `what` already has a candidate.
void take(const Fa2Candidate*& slot, const Fa2Candidate* c, const std::string& what) {
    if (slot != nullptr)
        throw std::invalid_argument(what + " is given twice (" + slot->name + " and " + c->name +
                                    ")");
    slot = c;
}

// The engine's own backward candidate at HD (its passes one at a time).
const Fa2Candidate& engine_backward(std::int64_t HD) {
    for (const Fa2Candidate& c : fa2_candidates())
        if (c.backward && c.is_default && c.HD == HD) return c;
    throw cuda::CudaError("no engine backward candidate at HD " + std::to_string(HD));
}

// The selection of NAPKIN_ATTENTION_CANDIDATES, parsed once and printed on stderr.
const Fa2Selection& selection() {
    static const Fa2Selection s = [] {
        const char* list = std::getenv(kVariable);
        Fa2Selection sel;
        try {
            sel = parse_fa2_selection(list != nullptr ? list : "");
        } catch (const std::invalid_argument& e) {
            throw cuda::CudaError(std::string(kVariable) + ": " + e.what());
        }
        std::fprintf(stderr, "napkin: flash attention (bf16) from %s: %s\n", kVariable,
                     describe(sel).c_str());
        return sel;
    }();
    return s;
}

// Throws unless c can run here.
void require_runnable(const Fa2Candidate& c) {
    if (!c.sm90a) return;
    const std::string why = fa2_sm90a_unavailable();
    if (!why.empty())
        throw cuda::CudaError(std::string(kVariable) + ": " + c.name + " runs on wgmma: " + why);
}

}  // namespace

Fa2Selection parse_fa2_selection(const std::string& list) {
    Fa2Selection s;
    if (trim(list).empty()) throw std::invalid_argument("expected candidate names, got none");
    std::size_t at = 0;
    while (at <= list.size()) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        const std::string entry = trim(list.substr(at, comma - at));
        at = comma + 1;
        if (entry.empty()) throw std::invalid_argument("an empty entry in \"" + list + "\"");
        const std::size_t sign = entry.find('@');
        const std::string name = entry.substr(0, sign);
        const Fa2Candidate* c = find_candidate(name);
        if (c == nullptr)
            throw std::invalid_argument("unknown candidate \"" + name +
                                        "\" (expected one of: " + candidate_names() + ")");
        int pass = -1;  // both
        if (sign != std::string::npos) {
            const std::string p = entry.substr(sign + 1);
            if (!c->backward)
                throw std::invalid_argument("\"" + entry + "\": " + name +
                                            " is a forward; @1 and @2 name a backward's passes");
            if (p != "1" && p != "2")
                throw std::invalid_argument("\"" + entry +
                                            "\": expected @1 (pass 1: dK, dV) or @2 (pass 2: dQ)");
            pass = p == "1" ? 0 : 1;
        }
        const int i = hd_index(c->HD);
        const std::string hd = "HD " + std::to_string(c->HD) + "'s ";
        if (!c->backward) {
            take(s.forward[i], c, hd + "forward");
            continue;
        }
        for (int q = 0; q < 2; ++q)
            if (pass < 0 || pass == q) take(s.pass[i][q], c, hd + "pass " + std::to_string(q + 1));
    }
    return s;
}

std::string describe(const Fa2Selection& s) {
    std::string out;
    auto name = [](const Fa2Candidate* c) { return c != nullptr ? c->name : "engine"; };
    for (int i = 0; i < 2; ++i) {
        if (s.forward[i] == nullptr && s.pass[i][0] == nullptr && s.pass[i][1] == nullptr) continue;
        out += std::string(out.empty() ? "" : "; ") + "HD " + (i == 0 ? "64" : "128") +
               ": forward " + name(s.forward[i]) + ", pass 1 " + name(s.pass[i][0]) + ", pass 2 " +
               name(s.pass[i][1]);
    }
    return out;
}

void selected_flash_forward(const AttentionFlashForwardArgs<bf16_t>& args,
                            const cuda::Launch& launch) {
    const int i = hd_index(args.dims.HD);
    const Fa2Candidate* c = i >= 0 ? selection().forward[i] : nullptr;
    if (c == nullptr) return cuda::attention_flash_forward<bf16_t>(args, launch);
    require_runnable(*c);
    c->fwd(args, launch);
}

void selected_flash_backward(const AttentionFlashBackwardArgs<bf16_t>& args,
                             const cuda::Launch& launch) {
    const int i = hd_index(args.dims.HD);
    const Fa2Candidate* p1 = i >= 0 ? selection().pass[i][0] : nullptr;
    const Fa2Candidate* p2 = i >= 0 ? selection().pass[i][1] : nullptr;
    if (p1 == nullptr && p2 == nullptr) return cuda::attention_flash_backward<bf16_t>(args, launch);
    if (p1 == p2) {  // one candidate's two passes, as it launches them
        require_runnable(*p1);
        return p1->bwd(args, launch);
    }
    const Fa2Candidate& engine = engine_backward(args.dims.HD);
    const Fa2Candidate& first = p1 != nullptr ? *p1 : engine;
    const Fa2Candidate& second = p2 != nullptr ? *p2 : engine;
    require_runnable(first);
    require_runnable(second);
    first.bwd_pass[0](args, launch);
    second.bwd_pass[1](args, launch);
}

}  // namespace napkin::bench
