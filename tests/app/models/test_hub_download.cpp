// Downloads from a hub (app/models): against HubTestServer, a local server speaking the hub's API
// subset with faults — the cache layout huggingface_hub makes (blobs named by digest, relative
// snapshot links, refs), redirects to another host without the token, resume by Range after a
// dropped connection and from a partial file another run left, a server that ignores Range, a
// wrong checksum (refused, nothing kept), 401/403 (a token is needed, HF_TOKEN sent as Bearer),
// 404, an architecture the engine does not run (refused before any weights), the free-space
// check, a full disk (a write error keeps the partial file), cancel, unsafe file names; and the
// cache scan that finds what other tools downloaded, the environment's settings, the catalogue.
#include "app/models/hub_cache.h"
#include "app/models/hub_download.h"
#include "app/models/model_catalogue.h"
#include "engine/model/model_config.h"
#include "hub_test_server.h"

#include <QtTest>

#include <sys/resource.h>

#include <csignal>
#include <fstream>

using namespace es;
using namespace es::models;
namespace fs = std::filesystem;

namespace {

const std::string kRepo = "test-org/Tiny-MoE";
const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

std::string readFile(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void writeFile(const fs::path &p, const std::string &data) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << data;
}

} // namespace

class TestHubDownload : public QObject {
    Q_OBJECT

    HubTestServer m_server;
    HubTestServer::Repo m_repo;
    std::unique_ptr<QTemporaryDir> m_tmp;

    fs::path cacheDir() const { return fs::path(m_tmp->path().toStdString()) / "hub"; }
    fs::path repoDir() const { return cacheDir() / "models--test-org--Tiny-MoE"; }
    std::string weights() const { return m_repo.files.at("model.safetensors"); }
    fs::path weightsBlob() const { return repoDir() / "blobs" / HubTestServer::sha256(weights()); }
    fs::path weightsPartial() const { return weightsBlob().string() + ".incomplete"; }

    download_options options() const {
        download_options o;
        o.repo_id = kRepo;
        o.hub.endpoint = m_server.endpoint();
        o.hub.cache_dir = cacheDir();
        o.retry_wait_s = 0.01;
        return o;
    }
    // The Range headers the server saw for the weights (at /cdn/, where the redirect leads).
    std::vector<std::string> weightRanges() const {
        std::vector<std::string> out;
        for (const auto &l : m_server.log())
            if (l.target.starts_with("/cdn/")) out.push_back(l.range);
        return out;
    }
    int requestsFor(const std::string &needle) const {
        int n = 0;
        for (const auto &l : m_server.log()) n += l.target.find(needle) != std::string::npos;
        return n;
    }
    // Nothing of the weights is in the cache: no blob, no snapshot link.
    void verifyNoWeights() const {
        QVERIFY(!fs::exists(weightsBlob()));
        QVERIFY(!fs::exists(fs::symlink_status(repoDir() / "snapshots" / kCommit / "model.safetensors")));
    }
    void verifyComplete(const download_result &r) const {
        QCOMPARE(r.snapshot_dir, repoDir() / "snapshots" / kCommit);
        QCOMPARE(readFile(weightsBlob()), weights());
        QCOMPARE(readFile(r.snapshot_dir / "model.safetensors"), weights());
        QVERIFY(!fs::exists(weightsPartial()));
    }

private slots:
    void initTestCase() {
        m_repo.commit = kCommit;
        for (const char *f : {"config.json", "generation_config.json", "model.safetensors",
                              "special_tokens_map.json", "tokenizer.model", "tokenizer_config.json"})
            m_repo.files[f] = readFile(fs::path(ES_TEST_DATA_DIR) / "moe-shared" / f);
        QVERIFY(weights().size() > 500000);
        m_repo.files["pytorch_model.bin"] = "weights the engine does not read";
        m_repo.files["docs/notes.md"] = "a file in a folder";
        m_server.addRepo(kRepo, m_repo);
        QVERIFY(m_server.start());
    }
    void init() {
        m_server.clearFaults();
        m_server.clearLog();
        m_server.requireToken("");
        m_tmp = std::make_unique<QTemporaryDir>();
        QVERIFY(m_tmp->isValid());
    }
    void cleanupTestCase() { m_server.stop(); }

    void downloadsIntoTheHubCacheLayout() {
        auto r = download_model(options());
        QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
        verifyComplete(*r);
        // Blobs named as huggingface_hub names them: SHA-256 for LFS files, git blob id for others.
        const std::string config = m_repo.files["config.json"];
        QCOMPARE(readFile(repoDir() / "blobs" / HubTestServer::gitBlobId(config)), config);
        // Snapshot entries are relative links into blobs/, one more ".." inside a folder.
        const fs::path snap = r->snapshot_dir;
        QVERIFY(fs::is_symlink(snap / "config.json"));
        QCOMPARE(fs::read_symlink(snap / "config.json").string(),
                 "../../blobs/" + HubTestServer::gitBlobId(config));
        QCOMPARE(fs::read_symlink(snap / "docs/notes.md").string(),
                 "../../../blobs/" + HubTestServer::gitBlobId("a file in a folder"));
        QCOMPARE(readFile(repoDir() / "refs" / "main"), kCommit);
        // Weight formats the engine does not read stay on the hub.
        QVERIFY(!fs::exists(fs::symlink_status(snap / "pytorch_model.bin")));
        QCOMPARE(requestsFor("pytorch_model.bin"), 0);
        QCOMPARE(r->files_fetched, 7);
        QCOMPARE(r->fetched_bytes, r->plan.total_bytes);
        // The engine loads it, and the scan lists it as loadable with its ref.
        QVERIFY(load_model_config(snap).ok());
        const auto found = scan_cache(cacheDir());
        QCOMPARE(found.size(), size_t(1));
        QCOMPARE(found[0].repo_id, kRepo);
        QCOMPARE(found[0].refs, std::vector<std::string>{"main"});
        QVERIFY2(found[0].loadable, found[0].problem.c_str());
        QVERIFY(found[0].bytes >= weights().size());
        // A second run finds every blob and fetches nothing.
        m_server.clearLog();
        auto again = download_model(options());
        QVERIFY2(again.ok(), again.ok() ? "" : again.message().c_str());
        QCOMPARE(again->files_fetched, 0);
        QCOMPARE(again->fetched_bytes, uint64_t(0));
        QCOMPARE(requestsFor("/resolve/"), 0);
    }

    void theTokenGoesToTheEndpointOnly() {
        m_server.requireToken("hf_secret");
        download_options o = options();
        o.hub.token = "hf_secret";
        auto r = download_model(o);
        QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
        for (const auto &l : m_server.log()) {
            if (l.target.starts_with("/cdn/")) {
                QVERIFY2(l.authorization.empty(), "the token went to the CDN's host");
                QVERIFY(l.host.starts_with("localhost:"));
            } else {
                QCOMPARE(l.authorization, std::string("Bearer hf_secret"));
            }
        }
        QVERIFY(requestsFor("/cdn/") > 0);
    }

    void resumesAfterADroppedConnection() {
        HubTestServer::Fault f;
        f.dropAfter = 100000;
        f.times = 2; // dropped twice: the third request finishes it
        m_server.setFault("model.safetensors", f);
        auto r = download_model(options());
        QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
        verifyComplete(*r);
        QCOMPARE(weightRanges(), (std::vector<std::string>{"", "bytes=100000-", "bytes=200000-"}));
        QCOMPARE(r->fetched_bytes, r->plan.total_bytes); // nothing fetched twice
    }

    void givesUpAfterTheAttemptsKeepingThePartial() {
        HubTestServer::Fault f;
        f.dropAfter = 50000;
        m_server.setFault("model.safetensors", f);
        download_options o = options();
        o.max_attempts = 3;
        auto r = download_model(o);
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find("gave up after 3 attempts") != std::string::npos, r.message().c_str());
        QCOMPARE(fs::file_size(weightsPartial()), uintmax_t(150000));
        verifyNoWeights();
        // Run again with the server mended: it continues from the partial file.
        m_server.clearFaults();
        m_server.clearLog();
        auto again = download_model(options());
        QVERIFY2(again.ok(), again.ok() ? "" : again.message().c_str());
        verifyComplete(*again);
        QCOMPARE(weightRanges(), std::vector<std::string>{"bytes=150000-"});
        QCOMPARE(again->resumed_from_bytes, uint64_t(150000));
    }

    void resumesAPartialFileLeftByAnotherRun() {
        // As huggingface_hub leaves an interrupted download: blobs/<sha256>.incomplete.
        writeFile(weightsPartial(), weights().substr(0, 123456));
        auto r = download_model(options());
        QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
        verifyComplete(*r);
        QCOMPARE(weightRanges(), std::vector<std::string>{"bytes=123456-"});
        QCOMPARE(r->resumed_from_bytes, uint64_t(123456));
    }

    void restartsWhenTheServerIgnoresTheRange() {
        writeFile(weightsPartial(), weights().substr(0, 5000));
        HubTestServer::Fault f;
        f.ignoreRange = true;
        m_server.setFault("model.safetensors", f);
        auto r = download_model(options());
        QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
        verifyComplete(*r);
    }

    void aPartialThatIsNotAPrefixIsRefusedAndRemoved() {
        // A partial file whose bytes are not the file's: the digest catches it; nothing is kept.
        writeFile(weightsPartial(), std::string(4096, 'x'));
        auto r = download_model(options());
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find("SHA-256") != std::string::npos, r.message().c_str());
        QVERIFY(!fs::exists(weightsPartial()));
        verifyNoWeights();
    }

    void refusesAWrongChecksum() {
        HubTestServer::Fault f;
        f.corrupt = true;
        m_server.setFault("model.safetensors", f);
        auto r = download_model(options());
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find("model.safetensors") != std::string::npos &&
                     r.message().find("SHA-256") != std::string::npos &&
                     r.message().find("removed") != std::string::npos,
                 r.message().c_str());
        verifyNoWeights();
        QVERIFY(!fs::exists(weightsPartial()));
        QVERIFY(!fs::exists(repoDir() / "snapshots" / kCommit)); // no snapshot shows a partial download
    }

    void refusesAWrongGitBlobId() {
        HubTestServer::Fault f;
        f.corrupt = true;
        m_server.setFault("tokenizer.model", f);
        auto r = download_model(options());
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find("tokenizer.model") != std::string::npos &&
                     r.message().find("git blob SHA-1") != std::string::npos,
                 r.message().c_str());
        QVERIFY(!fs::exists(repoDir() / "blobs" / HubTestServer::gitBlobId(m_repo.files["tokenizer.model"])));
    }

    void saysATokenIsNeeded_data() {
        QTest::addColumn<QString>("where");
        QTest::addColumn<int>("status");
        QTest::addColumn<QString>("token");
        QTest::addColumn<QString>("expected");
        QTest::newRow("401 on the list") << "api" << 401 << ""
                                         << "a token is needed (401";
        QTest::newRow("403 on a file") << "model.safetensors" << 403 << ""
                                       << "a token is needed (403";
        QTest::newRow("401 with a token") << "api" << 401 << "hf_wrong"
                                          << "refused the token in HF_TOKEN (401";
    }
    void saysATokenIsNeeded() {
        QFETCH(QString, where);
        QFETCH(int, status);
        QFETCH(QString, token);
        QFETCH(QString, expected);
        HubTestServer::Fault f;
        f.status = status;
        m_server.setFault(where.toStdString(), f);
        download_options o = options();
        o.hub.token = token.toStdString();
        auto r = download_model(o);
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find(expected.toStdString()) != std::string::npos, r.message().c_str());
        if (token.isEmpty()) QVERIFY2(r.message().find("HF_TOKEN") != std::string::npos, r.message().c_str());
        verifyNoWeights();
    }

    void aGatedRepoSaysSo() {
        HubTestServer::Fault f;
        f.status = 403;
        f.errorCode = "GatedRepo";
        m_server.setFault("api", f);
        auto r = download_model(options());
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find("gated") != std::string::npos &&
                     r.message().find("HF_TOKEN") != std::string::npos,
                 r.message().c_str());
    }

    void aMissingRepoOrRevisionIsNotFound() {
        download_options o = options();
        o.repo_id = "test-org/No-Such-Model";
        auto r = download_model(o);
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find("not found (404") != std::string::npos, r.message().c_str());
        o = options();
        o.revision = "v9";
        r = download_model(o);
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find("check the revision name") != std::string::npos, r.message().c_str());
        QVERIFY(!fs::exists(cacheDir() / "models--test-org--No-Such-Model" / "snapshots"));
    }

    void retriesABusyServer() {
        HubTestServer::Fault f;
        f.status = 503;
        f.times = 2;
        m_server.setFault("tokenizer.model", f);
        auto r = download_model(options());
        QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
        QCOMPARE(requestsFor("/resolve/main/tokenizer.model") +
                     requestsFor("/resolve/" + kCommit + "/tokenizer.model"),
                 3);
    }

    void refusesAnUnsupportedArchitectureBeforeDownloading() {
        HubTestServer::Repo other = m_repo;
        other.files["config.json"] =
            R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})";
        m_server.addRepo("test-org/Llama", other);
        download_options o = options();
        o.repo_id = "test-org/Llama";
        auto r = download_model(o);
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find("LlamaForCausalLM") != std::string::npos &&
                     r.message().find("was not downloaded") != std::string::npos,
                 r.message().c_str());
        QCOMPARE(requestsFor("model.safetensors"), 0);
        QCOMPARE(requestsFor("/cdn/"), 0);
        QVERIFY(!fs::exists(cacheDir() / "models--test-org--Llama" / "blobs"));
    }

    void refusesARepoWithoutSafetensors() {
        HubTestServer::Repo other;
        other.commit = kCommit;
        other.files["config.json"] = m_repo.files["config.json"];
        other.files["pytorch_model.bin"] = "x";
        m_server.addRepo("test-org/Bin-Only", other);
        download_options o = options();
        o.repo_id = "test-org/Bin-Only";
        auto r = download_model(o);
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find("no safetensors") != std::string::npos, r.message().c_str());
    }

    void refusesUnsafeFileNames() {
        HubTestServer::Repo other = m_repo;
        other.files["../../escape.json"] = "{}";
        m_server.addRepo("test-org/Escape", other);
        download_options o = options();
        o.repo_id = "test-org/Escape";
        auto r = download_model(o);
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find("not a safe relative path") != std::string::npos, r.message().c_str());
        QVERIFY(!fs::exists(cacheDir() / "escape.json"));
        QVERIFY(!fs::exists(fs::path(m_tmp->path().toStdString()) / "escape.json"));
    }

    void checksFreeSpaceBeforeStarting() {
        download_options o = options();
        fs::path asked;
        o.free_space = [&](const fs::path &p) {
            asked = p;
            return uint64_t(300000);
        };
        auto r = download_model(o);
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find("not enough free space") != std::string::npos &&
                     r.message().find("292.97 KiB free") != std::string::npos,
                 r.message().c_str());
        QCOMPARE(asked, repoDir() / "blobs");
        QCOMPARE(requestsFor("/resolve/"), 1); // config.json only, for the architecture check
        verifyNoWeights();
        // A partial file already there counts: what is left to fetch is what must fit.
        writeFile(weightsPartial(), weights().substr(0, 600000));
        auto r2 = download_model(o);
        QVERIFY2(r2.ok(), r2.ok() ? "" : r2.message().c_str());
        verifyComplete(*r2);
    }

    void aFullDiskKeepsThePartialFile() {
        // The file-size limit makes writes past it fail (EFBIG) as a full disk does (ENOSPC).
        std::signal(SIGXFSZ, SIG_IGN);
        rlimit old{};
        QCOMPARE(getrlimit(RLIMIT_FSIZE, &old), 0);
        rlimit small = old;
        small.rlim_cur = 200000;
        QCOMPARE(setrlimit(RLIMIT_FSIZE, &small), 0);
        auto r = download_model(options());
        QCOMPARE(setrlimit(RLIMIT_FSIZE, &old), 0);
        QVERIFY(!r.ok());
        QVERIFY2(r.message().find("cannot write") != std::string::npos &&
                     r.message().find("partial file is kept") != std::string::npos,
                 r.message().c_str());
        QCOMPARE(fs::file_size(weightsPartial()), uintmax_t(200000));
        verifyNoWeights();
        // With room again it resumes.
        m_server.clearLog();
        auto again = download_model(options());
        QVERIFY2(again.ok(), again.ok() ? "" : again.message().c_str());
        verifyComplete(*again);
        QCOMPARE(weightRanges(), std::vector<std::string>{"bytes=200000-"});
    }

    void cancelKeepsThePartialAndResumes() {
        HubTestServer::Fault slow;
        slow.chunkDelayMs = 20;
        m_server.setFault("model.safetensors", slow);
        std::atomic<bool> cancel{false};
        download_options o = options();
        o.cancel = &cancel;
        std::vector<download_progress> seen;
        o.on_progress = [&](const download_progress &p) {
            seen.push_back(p);
            if (p.file == "model.safetensors" && p.done > 0 &&
                p.what == download_progress::stage::downloading && fs::exists(weightsPartial()) &&
                fs::file_size(weightsPartial()) >= 50000)
                cancel = true;
        };
        auto r = download_model(o);
        QVERIFY(!r.ok());
        QVERIFY2(r.message().starts_with("cancelled"), r.message().c_str());
        const uintmax_t kept = fs::file_size(weightsPartial());
        QVERIFY(kept >= 50000 && kept < weights().size());
        verifyNoWeights();
        QVERIFY(!seen.empty());
        QVERIFY(seen.back().total >= weights().size());
        m_server.clearFaults();
        m_server.clearLog();
        auto again = download_model(options());
        QVERIFY2(again.ok(), again.ok() ? "" : again.message().c_str());
        verifyComplete(*again);
        QCOMPARE(weightRanges(), std::vector<std::string>{"bytes=" + std::to_string(kept) + "-"});
    }

    void findsModelsOtherToolsDownloaded() {
        // A cache as huggingface_hub lays it out, made by hand: one complete snapshot, one with
        // its weights missing, one with an architecture the engine does not run.
        const fs::path c = cacheDir();
        auto put = [&](const std::string &repo, const std::string &commit, const std::string &name,
                       const std::string &data) {
            const fs::path dir = c / repo_folder_name(repo);
            const std::string id = HubTestServer::sha256(data);
            writeFile(dir / "blobs" / id, data);
            fs::create_directories(dir / "snapshots" / commit);
            fs::create_symlink("../../blobs/" + id, dir / "snapshots" / commit / name);
        };
        const std::string a(40, 'a'), b(40, 'b'), d(40, 'd');
        for (const char *f : {"config.json", "model.safetensors", "tokenizer.model"})
            put("baidu/ERNIE-4.5-0.3B-PT", a, f, m_repo.files[f]);
        writeFile(c / repo_folder_name("baidu/ERNIE-4.5-0.3B-PT") / "refs" / "main", a);
        put("someone/Partial", b, "config.json", m_repo.files["config.json"]);
        put("someone/Llama", d, "config.json", R"({"architectures": ["LlamaForCausalLM"]})");
        writeFile(c / "not-a-model-folder" / "x", "y");
        const auto found = scan_cache(c);
        QCOMPARE(found.size(), size_t(3));
        std::map<std::string, cached_model> by;
        for (const auto &m : found) by[m.repo_id] = m;
        QVERIFY2(by["baidu/ERNIE-4.5-0.3B-PT"].loadable, by["baidu/ERNIE-4.5-0.3B-PT"].problem.c_str());
        QCOMPARE(by["baidu/ERNIE-4.5-0.3B-PT"].refs, std::vector<std::string>{"main"});
        QCOMPARE(by["baidu/ERNIE-4.5-0.3B-PT"].dir,
                 c / repo_folder_name("baidu/ERNIE-4.5-0.3B-PT") / "snapshots" / a);
        QVERIFY(!by["someone/Partial"].loadable);
        QVERIFY(by["someone/Partial"].config.has_value());
        QVERIFY2(by["someone/Partial"].problem.find("safetensors") != std::string::npos,
                 by["someone/Partial"].problem.c_str());
        QVERIFY(!by["someone/Llama"].loadable);
        QVERIFY2(by["someone/Llama"].problem.find("LlamaForCausalLM") != std::string::npos,
                 by["someone/Llama"].problem.c_str());
        QVERIFY(scan_cache(c / "missing").empty());
        // The ref names the snapshot, as huggingface_hub resolves it offline.
        QCOMPARE(repo_cache(c, "baidu/ERNIE-4.5-0.3B-PT").commit_for("main").value_or(""), a);
        QVERIFY(!repo_cache(c, "baidu/ERNIE-4.5-0.3B-PT").commit_for("dev").has_value());
    }

    void settingsFromTheEnvironment() {
        const QByteArray names[] = {"HF_ENDPOINT",   "HF_TOKEN",       "HUGGING_FACE_HUB_TOKEN",
                                    "HF_TOKEN_PATH", "HF_HUB_CACHE",   "HUGGINGFACE_HUB_CACHE",
                                    "HF_HOME",       "XDG_CACHE_HOME", "HOME"};
        std::map<QByteArray, std::optional<QByteArray>> saved;
        for (const auto &n : names) {
            saved[n] = qEnvironmentVariableIsSet(n) ? std::optional(qgetenv(n)) : std::nullopt;
            qunsetenv(n);
        }
        const QByteArray home = m_tmp->path().toUtf8();
        qputenv("HOME", home);
        hub_settings s = hub_settings_from_environment();
        QCOMPARE(s.endpoint, std::string("https://huggingface.co"));
        QCOMPARE(s.cache_dir, fs::path(home.toStdString()) / ".cache/huggingface/hub");
        QVERIFY(s.token.empty());
        // huggingface-cli login's token file under HF_HOME.
        writeFile(fs::path(home.toStdString()) / "hf" / "token", "hf_fromfile\n");
        qputenv("HF_HOME", home + "/hf");
        qputenv("HF_ENDPOINT", "https://mirror.example/");
        s = hub_settings_from_environment();
        QCOMPARE(s.cache_dir, fs::path(home.toStdString()) / "hf/hub");
        QCOMPARE(s.token, std::string("hf_fromfile"));
        QCOMPARE(s.endpoint, std::string("https://mirror.example"));
        qputenv("HF_HUB_CACHE", home + "/elsewhere");
        qputenv("HF_TOKEN", "hf_env");
        s = hub_settings_from_environment();
        QCOMPARE(s.cache_dir, fs::path(home.toStdString()) / "elsewhere");
        QCOMPARE(s.token, std::string("hf_env"));
        qunsetenv("HF_HUB_CACHE");
        qunsetenv("HF_HOME");
        qputenv("XDG_CACHE_HOME", home + "/xdg");
        s = hub_settings_from_environment();
        QCOMPARE(s.cache_dir, fs::path(home.toStdString()) / "xdg/huggingface/hub");
        for (const auto &[n, v] : saved) {
            if (v)
                qputenv(n, *v);
            else
                qunsetenv(n);
        }
    }

    void namesAreChecked() {
        QVERIFY(check_repo_id("baidu/ERNIE-4.5-0.3B-PT").ok());
        QVERIFY(check_repo_id("gpt2").ok());
        for (const char *bad : {"", "a/b/c", "../x", "a/..", "org/na me", "org/-x", "org/a--b", "/x", "org/"})
            QVERIFY2(!check_repo_id(bad).ok(), bad);
        QVERIFY(check_revision("refs/pr/1").ok());
        for (const char *bad : {"", "../main", "/main", "a\\b"}) QVERIFY2(!check_revision(bad).ok(), bad);
        QVERIFY(check_repo_path("a/b.json").ok());
        for (const char *bad : {"", "/etc/passwd", "a/../b", "./a", "a//b", "a/"})
            QVERIFY2(!check_repo_path(bad).ok(), bad);
        QCOMPARE(repo_folder_name("baidu/ERNIE-4.5-0.3B-PT"),
                 std::string("models--baidu--ERNIE-4.5-0.3B-PT"));
        QCOMPARE(percent_encode("refs/pr/1", false), std::string("refs%2Fpr%2F1"));
    }

    void theCatalogue() {
        const auto cat = ernie_catalogue();
        QCOMPARE(cat.size(), size_t(5));
        std::map<std::string, catalogue_entry> by;
        for (const auto &e : cat) by[e.repo_id] = e;
        const auto &small = by["baidu/ERNIE-4.5-0.3B-PT"], &moe = by["baidu/ERNIE-4.5-21B-A3B-Base-PT"],
                   &big = by["baidu/ERNIE-4.5-300B-A47B-PT"];
        QVERIFY(small.params > 300000000 && small.params < 400000000);
        QVERIFY(moe.params > 21000000000 && moe.params < 22500000000 && moe.base);
        QVERIFY(moe.active_params > 2500000000 && moe.active_params < 3500000000);
        QVERIFY(big.params > 290000000000 && big.params < 310000000000);
        QVERIFY(big.active_params > 45000000000 && big.active_params < 50000000000);
        QVERIFY(big.multi_gpu && !moe.multi_gpu && !small.multi_gpu);
        QVERIFY(small.download_bytes > uint64_t(small.params) * 2 - 1 &&
                small.download_bytes < uint64_t(small.params) * 3);
        // The verdicts are the engine's estimate, at each precision (here on the CPU).
        engine_params p;
        p.load.kind = backend_kind::cpu;
        const auto fit = fit_at_each_precision(small.config, p);
        QCOMPARE(fit.size(), size_t(2));
        QCOMPARE(fit[0].precision, std::string("BF16"));
        QCOMPARE(fit[1].precision, std::string("FP8"));
        QVERIFY2(fit[0].ok && fit[1].ok, fit[0].summary.c_str());
        QVERIFY(fit[1].estimate.weights_bytes < fit[0].estimate.weights_bytes);
        const auto huge = fit_at_each_precision(big.config, p);
        QVERIFY(huge[0].ok && !huge[0].fits); // 600 GB of BF16 weights
    }
};

QTEST_GUILESS_MAIN(TestHubDownload)
#include "test_hub_download.moc"
