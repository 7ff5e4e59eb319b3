// The CUDA graph cache: a decode-sized step is run eagerly once per key, then captured and
// replayed; the least recently replayed graph goes when the cache is full. Also the replay timings
// and the launch timeline the bench reads.
#include "engine/cuda/backend/cuda_backend_impl.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace es {

double cuda_backend_impl::graph_replay_us(int replays) {
    if (!m_graph.last || replays <= 0 || !m_broken.empty()) return 0.0;
    return time_replays(m_graph.last, replays);
}

double cuda_backend_impl::launched_graphs_replay_us(int replays) {
    if (replays <= 0) { // only forget the counts
        m_graph.runs.clear();
        return 0.0;
    }
    double sum = 0.0;
    int64_t steps = 0;
    if (!m_flight.empty()) return 0.0; // (only between forwards)
    // The slots' inputs as the latest forwards left them, put back at the end (graph_replay_us,
    // logits_row and the next step see what they would have).
    const std::vector<unsigned char> latest0(m_io[0].inputs.at(), m_io[0].inputs.at() + m_io[0].inputs.bytes()),
        latest1(m_io[1].inputs.at(), m_io[1].inputs.at() + m_io[1].inputs.bytes());
    if (m_broken.empty())
        for (const auto &[exec, gr] : m_graph.runs) {
            // Its latest launch's inputs back in place: a graph of fewer KV splits replayed
            // with a later step's positions would attend over more keys a split.
            pinned_buffer &pin = m_io[gr.slot].inputs;
            if (!gr.launches || gr.inputs.size() > pin.bytes()) continue;
            std::memcpy(pin.at(), gr.inputs.data(), gr.inputs.size());
            if (cudaMemcpyAsync(m_inputs.at(), pin.at(), gr.inputs.size(), cudaMemcpyHostToDevice, m_stream) !=
                cudaSuccess)
                break;
            const double us = time_replays(exec, replays);
            if (us <= 0.0) break;
            sum += us * double(gr.launches);
            steps += gr.launches;
        }
    cudaStreamSynchronize(m_stream);
    if (!latest0.empty()) std::memcpy(m_io[0].inputs.at(), latest0.data(), latest0.size());
    if (!latest1.empty()) std::memcpy(m_io[1].inputs.at(), latest1.data(), latest1.size());
    if (m_last_in.total && m_io[0].inputs.bytes() >= m_last_in.total && m_broken.empty())
        cudaMemcpyAsync(m_inputs.at(), m_io[m_last_slot].inputs.at(), m_last_in.total, cudaMemcpyHostToDevice, m_stream);
    cudaStreamSynchronize(m_stream);
    cudaGetLastError();
    m_graph.runs.clear();
    // The replays rewrote the workspace's candidates: no fed token may read them now.
    m_fed.valid = false;
    m_last_tops_current = false;
    return steps ? sum / double(steps) : 0.0;
}

double cuda_backend_impl::time_replays(cudaGraphExec_t exec, int replays) {
    cudaEvent_t a = nullptr, b = nullptr;
    float ms = 0.0f;
    bool ok = cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess &&
              cudaGraphLaunch(exec, m_stream) == cudaSuccess && // warm
              cudaEventRecord(a, m_stream) == cudaSuccess;
    for (int i = 0; ok && i < replays; ++i) ok = cudaGraphLaunch(exec, m_stream) == cudaSuccess;
    ok = ok && cudaEventRecord(b, m_stream) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
         cudaEventElapsedTime(&ms, a, b) == cudaSuccess;
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    cudaGetLastError();
    return ok ? 1000.0 * double(ms) / replays : 0.0;
}

std::vector<kernel_timeline_row> cuda_backend_impl::graph_timeline() {
    std::vector<kernel_timeline_row> rows;
    const auto names = m_graph.ops.find(m_graph.last);
    if (!m_graph.last || names == m_graph.ops.end() || !m_broken.empty()) return rows;
    const size_t n = names->second.size(), words = 1 + 2 * size_t(kernel_timeline_max);
    unsigned long long *buf = nullptr;
    std::vector<unsigned long long> host(words, 0);
    bool ok = cudaMalloc(reinterpret_cast<void **>(&buf), words * 8) == cudaSuccess &&
              cudaMemset(buf, 0, words * 8) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess &&
              set_kernel_timeline(buf) == cudaSuccess &&
              cudaGraphLaunch(m_graph.last, m_stream) == cudaSuccess &&
              cudaStreamSynchronize(m_stream) == cudaSuccess &&
              cudaMemcpy(host.data(), buf, words * 8, cudaMemcpyDeviceToHost) == cudaSuccess;
    set_kernel_timeline(nullptr);
    if (buf) cudaFree(buf);
    cudaGetLastError();
    const unsigned recorded = unsigned(host[0] & 0xffffffffu);
    if (!ok || recorded == 0) return rows;
    // A launch without pdl_enter (none in a decode graph today) would misalign the names:
    // then the rows are numbered instead.
    const size_t m = std::min<size_t>(recorded, kernel_timeline_max);
    const double t0 = double(host[2]);
    for (size_t i = 0; i < m; ++i) {
        char label[32];
        std::snprintf(label, sizeof label, "#%zu", i);
        rows.push_back({m == n ? names->second[i].name : std::string(label),
                        (double(host[1 + 2 * i]) - t0) / 1000.0,
                        (double(host[2 + 2 * i]) - t0) / 1000.0});
    }
    return rows;
}

void cuda_backend_impl::clear_graphs() {
    m_graph.last = nullptr;
    for (auto &kv : m_graph.execs) cudaGraphExecDestroy(kv.second);
    m_graph.execs.clear();
    m_graph.used.clear();
    m_graph.ops.clear();
    m_graph.runs.clear();
    m_graph.seen.clear();
    m_ws.unpin_all(); // no graph holds workspace pointers any more
}

void cuda_backend_impl::note_graph_launch(cudaGraphExec_t exec, int slot) {
    graph_cache::run &gr = m_graph.runs[exec];
    ++gr.launches;
    gr.slot = slot;
    gr.inputs.assign(m_io[slot].inputs.at(), m_io[slot].inputs.at() + m_last_in.total);
}

void cuda_backend_impl::evict_least_recent_graph() {
    auto oldest = m_graph.used.begin();
    for (auto it = m_graph.used.begin(); it != m_graph.used.end(); ++it)
        if (it->second < oldest->second) oldest = it;
    if (oldest == m_graph.used.end()) return;
    const auto g = m_graph.execs.find(oldest->first);
    if (g != m_graph.execs.end()) {
        ck(cudaStreamSynchronize(m_stream), "graph eviction");
        if (m_graph.last == g->second) m_graph.last = nullptr;
        m_graph.ops.erase(g->second);
        m_graph.runs.erase(g->second);
        cudaGraphExecDestroy(g->second);
        m_graph.execs.erase(g);
    }
    m_graph.used.erase(oldest);
}

bool cuda_backend_impl::capture_and_launch(const step_plan &p, const std::function<void()> &pre,
                                           const std::function<void()> &post, bool launch) {
    cudaGraph_t graph = nullptr;
    ck(cudaStreamBeginCapture(m_stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    std::vector<op_time> ops; // the launches, for graph_timeline and the timed steps
    struct stop_logging {
        std::vector<op_time> *&log;
        ~stop_logging() { log = nullptr; }
    } guard{m_graph.capture_ops = &ops};
    try {
        if (pre) pre();
        record_step(p);
        if (post) post();
    } catch (const load_error &e) {
        cudaStreamEndCapture(m_stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        m_graph.error = e.what();
        return false; // run eagerly; graphs stay off for this backend
    }
    cudaError_t e = cudaStreamEndCapture(m_stream, &graph);
    if (e != cudaSuccess || !graph) {
        cudaGetLastError();
        m_graph.error = std::string("stream capture failed: ") + cudaGetErrorString(e);
        return false;
    }
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        cudaGetLastError();
        m_graph.error = std::string("graph instantiation failed: ") + cudaGetErrorString(e);
        return false;
    }
    if (m_graph.execs.size() >= m_graph.max) evict_least_recent_graph();
    m_graph.execs.emplace(p.key, exec);
    m_graph.used[p.key] = ++m_graph.tick;
    m_graph.ops[exec] = std::move(ops);
    m_ws.pin_in_use(); // the graph holds the workspace's raw pointers until clear_graphs
    m_graph.last = exec;
    if (!launch) return true;
    ck(cudaGraphLaunch(exec, m_stream), "cudaGraphLaunch");
    note_graph_launch(exec, p.slot);
    return true;
}

} // namespace es
