// Scheduler (see scheduler.h).
#include "engine/runtime/scheduler.h"

#include <algorithm>

namespace es {

scheduler::scheduler(const scheduler_params &p) : m_p(p), m_pool(p.n_blocks, p.block_size, p.n_mapped) {
    m_pool.set_grow(p.grow);
}

std::string scheduler::add(std::unique_ptr<sched_request> r) {
    if (r->tokens.empty()) return "the prompt is empty";
    if (m_p.max_model_len > 0 && r->n_tokens() >= m_p.max_model_len)
        return "the prompt has " + std::to_string(r->n_tokens()) + " tokens but the model's context is " +
               std::to_string(m_p.max_model_len) + " tokens (it must leave room for at least one new token)";
    const int64_t blocks = (int64_t(r->n_tokens()) + 1 + m_p.block_size - 1) / m_p.block_size;
    if (blocks > m_p.n_blocks)
        return "the prompt needs " + std::to_string(blocks) + " KV blocks but the cache has " +
               std::to_string(m_p.n_blocks) + "; raise the KV cache size";
    m_waiting.push_back(std::move(r));
    return {};
}

sched_request *scheduler::find(uint64_t id) {
    for (auto &r : m_running)
        if (r->id == id) return r.get();
    for (auto &r : m_waiting)
        if (r->id == id) return r.get();
    return nullptr;
}

int64_t scheduler::kv_tokens_stored() const {
    int64_t n = 0;
    for (const auto &r : m_running) n += r->n_computed;
    return n;
}

void scheduler::release_blocks(sched_request &r) {
    // Reverse order: the tail blocks (least likely shared) are evicted first.
    std::vector<int32_t> rev(r.blocks.rbegin(), r.blocks.rend());
    m_pool.release(rev);
    r.blocks.clear();
    r.hashes.clear();
}

bool scheduler::allocate_for(sched_request &r, int32_t n_new) {
    const int32_t need = (r.n_computed + n_new + m_p.block_size - 1) / m_p.block_size - int32_t(r.blocks.size());
    if (need <= 0) return true;
    auto got = m_pool.allocate(need);
    if (!got) return false;
    r.blocks.insert(r.blocks.end(), got->begin(), got->end());
    return true;
}

void scheduler::preempt(sched_request &r) {
    release_blocks(r);
    r.n_computed = 0;
    r.running = false;
    ++r.n_preemptions;
}

// Prefix-cache lookup for a request being admitted: takes references on the cached leading
// full blocks and returns how many tokens they cover. At least one token is always left to
// compute, so the step produces logits to sample from. The caller counts the query only once the
// admission succeeds (a request retried while blocks are short would be counted every step).
int32_t scheduler::admit_prefix(sched_request &r) {
    if (!m_p.enable_prefix_caching || !r.shares_prefix()) return 0;
    const int32_t bs = m_p.block_size;
    const int32_t max_blocks = (r.n_tokens() - 1) / bs;
    std::optional<block_hash> parent;
    int32_t hits = 0;
    for (int32_t b = 0; b < max_blocks; ++b) {
        std::span<const int32_t> toks(r.tokens.data() + b * bs, size_t(bs));
        const block_hash h = hash_block(parent, toks);
        const int32_t blk = m_pool.lookup(h, toks);
        if (blk < 0) break;
        m_pool.acquire(blk);
        r.blocks.push_back(blk);
        r.hashes.push_back(h);
        parent = h;
        ++hits;
    }
    return hits * bs;
}

scheduler_output scheduler::schedule() {
    scheduler_output out;
    int32_t budget = m_p.max_batched_tokens;
    std::vector<sched_request *> scheduled;

    auto unschedule = [&](sched_request *victim) {
        for (size_t i = 0; i < out.chunks.size(); ++i)
            if (out.chunks[i].req == victim) {
                budget += out.chunks[i].n_new;
                out.chunks.erase(out.chunks.begin() + long(i));
                return;
            }
    };
    // Preempts the newest running request unless that is `keep` itself (then false), as vLLM:
    // the victim is always the back of m_running, so indices before it stay valid.
    auto preempt_newest = [&](sched_request *keep) {
        if (m_running.empty() || m_running.back().get() == keep) return false;
        sched_request *victim = m_running.back().get();
        unschedule(victim);
        preempt(*victim);
        out.preempted.push_back(victim->id);
        m_waiting.push_front(std::move(m_running.back()));
        m_running.pop_back();
        return true;
    };

    // Running requests: decodes first (one token each), then unfinished prefills.
    for (int pass = 0; pass < 2 && budget > 0; ++pass) {
        for (size_t i = 0; i < m_running.size() && budget > 0; ++i) {
            sched_request *r = m_running[i].get();
            const int32_t remaining = r->n_tokens() - r->n_computed;
            const bool decoding = remaining == 1;
            if (remaining <= 0 || decoding != (pass == 0)) continue;
            const int32_t n_new = std::min(remaining, budget);
            bool ok = allocate_for(*r, n_new);
            while (!ok && preempt_newest(r)) ok = allocate_for(*r, n_new);
            if (!ok) {
                // Nothing newer left to preempt: this request is the back; recompute it later.
                unschedule(r);
                preempt(*r);
                out.preempted.push_back(r->id);
                m_waiting.push_front(std::move(m_running.back()));
                m_running.pop_back();
                break;
            }
            out.chunks.push_back({r, r->n_computed, n_new, r->n_computed + n_new == r->n_tokens()});
            budget -= n_new;
        }
    }

    // Waiting requests, first come first served; none after a preemption in this step.
    while (out.preempted.empty() && !m_waiting.empty() && budget > 0 &&
           int32_t(m_running.size()) < m_p.max_num_seqs) {
        sched_request *r = m_waiting.front().get();
        const bool lookup = r->n_computed == 0 && r->blocks.empty();
        if (lookup) r->n_computed = admit_prefix(*r);
        const int32_t n_new = std::min(r->n_tokens() - r->n_computed, budget);
        if (!allocate_for(*r, n_new)) {
            // Not enough free blocks now: give the cache hits back and wait for running requests.
            release_blocks(*r);
            r->n_computed = 0;
            if (!m_running.empty() || m_pool.grow_error().empty()) break;
            // Nothing runs that could give blocks back, and the pool's memory cannot grow: the
            // request cannot run now (a smaller one behind it may).
            out.failed.emplace_back(r->id, "the KV pool cannot hold this request's " + std::to_string(r->n_tokens()) +
                                               " tokens: " + m_pool.grow_error());
            m_waiting.pop_front();
            continue;
        }
        // Statistics of the admission that succeeded, not of attempts that found no blocks (their
        // hits may since have been evicted, or more blocks cached).
        if (lookup && m_p.enable_prefix_caching)
            m_pool.count_query(uint64_t((r->n_tokens() - 1) / m_p.block_size),
                               uint64_t(r->n_computed / m_p.block_size));
        if (r->n_preemptions == 0) r->n_cached_tokens = std::min(r->n_computed, r->n_prompt);
        r->running = true;
        m_running.push_back(std::move(m_waiting.front()));
        m_waiting.pop_front();
        out.chunks.push_back({r, r->n_computed, n_new, r->n_computed + n_new == r->n_tokens()});
        budget -= n_new;
    }

    for (const auto &c : out.chunks) {
        if (c.n_new == 1 && c.start >= c.req->n_prompt) out.n_decode_tokens += 1;
        else out.n_prefill_tokens += c.n_new;
    }
    return out;
}

void scheduler::update(const scheduler_output &out) {
    const int32_t bs = m_p.block_size;
    for (const auto &c : out.chunks) {
        sched_request &r = *c.req;
        r.n_computed = c.start + c.n_new;
        if (!m_p.enable_prefix_caching || !r.shares_prefix()) continue;
        // Cache every block that became full with computed tokens.
        const int32_t full = r.n_computed / bs;
        while (int32_t(r.hashes.size()) < full) {
            const int32_t b = int32_t(r.hashes.size());
            std::span<const int32_t> toks(r.tokens.data() + b * bs, size_t(bs));
            const block_hash h = hash_block(r.hashes.empty() ? std::nullopt : std::optional(r.hashes.back()), toks);
            m_pool.cache_full_block(r.blocks[b], h, toks);
            r.hashes.push_back(h);
        }
    }
}

std::unique_ptr<sched_request> scheduler::finish(uint64_t id) {
    for (auto it = m_running.begin(); it != m_running.end(); ++it)
        if ((*it)->id == id) {
            auto r = std::move(*it);
            m_running.erase(it);
            release_blocks(*r);
            r->running = false;
            return r;
        }
    for (auto it = m_waiting.begin(); it != m_waiting.end(); ++it)
        if ((*it)->id == id) {
            auto r = std::move(*it);
            m_waiting.erase(it);
            release_blocks(*r);
            return r;
        }
    return nullptr;
}

} // namespace es
