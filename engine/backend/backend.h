// The interface every compute backend implements (CPU now, CUDA later), and the batch a
// forward pass consumes. One batch mixes prefill chunks and decode tokens of many sequences:
// each token carries its sequence and position; each sequence carries its KV block table.
//
// Paged KV layout (owned by the backend): per layer, K and V pools of n_blocks blocks of
// block_size tokens; token `pos` of a sequence lives in block block_table[pos / block_size] at
// slot pos % block_size. A forward pass first writes K/V of all batch tokens, then every token
// attends to positions [0, pos] of its own sequence through the block table, so chunked
// prefill, prefix-cached blocks and decode are one code path. A backend may back only the pool's
// lowest blocks with memory, [0, kv_mapped_blocks()), and map more on demand
// (kv_ensure_blocks) or give the top back (kv_trim_blocks): the CUDA backend reserves the whole
// pool's addresses and maps physical memory in steps.
#pragma once

#include "engine/backend/routing_intervention.h"
#include "engine/core/sampling.h"
#include "engine/core/step_phases.h"
#include "engine/core/status.h"
#include "engine/model/model_config.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace es {

struct batch_seq {
    std::vector<int32_t> block_table;  // KV blocks of this sequence, in position order
    // The expert intervention its tokens are routed under (routing_intervention.h); null or
    // empty: none. Only backends that support them (backend::supports_routing_interventions)
    // accept a batch with one.
    std::shared_ptr<const routing_intervention> routing;
};

struct batch {
    // [n_tokens]; through backend::submit, a token < 0 is fed: the previous submitted forward's
    // output row −token − 1's token (its draw, or its top candidate where it made none), which
    // the backend knows before the host does, so that a decode step can be submitted while the
    // one before it still runs.
    std::vector<int32_t> tokens;
    std::vector<int32_t> pos;          // [n_tokens] position within its sequence
    std::vector<int32_t> seq;          // [n_tokens] index into seqs; a sequence's tokens are one run, positions rising by one
    std::vector<batch_seq> seqs;
    std::vector<int32_t> logits_rows;  // token indices whose logits are wanted, in output order
    // > 0: a backend that supports it (backend::supports_candidates) may return each row's top
    // top_n candidates instead of the full row (forward_output::candidates); 0: full rows.
    int32_t top_n = 0;
    // [logits_rows.size()] or empty: the temperature of each row's softmax denominator
    // (forward_output::cand_sum); <= 0 or absent: no sum.
    std::vector<float> temperatures;
    // [logits_rows.size()] or empty: each row's draw, made by a backend that supports it
    // (backend::supports_sampling; forward_output::sampled). row_sampling::penalties is the index
    // of the row's first entry in `penalties`; row_sampling::extra_token indexes `tokens`.
    std::vector<row_sampling> sampling;
    std::vector<penalty_entry> penalties;
    // Measure this forward's phases (forward_output::phases, ::timeline) on the device, at the
    // cost of the overlap with its neighbours; a backend that times every forward ignores it.
    bool time_phases = false;

    int32_t n_tokens() const { return int32_t(tokens.size()); }
};

// Router decisions of one forward pass, for telemetry: for MoE layer slot m (layers in order,
// dense layers skipped), ids[m][t*k + j] and weights[m][t*k + j] for token t, choice j. k is the
// largest number of experts any token of the pass selected (an intervention may change it per
// sequence); a token that selected fewer has id −1 and weight 0 in the remaining places.
// margins[m][t]: how narrowly token t's last free choice won, in the router's selection score
// (softmax probability + the score-correction bias): the k-th chosen expert's score minus the
// best unchosen one's (the (k+1)-th choice); NaN where no expert was left unchosen or every
// place was forced. Empty when the backend does not record it.
struct routing_record {
    std::vector<int32_t> moe_layers;            // layer index of each slot
    int32_t n_expert_used = 0;                  // k
    std::vector<std::vector<int16_t>> ids;
    std::vector<std::vector<float>> weights;
    std::vector<std::vector<float>> margins;    // [slot][token], or empty (not recorded)
};

// Each logits row reduced to its top_n candidates (kernels/topk_logits.cuh): values descending,
// ties → lower id, NaN never a candidate, id −1 / −inf in unused slots.
struct logit_candidate_rows {
    int32_t top_n = 0;           // 0: not returned (forward_output::logits holds the rows)
    std::vector<int32_t> ids;    // [rows, top_n]
    std::vector<float> logits;   // [rows, top_n]
    std::vector<float> row_max;  // [rows] largest non-NaN logit
    std::vector<double> row_sum; // [rows] Σ exp((l − max)/T_row) in double (0 where T_row <= 0)
};

struct forward_output {
    // [logits_rows.size(), n_vocab]; empty when `candidates` were returned instead
    // (backend::logits_row fetches a full row then).
    std::vector<float> logits;
    logit_candidate_rows candidates;
    // [logits_rows.size()] the token drawn from each row when the batch asked (batch::sampling).
    std::vector<int32_t> sampled;
    routing_record routing;
    phase_times phases;
    // The launches of a forward timed on the device (batch::time_phases), in order; else empty.
    std::vector<op_time> timeline;
};

struct kv_cache_params {
    int32_t block_size = 16;
    int32_t n_blocks = 0;   // the pool's capacity
    // The pool's memory on demand: the backend may back only the blocks kv_ensure_blocks asks for
    // (the engine's pool). false: every block has memory from the start (a backend that cannot
    // map on demand backs them all either way).
    bool on_demand = false;
};

// Memory the backend manages besides weights and KV (workspace) and what the device reports.
// reserved: bytes the workspace holds (CUDA: the allocator's segments); in_use: bytes of it handed
// out; largest_free: the largest block inside `reserved` a request gets without asking the
// device (never the device's free memory). fragmentation = 1 − largest_free / (reserved − in_use),
// 0 when nothing is free (device_allocator.h).
struct backend_memory {
    uint64_t reserved = 0, in_use = 0, largest_free = 0; // workspace allocator
    uint64_t device_total = 0, device_free = 0;          // GPU: cudaMemGetInfo; CPU: RAM
    // Every device allocation the backend holds, by what it is for ("weights", "KV pool",
    // "workspace", "cuBLASLt workspace", …): what device_total − device_free holds beyond their sum
    // is the CUDA context's own and other processes'. Empty where memory is RAM. "KV pool" is the
    // memory mapped now, not the pool's capacity.
    std::vector<std::pair<std::string, uint64_t>> parts;
    // The KV pool: bytes of memory mapped now and of its whole address range (its capacity); 0
    // where the backend does not report them (the pool is then blocks × kv_block_bytes, all of it
    // allocated). kv_note: how the pool's memory is held, e.g. why it is one allocation.
    uint64_t kv_mapped = 0, kv_capacity = 0;
    std::string kv_note;
};

// Checks a batch against the model and the KV pool before a backend touches memory: lengths
// agree, token ids inside the vocabulary, positions covered by the sequence's block table and
// inside the context, block ids inside the pool, logits rows inside the batch. Throws
// es::load_error naming what is wrong (backends call it inside catch_errors). fed: negative
// tokens pass (submit's fed tokens, which the backend checks against the previous forward).
void check_batch(const batch &b, const model_config &cfg, const kv_cache_params &kv, bool fed = false);
// Whether any sequence of the batch carries a non-empty expert intervention.
bool batch_has_routing(const batch &b);

class backend {
public:
    virtual ~backend() = default;
    virtual std::string name() const = 0;            // "cpu", "cuda:0 NVIDIA H200"
    virtual const model_config &config() const = 0;

    // (Re)creates the KV pools, p.n_blocks blocks each (the capacity). Fails with a readable
    // message when the memory is not there. With p.on_demand a backend that maps on demand backs
    // none of the blocks yet (kv_mapped_blocks); otherwise all of them are backed.
    virtual status init_kv_cache(const kv_cache_params &p) = 0;
    virtual const kv_cache_params &kv_params() const = 0;
    virtual size_t kv_block_bytes() const = 0;

    // The KV pool's memory on demand. Blocks [0, kv_mapped_blocks()) of [0, kv_capacity_blocks())
    // are backed by memory; a batch may name only those. kv_ensure_blocks(n) backs blocks [0, n)
    // (more where the backend maps in steps; the new memory zeroed before any later forward reads
    // it), callable while forwards are in flight; it fails, with a message that names the KV pool
    // and the memory missing, when the memory is not there, leaving what was mapped. kv_trim_blocks(n)
    // gives back the memory of the blocks from n up, as far as the backend's steps allow (the
    // blocks kept: kv_mapped_after_trim(n) ≥ n); none of them may hold anything still needed, and
    // no forward may be in flight. The defaults: everything mapped, nothing to give back.
    virtual int32_t kv_capacity_blocks() const { return kv_params().n_blocks; }
    virtual int32_t kv_mapped_blocks() const { return kv_params().n_blocks; }
    virtual status kv_ensure_blocks(int32_t n);
    virtual status kv_trim_blocks(int32_t /*n*/) { return ok_status(); }
    virtual int32_t kv_mapped_after_trim(int32_t /*n*/) const { return kv_mapped_blocks(); }

    // Runs one forward pass. Validates the batch (ids in vocab, positions inside blocks). Nothing
    // may be in flight (submit without its finish).
    virtual status forward(const batch &b, forward_output &out) = 0;

    // Overlapped steps: submit() starts a forward and returns; finish() waits for the oldest
    // submitted forward not yet finished and fills `out` as forward() would, with that forward's
    // status. At most two are in flight. Only submit() takes fed tokens (batch::tokens); their
    // rows must be rows of the previous submitted forward, and that forward's top candidate is
    // what a greedy sampler without penalties picks. While a forward is in flight, logits_row()
    // refuses. This default runs the forward inside submit() (no overlap) and resolves fed tokens
    // from its outputs; the CUDA backend overlaps the next step's launch with the running step and
    // feeds the token on the GPU.
    virtual status submit(const batch &b);
    virtual status finish(forward_output &out);
    virtual int32_t in_flight() const { return int32_t(m_queued.size()); }
    // Whether submit() overlaps steps, so that the engine gains by submitting ahead.
    virtual bool overlaps_steps() const { return false; }

    // Whether forward() honours batch::top_n (returns candidates instead of full rows).
    virtual bool supports_candidates() const { return false; }
    // Whether forward() draws each row's token itself (batch::sampling → forward_output::sampled,
    // engine/core/sampling.h); with it, fed tokens read the draws.
    virtual bool supports_sampling() const { return false; }
    // Whether forward() applies batch_seq::routing (expert interventions); a backend that does
    // not refuses a batch that carries one (batch_has_routing), saying so.
    virtual bool supports_routing_interventions() const { return false; }
    // Full logits of output row `row` of the last forward(), valid until the next forward() or
    // init_kv_cache(); out.size() must be n_vocab. Same thread as forward().
    virtual status logits_row(int32_t row, std::span<float> out) = 0;

    virtual size_t weights_bytes() const = 0;
    virtual backend_memory memory() const { return {}; }
    // Places the forward pass's workspace for the largest step the engine runs (max_tokens
    // tokens, max_rows logits rows, block tables of max_blocks_per_seq), so that the device's
    // free memory afterwards is what the KV pool may take. Backends whose memory is RAM have
    // nothing to place.
    virtual status reserve_workspace(int32_t max_tokens, int32_t max_rows, int32_t max_blocks_per_seq) {
        return ok_status();
    }
    // Whether the KV pool lives in device memory sized from memory() (a GPU), not from RAM.
    virtual bool kv_in_device_memory() const { return false; }
    // The device's read bandwidth in bytes/s (the peak a launch's bytes per second are set
    // against), measured once and remembered; 0 where the backend has no device to measure.
    virtual double device_read_bandwidth() { return 0.0; }

private:
    // The default submit/finish: forwards run at submit, their outputs queued for finish.
    struct queued_forward {
        status st = ok_status();
        forward_output out;
    };
    std::deque<queued_forward> m_queued;
    std::vector<int32_t> m_prev_top; // the top candidate of each output row of the last submitted forward
};

// The token of each output row of a finished forward that a fed token reads: its draw
// (forward_output::sampled), else the candidates' first id, or the arg max of the full row (NaN
// skipped, ties → the lower id; −1 when every value is NaN), as a greedy sampler without
// penalties picks it.
std::vector<int32_t> top_candidates(const forward_output &out, int64_t n_vocab);

} // namespace es
