// The CUDA backend's construction, runtime switches, reports and KV pools (cuda_backend_impl.h
// lists what each file of the backend owns), and the module's device probe.
#include "engine/cuda/backend/cuda_backend_impl.h"

#include "engine/core/switches.h"
#include "engine/cuda/cuda_loader.h"
#include "kernels/fill_random.cuh"
#include "kernels/read_sum.cuh"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace es {

cuda_backend_impl::cuda_backend_impl(const model_config &cfg, const cuda_backend_params &p, const cuda_device_info &dev)
    : m_cfg(cfg), m_params(p), m_dev(dev) {
    ck(cudaSetDevice(p.device), "cudaSetDevice");
    ck(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (io_slot &io : m_io) ck(cudaEventCreateWithFlags(&io.done, cudaEventDisableTiming), "cudaEventCreate");
    ck(create_gemm_lt_context(&m_lt, k_cublas_workspace_bytes), "cuBLASLt initialisation");
    // FP8 activations need cuBLASLt's outer-vector scaling, which needs compute capability
    // 9.0: below, the dequantize path from the start (a refusal at run time does the same).
    m_act = p.precision == weight_precision::fp8 ? p.activations : activation_format::bf16;
    if (m_act != activation_format::bf16 && dev.cc_major < 9) {
        m_act_note = "FP8 activations need compute capability 9.0 (cuBLASLt outer-vector scaling); " +
                     dev.name + " has " + std::to_string(dev.cc_major) + "." +
                     std::to_string(dev.cc_minor) + ": BF16 activations, weights dequantized";
        m_act = activation_format::bf16;
    }
    // Block scales: cuBLASLt's FP8 GEMM scales weights per row (outer vector) only.
    if (m_act != activation_format::bf16 && p.fp8.scales == scale_layout::block128) {
        m_act_note = "128x128 block scales (cuBLASLt's FP8 GEMM takes per-row weight scales only): BF16 "
                     "activations, weights dequantized";
        m_act = activation_format::bf16;
    }
    read_switches(dev);
}

void cuda_backend_impl::read_switches(const cuda_device_info &dev) {
    set_programmatic_launch(dev.cc_major >= 9 && switch_flag("ES_CUDA_PDL", true));
    m_opt.plan.moe_down_rows = switch_value("ES_CUDA_MOE_DOWN").value_or("rows") != "gather";
    m_opt.plan.fuse = switch_flag("ES_CUDA_FUSE", m_opt.plan.fuse);
    m_opt.plan.kv_split_chunks = int(std::max<int64_t>(1, switch_int("ES_CUDA_KV_SPLIT_CHUNKS", m_opt.plan.kv_split_chunks)));
    m_opt.plan.kv_splits_max = std::clamp<int64_t>(switch_int("ES_CUDA_KV_SPLITS_MAX", m_opt.plan.kv_splits_max), 1,
                                                   k_decode_kv_splits);
    if (const auto rw = switch_value("ES_CUDA_MOE_DOWN_ROWS_PER_WARP")) {
        if (*rw != "1" && *rw != "2" && *rw != "4")
            throw load_error("ES_CUDA_MOE_DOWN_ROWS_PER_WARP must be 1, 2 or 4, not '" + *rw + "'");
        m_opt.moe_down_rows_per_warp = std::stoi(*rw);
    }
    m_opt.plan.moe_gemv_max_tokens = std::max<int64_t>(0, switch_int("ES_CUDA_MOE_GEMV_MAX_TOKENS", m_opt.plan.moe_gemv_max_tokens));
    m_opt.plan.moe_slot_counters = switch_flag("ES_CUDA_MOE_SLOT_COUNTERS", m_opt.plan.moe_slot_counters);
    m_opt.router_tiles_min = std::max<int64_t>(0, switch_int("ES_CUDA_ROUTER_TILES_MIN", m_opt.router_tiles_min));
    m_opt.moe_wgmma = switch_flag("ES_CUDA_MOE_WGMMA", m_opt.moe_wgmma);
    m_opt.moe_wgmma_min = std::max<int64_t>(0, switch_int("ES_CUDA_MOE_WGMMA_MIN", m_opt.moe_wgmma_min));
    m_opt.moe_fp8_act = switch_flag("ES_CUDA_MOE_FP8_ACT", m_opt.moe_fp8_act);
    m_opt.moe_mma = int(std::max<int64_t>(0, switch_int("ES_CUDA_MOE_MMA", m_opt.moe_mma)));
    if (const auto ms = switch_value("ES_CUDA_MOE_MMA_SHAPE")) m_opt.moe_mma_shape = parse_mma_shape(*ms);
    m_opt.moe_tile_major = switch_flag("ES_CUDA_MOE_TILE_MAJOR", m_params.moe_tile_major);
    m_graph.max = size_t(std::max<int64_t>(1, switch_int("ES_CUDA_MAX_GRAPHS", int64_t(m_graph.max))));
    if (const auto co = switch_value("ES_CUDA_CARVEOUT")) set_kernel_carveout(std::atoi(co->c_str()));
    if (const auto pm = switch_value("ES_CUDA_GEMV_PRELOAD_MIN_KB"))
        set_gemv_preload_min_bytes(int64_t(std::max(0, std::atoi(pm->c_str()))) << 10);
    if (const auto nr = switch_value("ES_CUDA_NORM_ROWS")) set_moe_gate_up_norm_rows(std::atoi(nr->c_str()));
    if (const auto lp = switch_value("ES_CUDA_L2_PREFETCH_KB")) {
        const long long kb = std::atoll(lp->c_str());
        set_l2_prefetch_max_bytes(kb < 0 ? -1 : int64_t(kb) << 10);
    }
    m_opt.plan.combine_norm = switch_flag("ES_CUDA_COMBINE_NORM", m_opt.plan.combine_norm);
    m_opt.plan.head_pick = switch_flag("ES_CUDA_HEAD_PICK", m_opt.plan.head_pick);
    m_opt.plan.zero_copy = switch_flag("ES_CUDA_ZERO_COPY", m_opt.plan.zero_copy);
    if (switch_value("ES_CUDA_ATTN_CLUSTER")) set_attention_cluster_merge(switch_flag("ES_CUDA_ATTN_CLUSTER", true));
    if (const auto am = switch_value("ES_CUDA_ATTN_MERGE")) set_attention_merge_push(*am == "push");
    if (const auto skip = switch_value("ES_CUDA_SKIP_OPS")) {
        std::string cur;
        for (const char ch : *skip + ",") {
            if (ch != ',') {
                cur += ch;
            } else if (!cur.empty()) {
                m_opt.skip_ops.push_back(cur);
                cur.clear();
            }
        }
    }
}

plan_options cuda_backend_impl::current_plan_options() const {
    plan_options o = m_opt.plan;
    o.use_graphs = m_params.use_graphs;
    o.profiling = m_prof.on;
    o.skipping_ops = !m_opt.skip_ops.empty();
    return o;
}

moe_gate_up_gemv_params::mma_shape_t cuda_backend_impl::parse_mma_shape(const std::string &text) {
    moe_gate_up_gemv_params::mma_shape_t m;
    std::vector<std::string> part;
    for (std::string v = text; !v.empty();) {
        const size_t slash = v.find('/');
        part.push_back(v.substr(0, slash));
        v = slash == std::string::npos ? "" : v.substr(slash + 1);
    }
    bool ok = part.size() >= 3;
    try {
        if (ok) {
            m.warps = std::stoi(part[0]);
            m.tiles = std::stoi(part[1]);
            m.depth = std::stoi(part[2]);
        }
    } catch (const std::exception &) {
        ok = false;
    }
    for (size_t k = 3; ok && k < part.size(); ++k) ok = part[k] == "wave";
    if (ok && part.size() > 3) m.wave = true;
    if (!ok || !moe_gate_up_mma_shape_ok(m))
        throw load_error("ES_CUDA_MOE_MMA_SHAPE='" + text +
                         "' is not a shape of the routed gate/up's tensor-core kernel "
                         "(warps/tiles/depth[/wave]; kernels/moe_gate_up_gemv.cu lists them)");
    return m;
}

cuda_backend_impl::~cuda_backend_impl() {
    if (m_stream) cudaStreamSynchronize(m_stream);
    clear_graphs();
    for (cudaEvent_t e : m_prof.events) cudaEventDestroy(e);
    for (cudaEvent_t e : m_timing.events) cudaEventDestroy(e);
    if (m_timing.timeline) cudaFree(m_timing.timeline);
    for (io_slot &io : m_io)
        if (io.done) cudaEventDestroy(io.done);
    destroy_gemm_lt_context(m_lt);
    if (m_stream) cudaStreamDestroy(m_stream);
}

std::string cuda_backend_impl::name() const {
    return "cuda:" + std::to_string(m_params.device) + " " + m_dev.name +
           (m_params.precision == weight_precision::fp8
                ? std::string(" (fp8, ") +
                      (m_params.fp8.scales == scale_layout::block128 ? "block128 scales, " : "") +
                      activation_format_name(m_act) + " activations" + kv_name_suffix() + ")"
                : std::string(" (bf16") + kv_name_suffix() + ")");
}

size_t cuda_backend_impl::kv_block_bytes() const {
    return size_t(m_kv.block_size) * size_t(m_cfg.kv_dim()) * 2 * kv_format_bytes(kv_fmt()) *
           size_t(m_cfg.n_layer);
}

void cuda_backend_impl::set_profiling(bool on) {
    m_prof.on = on;
    m_prof.totals.clear();
}

std::vector<kernel_profile_row> cuda_backend_impl::profile() const {
    std::vector<kernel_profile_row> rows;
    for (const auto &[name, v] : m_prof.totals) rows.push_back({name, v.first, v.second});
    std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a.total_ms > b.total_ms; });
    return rows;
}

std::string cuda_backend_impl::graph_status() const {
    if (!m_params.use_graphs) return "off";
    std::string skipped, notes;
    for (const auto &o : m_opt.skip_ops) skipped += (skipped.empty() ? "" : ",") + o;
    if (!skipped.empty()) notes = "; LEAVING OUT launches named " + skipped + " (ES_CUDA_SKIP_OPS)";
    if (!m_w.tile_major_note.empty()) notes += "; " + m_w.tile_major_note;
    const std::string pdl = programmatic_launch() ? ", programmatic launch" : ", no programmatic launch";
    if (!m_graph.error.empty()) return "failed: " + m_graph.error + pdl + notes;
    return "on, " + std::to_string(m_graph.execs.size()) + " captured" + pdl + notes;
}

forward_host_times cuda_backend_impl::host_times(bool reset) {
    const forward_host_times t = m_host_times;
    if (reset) m_host_times = forward_host_times{};
    return t;
}

cuda_memory_report cuda_backend_impl::memory_report() const {
    cuda_memory_report r;
    r.weights_bytes = weights_bytes();
    r.placement_slack_bytes = m_w.head_copy.bytes() - m_w.head_copy_bytes;
    r.kv_bytes = m_kv_pool.bytes();
    r.kv_capacity_bytes = m_kv_pool.capacity_bytes();
    r.kv_note = m_kv_pool.note();
    r.kv_cache = m_params.kv_cache;
    const device_allocator_stats ws = m_ws.stats();
    r.workspace_bytes = ws.reserved;
    r.workspace_in_use_bytes = ws.in_use;
    r.workspace_largest_free_bytes = ws.largest_free_block;
    r.workspace_peak_bytes = ws.peak_in_use;
    r.workspace_segments = ws.n_segments;
    r.library_bytes = k_cublas_workspace_bytes;
    if (cudaMemGetInfo(&r.device_free_bytes, &r.device_total_bytes) != cudaSuccess) {
        cudaGetLastError();
        r.device_free_bytes = r.device_total_bytes = 0;
    }
    return r;
}

backend_memory cuda_backend_impl::memory() const {
    backend_memory m;
    const device_allocator_stats ws = m_ws.stats();
    m.reserved = ws.reserved;
    m.in_use = ws.in_use;
    m.largest_free = ws.largest_free_block;
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        cudaGetLastError();
        f = t = 0;
    }
    m.device_free = f;
    m.device_total = t;
    // Every device allocation of the backend (and the one cuBLASLt's context makes for its
    // workspace); the KV pool's memory mapped now.
    m.parts = {{"weights", m_w.arena.bytes()},
               {"FP8 head copy", m_w.head_copy.bytes()},
               {"KV pool", m_kv_pool.bytes()},
               {"workspace", ws.reserved},
               {"cuBLASLt workspace", m_lt ? k_cublas_workspace_bytes : 0},
               {"kernel timeline", m_timing.timeline ? (1 + 2 * size_t(kernel_timeline_max)) * 8 : 0}};
    m.kv_mapped = m_kv_pool.bytes();
    m.kv_capacity = m_kv_pool.capacity_bytes();
    m.kv_note = m_kv_pool.note();
    return m;
}

status cuda_backend_impl::init_kv_cache(const kv_cache_params &p) {
    return catch_errors([&]() -> status {
        check_usable();
        if (p.block_size <= 0 || p.n_blocks <= 0)
            throw load_error("KV cache: block_size and n_blocks must be positive");
        if (!m_flight.empty()) throw load_error("KV cache: a submitted forward is not finished");
        ck(cudaStreamSynchronize(m_stream), "KV cache re-initialisation");
        clear_graphs();
        m_kv_pool.reset();
        m_kv = kv_cache_params{};
        const size_t per_layer = size_t(p.n_blocks) * size_t(p.block_size) * size_t(m_cfg.kv_dim());
        const size_t kv_bytes = per_layer * 2 * kv_format_bytes(kv_fmt()) * size_t(m_cfg.n_layer);
        // (The capacity: what the pool may come to map.)
        give_back_head_slack_for(kv_bytes);
        // On demand: reserved whole, mapped by kv_ensure_blocks; else one allocation, cleared.
        m_kv_pool.init(m_params.device, int32_t(2 * m_cfg.n_layer), p.n_blocks,
                       size_t(p.block_size) * size_t(m_cfg.kv_dim()) * kv_format_bytes(kv_fmt()), p.on_demand, m_stream,
                       "the KV cache (" + std::to_string(p.n_blocks) + " blocks of " + std::to_string(p.block_size) +
                           " tokens, " + (kv_fmt() == kv_format::bf16 ? "BF16" : "FP8 E4M3") + ")");
        m_kv_layer_elems = m_kv_pool.stride() / kv_format_bytes(kv_fmt());
        m_kv = p;
        return ok_status();
    });
}

status cuda_backend_impl::kv_ensure_blocks(int32_t n) {
    return catch_errors([&]() -> status {
        check_usable();
        guard_sticky([&] { m_kv_pool.ensure(n, m_stream); });
        return ok_status();
    });
}

status cuda_backend_impl::kv_trim_blocks(int32_t n) {
    return catch_errors([&]() -> status {
        check_usable();
        if (!m_flight.empty()) throw load_error("the KV pool cannot give memory back while a forward is in flight");
        if (m_kv_pool.mapped_after_trim(n) >= m_kv_pool.mapped_blocks()) return ok_status();
        // Every launch that may touch those blocks has ended before their memory goes.
        guard_sticky([&] {
            ck(cudaStreamSynchronize(m_stream), "the KV pool's trim");
            m_kv_pool.trim(n);
        });
        return ok_status();
    });
}

double cuda_backend_impl::device_read_bandwidth() {
    if (m_read_bw <= 0.0) m_read_bw = measure_read_bandwidth();
    return m_read_bw;
}

double cuda_backend_impl::measure_read_bandwidth() {
    if (!m_broken.empty() || !m_flight.empty()) return 0.0;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return 0.0;
    }
    // Far beyond L2 (50-60 MiB on Hopper), so every pass streams from HBM.
    const size_t bytes = std::min<size_t>(size_t(1) << 30, free_b / 4) / 16 * 16;
    if (bytes < (size_t(64) << 20)) return 0.0;
    constexpr int k_passes = 5;
    cudaEvent_t a = nullptr, b = nullptr;
    double result = 0.0;
    try {
        device_buffer buf, sink;
        buf.alloc(bytes, "the read-bandwidth probe");
        sink.alloc(256, "the read-bandwidth probe's checksum");
        ck(cudaMemsetAsync(buf.at(), 0x5a, bytes, m_stream), "the read-bandwidth probe");
        ck(cudaMemsetAsync(sink.at(), 0, 4, m_stream), "the read-bandwidth probe");
        read_sum_params p;
        p.src = buf.at();
        p.bytes = bytes;
        p.out = sink.at<unsigned>();
        ck(launch_read_sum(p, m_stream), "read_sum"); // warm
        ck(cudaEventCreate(&a), "cudaEventCreate");
        ck(cudaEventCreate(&b), "cudaEventCreate");
        ck(cudaEventRecord(a, m_stream), "cudaEventRecord");
        for (int i = 0; i < k_passes; ++i) ck(launch_read_sum(p, m_stream), "read_sum");
        ck(cudaEventRecord(b, m_stream), "cudaEventRecord");
        ck(cudaEventSynchronize(b), "the read-bandwidth probe");
        float ms = 0.0f;
        ck(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        if (ms > 0.0f) result = double(bytes) * k_passes / (double(ms) / 1000.0);
    } catch (const load_error &) {
        cudaGetLastError();
        result = 0.0;
    }
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    return result;
}

void cuda_backend_impl::check_usable() const {
    if (!m_broken.empty()) throw load_error("the CUDA backend stopped after an earlier error: " + m_broken);
}

void cuda_backend_impl::check_batch(const batch &b, bool fed) const {
    if (!m_kv_pool.initialized()) throw load_error("batch: the KV cache is not initialised");
    es::check_batch(b, m_cfg, m_kv, fed);
    // A block without memory behind it would fault the kernels (and the context with them).
    const int32_t mapped = m_kv_pool.mapped_blocks();
    for (const batch_seq &s : b.seqs)
        for (int32_t blk : s.block_table)
            if (blk >= mapped)
                throw load_error("batch: KV block " + std::to_string(blk) + " has no memory (the KV pool maps " +
                                 std::to_string(mapped) + " of its " + std::to_string(m_kv.n_blocks) +
                                 " blocks; kv_ensure_blocks first)");
    for (const batch_seq &s : b.seqs)
        if (s.routing)
            if (const status st = check_routing_intervention(*s.routing, m_cfg); !st)
                throw load_error("batch: expert intervention: " + st.message());
}

void cuda_backend_impl::collect_profile() {
    for (const auto &[name, i] : m_prof.pending) {
        float ms = 0.0f;
        ck(cudaEventElapsedTime(&ms, m_prof.events[i], m_prof.events[i + 1]), "cudaEventElapsedTime");
        auto &v = m_prof.totals[name];
        v.first += ms;
        v.second += 1;
    }
    m_prof.pending.clear();
    m_prof.next = 0;
}

int cuda_driver_version(std::string *why) {
    std::string reason;
    int v = 0;
    if (void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); !h) {
        const char *e = dlerror();
        reason = std::string("no NVIDIA driver is installed (libcuda.so.1 cannot be loaded: ") +
                 (e ? e : "?") + ")";
    } else {
        dlclose(h);
        const cudaError_t e = cudaDriverGetVersion(&v);
        if (e != cudaSuccess || v == 0) {
            cudaGetLastError();
            reason = e != cudaSuccess
                         ? std::string("the NVIDIA driver cannot be used (") + cudaGetErrorString(e) + ")"
                         : std::string("no NVIDIA driver is loaded (libcuda.so.1 reports no version)");
            v = 0;
        } else if (v / 1000 < CUDART_VERSION / 1000) {
            // CUDA's minor-version compatibility: any driver of the runtime's major version works.
            reason = "the NVIDIA driver is too old: it supports CUDA " + cuda_version_string(v) +
                     ", this build needs " + std::to_string(CUDART_VERSION / 1000) + ".x (update the driver)";
        }
    }
    if (why) *why = reason;
    return v;
}

result<cuda_device_info> probe_cuda_device(int device) {
    std::string why;
    if (cuda_driver_version(&why) == 0 || !why.empty()) return error{why};
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return error{std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")"};
    }
    if (count <= device) return error{"no CUDA device " + std::to_string(device) + " (" + std::to_string(count) + " found)"};
    cudaDeviceProp prop{};
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
        cudaGetLastError();
        return error{std::string("cannot query CUDA device: ") + cudaGetErrorString(e)};
    }
    cuda_device_info info;
    info.device = device;
    info.name = prop.name;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.n_sm = prop.multiProcessorCount;
#ifdef ES_CUDA_MIN_CC
    if (prop.major * 10 + prop.minor < ES_CUDA_MIN_CC)
        return error{info.name + " has compute capability " + std::to_string(prop.major) + "." +
                     std::to_string(prop.minor) + "; this build's kernels need " +
                     std::to_string(ES_CUDA_MIN_CC / 10) + "." + std::to_string(ES_CUDA_MIN_CC % 10) +
                     " or newer (rebuild with ES_CUDA_ARCHITECTURES naming this GPU)"};
#endif
    // Launch one tiny kernel: proves the driver, the context and that this build has code for
    // the GPU's architecture (cudaErrorNoKernelImageForDevice otherwise).
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        cudaGetLastError();
        return error{std::string("cannot use CUDA device: ") + cudaGetErrorString(e)};
    }
    void *buf = nullptr;
    if ((e = cudaMalloc(&buf, 256)) != cudaSuccess) {
        cudaGetLastError();
        return error{std::string("cannot allocate on the CUDA device: ") + cudaGetErrorString(e)};
    }
    fill_random_params p;
    p.out = static_cast<bf16_t *>(buf);
    p.n = 16;
    e = launch_fill_random(p, nullptr);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    cudaFree(buf);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return error{info.name + " (compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                     ") cannot run this build's kernels: " + cudaGetErrorString(e) +
                     " (rebuild with ES_CUDA_ARCHITECTURES naming this GPU)"};
    }
    cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
    return info;
}

} // namespace es
