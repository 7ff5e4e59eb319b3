// The CUDA backend's class, inside the module only. Its work is split by concern, one file each:
//   cuda_backend.cpp  construction, switches, reports, the KV pools, the device probe
//   kv_pool.cpp       the KV pool's memory: reserved once, mapped on demand (kv_pool_plan.cpp)
//   weights.cpp       weights: sources (checkpoint, random), placement, upload, FP8 quantization;
//                     the factories
//   workspace.cpp     the per-step workspace and the pinned I/O slots
//   step_plan.cpp     the pure plan of a step (layouts, fusions, graph key)
//   record.cpp        a plan recorded into launches, one function per phase
//   graphs.cpp        the CUDA graph cache: capture, replay, eviction, replay timing
//   step.cpp          forward / submit / finish: the asynchronous step and its outputs
// Invariants: every CUDA failure is an es::load_error (catch_errors at the interface); a sticky
// one marks the backend broken (m_broken) and every later call refuses; nothing that a captured
// graph points at (workspace blocks, pinned slots, weights) moves while the graph lives.
#pragma once

#include "engine/cuda/backend/cuda_backend.h"
#include "engine/cuda/backend/cuda_util.h"
#include "engine/cuda/backend/kv_pool.h"
#include "engine/cuda/backend/step_plan.h"
#include "engine/cuda/device_allocator.h"
#include "kernels/attention.cuh"
#include "kernels/gemm_lt.cuh"
#include "kernels/gemv.cuh"
#include "kernels/kernel_common.h"
#include "kernels/moe_gate_up_gemv.cuh"
#include "kernels/moe_grouped_gemm.cuh"
#include "kernels/moe_router.cuh"
#include "kernels/rope_kv.cuh"

#include <cuda_runtime_api.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace es {

inline constexpr size_t k_cublas_workspace_bytes = size_t(32) << 20; // cuBLASLt's own workspace

// A linear layer's weights in the weights arena: [n, k] in fmt, plus fp32 scales for FP8 in
// `layout`. Stacks of experts are one dlin with n = n_expert · rows per expert; with block scales
// each expert's [grid_rows, k] matrix has its own grid of fp8_scale_count(grid_rows, k) scales,
// expert e's at scale + e · fp8_scale_count(grid_rows, k, block128) (grid_rows = n: one matrix).
struct dlin {
    size_t w_off = 0, s_off = 0;
    int64_t n = 0, k = 0;
    weight_format fmt = weight_format::bf16;
    scale_layout layout = scale_layout::channel; // FP8 only
    int64_t grid_rows = 0;                       // rows of one scale grid (a stack's expert; else n)
    const void *w = nullptr;
    const float *scale = nullptr;
    int64_t grid_scales() const { return fp8_scale_count(grid_rows, k, layout); }
    int64_t scale_count() const { return grid_rows > 0 ? n / grid_rows * grid_scales() : 0; }
    size_t bytes() const {
        return size_t(n * k) * weight_format_bytes(fmt) +
               (fmt == weight_format::fp8_e4m3 ? size_t(scale_count()) * 4 : 0);
    }
};

struct dlayer {
    size_t attn_norm_off = 0, ffn_norm_off = 0;
    const bf16_t *attn_norm = nullptr, *ffn_norm = nullptr; // [n_embd]
    dlin wqkv, wo;                                          // [q+2kv, H], [H, q]
    bool is_moe = false;
    dlin gate_up, down;                                     // dense: [2F, H], [H, F]
    size_t router_off = 0, bias_off = 0;
    const float *router = nullptr, *bias = nullptr;         // [E, H], [E]
    dlin exp_gate_up, exp_down;                             // [E·2Fe, H], [E·H, Fe]
    dlin sh_gate_up, sh_down;                               // [2Fs, H], [H, Fs]
};

// The weights in device memory: the layers, embeddings and norms in one allocation (`arena`),
// the FP8 head copy (fp8_policy::head) in one of its own.
struct device_weights {
    device_buffer arena;
    device_buffer head_copy;      // its allocation may be larger than the copy: head_copy_alloc_bytes
    size_t head_copy_bytes = 0;   // the copy's own bytes
    size_t tok_embd_off = 0, output_norm_off = 0, head_off = 0, inv_freq_off = 0;
    std::vector<dlayer> layers;
    dlin head, head_fp8;
    double decode_bytes = 0.0;    // read by a batch-1 decode step (decode_weight_bytes)
    int64_t max_dense_lin = 0;    // elements of the widest dense linear
    std::string tile_major_note;  // why the routed gate/up stacks stay row-major, when they do
};

class weight_source;

// The backend's choices: what shapes a plan, and the kernels' instances and thresholds (the
// measuring aids among them come from the runtime switches, read_switches).
struct backend_options {
    plan_options plan;
    int moe_down_rows_per_warp = 0; // 0: the kernel's default
    int64_t router_tiles_min = moe_router_tiles_min_tokens;
    bool moe_wgmma = true;
    int64_t moe_wgmma_min = moe_grouped_gemm_wgmma_min_slots_per_expert;
    bool moe_fp8_act = true;
    int moe_mma = 1;
    moe_gate_up_gemv_params::mma_shape_t moe_mma_shape;
    bool moe_tile_major = false; // the FP8 routed gate/up stacks stored tile-major
    std::vector<std::string> skip_ops;
};

// One of two sets of pinned host buffers, a forward in flight each (submit): the inputs' mirror,
// the routing record's and the logits' or candidates' copies, and the download block as
// zero-copy graphs write it (sized with the workspace layout, so that its address changes only
// where the graphs are cleared; `logits` grows as needed: graphs never hold it), and the event
// recorded after the slot's forward.
struct io_slot {
    pinned_buffer inputs, record, logits, block;
    pinned_buffer penalties; // the step's penalty lists (batch::penalties), read by sample_rows in place
    cudaEvent_t done = nullptr;
};

// Captured decode graphs by key, least recently replayed dropped first.
struct graph_cache {
    std::map<graph_key, cudaGraphExec_t> execs;
    std::map<graph_key, uint64_t> used; // last capture or replay
    uint64_t tick = 0;
    size_t max = k_max_graphs;
    std::set<graph_key> seen; // keys run eagerly once (lazy initialization stays out of graphs)
    cudaGraphExec_t last = nullptr;
    std::string error; // why capture failed: graphs stay off for this backend
    // The launches of each captured graph, in order, with their phases and bytes (graph_timeline,
    // the timed steps), and the list op() appends to while a capture runs.
    std::map<cudaGraphExec_t, std::vector<op_time>> ops;
    std::vector<op_time> *capture_ops = nullptr;
    // Steps that launched each graph since launched_graphs_replay_us last ran, and the inputs of
    // its latest launch (the pinned mirror's bytes), so that it can be replayed as it ran.
    struct run {
        int64_t launches = 0;
        int slot = 0; // the pinned slot its inputs come from
        std::vector<unsigned char> inputs;
    };
    std::map<cudaGraphExec_t, run> runs;
};

// Every launch timed with events while profiling is on; GPU time summed per launch name.
struct op_profiler {
    bool on = false;
    std::vector<cudaEvent_t> events;
    size_t next = 0;
    std::vector<std::pair<std::string, size_t>> pending;
    std::map<std::string, std::pair<double, int64_t>> totals;
};

// What a launch reads, for the step timeline (op_time::bytes, ::shared).
struct op_cost {
    double bytes = 0.0, shared = 0.0;
};

// A forward timed on the device (batch::time_phases): events around the step, and around each
// launch of a step recorded eagerly (on); a replayed graph's kernels instead write their release
// times into `timeline` (kernel_common.h set_kernel_timeline: no node is added to the graph).
struct step_timing {
    bool on = false;
    std::vector<cudaEvent_t> events; // reused; 2 per launch of an eager step, 2 for the step
    size_t next = 0;
    std::vector<op_time> ops;        // the eager step's launches
    std::vector<size_t> op_event;    // each one's first event in `events`
    unsigned long long *timeline = nullptr; // 1 + 2 · kernel_timeline_max words (device)
};

// A forward submitted and not finished: what its outputs' unpacking needs.
struct pending_forward {
    int slot = 0;
    int64_t T = 0, R = 0, top_n = 0, nk = 0;
    int64_t K = 0;                // routed experts' places per token (step_plan::K)
    std::vector<int32_t> token_k; // with an intervention: each token's k (≤ K); else empty
    size_t cand_rel = 0, logit_bytes = 0;
    bool via_pinned = false, cand_block = false, io_done = false, replayed = false;
    bool sample = false;     // its candidates are draws (forward_output::sampled)
    bool timed = false;      // batch::time_phases: phases and timeline below, measured at submit
    phase_times phases;
    std::vector<op_time> timeline;
    bool done = false;       // its outputs already in `out` (run synchronously, or drained)
    status st = ok_status(); // its status, when done
    forward_output out;
    std::chrono::steady_clock::time_point h0, h1, h2, h3, h4;
};

// Pointers into the workspace and the inputs of the step being recorded (record.cpp).
struct step_ptrs {
    float *x = nullptr, *qkv = nullptr, *gu = nullptr;
    bf16_t *xn = nullptr, *q = nullptr, *attn = nullptr, *act = nullptr;
    const int32_t *tokens = nullptr, *pos = nullptr, *seq = nullptr, *rows = nullptr, *tiles = nullptr, *bt = nullptr;
};

// Between the layers of a step being recorded: what the last combine already wrote.
struct layer_link {
    bool embedded = false;    // the embedding ran (alone, or inside layer 0's q/k/v GEMV)
    bool xn_ready = false;    // the next layer's attention input is normalized in xn
    bool head_normed = false; // the last combine wrote the head's normalized row (xr)
    int64_t moe_slot = 0;     // the routing record's slot of the next MoE layer
};

class cuda_backend_impl final : public cuda_backend {
public:
    cuda_backend_impl(const model_config &cfg, const cuda_backend_params &p, const cuda_device_info &dev);
    ~cuda_backend_impl() override;

    // es::backend
    std::string name() const override;
    const model_config &config() const override { return m_cfg; }
    size_t weights_bytes() const override { return m_w.arena.bytes() + m_w.head_copy_bytes; }
    status init_kv_cache(const kv_cache_params &p) override;
    const kv_cache_params &kv_params() const override { return m_kv; }
    size_t kv_block_bytes() const override;
    // The pool's memory on demand (kv_pool.h): reserved at init_kv_cache, mapped and given back here.
    int32_t kv_mapped_blocks() const override { return m_kv_pool.initialized() ? m_kv_pool.mapped_blocks() : 0; }
    status kv_ensure_blocks(int32_t n) override;
    status kv_trim_blocks(int32_t n) override;
    int32_t kv_mapped_after_trim(int32_t n) const override { return m_kv_pool.mapped_after_trim(n); }
    status forward(const batch &b, forward_output &out) override;
    // Overlapped steps (backend::submit): a forward is enqueued with its outputs' host copies in
    // one of two slots of pinned buffers, so that the next one can be enqueued before its outputs
    // are read; fed tokens come from the previous forward's candidates on the GPU (copy_bytes).
    status submit(const batch &b) override;
    status finish(forward_output &out) override;
    int32_t in_flight() const override { return int32_t(m_flight.size()); }
    bool overlaps_steps() const override { return true; }
    bool supports_candidates() const override { return true; }
    bool supports_sampling() const override { return true; }
    bool supports_routing_interventions() const override { return true; }
    status logits_row(int32_t row, std::span<float> out) override;
    backend_memory memory() const override;
    status reserve_workspace(int32_t max_tokens, int32_t max_rows, int32_t max_blocks_per_seq) override;
    bool kv_in_device_memory() const override { return true; }

    // es::cuda_backend
    // The workspace figures are the allocator's (device_allocator_stats); the device's come from
    // cudaMemGetInfo (0 when it fails, e.g. after a sticky error).
    cuda_memory_report memory_report() const override;
    void set_profiling(bool on) override;
    std::vector<kernel_profile_row> profile() const override;
    std::string graph_status() const override;
    double graph_replay_us(int replays) override;
    double launched_graphs_replay_us(int replays) override;
    forward_host_times host_times(bool reset) override;
    std::vector<kernel_timeline_row> graph_timeline() override;
    void set_record_routing(bool on) override { m_opt.plan.record_routing = on; }
    weight_precision precision() const override { return m_params.precision; }
    activation_format activations() const override { return m_act; }
    std::string activation_note() const override { return m_act_note; }
    double decode_weight_bytes() const override { return m_w.decode_bytes; }
    double measure_read_bandwidth() override;
    double device_read_bandwidth() override;

    // Builds every weight through `src` (plan offsets, one allocation, fill, quantize).
    void build(weight_source &src);

private:
    // ---- cuda_backend.cpp
    // The runtime switches (core/switches.h has each one's meaning; those that change results
    // are read only in developer builds).
    void read_switches(const cuda_device_info &dev);
    // "warps/tiles/depth[/wave]" → an instance of the tensor-core routed gate/up, or a refusal.
    static moe_gate_up_gemv_params::mma_shape_t parse_mma_shape(const std::string &text);
    void check_usable() const;
    void check_batch(const batch &b, bool fed = false) const;
    // Runs f; a CUDA error that leaves the context unusable marks the backend broken.
    template <typename F>
    void guard_sticky(F &&f) {
        try {
            f();
        } catch (const load_error &e) {
            const cudaError_t st = cudaGetLastError();
            if (is_sticky(st) || std::string(e.what()).find("no longer usable") != std::string::npos)
                m_broken = e.what();
            throw;
        }
    }
    // The KV pools' element format (cuda_backend_params::kv_cache) and the name's mention of it.
    kv_format kv_fmt() const {
        return m_params.kv_cache == kv_cache_dtype::fp8 ? kv_format::fp8_e4m3 : kv_format::bf16;
    }
    std::string kv_name_suffix() const { return m_params.kv_cache == kv_cache_dtype::fp8 ? ", fp8 KV" : ""; }
    // Warps of the head's persistent grid the pick's keys have room for: 64 an SM (an SM holds at
    // most 2,048 threads).
    unsigned pick_keys_cap() const { return 64u * unsigned(std::max(m_dev.n_sm, 1)); }
    // The plan's options as they stand now (profiling and launches left out included).
    plan_options current_plan_options() const;
    void collect_profile();

    // ---- weights.cpp
    struct weight_placement; // build()'s offsets and sizes before the allocation
    void choose_moe_layout(const weight_placement &wp);
    void place_weights(weight_placement &wp);
    void fill_weights(weight_source &src);
    void resolve_pointers();
    // fp8_policy::head: the E4M3 copy of the head, quantized from the BF16 table on the GPU into `to`.
    void quantize_head_copy(const device_buffer &to);
    // A KV cache that would leave less than a twentieth of the device free beside the FP8 head
    // copy's placement slack (head_copy_alloc_bytes) gets that slack: the copy moves to an
    // allocation of its own size, quantized again from the BF16 table (the same codes). The
    // caller has cleared the graphs, which hold the old copy's address.
    void give_back_head_slack_for(size_t kv_bytes);
    void compute_decode_bytes();
    // The FP8 head copy's allocation: a copy of 128 MiB to 1 GiB gets 1 GiB where that slack costs
    // at most 1% of the device's memory and leaves a tenth of it free (the memory report names the
    // slack; weights_bytes() and the will-it-fit estimate count the copy's own bytes; a KV cache
    // that needs the room takes it back: give_back_head_slack_for). With the 21B-A3B's 253 MiB
    // copy in an allocation of its own size, the routed gate/up GEMV of every MoE layer runs
    // ~1.4 µs slower on the H200; at 1 or 2 GiB it runs as without the copy (the 0.3B's 101 MiB
    // copy: no difference). Why one allocation's placement slows the reads of another is not
    // known; the layers' own allocation shows the same (ES_CUDA_WEIGHTS_PAD_KB).
    size_t head_copy_alloc_bytes(size_t bytes) const;

    // ---- workspace.cpp
    workspace_shape ws_shape() const;
    int64_t max_ff() const;
    int64_t n_moe_layers() const;
    bool workspace_fits(int64_t T, int64_t R, int64_t bt) const;
    // Grows the workspace and the pinned slots (graphs cleared) to hold a step of T tokens, R
    // rows and bt block-table entries; capacities double, so a growing context resizes rarely.
    void ensure_workspace(int64_t T, int64_t R, int64_t bt);
    // The dequantize path's BF16 weight buffer (the widest dense linear), allocated once.
    void ensure_dequantize_buffer();

    // ---- record.cpp: the step's launches, no host synchronization (capturable into a graph)
    void record_step(const step_plan &p);
    step_ptrs pointers_for(const step_plan &p) const;
    void record_embedding(const step_plan &p, const step_ptrs &s, layer_link &link);
    void record_attention(const step_plan &p, const step_ptrs &s, int64_t il, layer_link &link);
    void record_dense_ffn(const step_plan &p, const step_ptrs &s, int64_t il);
    // The norm, the router and the shared experts of an MoE layer; whether moe_front took them.
    // ids, wts, margins: the routing record's slot moe_slot; under an intervention (plan:
    // reroute) moe_reroute selects the experts again from the router's logits.
    bool record_moe_front(const step_plan &p, const step_ptrs &s, int64_t il, int64_t moe_slot, int32_t *ids,
                          float *wts, float *margins, bool &shared_in_down);
    void record_moe_decode(const step_plan &p, const step_ptrs &s, int64_t il, layer_link &link);
    void record_moe_grouped(const step_plan &p, const step_ptrs &s, int64_t il, layer_link &link);
    void record_head(const step_plan &p, const step_ptrs &s, const layer_link &link);
    // The bytes of a routed expert stack T tokens' choices read at most (min(E, T · k) experts).
    double routed_bytes(const dlin &stack, int64_t T) const;
    // Every launch goes through here: checked, left out when ES_CUDA_SKIP_OPS names it, listed
    // with its phase (m_phase) and cost while a graph is captured, timed with events while
    // profiling or while a timed step is recorded eagerly.
    template <typename F>
    void op(const std::string &name, F &&launch) {
        op(name, op_cost{}, std::forward<F>(launch));
    }
    template <typename F>
    void op(const std::string &name, op_cost cost, F &&launch) {
        for (const auto &o : m_opt.skip_ops)
            if (name.find(o) != std::string::npos) return;
        if (m_graph.capture_ops) m_graph.capture_ops->push_back(op_tag(name, cost));
        if (m_timing.on) {
            cudaEvent_t a = timing_event(), b = timing_event();
            m_timing.op_event.push_back(m_timing.next - 2);
            m_timing.ops.push_back(op_tag(name, cost));
            ck(cudaEventRecord(a, m_stream), "cudaEventRecord");
            check_launch(name, launch());
            ck(cudaEventRecord(b, m_stream), "cudaEventRecord");
            return;
        }
        if (!m_prof.on) {
            check_launch(name, launch());
            return;
        }
        while (m_prof.events.size() < m_prof.next + 2) {
            cudaEvent_t e = nullptr;
            ck(cudaEventCreate(&e), "cudaEventCreate");
            m_prof.events.push_back(e);
        }
        cudaEvent_t a = m_prof.events[m_prof.next++], b = m_prof.events[m_prof.next++];
        ck(cudaEventRecord(a, m_stream), "cudaEventRecord");
        check_launch(name, launch());
        ck(cudaEventRecord(b, m_stream), "cudaEventRecord");
        m_prof.pending.push_back({name, m_prof.next - 2});
    }
    void check_launch(const std::string &name, cudaError_t e) const;
    op_time op_tag(const std::string &name, op_cost cost) const {
        return op_time{name, m_phase, m_phase_layer, 0.0, 0.0, cost.bytes, cost.shared};
    }
    // The next event of the timing pool (created as needed).
    cudaEvent_t timing_event();
    // A timed step's figures once its end event completed (synchronously): its phases and
    // launches into pf, from the replayed graph's kernel timeline (exec) or the eager launches'
    // events.
    void finish_step_timing(pending_forward &pf, cudaGraphExec_t exec, cudaEvent_t begin, cudaEvent_t end);
    // A prefill-sized FP8 linear with FP8 activations: act_quantize (per-token scales) into the
    // workspace, then cuBLASLt's FP8 GEMM with per-token and per-channel scales. False, with
    // nothing left to undo, when the shape breaks cuBLASLt's FP8 rules (that linear takes the
    // dequantize path) or cuBLASLt refuses the GEMM: the refusal is remembered (m_act becomes
    // bf16, m_act_note the reason) and every later step takes the dequantize path directly.
    bool linear_fp8(const std::string &role, const dlin &L, const bf16_t *x, int64_t ldx, float *y, int64_t ldy,
                    int64_t M, bool acc);
    // y_ready: accumulating into a y that neither of the last two launches writes (gemv.cuh).
    void linear(const char *role, const dlin &L, const bf16_t *x, int64_t ldx, float *y, int64_t ldy, int64_t M,
                bool acc, bool y_ready = false);
    static gemv_params gemv_for(const dlin &L, const bf16_t *x, int64_t ldx, float *y, int64_t ldy, int64_t M,
                                bool acc);
    // y += down(silu(gate(x)) · up(x)) over T tokens (dense MLP and shared experts). With `in`,
    // x is instead the norm of in->x, fused into the gate/up GEMV: false, with nothing launched,
    // when that path does not apply (more than two tokens, shapes the fused kernel cannot take);
    // the caller then runs rms_norm and calls again without it.
    bool swiglu(const char *role, const dlin &gate_up, const dlin &down, int64_t F, const bf16_t *x, float *y,
                float *gu, bf16_t *act, int64_t T, const norm_in *in = nullptr);

    // ---- graphs.cpp
    void clear_graphs();
    // One replay's GPU time in µs, from `replays` back to back after a warm one (0 on failure).
    double time_replays(cudaGraphExec_t exec, int replays);
    // Counts a launch of `exec` and keeps the inputs it ran with (launched_graphs_replay_us).
    void note_graph_launch(cudaGraphExec_t exec, int slot);
    // Drops the graph replayed longest ago (graph_cache::max). The stream is drained first: that
    // graph may be the one still running. Its workspace stays pinned until clear_graphs.
    void evict_least_recent_graph();
    // Captures the plan's launches (pre and post, when set, enqueue transfers captured before and
    // after them), instantiates and launches the graph. False when capture fails: the step then
    // runs eagerly, and graphs stay off for this backend.
    // launch false: captured and kept, not launched (a timed step replays it next, so that its
    // kernels' timeline is what a replay runs).
    bool capture_and_launch(const step_plan &p, const std::function<void()> &pre,
                            const std::function<void()> &post, bool launch = true);

    // ---- step.cpp
    // Collects every forward in flight into its pending entry (their outputs read now), so that
    // the workspace or its pinned buffers can change.
    void drain();
    // Enqueues a forward (submit): inputs into its slot's pinned mirror, the step's launches (a
    // graph or eagerly), its outputs' download; returns what collect() needs. Profiling and
    // full-row forwards larger than decode's run to the end here (done).
    pending_forward start(const batch &b);
    // The batch's tokens with fed ones resolved on the host (when the GPU cannot patch them).
    std::vector<int32_t> host_tokens(const batch &b, const step_plan &p);
    // The inputs into the slot's pinned mirror, in the plan's layout.
    void pack_inputs(const batch &b, const step_plan &p, const std::vector<int32_t> &tokens);
    // A step with expert interventions (plan: reroute): each MoE layer's routing rules (rule 0 the
    // model's routing, then one per distinct intervention of the batch) and each token's rule into
    // m_route, and each token's k into pf.token_k.
    void upload_route_rules(const batch &b, const step_plan &p, pending_forward &pf);
    // The step's launches: a graph replayed or captured, else eagerly; its I/O around or inside.
    void launch_step(const step_plan &p, pending_forward &pf);
    // The previous submitted forward's top candidates on the host (m_last_tops): collects the
    // forwards in flight.
    void drain_for_tops();
    // Waits for a started forward and reads its outputs from its slot's pinned buffers into out.
    // latest: pf is the last forward submitted (its top candidates are what fed tokens name next).
    void collect(pending_forward &pf, forward_output &out, bool latest);

    // ---- state
    model_config m_cfg;
    cuda_backend_params m_params;
    cuda_device_info m_dev;
    backend_options m_opt;
    cudaStream_t m_stream = nullptr;
    gemm_lt_context *m_lt = nullptr;
    std::string m_broken;                              // why the backend stopped (a sticky error)
    activation_format m_act = activation_format::bf16; // in effect for FP8 linears (activations())
    std::string m_act_note;                            // why m_act differs from the request

    device_weights m_w;
    // The KV pools: region 2·il is layer il's K pool, 2·il + 1 its V pool, m_kv_layer_elems
    // elements apart (the regions' stride: the capacity's blocks, rounded up to the mapping
    // granularity); blocks [0, kv_mapped_blocks()) of each have memory.
    kv_pool_memory m_kv_pool;
    kv_cache_params m_kv;
    size_t m_kv_layer_elems = 0;
    // Per-step scratch from the caching workspace allocator (declared first: it outlives its blocks).
    device_allocator m_ws{cuda_memory_source()};
    workspace_buffer m_staging{m_ws}, m_deq{m_ws}, m_work{m_ws}, m_inputs{m_ws};
    // Expert interventions of the step being recorded (upload_route_rules): each token's rule
    // [T] at 0, then the rules [n_moe][m_route_n_rules][moe_reroute_rule_words(E)] at m_route_rules.
    workspace_buffer m_route{m_ws};
    size_t m_route_rules = 0;
    int64_t m_route_n_rules = 0;
    work_layout m_lay{};
    io_slot m_io[2];
    graph_cache m_graph;
    op_profiler m_prof;
    step_timing m_timing;
    // The phase and layer the launches being recorded belong to (record_step sets them).
    step_phase m_phase = step_phase::other;
    int32_t m_phase_layer = -1;
    double m_step_kv_bytes = 0.0; // KV bytes a layer's attention reads in the step being recorded
    double m_read_bw = 0.0;       // device_read_bandwidth(), once measured

    // The asynchronous step.
    std::deque<pending_forward> m_flight; // submitted, not finished (oldest first)
    // Where the last submitted forward left its candidates in the workspace (fed tokens of the
    // next one read them on the GPU), and the top candidate of each row of the last one finished
    // (fed tokens resolved on the host, where the workspace has moved since).
    fed_source m_fed;
    std::vector<int32_t> m_last_tops;
    bool m_last_tops_current = false; // m_last_tops is of the last submitted forward
    int64_t m_last_rows = 0;          // logits rows of the last finished forward (logits_row())
    out_layout m_out{};               // the download block of the step being recorded
    // The step being recorded gets its inputs from a kernel (copy_bytes), not a copy before its
    // first launch: layer 0's fused q/k/v GEMV must read them after its wait.
    bool m_inputs_by_kernel = false;
    forward_host_times m_host_times;                        // host_times()
    std::chrono::steady_clock::time_point m_last_collect{}; // the last collect()'s end (host_times' wait)
    int m_last_slot = 0;                                    // the last submitted forward's slot
    input_layout m_last_in{};                               // its input layout (graph replays)
};

} // namespace es
