// engine/core/switches: the table is well formed, the readers parse as documented, and switches
// that change results are honoured only in developer builds.
#include "engine/core/switches.h"

#include <QtTest>

#include <cstdlib>
#include <set>
#include <string>

class TestSwitches : public QObject {
    Q_OBJECT
private slots:
    void cleanup() {
        ::unsetenv("ES_CUDA_MAX_GRAPHS");
        ::unsetenv("ES_CUDA_PDL");
        ::unsetenv("ES_CUDA_SKIP_OPS");
        ::unsetenv("ES_CUDA_ATTN_MERGE");
    }

    void tableIsWellFormed() {
        std::set<std::string> names;
        for (const es::switch_info &s : es::all_switches()) {
            const std::string n = s.name;
            QVERIFY2(names.insert(n).second, ("listed twice: " + n).c_str());
            QVERIFY2(n.starts_with("ES_") || n.starts_with("EXPERTSCOPE_"), n.c_str());
            QVERIFY2(s.default_value && *s.default_value, n.c_str());
            QVERIFY2(s.meaning && std::string(s.meaning).size() > 10, n.c_str());
        }
        QVERIFY(names.count("ES_CUDA_SKIP_OPS"));
        for (const es::switch_info &s : es::all_switches())
            if (std::string(s.name) == "ES_CUDA_SKIP_OPS") QVERIFY(!s.exact);
    }

    void exactSwitchesAreRead() {
        QCOMPARE(es::switch_int("ES_CUDA_MAX_GRAPHS", 256), int64_t(256));
        ::setenv("ES_CUDA_MAX_GRAPHS", "12", 1);
        QCOMPARE(es::switch_int("ES_CUDA_MAX_GRAPHS", 256), int64_t(12));
        ::setenv("ES_CUDA_MAX_GRAPHS", "twelve", 1);
        QCOMPARE(es::switch_int("ES_CUDA_MAX_GRAPHS", 256), int64_t(256));
        ::setenv("ES_CUDA_MAX_GRAPHS", "", 1);
        QVERIFY(!es::switch_value("ES_CUDA_MAX_GRAPHS"));
    }

    void flagsParse_data() {
        QTest::addColumn<QString>("value");
        QTest::addColumn<bool>("expected");
        QTest::newRow("0") << "0" << false;
        QTest::newRow("off") << "OFF" << false;
        QTest::newRow("false") << "false" << false;
        QTest::newRow("no") << "no" << false;
        QTest::newRow("1") << "1" << true;
        QTest::newRow("on") << "on" << true;
    }
    void flagsParse() {
        QFETCH(QString, value);
        QFETCH(bool, expected);
        ::setenv("ES_CUDA_PDL", value.toUtf8().constData(), 1);
        QCOMPARE(es::switch_flag("ES_CUDA_PDL", !expected), expected);
    }

    void unknownNamesAreNotRead() {
        ::setenv("ES_NOT_A_SWITCH", "1", 1);
        QVERIFY(!es::switch_value("ES_NOT_A_SWITCH"));
        ::unsetenv("ES_NOT_A_SWITCH");
    }

    void resultChangingSwitchesNeedADeveloperBuild() {
        ::setenv("ES_CUDA_SKIP_OPS", "attention", 1);
        ::setenv("ES_CUDA_ATTN_MERGE", "push", 1);
        const auto ignored = es::ignored_switches();
        if (es::developer_switches_enabled()) {
            QCOMPARE(es::switch_value("ES_CUDA_SKIP_OPS").value_or(""), std::string("attention"));
            QVERIFY(ignored.empty());
        } else {
            QVERIFY(!es::switch_value("ES_CUDA_SKIP_OPS"));
            QVERIFY(!es::switch_value("ES_CUDA_ATTN_MERGE"));
            QCOMPARE(ignored.size(), size_t(2));
        }
    }
};

QTEST_GUILESS_MAIN(TestSwitches)
#include "test_switches.moc"
