// CPU twin of sample_rows: engine/core/sampling.h's draw, row by row.
#include "kernels/sample_rows.cuh"

namespace es {

void sample_rows_ref(const sample_rows_params &p) {
    for (int64_t r = 0; r < p.n_rows; ++r)
        p.ids[r] = sampling_draw(p.logits + r * p.n_vocab, p.n_vocab, p.rows[r], p.tokens,
                                 p.values ? p.values + r : nullptr, p.row_max ? p.row_max + r : nullptr);
}

} // namespace es
