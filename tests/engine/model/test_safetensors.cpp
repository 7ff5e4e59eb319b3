// Tests of dtype conversions (exact on known values and exhaustive over all f16/bf16 patterns)
// and of safetensors_file / weight_store: every malformed-header class is refused with a message
// naming the file, the tensor and the expectation; valid single files and sharded folders load.
#include "engine/core/dtype.h"
#include "engine/model/npy.h"
#include "engine/model/safetensors.h"
#include "test_support.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

using namespace es;
using namespace es_test;

Q_DECLARE_METATYPE(std::string)

namespace {

bool same_float(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return std::memcmp(&a, &b, 4) == 0; // also tells +0 from -0
}

// Independent f16 reference: sign * mantissa * 2^exp with ldexp.
float f16_reference(uint16_t h) {
    const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0)
        v = std::ldexp(float(man), -24);
    else if (exp == 31)
        v = man ? NAN : INFINITY;
    else
        v = std::ldexp(float(man | 0x400), exp - 25);
    return sign ? -v : v;
}

QString check_messages(const QString &msg, const QStringList &expect) {
    for (const QString &e : expect)
        if (!msg.contains(e)) return QString("message \"%1\" lacks \"%2\"").arg(msg, e);
    return {};
}

} // namespace

class test_safetensors : public QObject {
    Q_OBJECT

private slots:
    void dtype_names();
    void f16_known_values_data();
    void f16_known_values();
    void bf16_known_values_data();
    void bf16_known_values();
    void f8_known_values_data();
    void f8_known_values();
    void convert_exhaustive_data();
    void convert_exhaustive();

    void malformed_file_data();
    void malformed_file();
    void valid_single_file();
    void weight_store_dir_data();
    void weight_store_dir();
    void npy_round_trip_and_malformed();
};

void test_safetensors::dtype_names() {
    for (dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::f8_e4m3, dtype::f8_e5m2}) {
        const auto back = dtype_from_name(dtype_name(t));
        QVERIFY(back.has_value());
        QCOMPARE(int(*back), int(t));
    }
    QCOMPARE(dtype_size(dtype::f32), size_t(4));
    QCOMPARE(dtype_size(dtype::bf16), size_t(2));
    QCOMPARE(dtype_size(dtype::f16), size_t(2));
    QCOMPARE(dtype_size(dtype::f8_e4m3), size_t(1));
    QVERIFY(!dtype_from_name("I64").has_value());
    QVERIFY(!dtype_from_name("bf16").has_value()); // safetensors spellings are upper case
}

void test_safetensors::f16_known_values_data() {
    QTest::addColumn<uint>("bits");
    QTest::addColumn<float>("expected");
    QTest::newRow("one") << 0x3c00u << 1.0f;
    QTest::newRow("minus_2_5") << 0xc100u << -2.5f;
    QTest::newRow("max_65504") << 0x7bffu << 65504.0f;
    QTest::newRow("third") << 0x3555u << 0.333251953125f;
    QTest::newRow("min_normal") << 0x0400u << 0x1p-14f;
    QTest::newRow("min_subnormal") << 0x0001u << 0x1p-24f;
    QTest::newRow("max_subnormal") << 0x03ffu << 1023.0f * 0x1p-24f;
    QTest::newRow("neg_subnormal") << 0x8200u << -0x1p-15f;
    QTest::newRow("zero") << 0x0000u << 0.0f;
    QTest::newRow("neg_zero") << 0x8000u << -0.0f;
    QTest::newRow("inf") << 0x7c00u << INFINITY;
    QTest::newRow("neg_inf") << 0xfc00u << -INFINITY;
    QTest::newRow("nan") << 0x7e00u << NAN;
}

void test_safetensors::f16_known_values() {
    QFETCH(uint, bits);
    QFETCH(float, expected);
    QVERIFY2(same_float(f16_to_f32(uint16_t(bits)), expected),
             qPrintable(QString::number(f16_to_f32(uint16_t(bits)))));
    // The bulk path, from an unaligned source.
    QByteArray buf(1, '\0');
    buf += u16_bytes({uint16_t(bits)});
    float out = 0;
    convert_to_f32(dtype::f16, buf.constData() + 1, &out, 1);
    QVERIFY(same_float(out, expected));
}

void test_safetensors::bf16_known_values_data() {
    QTest::addColumn<uint>("bits");
    QTest::addColumn<float>("expected");
    QTest::newRow("one") << 0x3f80u << 1.0f;
    QTest::newRow("minus_2_5") << 0xc020u << -2.5f;
    QTest::newRow("max") << 0x7f7fu << 0x1.fep127f;
    QTest::newRow("min_subnormal") << 0x0001u << 0x1p-133f;
    QTest::newRow("neg_zero") << 0x8000u << -0.0f;
    QTest::newRow("inf") << 0x7f80u << INFINITY;
}

void test_safetensors::bf16_known_values() {
    QFETCH(uint, bits);
    QFETCH(float, expected);
    QVERIFY(same_float(bf16_to_f32(uint16_t(bits)), expected));
    QCOMPARE(uint(f32_to_bf16(expected)), bits);
    QByteArray buf(3, '\0');
    buf += u16_bytes({uint16_t(bits)});
    float out = 0;
    convert_to_f32(dtype::bf16, buf.constData() + 3, &out, 1);
    QVERIFY(same_float(out, expected));
}

void test_safetensors::f8_known_values_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<uint>("bits");
    QTest::addColumn<float>("expected");
    QTest::newRow("e4m3_one") << int(dtype::f8_e4m3) << 0x38u << 1.0f;
    QTest::newRow("e4m3_max_448") << int(dtype::f8_e4m3) << 0x7eu << 448.0f;
    QTest::newRow("e4m3_neg_1_5") << int(dtype::f8_e4m3) << 0xbcu << -1.5f;
    QTest::newRow("e4m3_min_subnormal") << int(dtype::f8_e4m3) << 0x01u << 0x1p-9f;
    QTest::newRow("e4m3_nan") << int(dtype::f8_e4m3) << 0x7fu << NAN;
    QTest::newRow("e5m2_one") << int(dtype::f8_e5m2) << 0x3cu << 1.0f;
    QTest::newRow("e5m2_max_57344") << int(dtype::f8_e5m2) << 0x7bu << 57344.0f;
    QTest::newRow("e5m2_inf") << int(dtype::f8_e5m2) << 0x7cu << INFINITY;
    QTest::newRow("e5m2_min_subnormal") << int(dtype::f8_e5m2) << 0x01u << 0x1p-16f;
}

void test_safetensors::f8_known_values() {
    QFETCH(int, type);
    QFETCH(uint, bits);
    QFETCH(float, expected);
    const uint8_t b = uint8_t(bits);
    float out = 0;
    convert_to_f32(dtype(type), &b, &out, 1);
    QVERIFY2(same_float(out, expected), qPrintable(QString::number(out)));
}

void test_safetensors::convert_exhaustive_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<int>("offset"); // source misalignment in bytes
    QTest::newRow("f16_aligned") << int(dtype::f16) << 0;
    QTest::newRow("f16_unaligned") << int(dtype::f16) << 1;
    QTest::newRow("bf16_aligned") << int(dtype::bf16) << 0;
    QTest::newRow("bf16_unaligned") << int(dtype::bf16) << 1;
}

// All 65536 bit patterns through the vectorized bulk path against an independent reference.
void test_safetensors::convert_exhaustive() {
    QFETCH(int, type);
    QFETCH(int, offset);
    std::vector<uint16_t> all(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
    const QByteArray buf = QByteArray(offset, '\0') + u16_bytes(all);
    std::vector<float> out(all.size());
    convert_to_f32(dtype(type), buf.constData() + offset, out.data(), out.size());
    for (size_t i = 0; i < all.size(); ++i) {
        const float ref = dtype(type) == dtype::f16 ? f16_reference(uint16_t(i)) : bf16_to_f32(uint16_t(i));
        if (!same_float(out[i], ref))
            QFAIL(qPrintable(
                QString("pattern 0x%1: got %2, expected %3").arg(i, 4, 16, QChar('0')).arg(out[i]).arg(ref)));
        if (dtype(type) == dtype::f16 && !same_float(f16_to_f32(uint16_t(i)), ref))
            QFAIL(
                qPrintable(QString("f16_to_f32(0x%1) differs from the reference").arg(i, 4, 16, QChar('0'))));
    }
}

void test_safetensors::malformed_file_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QStringList>("expect");
    const QByteArray d16(16, '\0');
    auto entry = [](const std::string &dtype, const std::string &shape, const std::string &offsets) {
        return "{\"w\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets +
               "}}";
    };
    QTest::newRow("empty_file") << QByteArray()
                                << QStringList{"bad.safetensors", "truncated", "0 bytes", "at least 8"};
    QTest::newRow("truncated") << QByteArray("\x05\x00\x00", 3)
                               << QStringList{"bad.safetensors", "truncated", "3 bytes", "at least 8"};
    QTest::newRow("header_past_end") << (le_u64(1000) + QByteArray("{}  ", 4))
                                     << QStringList{"bad.safetensors", "header length 1000", "past the end",
                                                    "12 bytes"};
    QTest::newRow("header_absurd") << (le_u64(1ull << 40) + QByteArray("{}"))
                                   << QStringList{"bad.safetensors", "header length 1099511627776", "absurd"};
    QTest::newRow("header_not_json") << safetensors_raw("{\"w\": [1, 2")
                                     << QStringList{"bad.safetensors", "not valid JSON"};
    QTest::newRow("header_not_object")
        << safetensors_raw("[1, 2]")
        << QStringList{"bad.safetensors", "header is array", "expected a JSON object"};
    QTest::newRow("entry_not_object") << safetensors_raw("{\"w\": 5}")
                                      << QStringList{"bad.safetensors", "tensor 'w'", "expected an object"};
    QTest::newRow("missing_dtype") << safetensors_raw("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", d16)
                                   << QStringList{"tensor 'w'", "no 'dtype'"};
    QTest::newRow("missing_shape") << safetensors_raw("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}",
                                                      d16)
                                   << QStringList{"tensor 'w'", "no 'shape'"};
    QTest::newRow("missing_offsets") << safetensors_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", d16)
                                     << QStringList{"tensor 'w'", "no 'data_offsets'"};
    QTest::newRow("unknown_dtype_I64")
        << safetensors_raw(entry("I64", "[2]", "[0,16]"), d16)
        << QStringList{"bad.safetensors", "tensor 'w'", "unsupported dtype 'I64'",
                       "F32, F16, BF16, F8_E4M3, F8_E5M2"};
    QTest::newRow("dtype_not_string")
        << safetensors_raw("{\"w\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", d16)
        << QStringList{"tensor 'w'", "'dtype'", "expected a string"};
    QTest::newRow("negative_dim") << safetensors_raw(entry("F32", "[-2, 2]", "[0,16]"), d16)
                                  << QStringList{"tensor 'w'", "dim 0 is -2", "non-negative integer"};
    QTest::newRow("non_integer_dim") << safetensors_raw(entry("F32", "[2, 1.5]", "[0,12]"), d16)
                                     << QStringList{"tensor 'w'", "dim 1", "non-integer",
                                                    "non-negative integer"};
    QTest::newRow("shape_not_array") << safetensors_raw(entry("F32", "4", "[0,16]"), d16)
                                     << QStringList{"tensor 'w'", "'shape'", "expected an array"};
    QTest::newRow("shape_overflow") << safetensors_raw(entry("F32", "[4294967296, 4294967296, 4]", "[0,16]"),
                                                       d16)
                                    << QStringList{"tensor 'w'", "[4294967296, 4294967296, 4]", "overflows"};
    QTest::newRow("offsets_not_two") << safetensors_raw(entry("F32", "[4]", "[0]"), d16)
                                     << QStringList{"tensor 'w'", "data_offsets",
                                                    "two non-negative integers"};
    QTest::newRow("offsets_negative") << safetensors_raw(entry("F32", "[2]", "[-8,0]"), d16)
                                      << QStringList{"tensor 'w'", "[-8,0]", "two non-negative integers"};
    QTest::newRow("offsets_reversed")
        << safetensors_raw(entry("F32", "[2]", "[8,0]"), d16)
        << QStringList{"bad.safetensors", "tensor 'w'", "[8, 0]", "reversed", "begin > end"};
    QTest::newRow("offsets_outside_file") << safetensors_raw(entry("F32", "[8]", "[0,32]"), d16)
                                          << QStringList{"bad.safetensors", "tensor 'w'", "[0, 32]",
                                                         "outside the file", "data section is 16 bytes"};
    QTest::newRow("bytes_mismatch") << safetensors_raw(entry("F32", "[2, 2]", "[0,8]"), d16)
                                    << QStringList{"bad.safetensors", "tensor 'w'", "hold 8 bytes",
                                                   "expected 16", "[2, 2]"};
    QTest::newRow("overlapping") << safetensors_raw(
                                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                                        d16)
                                 << QStringList{"bad.safetensors", "tensor 'b'", "overlap tensor 'a'",
                                                "[4, 12)", "[0, 8)"};
    QTest::newRow("metadata_not_object") << safetensors_raw("{\"__metadata__\": [\"x\"]}")
                                         << QStringList{"'__metadata__'", "expected an object of strings"};
    QTest::newRow("metadata_value_not_string")
        << safetensors_raw("{\"__metadata__\": {\"format\": 1}}")
        << QStringList{"'__metadata__'", "'format'", "expected a string"};
}

void test_safetensors::malformed_file() {
    QFETCH(QByteArray, bytes);
    QFETCH(QStringList, expect);
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const QString path = tmp.filePath("bad.safetensors");
    QVERIFY(write_file(path, bytes));
    auto r = safetensors_file::open(path.toStdString());
    QVERIFY2(!r.ok(), "malformed file was accepted");
    const QString msg = QString::fromStdString(r.message());
    const QString problem = check_messages(msg, expect);
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

void test_safetensors::valid_single_file() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    // A 2-byte tensor first, so the F32 after it starts unaligned; a zero-sized tensor too.
    const std::vector<st_tensor> tensors = {
        {"tiny_bf16", "BF16", {1}, u16_bytes({0x3f80})},
        {"mat_f32", "F32", {2, 3}, f32_bytes({1, -2, 3.5f, 0, 1e-3f, -65504})},
        {"vec_f16", "F16", {3}, u16_bytes({0x3c00, 0xc100, 0x0001})},
        {"empty", "F32", {0, 5}, {}},
        {"scalar", "BF16", {}, u16_bytes({0xc020})},
    };
    QVERIFY(write_file(tmp.filePath("model.safetensors"),
                       safetensors_bytes(tensors, {{"format", "pt"}, {"note", "x"}})));
    auto r = safetensors_file::open(tmp.filePath("model.safetensors").toStdString());
    QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
    const safetensors_file &f = **r;
    QCOMPARE(f.tensors().size(), size_t(5));
    QCOMPARE(f.metadata().at("format"), std::string("pt"));
    QCOMPARE(f.metadata().at("note"), std::string("x"));

    const tensor_view &m = f.tensors().at("mat_f32");
    QCOMPARE(m.type, dtype::f32);
    QCOMPARE(m.shape_str(), std::string("[2, 3]"));
    QCOMPARE(m.n_elements(), int64_t(6));
    QCOMPARE(m.n_bytes, size_t(24));
    QCOMPARE(m.file, std::string("model.safetensors"));
    std::vector<float> v(6);
    convert_to_f32(m.type, m.data, v.data(), v.size());
    QCOMPARE(v, (std::vector<float>{1, -2, 3.5f, 0, 1e-3f, -65504}));

    const tensor_view &h = f.tensors().at("vec_f16");
    std::vector<float> hv(3);
    convert_to_f32(h.type, h.data, hv.data(), hv.size());
    QCOMPARE(hv, (std::vector<float>{1.0f, -2.5f, 0x1p-24f}));

    QCOMPARE(f.tensors().at("empty").n_elements(), int64_t(0));
    QCOMPARE(f.tensors().at("empty").n_bytes, size_t(0));
    QCOMPARE(f.tensors().at("scalar").n_elements(), int64_t(1));
    QCOMPARE(f.tensors().at("scalar").shape_str(), std::string("[]"));

    // The folder form finds the same file.
    auto store = weight_store::open_dir(tmp.path().toStdString());
    QVERIFY2(store.ok(), store.ok() ? "" : store.message().c_str());
    QCOMPARE((*store)->all().size(), size_t(5));
    QCOMPARE((*store)->total_bytes(), size_t(2 + 24 + 6 + 0 + 2));
    QVERIFY((*store)->find("vec_f16") != nullptr);
    QVERIFY((*store)->find("nope") == nullptr);
    QCOMPARE((*store)->source(), std::string("model.safetensors"));
}

// Folder layouts. `files` entries are "file=tensor,tensor" (each tensor F32 [2]); `index` is the
// text of model.safetensors.index.json, or empty for none.
void test_safetensors::weight_store_dir_data() {
    QTest::addColumn<QStringList>("files");
    QTest::addColumn<QByteArray>("index");
    QTest::addColumn<int>("n_tensors"); // -1: expect an error
    QTest::addColumn<QStringList>("expect");
    const QByteArray two_shard_index = R"({"metadata": {"total_size": 24}, "weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
        "c": "model-00002-of-00002.safetensors"}})";
    QTest::newRow("single_file") << QStringList{"model.safetensors=a,b"} << QByteArray() << 2
                                 << QStringList{};
    QTest::newRow("two_shards") << QStringList{"model-00001-of-00002.safetensors=a,b",
                                               "model-00002-of-00002.safetensors=c"}
                                << two_shard_index << 3 << QStringList{};
    QTest::newRow("shard_extra_tensor_indexed")
        << QStringList{"model-00001-of-00002.safetensors=a,b,x", "model-00002-of-00002.safetensors=c"}
        << two_shard_index << 4 << QStringList{};
    QTest::newRow("missing_shard") << QStringList{"model-00001-of-00002.safetensors=a,b"} << two_shard_index
                                   << -1
                                   << QStringList{"model.safetensors.index.json",
                                                  "model-00002-of-00002.safetensors", "tensor 'c'",
                                                  "does not exist"};
    QTest::newRow("shard_lacks_tensor")
        << QStringList{"model-00001-of-00002.safetensors=a", "model-00002-of-00002.safetensors=c"}
        << two_shard_index << -1
        << QStringList{"model.safetensors.index.json", "tensor 'b'", "model-00001-of-00002.safetensors",
                       "no such tensor"};
    QTest::newRow("duplicate_across_shards")
        << QStringList{"model-00001-of-00002.safetensors=a,b", "model-00002-of-00002.safetensors=c,a"}
        << two_shard_index << -1
        << QStringList{"tensor 'a'", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                       "both"};
    QTest::newRow("shard_name_with_slash")
        << QStringList{} << QByteArray(R"({"weight_map": {"a": "sub/x.safetensors"}})") << -1
        << QStringList{"'sub/x.safetensors'", "tensor 'a'", "plain file name"};
    QTest::newRow("shard_name_with_dotdot")
        << QStringList{} << QByteArray(R"({"weight_map": {"a": "..x.safetensors"}})") << -1
        << QStringList{"'..x.safetensors'", "plain file name"};
    QTest::newRow("index_not_json") << QStringList{} << QByteArray("{weight_map") << -1
                                    << QStringList{"model.safetensors.index.json", "not a JSON object"};
    QTest::newRow("index_without_weight_map") << QStringList{} << QByteArray(R"({"metadata": {}})") << -1
                                              << QStringList{"model.safetensors.index.json", "'weight_map'"};
    QTest::newRow("no_weights") << QStringList{"other.safetensors=a"} << QByteArray() << -1
                                << QStringList{"no model.safetensors or model.safetensors.index.json in"};
    QTest::newRow("bad_shard_names_shard")
        << QStringList{"model-00001-of-00002.safetensors=a,b", "model-00002-of-00002.safetensors=!truncated"}
        << two_shard_index << -1 << QStringList{"model-00002-of-00002.safetensors", "truncated"};
}

void test_safetensors::weight_store_dir() {
    QFETCH(QStringList, files);
    QFETCH(QByteArray, index);
    QFETCH(int, n_tensors);
    QFETCH(QStringList, expect);
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    for (const QString &spec : files) {
        const QString name = spec.section('=', 0, 0), list = spec.section('=', 1);
        QByteArray bytes;
        if (list == "!truncated") {
            bytes = QByteArray("\x01\x02", 2);
        } else {
            std::vector<st_tensor> ts;
            float k = 0;
            for (const QString &t : list.split(',')) {
                ts.push_back({t.toStdString(), "F32", {2}, f32_bytes({k, k + 1})});
                k += 2;
            }
            bytes = safetensors_bytes(ts);
        }
        QVERIFY(write_file(tmp.filePath(name), bytes));
    }
    if (!index.isEmpty()) QVERIFY(write_file(tmp.filePath("model.safetensors.index.json"), index));

    auto r = weight_store::open_dir(tmp.path().toStdString());
    if (n_tensors < 0) {
        QVERIFY2(!r.ok(), "bad folder was accepted");
        const QString problem = check_messages(QString::fromStdString(r.message()), expect);
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        return;
    }
    QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
    const weight_store &s = **r;
    QCOMPARE(int(s.all().size()), n_tensors);
    QCOMPARE(s.total_bytes(), size_t(n_tensors) * 8);
    for (const auto &[name, t] : s.all()) {
        QCOMPARE(t->name, name);
        QCOMPARE(t->shape_str(), std::string("[2]"));
    }
    if (!index.isEmpty()) {
        QCOMPARE(s.find("c")->file, std::string("model-00002-of-00002.safetensors"));
        QCOMPARE(s.source(), std::string("model.safetensors.index.json"));
        float v[2];
        convert_to_f32(dtype::f32, s.find("b")->data, v, 2);
        QCOMPARE(v[0], 2.0f);
        QCOMPARE(v[1], 3.0f);
    }
}

// The .npy reader (reference logits): what the writer wrote comes back; a header the fuzzer
// (tests/fuzz/fuzz_npy) broke is refused with a message, never an exception or a huge allocation.
void test_safetensors::npy_round_trip_and_malformed() {
    QTemporaryDir tmp;
    const std::string path = tmp.filePath("a.npy").toStdString();
    const std::vector<float> v = {1.f, -2.f, 3.5f, 0.f, 5.f, 6.f};
    QVERIFY(write_npy_f32(path, v.data(), {2, 3}).ok());
    auto a = read_npy_f32(path);
    QVERIFY2(a.ok(), a.ok() ? "" : a.message().c_str());
    QCOMPARE(a->shape, (std::vector<int64_t>{2, 3}));
    QCOMPARE(a->data, v);

    auto header = [](const std::string &dict, char version = 1) {
        std::string h = std::string("\x93NUMPY", 6) + version + '\0';
        const uint16_t n = uint16_t(dict.size());
        h += char(n & 0xff);
        h += char(n >> 8);
        if (version != 1) h += std::string(2, '\0');
        return h + dict;
    };
    const struct {
        const char *name;
        std::string bytes;
        const char *expect;
    } cases[] = {
        {"shape not a number",
         header("{'descr': '<f4', 'fortran_order': False, 'shape': (x, 3), }") + std::string(24, '\0'),
         "is not a tuple of non-negative integers"},
        {"negative dim", header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }"),
         "is not a tuple of non-negative integers"},
        {"dim beyond int64",
         header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }"),
         "is not a tuple of non-negative integers"},
        {"more data than the file",
         header("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000000000), }"),
         "needs more data than the file's 0 bytes"},
        {"unknown version", header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 9) + "abcd",
         "format version 9"},
        {"header past the end", std::string("\x93NUMPY\x01\x00\xff\x7f{'descr'", 17),
         "runs past the end of the file"},
    };
    for (const auto &c : cases) {
        const std::string p = tmp.filePath("bad.npy").toStdString();
        QVERIFY(write_file(QString::fromStdString(p), QByteArray(c.bytes.data(), qsizetype(c.bytes.size()))));
        auto r = read_npy_f32(p);
        QVERIFY2(!r.ok(), c.name);
        QVERIFY2(r.message().find(c.expect) != std::string::npos,
                 (std::string(c.name) + ": " + r.message()).c_str());
    }
}

QTEST_GUILESS_MAIN(test_safetensors)
#include "test_safetensors.moc"
