// The scheduler of the engine step (vLLM v1 style): there is no prefill phase; each request's
// computed tokens catch up to its known tokens (prompt + output) under a per-step token budget
// and a maximum number of sequences, so chunked prefill and decode share one batch.
// Order each step: running requests that decode (one token each), then running requests still
// prefilling, then waiting requests (FCFS) with prefix-cache hits. When KV blocks run out the
// newest running request is preempted: its blocks are freed and it is recomputed later (its
// output tokens and sampler state are kept, so the continuation is unchanged). Where the pool's
// memory grows on demand (block_pool's grow function) and cannot grow, that is blocks running
// out too; a waiting request that cannot be given blocks while nothing runs (so nothing will give
// any back) fails, with the reason the pool could not grow (scheduler_output::failed).
// Owned by the engine thread; not thread-safe.
#pragma once

#include "engine/backend/routing_intervention.h"
#include "engine/runtime/block_pool.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace es {

struct scheduler_params {
    int32_t max_num_seqs = 16;          // sequences in one step
    int32_t max_batched_tokens = 512;   // tokens in one step
    int32_t block_size = 16;
    int32_t n_blocks = 0;
    // Blocks with memory at the start (block_pool's n_mapped; < 0: all) and how the pool maps more.
    int32_t n_mapped = -1;
    kv_grow_fn grow;
    int64_t max_model_len = 0;          // context: prompt + output must stay below
    bool enable_prefix_caching = true;
};

// What the scheduler knows of a request. The engine derives its own state from this.
struct sched_request {
    uint64_t id = 0;
    std::vector<int32_t> tokens;        // prompt followed by output
    int32_t n_prompt = 0;
    int32_t n_computed = 0;             // tokens whose K/V are in this request's blocks
    std::vector<int32_t> blocks;        // KV block table
    std::vector<block_hash> hashes;     // hashes of the full blocks cached so far (chain)
    int32_t n_cached_tokens = 0;        // prompt tokens served by the prefix cache at admission
    int32_t n_preemptions = 0;
    bool running = false;
    // The expert intervention its tokens are routed under; with one, no block of it is looked up
    // in or added to the prefix cache (the KV past the first MoE layer differs).
    std::shared_ptr<const routing_intervention> routing;
    bool shares_prefix() const { return !routing || routing->empty(); }

    int32_t n_tokens() const { return int32_t(tokens.size()); }
};

struct scheduled_chunk {
    sched_request *req = nullptr;
    int32_t start = 0;                  // first position computed in this step
    int32_t n_new = 0;                  // tokens computed in this step
    bool samples = false;               // reaches the last known token: the step samples one
};

struct scheduler_output {
    std::vector<scheduled_chunk> chunks;
    std::vector<uint64_t> preempted;    // ids preempted this step
    // Requests taken out of the scheduler this step because the KV pool cannot grow to hold them
    // and nothing runs that could give blocks back: id and why (the engine fails their streams).
    std::vector<std::pair<uint64_t, std::string>> failed;
    int32_t n_prefill_tokens = 0, n_decode_tokens = 0;
};

class scheduler {
public:
    explicit scheduler(const scheduler_params &p);

    // Adds a request to the back of the waiting queue. Fails (returns a message) when it can
    // never run: prompt not shorter than the context, or more blocks than the cache has.
    std::string add(std::unique_ptr<sched_request> r);

    scheduler_output schedule();

    // After the forward pass: advances n_computed of every scheduled chunk and caches newly
    // full blocks. Sampled tokens are appended by the engine through append_token().
    void update(const scheduler_output &out);
    void append_token(sched_request &r, int32_t token) { r.tokens.push_back(token); }

    // Removes a finished or cancelled request and frees its blocks. Returns it (or null).
    std::unique_ptr<sched_request> finish(uint64_t id);

    sched_request *find(uint64_t id);
    bool has_work() const { return !m_waiting.empty() || !m_running.empty(); }
    int32_t n_waiting() const { return int32_t(m_waiting.size()); }
    int32_t n_running() const { return int32_t(m_running.size()); }
    const block_pool &pool() const { return m_pool; }
    // The pool's memory after the backend gave back or mapped some (block_pool::set_mapped).
    bool set_mapped(int32_t n_mapped) { return m_pool.set_mapped(n_mapped); }
    const scheduler_params &params() const { return m_p; }
    // Tokens whose K/V are held by running requests (for KV waste).
    int64_t kv_tokens_stored() const;

private:
    bool allocate_for(sched_request &r, int32_t n_new);
    void preempt(sched_request &r);
    void release_blocks(sched_request &r);
    int32_t admit_prefix(sched_request &r);

    scheduler_params m_p;
    block_pool m_pool;
    std::deque<std::unique_ptr<sched_request>> m_waiting;
    std::vector<std::unique_ptr<sched_request>> m_running; // admission order: back = newest
};

} // namespace es
