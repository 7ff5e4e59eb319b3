// Runtime switches: every environment variable the engine reads, in one typed table (name, type,
// default, what it changes, whether results stay bit-exact). Nothing else in the engine calls
// getenv. Switches that change results (measuring aids: other kernels, other summation orders,
// launches left out) are honoured only in developer builds (CMake option ES_DEVELOPER_SWITCHES);
// a release build ignores them and lists them in ignored_switches(), so the programs that print
// a run's configuration (bench, selftest) can say so. `expertscope-cli switches` prints the table.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace es {

enum class switch_type { flag, integer, text };

struct switch_info {
    const char *name;          // "ES_CUDA_PDL"
    switch_type type;
    const char *default_value; // as the engine behaves when unset ("1", "8192", "(unset)")
    const char *meaning;       // what it changes, in words
    bool exact;                // results bit-identical to the default whatever its value
};

// The table, in the order the documentation lists it.
std::span<const switch_info> all_switches();

// Whether this build honours switches that change results.
bool developer_switches_enabled();

// The raw value of a switch of the table: nullopt when unset or empty, or when the switch changes
// results and this is a release build. Reading a name outside the table is a programming error:
// it answers nullopt.
std::optional<std::string> switch_value(std::string_view name);
// Integer and flag readers: the fallback when unset; a value that is not a number is the fallback
// too (flags: "0", "false", "off" and "no" are false, anything else true).
int64_t switch_int(std::string_view name, int64_t fallback);
bool switch_flag(std::string_view name, bool fallback);

// Switches set in the environment that this build ignores (release build, result-changing), for
// a run's configuration line.
std::vector<std::string> ignored_switches();

} // namespace es
