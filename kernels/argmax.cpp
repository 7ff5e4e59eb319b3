// CPU twin of argmax (see argmax.cuh).
#include "kernels/argmax.cuh"

namespace es {

void argmax_ref(const argmax_params &p) {
    for (int64_t r = 0; r < p.n_rows; ++r) {
        const float *x = p.x + r * p.n;
        int64_t best = -1;
        for (int64_t j = 0; j < p.n; ++j)
            if (!std::isnan(x[j]) && (best < 0 || x[j] > x[best])) best = j;
        p.out[r] = int32_t(best < 0 ? 0 : best);
    }
}

} // namespace es
