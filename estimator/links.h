// Interconnects between data-parallel ranks: the bandwidth one GPU can send at in one direction
// (what a ring collective is limited by), per generation of NVLink, InfiniBand and PCIe. Every
// value and its source is in docs/HARDWARE.md ("Links").
// Units: Gb/s = 1e9 bits/s, as network links are quoted; GB/s = 1e9 bytes/s, as NVLink is.
#pragma once

#include <string_view>
#include <vector>

namespace napkin {

struct LinkSpec {
    std::string_view name;       // flag value: "nvlink4"
    std::string_view full_name;  // "NVLink 4 (H100 SXM, 18 links)"
    double gbit_per_s = 0;       // per GPU, one direction
    std::string_view source;     // short citation; docs/HARDWARE.md has the full one
    double bytes_per_s() const { return gbit_per_s * 1e9 / 8; }
};

const std::vector<LinkSpec>& link_table();
const LinkSpec* find_link(std::string_view name);
// Throws UsageError("--link: unknown link 'x' (expected nvlink3|nvlink4|...)").
const LinkSpec& link_or_throw(std::string_view name);

}  // namespace napkin
