// tokenizer_config.json of any text beside the reference tokenizer.model (and its
// special_tokens_map.json): load() refuses it with a message, or gives a tokenizer whose special
// ids are in the vocabulary (or -1 where optional) and that encodes and decodes the chat template.
#include "engine/model/chat_template.h"
#include "engine/model/tokenizer.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    static const std::filesystem::path dir = [] {
        auto d = fuzz::scratch_dir() / "tokenizer";
        std::filesystem::create_directories(d);
        const auto src = std::filesystem::path(ES_FUZZ_DATA_DIR) / "tokenizer";
        for (const char *f : {"tokenizer.model", "special_tokens_map.json"})
            std::filesystem::create_symlink(src / f, d / f);
        return d;
    }();
    fuzz::write_file(dir / "tokenizer_config.json", fuzz::as_text(data, size));
    auto tok = tokenizer::load(dir);
    if (!tok) {
        ES_FUZZ_CHECK(fuzz::is_specific(tok.message()));
        return 0;
    }
    const int32_t n = (*tok)->n_vocab();
    const auto &s = (*tok)->specials();
    for (int32_t id : {s.bos_id, s.eos_id, s.pad_id}) ES_FUZZ_CHECK(id >= -1 && id < n);
    for (int32_t id : {s.cls_id, s.sep_id}) ES_FUZZ_CHECK(id >= -1 && id < n);
    for (int32_t id : (*tok)->stop_ids()) ES_FUZZ_CHECK(id >= 0 && id < n);
    const auto ids =
        (*tok)->encode(render_chat({{chat_role::system, "你好"}, {chat_role::user, "hi <s> </s>"}}));
    for (int32_t id : ids) ES_FUZZ_CHECK(id >= 0 && id < n);
    (void)(*tok)->decode(ids);
    return 0;
}
