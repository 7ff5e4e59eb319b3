// config.json of any text: parse_model_config() refuses it with a message, or accepts a config
// that validate_model_config() also accepts and whose derived sizes (MoE layers, the CUDA weight
// arena at every precision) compute without overflow.
#include "engine/model/model_config.h"
#include "engine/runtime/engine.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    auto cfg = parse_model_config(std::string(fuzz::as_text(data, size)));
    if (!cfg) {
        ES_FUZZ_CHECK(fuzz::is_specific(cfg.message()));
        return 0;
    }
    ES_FUZZ_CHECK(validate_model_config(*cfg).ok());
    ES_FUZZ_CHECK(cfg->n_moe_layers() >= 0 && cfg->n_moe_layers() <= cfg->n_layer);
    int64_t n_moe = 0;
    if (cfg->n_layer <= 4096)
        for (int64_t il = 0; il < cfg->n_layer; ++il) n_moe += cfg->is_moe_layer(il) ? 1 : 0;
    if (cfg->n_layer <= 4096) ES_FUZZ_CHECK(n_moe == cfg->n_moe_layers());
    (void)cuda_weight_bytes(*cfg, weight_precision::bf16);
    (void)cuda_weight_bytes(*cfg, weight_precision::fp8);
    fp8_policy all_fp8;
    all_fp8.head = true;
    all_fp8.scales = scale_layout::block128;
    (void)cuda_weight_bytes(*cfg, weight_precision::fp8, all_fp8);
    return 0;
}
