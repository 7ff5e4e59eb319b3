// model.safetensors.index.json of any bytes beside two valid shards: open_dir() either refuses it
// with a message or indexes exactly the tensors the shards hold, each from the shard the index
// names. Shard names that leave the folder are refused.
#include "engine/model/safetensors.h"
#include "fuzz_support.h"
#include "test_support.h"

namespace {

// A valid safetensors file holding the named F32 tensors of 2 elements each.
std::string shard(std::initializer_list<const char *> names) {
    std::vector<es_test::st_tensor> tensors;
    for (const char *n : names) tensors.push_back({n, "F32", {2}, QByteArray(8, '\x01')});
    return es_test::safetensors_bytes(tensors).toStdString();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    static const std::filesystem::path dir = [] {
        auto d = fuzz::scratch_dir() / "sharded";
        std::filesystem::create_directories(d);
        fuzz::write_file(d / "model-00001-of-00002.safetensors", shard({"a", "b"}));
        fuzz::write_file(d / "model-00002-of-00002.safetensors", shard({"c"}));
        // A file outside the folder that a traversing shard name would reach.
        fuzz::write_file(d.parent_path() / "outside.safetensors", shard({"x"}));
        return d;
    }();
    fuzz::write_file(dir / "model.safetensors.index.json", fuzz::as_text(data, size));
    auto store = weight_store::open_dir(dir);
    if (!store) {
        ES_FUZZ_CHECK(fuzz::is_specific(store.message()));
        return 0;
    }
    ES_FUZZ_CHECK(!(*store)->find("x"));
    for (const auto &[name, t] : (*store)->all()) {
        ES_FUZZ_CHECK(t->n_bytes == 8);
        ES_FUZZ_CHECK(t->file.rfind("model-0000", 0) == 0);
    }
    return 0;
}
