// Tests of config.json parsing (HF defaults, rope forms, MoE layer selection, every refusal with a
// message naming the key and the expectation), the benchmark shapes, and bind_model_tensors on
// tiny model folders written in the test (missing, transposed, FP8 tensors; mtp skipped).
#include "engine/model/model_config.h"
#include "engine/model/model_tensors.h"
#include "engine/model/safetensors.h"
#include "engine/runtime/model.h"
#include "test_support.h"

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>

using namespace es;
using namespace es_test;

namespace {

QString check_messages(const QString &msg, const QStringList &expect) {
    for (const QString &e : expect)
        if (!msg.contains(e)) return QString("message \"%1\" lacks \"%2\"").arg(msg, e);
    return {};
}

// tiny_config(moe) with `patch` (a JSON object) merged over it; null values delete keys.
QByteArray patched(bool moe, const char *patch) {
    json c = tiny_config(moe);
    c.merge_patch(json::parse(patch));
    return QByteArray::fromStdString(c.dump());
}

} // namespace

class test_model_config : public QObject {
    Q_OBJECT

private slots:
    void bad_config_data();
    void bad_config();
    void defaults_data();
    void defaults();
    void null_means_derived();
    void rope_data();
    void rope();
    void eos_forms_data();
    void eos_forms();
    void moe_layer_selection_data();
    void moe_layer_selection();
    void shapes();
    void load_from_dir();
    void generation_config_data();
    void generation_config();

    void bind_valid_data();
    void bind_valid();
    void bind_errors_data();
    void bind_errors();
    void bind_warnings();
};

void test_model_config::bad_config_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QStringList>("expect");
    QTest::newRow("not_json") << QByteArray("{\"vocab_size\": ")
                              << QStringList{"config.json", "not valid JSON"};
    QTest::newRow("not_object") << QByteArray("[1]") << QStringList{"config.json", "expected a JSON object"};
    QTest::newRow("hidden_size_string")
        << patched(false, R"({"hidden_size": "1024"})")
        << QStringList{"config.json", "'hidden_size'", "string", "expected an integer"};
    QTest::newRow("layers_float") << patched(false, R"({"num_hidden_layers": 2.5})")
                                  << QStringList{"'num_hidden_layers'", "expected an integer"};
    QTest::newRow("tie_not_bool") << patched(false, R"({"tie_word_embeddings": 1})")
                                  << QStringList{"'tie_word_embeddings'", "expected true or false"};
    QTest::newRow("eps_string") << patched(false, R"({"rms_norm_eps": "1e-5"})")
                                << QStringList{"'rms_norm_eps'", "expected a number"};
    QTest::newRow("architectures_not_list") << patched(false, R"({"architectures": "Ernie4_5ForCausalLM"})")
                                            << QStringList{"'architectures'", "expected a list of strings"};
    QTest::newRow("heads_not_divisible")
        << patched(false, R"({"num_attention_heads": 20, "num_key_value_heads": 3})")
        << QStringList{"config.json: key 'num_attention_heads' (20) is not divisible by "
                       "'num_key_value_heads' (3)"};
    QTest::newRow("absurd_vocab") << patched(false, R"({"vocab_size": 5000000})")
                                  << QStringList{"'vocab_size' (5000000)", "absurd", "4000000"};
    QTest::newRow("absurd_hidden") << patched(false, R"({"hidden_size": 1000000})")
                                   << QStringList{"'hidden_size' (1000000)", "absurd"};
    QTest::newRow("absurd_param_count")
        << patched(false, R"({"hidden_size": 65536, "num_hidden_layers": 1024, "intermediate_size": 1000000,
                              "num_attention_heads": 512, "head_dim": 128})")
        << QStringList{"parameters", "absurd"};
    QTest::newRow("absurd_huge_integer") << patched(false, R"({"vocab_size": 18446744073709551615})")
                                         << QStringList{"'vocab_size'", "fits 64 bits"};
    QTest::newRow("zero_layers") << patched(false, R"({"num_hidden_layers": 0})")
                                 << QStringList{"'num_hidden_layers' (0)", "at least 1"};
    QTest::newRow("negative_heads") << patched(false, R"({"num_attention_heads": -4})")
                                    << QStringList{"'num_attention_heads' (-4)", "at least 1"};
    QTest::newRow("head_dim_odd") << patched(false, R"({"head_dim": 7})")
                                  << QStringList{"'head_dim' (7)", "even"};
    QTest::newRow("unsupported_architecture")
        << patched(false, R"({"architectures": ["LlamaForCausalLM"]})")
        << QStringList{"unsupported architecture 'LlamaForCausalLM'", "Ernie4_5ForCausalLM",
                       "Ernie4_5_MoeForCausalLM"};
    QTest::newRow("unsupported_model_type")
        << patched(false, R"({"architectures": null, "model_type": "llama"})")
        << QStringList{"unsupported architecture 'llama'", "ernie4_5_moe"};
    QTest::newRow("no_architecture") << patched(false, R"({"architectures": null, "model_type": null})")
                                     << QStringList{"neither 'architectures' nor 'model_type'"};
    QTest::newRow("rope_type_yarn")
        << patched(false, R"({"rope_parameters": {"rope_theta": 10000, "rope_type": "yarn"}})")
        << QStringList{"rope_type 'yarn'", "not supported", "'rope_parameters.rope_type'"};
    QTest::newRow("rope_scaling_linear")
        << patched(false, R"({"rope_scaling": {"type": "linear", "factor": 2.0}})")
        << QStringList{"rope_type 'linear'", "not supported"};
    QTest::newRow("hidden_act_gelu") << patched(false, R"({"hidden_act": "gelu"})")
                                     << QStringList{"'hidden_act'", "'gelu'", "expected 'silu'"};
    QTest::newRow("use_bias") << patched(false, R"({"use_bias": true})")
                              << QStringList{"use_bias=true is not supported"};
    QTest::newRow("eos_out_of_vocab") << patched(false, R"({"eos_token_id": 64})")
                                      << QStringList{"'eos_token_id' (64)", "'vocab_size' (64)"};
    QTest::newRow("eos_list_of_strings")
        << patched(false, R"({"eos_token_id": [2, "x"]})")
        << QStringList{"'eos_token_id'", "an integer or a non-empty list of integers"};
    QTest::newRow("bos_negative") << patched(false, R"({"bos_token_id": -5})")
                                  << QStringList{"'bos_token_id' (-5)"};
    QTest::newRow("moe_k_above_experts")
        << patched(true, R"({"moe_k": 5})") << QStringList{"'moe_k' (5)", "'moe_num_experts' (4)"};
    QTest::newRow("moe_k_zero") << patched(true, R"({"moe_k": 0})") << QStringList{"'moe_k' (0)"};
    QTest::newRow("moe_experts_beyond_int16") << patched(true, R"({"moe_num_experts": 40000})")
                                              << QStringList{"'moe_num_experts' (40000)", "absurd"};
    QTest::newRow("moe_start_out_of_range")
        << patched(true, R"({"moe_layer_start_index": 3})")
        << QStringList{"'moe_layer_start_index' (3)", "'num_hidden_layers' (3)"};
    QTest::newRow("moe_end_before_start")
        << patched(true, R"({"moe_layer_start_index": 2, "moe_layer_end_index": 1})")
        << QStringList{"'moe_layer_end_index' (1)", "'moe_layer_start_index' (2)"};
    QTest::newRow("moe_interval_zero") << patched(true, R"({"moe_layer_interval": 0})")
                                       << QStringList{"'moe_layer_interval' (0)", "at least 1"};
    QTest::newRow("moe_shared_negative")
        << patched(true, R"({"moe_num_shared_experts": -1})") << QStringList{"'moe_num_shared_experts' (-1)"};
    QTest::newRow("moe_ff_zero") << patched(true, R"({"moe_intermediate_size": 0})")
                                 << QStringList{"'moe_intermediate_size' (0)"};
}

void test_model_config::bad_config() {
    QFETCH(QByteArray, text);
    QFETCH(QStringList, expect);
    auto r = parse_model_config(text.toStdString());
    QVERIFY2(!r.ok(), "bad config was accepted");
    const QString problem = check_messages(QString::fromStdString(r.message()), expect);
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

// Only the architecture given: every other value is HF transformers' default.
void test_model_config::defaults_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<bool>("moe");
    QTest::newRow("dense_architectures")
        << QByteArray(R"({"architectures": ["Ernie4_5ForCausalLM"]})") << false;
    QTest::newRow("dense_old_spelling")
        << QByteArray(R"({"architectures": ["Ernie4_5_ForCausalLM"]})") << false;
    QTest::newRow("dense_model_type") << QByteArray(R"({"model_type": "ernie4_5"})") << false;
    QTest::newRow("moe_architectures")
        << QByteArray(R"({"architectures": ["Ernie4_5_MoeForCausalLM"]})") << true;
    QTest::newRow("moe_model_type") << QByteArray(R"({"model_type": "ernie4_5_moe", "rope_scaling": null})")
                                    << true;
}

void test_model_config::defaults() {
    QFETCH(QByteArray, text);
    QFETCH(bool, moe);
    auto r = parse_model_config(text.toStdString());
    QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
    const model_config &c = *r;
    QCOMPARE(c.arch, moe ? model_arch::moe : model_arch::dense);
    QCOMPARE(c.n_vocab, int64_t(103424));
    QCOMPARE(c.n_embd, int64_t(moe ? 2560 : 1024));
    QCOMPARE(c.n_ff, int64_t(moe ? 12288 : 3072));
    QCOMPARE(c.n_layer, int64_t(moe ? 28 : 18));
    QCOMPARE(c.n_head, int64_t(moe ? 20 : 16));
    QCOMPARE(c.n_head_kv, int64_t(moe ? 4 : 2));
    QCOMPARE(c.head_dim, int64_t(128));
    QCOMPARE(c.n_ctx_train, int64_t(131072));
    QCOMPARE(c.rope_theta, 500000.0);
    QCOMPARE(c.rms_eps, 1e-5);
    QVERIFY(c.tie_word_embeddings);
    QCOMPARE(c.bos_id, 1);
    QCOMPARE(c.eos_ids, std::vector<int32_t>{2});
    QCOMPARE(c.pad_id, 0);
    if (moe) {
        QCOMPARE(c.n_expert, int64_t(64));
        QCOMPARE(c.n_expert_used, int64_t(6));
        QCOMPARE(c.n_ff_exp, int64_t(1536));
        QCOMPARE(c.n_expert_shared, int64_t(2));
        QCOMPARE(c.moe_layer_start, int64_t(1));
        QCOMPARE(c.moe_layer_end, int64_t(27));
        QCOMPARE(c.moe_layer_interval, int64_t(1));
        QCOMPARE(c.moe_norm_min, 1e-12);
        QVERIFY(!c.is_moe_layer(0));
        QVERIFY(c.is_moe_layer(1));
        QVERIFY(c.is_moe_layer(27));
        QCOMPARE(c.n_moe_layers(), int64_t(27));
    } else {
        QCOMPARE(c.n_moe_layers(), int64_t(0));
    }
}

void test_model_config::null_means_derived() {
    // num_key_value_heads null: as many as query heads; head_dim null: hidden / heads.
    json d = tiny_config(false); // (merge_patch would delete null keys: set them directly)
    d["num_key_value_heads"] = nullptr;
    d["head_dim"] = nullptr;
    auto r = parse_model_config(d.dump());
    QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
    QCOMPARE(r->n_head_kv, int64_t(4));
    QCOMPARE(r->head_dim, int64_t(8));
    // MoE without head_dim: hidden / heads (dense would default to 128).
    json c = tiny_config(true);
    c.erase("head_dim");
    auto m = parse_model_config(c.dump());
    QVERIFY2(m.ok(), m.ok() ? "" : m.message().c_str());
    QCOMPARE(m->head_dim, int64_t(8));
    d = tiny_config(false);
    d["pad_token_id"] = nullptr;
    auto p = parse_model_config(d.dump());
    QVERIFY(p.ok());
    QCOMPARE(p->pad_id, -1);
}

void test_model_config::rope_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<double>("theta");
    QTest::newRow("top_level") << patched(false, R"({"rope_theta": 10000})") << 10000.0;
    QTest::newRow("absent") << patched(false, R"({"rope_theta": null})") << 500000.0;
    QTest::newRow("rope_parameters")
        << patched(
               false,
               R"({"rope_theta": null, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}})")
        << 1000000.0;
    QTest::newRow("rope_parameters_without_type")
        << patched(false, R"({"rope_theta": null, "rope_parameters": {"rope_theta": 250000}})") << 250000.0;
    QTest::newRow("legacy_rope_scaling_null")
        << patched(false, R"({"rope_scaling": null, "rope_theta": 20000})") << 20000.0;
}

void test_model_config::rope() {
    QFETCH(QByteArray, text);
    QFETCH(double, theta);
    auto r = parse_model_config(text.toStdString());
    QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
    QCOMPARE(r->rope_theta, theta);
}

void test_model_config::eos_forms_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QList<int>>("eos");
    QTest::newRow("int") << patched(false, R"({"eos_token_id": 5})") << QList<int>{5};
    QTest::newRow("list") << patched(false, R"({"eos_token_id": [2, 7]})") << QList<int>{2, 7};
    QTest::newRow("absent") << patched(false, R"({"eos_token_id": null})") << QList<int>{2};
}

void test_model_config::eos_forms() {
    QFETCH(QByteArray, text);
    QFETCH(QList<int>, eos);
    auto r = parse_model_config(text.toStdString());
    QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
    QCOMPARE(QList<int>(r->eos_ids.begin(), r->eos_ids.end()), eos);
}

void test_model_config::moe_layer_selection_data() {
    QTest::addColumn<int>("n_layer");
    QTest::addColumn<int>("start");
    QTest::addColumn<int>("end");
    QTest::addColumn<int>("interval");
    QTest::addColumn<QList<int>>("moe_layers");
    QTest::newRow("all_but_first") << 4 << 1 << -1 << 1 << QList<int>{1, 2, 3};
    QTest::newRow("interval_2_end_5") << 8 << 1 << 5 << 2 << QList<int>{1, 3, 5};
    QTest::newRow("interval_2_end_minus_1") << 8 << 0 << -1 << 2 << QList<int>{1, 3, 5, 7};
    QTest::newRow("interval_3_start_2") << 9 << 2 << -1 << 3 << QList<int>{2, 5, 8};
    QTest::newRow("start_equals_end") << 6 << 4 << 4 << 1 << QList<int>{4};
    QTest::newRow("one_layer") << 1 << 0 << -1 << 1 << QList<int>{0};
}

void test_model_config::moe_layer_selection() {
    QFETCH(int, n_layer);
    QFETCH(int, start);
    QFETCH(int, end);
    QFETCH(int, interval);
    QFETCH(QList<int>, moe_layers);
    json c = tiny_config(true);
    c["num_hidden_layers"] = n_layer;
    c["moe_layer_start_index"] = start;
    c["moe_layer_end_index"] = end;
    c["moe_layer_interval"] = interval;
    auto r = parse_model_config(c.dump());
    QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
    QList<int> got;
    for (int il = 0; il < n_layer; ++il)
        if (r->is_moe_layer(il)) got.push_back(il);
    QCOMPARE(got, moe_layers);
    QCOMPARE(r->n_moe_layers(), int64_t(moe_layers.size()));
}

void test_model_config::shapes() {
    auto small = model_config_for_shape("ernie-4.5-0.3b");
    QVERIFY2(small.ok(), small.ok() ? "" : small.message().c_str());
    QCOMPARE(small->arch, model_arch::dense);
    QCOMPARE(small->q_dim(), int64_t(2048)); // != hidden: head_dim comes from the config
    QCOMPARE(small->kv_dim(), int64_t(256));
    // embed 103424*1024 + 18 * (2*1024 + 2*2048*1024 + 2*256*1024 + 3*3072*1024) + 1024
    QCOMPARE(small->n_params(), int64_t(360748032));
    QCOMPARE(small->n_params_active(), small->n_params());
    QCOMPARE(small->kv_bytes_per_token(2), int64_t(2 * 18 * 256 * 2));

    auto big = model_config_for_shape("ernie-4.5-21b-a3b");
    QVERIFY2(big.ok(), big.ok() ? "" : big.message().c_str());
    QCOMPARE(big->arch, model_arch::moe);
    QCOMPARE(big->n_moe_layers(), int64_t(27));
    QVERIFY(!big->is_moe_layer(0));
    QVERIFY(big->n_params() > int64_t(21e9) && big->n_params() < int64_t(22.5e9));
    QVERIFY(big->n_params_active() > int64_t(2.8e9) && big->n_params_active() < int64_t(3.6e9));

    auto bad = model_config_for_shape("ernie-4.5-0.3b-moe");
    QVERIFY(!bad.ok());
    const QString problem = check_messages(QString::fromStdString(bad.message()),
                                           {"'ernie-4.5-0.3b-moe'", "ernie-4.5-0.3b", "ernie-4.5-21b-a3b"});
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

void test_model_config::load_from_dir() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    auto missing = load_model_config(tmp.path().toStdString());
    QVERIFY(!missing.ok());
    QVERIFY2(QString::fromStdString(missing.message()).contains(tmp.filePath("config.json")),
             missing.message().c_str());

    QVERIFY(write_file(tmp.filePath("config.json"), patched(false, R"({"num_attention_heads": 3})")));
    auto bad = load_model_config(tmp.path().toStdString());
    QVERIFY(!bad.ok());
    QVERIFY2(QString::fromStdString(bad.message()).contains(tmp.filePath("config.json")),
             bad.message().c_str());

    QVERIFY(write_file(tmp.filePath("config.json"), QByteArray::fromStdString(tiny_config(true).dump())));
    auto good = load_model_config(tmp.path().toStdString());
    QVERIFY2(good.ok(), good.ok() ? "" : good.message().c_str());
    QCOMPARE(good->n_expert, int64_t(4));
    QCOMPARE(good->arch_name, std::string("Ernie4_5_MoeForCausalLM"));
}

// ----- generation_config.json ---------------------------------------------------------------

// The sampling defaults: the file's values over HF's, its eos ids added to the config's; values a
// float or 32 bits cannot hold, or that are not token ids, are refused naming the key (before,
// 2^40 wrapped into another id and 1e300 became an infinite temperature).
void test_model_config::generation_config_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QString>("expect"); // empty: loads
    QTest::newRow("hub file")
        << QByteArray(R"({"temperature": 0.6, "top_p": 0.9, "top_k": 20, "eos_token_id": [2, 7]})")
        << QString();
    QTest::newRow("not an object") << QByteArray("[1]") << QStringLiteral("not a JSON object");
    QTest::newRow("temperature string")
        << QByteArray(R"({"temperature": "hot"})") << QStringLiteral("'temperature' must be a number");
    QTest::newRow("temperature beyond float")
        << QByteArray(R"({"temperature": 1e300})") << QStringLiteral("'temperature' must be a number");
    QTest::newRow("top_k beyond 32 bits") << QByteArray(R"({"top_k": 10000000000})")
                                          << QStringLiteral("'top_k' is 10000000000, beyond 32 bits");
    QTest::newRow("eos beyond 32 bits")
        << QByteArray(R"({"eos_token_id": [2, 1099511627776]})")
        << QStringLiteral("'eos_token_id' holds 1099511627776, not a token id");
    QTest::newRow("eos negative") << QByteArray(R"({"eos_token_id": -1})")
                                  << QStringLiteral("'eos_token_id' holds -1, not a token id");
    QTest::newRow("penalty large but finite")
        << QByteArray(R"({"repetition_penalty": 3e38, "temperature": 0.5})") << QString();
}

void test_model_config::generation_config() {
    QFETCH(QByteArray, text);
    QFETCH(QString, expect);
    QTemporaryDir tmp;
    QVERIFY(write_file(tmp.filePath("generation_config.json"), text));
    model_config cfg = *model_config_for_shape("ernie-4.5-0.3b");
    cfg.eos_ids = {2};
    auto sp = load_generation_config(tmp.path().toStdString(), cfg);
    if (expect.isEmpty()) {
        QVERIFY2(sp.ok(), sp.ok() ? "" : sp.message().c_str());
        QVERIFY(sp->validate().empty());
        if (QTest::currentDataTag() == QLatin1String("hub file")) {
            QCOMPARE(sp->temperature, 0.6f);
            QCOMPARE(sp->top_k, 20);
            QCOMPARE(sp->stop_ids, (std::vector<int32_t>{2, 7}));
        }
        return;
    }
    QVERIFY(!sp.ok());
    QVERIFY2(QString::fromStdString(sp.message()).contains(expect), sp.message().c_str());
    QVERIFY2(QString::fromStdString(sp.message()).contains("generation_config.json"), sp.message().c_str());
}

// ----- bind_model_tensors ------------------------------------------------------------------

void test_model_config::bind_valid_data() {
    QTest::addColumn<QByteArray>("config");
    QTest::addColumn<int>("n_shards");
    QTest::addColumn<QString>("tweak"); // "" | "bias_1d" | "f32_f16" | "router_bf16"
    QTest::newRow("dense_tied") << patched(false, "{}") << 1 << "";
    QTest::newRow("dense_untied") << patched(false, R"({"tie_word_embeddings": false})") << 1 << "";
    QTest::newRow("dense_f32_f16_mix") << patched(false, "{}") << 1 << "f32_f16";
    QTest::newRow("moe_single_file") << patched(true, "{}") << 1 << "";
    QTest::newRow("moe_two_shards") << patched(true, "{}") << 2 << "";
    QTest::newRow("moe_three_shards_untied") << patched(true, R"({"tie_word_embeddings": false})") << 3 << "";
    QTest::newRow("moe_no_shared") << patched(true, R"({"moe_num_shared_experts": 0})") << 1 << "";
    QTest::newRow("moe_bias_1d") << patched(true, "{}") << 1 << "bias_1d";
    QTest::newRow("moe_router_bf16") << patched(true, "{}") << 1 << "router_bf16";
    QTest::newRow("moe_interval_2") << patched(true, R"({"num_hidden_layers": 4, "moe_layer_start_index": 0,
                                                        "moe_layer_interval": 2})")
                                    << 2 << "";
}

void test_model_config::bind_valid() {
    QFETCH(QByteArray, config);
    QFETCH(int, n_shards);
    QFETCH(QString, tweak);
    auto cfg = parse_model_config(config.toStdString());
    QVERIFY2(cfg.ok(), cfg.ok() ? "" : cfg.message().c_str());
    std::vector<st_tensor> ts = model_tensor_list(*cfg);
    for (st_tensor &t : ts) {
        const QString name = QString::fromStdString(t.name);
        if (tweak == "bias_1d" && name.endsWith("e_score_correction_bias")) t.shape = {cfg->n_expert};
        if (tweak == "router_bf16" && name.endsWith("mlp.gate.weight")) {
            t.dtype = "BF16";
            t.data = t.data.left(t.data.size() / 2);
        }
        if (tweak == "f32_f16" && name.contains("norm")) {
            t.dtype = "F32";
            t.data = f32_bytes(std::vector<float>(size_t(n_elements(t.shape)), 1.0f));
        }
        if (tweak == "f32_f16" && name.contains("k_proj")) t.dtype = "F16"; // same byte count as BF16
    }
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    QVERIFY(write_model_dir(tmp.path(), json::parse(config.toStdString()), ts, n_shards));

    auto store = weight_store::open_dir(tmp.path().toStdString());
    QVERIFY2(store.ok(), store.ok() ? "" : store.message().c_str());
    QCOMPARE((*store)->all().size(), ts.size());
    auto bound = bind_model_tensors(*cfg, **store);
    QVERIFY2(bound.ok(), bound.ok() ? "" : bound.message().c_str());
    const model_tensors &mt = *bound;
    QVERIFY2(mt.warnings.empty(), mt.warnings.empty() ? "" : mt.warnings.front().c_str());
    QCOMPARE(int64_t(mt.layers.size()), cfg->n_layer);
    QVERIFY(mt.tok_embd && mt.output_norm && mt.output);
    if (cfg->tie_word_embeddings)
        QCOMPARE(mt.output, mt.tok_embd);
    else
        QCOMPARE(mt.output->name, std::string("lm_head.weight"));
    for (int64_t il = 0; il < cfg->n_layer; ++il) {
        const layer_tensors &L = mt.layers[size_t(il)];
        QCOMPARE(L.is_moe, cfg->is_moe_layer(il));
        QVERIFY(L.attn_norm && L.ffn_norm && L.wq && L.wk && L.wv && L.wo);
        QCOMPARE(L.wo->shape, (std::vector<int64_t>{cfg->n_embd, cfg->q_dim()}));
        if (!L.is_moe) {
            QVERIFY(L.ffn_gate && L.ffn_up && L.ffn_down);
            QVERIFY(L.ffn_gate_exps.empty());
            continue;
        }
        QVERIFY(L.ffn_gate_inp && L.ffn_exp_probs_b && !L.ffn_gate);
        QCOMPARE(int64_t(L.ffn_gate_exps.size()), cfg->n_expert);
        QCOMPARE(int64_t(L.ffn_down_exps.size()), cfg->n_expert);
        for (const tensor_view *t : L.ffn_up_exps) QVERIFY(t != nullptr);
        QCOMPARE(L.ffn_down_exps[1]->name,
                 "model.layers." + std::to_string(il) + ".mlp.experts.1.down_proj.weight");
        QCOMPARE(L.ffn_gate_shexp != nullptr, cfg->n_expert_shared > 0);
    }
}

// Each row writes a valid tiny model, then applies one mutation: "drop:NAME", "transpose:NAME",
// "dtype:NAME:DT" (data resized), "reshape:NAME:AxB", "add:NAME" (an extra [2] BF16 tensor).
void test_model_config::bind_errors_data() {
    QTest::addColumn<QByteArray>("config");
    QTest::addColumn<QString>("mutation");
    QTest::addColumn<QStringList>("expect");
    const QByteArray dense = patched(false, "{}"), moe = patched(true, "{}");
    QTest::newRow("missing_tensor")
        << dense << "drop:model.layers.1.mlp.up_proj.weight"
        << QStringList{"model.safetensors: missing tensor 'model.layers.1.mlp.up_proj.weight'"};
    QTest::newRow("missing_embedding") << dense << "drop:model.embed_tokens.weight"
                                       << QStringList{"missing tensor 'model.embed_tokens.weight'"};
    QTest::newRow("transposed_q_proj")
        << dense << "transpose:model.layers.0.self_attn.q_proj.weight"
        << QStringList{"model.safetensors", "tensor 'model.layers.0.self_attn.q_proj.weight' "
                                            "has shape [32, 64], expected [64, 32] ([out, in])"};
    QTest::newRow("transposed_down_proj") << dense << "transpose:model.layers.1.mlp.down_proj.weight"
                                          << QStringList{"has shape [48, 32], expected [32, 48] ([out, in])"};
    QTest::newRow("wrong_kv_width") << dense << "reshape:model.layers.0.self_attn.k_proj.weight:16x64"
                                    << QStringList{"'model.layers.0.self_attn.k_proj.weight'",
                                                   "has shape [16, 64]", "expected [32, 32]"};
    QTest::newRow("wrong_norm") << dense << "reshape:model.norm.weight:1x32"
                                << QStringList{"'model.norm.weight' has shape [1, 32], expected [32]"};
    QTest::newRow("fp8_weight") << dense << "dtype:model.layers.0.mlp.gate_proj.weight:F8_E4M3"
                                << QStringList{"'model.layers.0.mlp.gate_proj.weight'", "F8_E4M3", "FP8",
                                               "not supported yet", "F32, F16 or BF16"};
    QTest::newRow("untied_without_lm_head")
        << patched(false, R"({"tie_word_embeddings": false})") << "drop:lm_head.weight"
        << QStringList{"missing tensor 'lm_head.weight'"};
    QTest::newRow("missing_expert") << moe << "drop:model.layers.2.mlp.experts.3.gate_proj.weight"
                                    << QStringList{
                                           "missing tensor 'model.layers.2.mlp.experts.3.gate_proj.weight'"};
    QTest::newRow("missing_shared_expert")
        << moe << "drop:model.layers.1.mlp.shared_experts.down_proj.weight"
        << QStringList{"missing tensor 'model.layers.1.mlp.shared_experts.down_proj.weight'"};
    QTest::newRow("missing_router_bias")
        << moe << "drop:model.layers.1.mlp.moe_statics.e_score_correction_bias"
        << QStringList{"missing tensor 'model.layers.1.mlp.moe_statics.e_score_correction_bias'"};
    QTest::newRow("router_transposed")
        << moe << "transpose:model.layers.1.mlp.gate.weight"
        << QStringList{"'model.layers.1.mlp.gate.weight' has shape [32, 4], expected [4, 32]"};
    QTest::newRow("bias_wrong_length")
        << moe << "reshape:model.layers.1.mlp.moe_statics.e_score_correction_bias:1x3"
        << QStringList{"has shape [1, 3], expected [1, 4] or [4]"};
    QTest::newRow("expert_transposed") << moe << "transpose:model.layers.1.mlp.experts.0.up_proj.weight"
                                       << QStringList{"has shape [32, 16], expected [16, 32] ([out, in])"};
}

namespace {

void mutate(std::vector<st_tensor> &ts, const QString &mutation) {
    const QStringList parts = mutation.split(':');
    const std::string name = parts.value(1).toStdString();
    auto it = std::find_if(ts.begin(), ts.end(), [&](const st_tensor &t) { return t.name == name; });
    if (parts[0] == "add") {
        ts.push_back({name, "BF16", {2}, u16_bytes({0, 0})});
        return;
    }
    QVERIFY2(it != ts.end(), qPrintable("no tensor " + parts[1]));
    if (parts[0] == "drop") {
        ts.erase(it);
    } else if (parts[0] == "transpose") {
        std::reverse(it->shape.begin(), it->shape.end());
    } else if (parts[0] == "dtype") {
        it->dtype = parts[2].toStdString();
        it->data = QByteArray(
            qsizetype(n_elements(it->shape) * int64_t(dtype_size(*dtype_from_name(it->dtype)))), '\0');
    } else if (parts[0] == "reshape") {
        it->shape.clear();
        for (const QString &d : parts[2].split('x')) it->shape.push_back(d.toLongLong());
        it->data = QByteArray(
            qsizetype(n_elements(it->shape) * int64_t(dtype_size(*dtype_from_name(it->dtype)))), '\0');
    }
}

} // namespace

void test_model_config::bind_errors() {
    QFETCH(QByteArray, config);
    QFETCH(QString, mutation);
    QFETCH(QStringList, expect);
    auto cfg = parse_model_config(config.toStdString());
    QVERIFY2(cfg.ok(), cfg.ok() ? "" : cfg.message().c_str());
    std::vector<st_tensor> ts = model_tensor_list(*cfg);
    mutate(ts, mutation);
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    QVERIFY(write_model_dir(tmp.path(), json::parse(config.toStdString()), ts));
    auto store = weight_store::open_dir(tmp.path().toStdString());
    QVERIFY2(store.ok(), store.ok() ? "" : store.message().c_str());
    auto bound = bind_model_tensors(*cfg, **store);
    QVERIFY2(!bound.ok(), "bad tensors were accepted");
    const QString problem = check_messages(QString::fromStdString(bound.message()), expect);
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

void test_model_config::bind_warnings() {
    const json config = tiny_config(true);
    auto cfg = parse_model_config(config.dump());
    QVERIFY(cfg.ok());
    std::vector<st_tensor> ts = model_tensor_list(*cfg);
    // Multi-token-prediction tensors are skipped silently; anything else unknown is reported.
    mutate(ts, "add:model.mtp_block.0.self_attn.q_proj.weight");
    mutate(ts, "add:model.mtp_linear_proj.0.weight");
    mutate(ts, "add:mtp_emb_norm.0.weight");
    mutate(ts, "add:model.layers.0.self_attn.rotary_emb.inv_freq");
    mutate(ts, "add:lm_head.weight");
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    QVERIFY(write_model_dir(tmp.path(), config, ts, 2));
    auto store = weight_store::open_dir(tmp.path().toStdString());
    QVERIFY2(store.ok(), store.ok() ? "" : store.message().c_str());
    auto bound = bind_model_tensors(*cfg, **store);
    QVERIFY2(bound.ok(), bound.ok() ? "" : bound.message().c_str());
    QCOMPARE(bound->output, bound->tok_embd); // tied: lm_head.weight is not used
    QStringList warnings;
    for (const std::string &w : bound->warnings) warnings << QString::fromStdString(w);
    QCOMPARE(warnings.size(), 2);
    QVERIFY2(warnings.filter("mtp").isEmpty(), qPrintable(warnings.join(" | ")));
    QVERIFY2(warnings.filter("unexpected tensor 'model.layers.0.self_attn.rotary_emb.inv_freq'").size() == 1,
             qPrintable(warnings.join(" | ")));
    QVERIFY2(warnings.filter("lm_head.weight is present but tie_word_embeddings is true").size() == 1,
             qPrintable(warnings.join(" | ")));
}

QTEST_GUILESS_MAIN(test_model_config)
#include "test_model_config.moc"
