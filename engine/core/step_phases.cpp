// The phase sums of step_phases.h.
#include "engine/core/step_phases.h"

#include <algorithm>

namespace es {

void add_op_times(phase_times &ph, const std::vector<op_time> &ops) {
    for (const op_time &o : ops) {
        const double ms = o.dur_us / 1000.0;
        switch (o.phase) {
        case step_phase::attention: ph.attention_ms += ms; break;
        case step_phase::moe_routed:
        case step_phase::moe_shared: {
            // A launch of either MoE phase may hold the other's work (a fused kernel): split by bytes.
            const double sh = o.phase == step_phase::moe_shared ? 1.0 : std::clamp(o.shared, 0.0, 1.0);
            ph.moe_shared_ms += ms * sh;
            ph.moe_ms += ms * (1.0 - sh);
            break;
        }
        case step_phase::dense: ph.dense_ms += ms; break;
        case step_phase::head: ph.head_ms += ms; break;
        case step_phase::other: ph.other_ms += ms; break;
        }
    }
}

} // namespace es
