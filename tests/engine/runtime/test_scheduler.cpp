// es::scheduler driven without a model. A small harness plays the engine: schedule(), a simulated
// forward pass that writes each fed token into a simulated paged KV store through the request's
// block table (and reads the context back through it), update(), then for every sampling chunk a
// deterministic "model" token — a hash of the context read from the KV store — is appended, and a
// request is finished once it has its target number of output tokens. So a block served wrongly
// by the prefix cache, freed while in use or lost in a preemption changes the tokens. The harness
// checks every step: the token budget and max_num_seqs, chunk starts, block coverage, decodes
// first, FCFS admission, the newest running request as the preemption victim, ref counts against
// the block tables, and pool.check(). The expected tokens of every request come from running the
// same "model" over the request alone (an unpreempted, unbatched run), computed independently.
// A simulated device can hold the pool's memory instead of a whole pool: it maps blocks in steps
// up to a limit, the harness gives the free top back between steps as the engine does, and every
// block a step uses must have memory; a request the pool cannot grow to hold with nothing running
// fails, naming the KV pool.
#include "engine/runtime/scheduler.h"

#include <QtTest>

#include <algorithm>
#include <array>
#include <climits>
#include <deque>
#include <map>
#include <random>
#include <set>

using ids_t = std::vector<int32_t>;

namespace {

// The "model": the next token is a hash of the whole context.
int32_t next_token(const ids_t &context) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t t : context) h = (h ^ uint32_t(t)) * 0x100000001b3ull;
    return int32_t((h ^ (h >> 29)) % 32000);
}

struct req_spec {
    uint64_t id = 0;
    int arrival_step = 0;
    ids_t prompt;
    int32_t n_output = 1; // finished once it has this many output tokens
};

// What running the request alone gives: prompt + n_output tokens of the model.
ids_t reference_tokens(const req_spec &s) {
    ids_t t = s.prompt;
    for (int32_t i = 0; i < s.n_output; ++i) t.push_back(next_token(t));
    return t;
}

ids_t make_prompt(uint64_t id, int32_t n, const ids_t &shared_prefix = {}) {
    std::mt19937 rng(uint32_t(id * 7919 + 17));
    ids_t p(shared_prefix.begin(), shared_prefix.begin() + std::min<size_t>(shared_prefix.size(), size_t(n)));
    while (int32_t(p.size()) < n) p.push_back(int32_t(rng() % 32000));
    return p;
}

int32_t blocks_for(int32_t n_tokens, int32_t block_size) { return (n_tokens + block_size - 1) / block_size; }

struct chunk_log {
    uint64_t id;
    int32_t start, n_new;
    bool samples;
};

struct step_log {
    std::vector<chunk_log> chunks;
    std::vector<uint64_t> preempted;
    int32_t n_tokens = 0;
};

// The KV pool's memory as a device gives it: mapped in steps of `step` blocks (0: the pool is
// whole), up to `limit` blocks; given back by the harness between steps when trim_between_steps.
struct device_model {
    int32_t step = 0;
    int32_t limit = INT32_MAX;
    bool trim_between_steps = true;
    int grows = 0, short_grows = 0, trims = 0;
};

// Plays the engine around one scheduler and checks the invariants after every step.
class sim {
public:
    explicit sim(const es::scheduler_params &p, device_model dev = {})
        : m_dev(dev), m_p(with_device(p)), m_sched(m_p), m_kv(size_t(p.n_blocks), ids_t(size_t(p.block_size), -1)) {}

    device_model &device() { return m_dev; }
    const std::map<uint64_t, std::string> &failed() const { return m_failed; }

    // The engine's trim: the pool's free top above its floor back to the device, in whole steps.
    std::string trim(bool keep_cached) {
        const es::block_pool &pool = m_sched.pool();
        const int32_t floor = pool.trim_floor(keep_cached);
        const int32_t to = std::min(pool.n_mapped(), (floor + m_dev.step - 1) / m_dev.step * m_dev.step);
        if (to < pool.n_mapped()) ++m_dev.trims;
        if (!m_sched.set_mapped(to)) return "set_mapped refused a trim to the pool's own floor";
        return check_pool();
    }

    es::scheduler &sched() { return m_sched; }
    const es::scheduler_params &params() const { return m_p; }
    int step_no() const { return m_step; }
    const std::vector<step_log> &log() const { return m_log; }
    const std::map<uint64_t, ids_t> &finished() const { return m_finished; }
    const std::map<uint64_t, int> &added_at() const { return m_added_at; }
    const std::map<uint64_t, int> &finished_at() const { return m_finished_at; }
    const std::vector<uint64_t> &first_admissions() const { return m_first_admissions; }
    int n_preemptions() const { return m_n_preemptions; }
    bool ever_preempted(uint64_t id) const { return m_ever_preempted.count(id) > 0; }
    bool ever_admitted(uint64_t id) const { return m_ever_admitted.count(id) > 0; }
    bool is_running(uint64_t id) const {
        return std::find(m_running.begin(), m_running.end(), id) != m_running.end();
    }

    std::string add(const req_spec &s) {
        auto r = std::make_unique<es::sched_request>();
        r->id = s.id;
        r->tokens = s.prompt;
        r->n_prompt = int32_t(s.prompt.size());
        const std::string msg = m_sched.add(std::move(r));
        if (msg.empty()) {
            m_specs[s.id] = s;
            m_waiting.push_back(s.id);
            m_added_at[s.id] = m_step;
        }
        return msg;
    }

    // Finishes (cancels) a live request wherever it is; the pool must stay consistent.
    std::string cancel(uint64_t id) {
        std::string e;
        auto r = finish(id, e);
        if (!e.empty()) return e;
        if (r->id != id) return "finish returned another request";
        if (!r->blocks.empty()) return "a finished request keeps blocks";
        forget(id);
        return check_pool();
    }

    // One engine step. Returns the first broken invariant (empty when all hold).
    std::string step() {
        ++m_step;
        const std::string where = "step " + std::to_string(m_step) + ": ";
        std::map<uint64_t, int32_t> pre_computed, pre_n_tokens;
        for (uint64_t id : m_running) {
            const es::sched_request *r = m_sched.find(id);
            pre_computed[id] = r->n_computed;
            pre_n_tokens[id] = r->n_tokens();
        }
        const std::vector<uint64_t> running_before = m_running;

        const es::scheduler_output out = m_sched.schedule();
        if (std::string e = check_schedule(out, running_before, pre_computed, pre_n_tokens); !e.empty())
            return where + e;

        step_log sl;
        sl.preempted = out.preempted;
        for (const auto &c : out.chunks) {
            sl.chunks.push_back({c.req->id, c.start, c.n_new, c.samples});
            sl.n_tokens += c.n_new;
        }
        m_log.push_back(sl);

        if (std::string e = forward(out); !e.empty()) return where + e;
        m_sched.update(out);
        for (const auto &c : out.chunks)
            if (c.req->n_computed != c.start + c.n_new)
                return where + "update left n_computed " + std::to_string(c.req->n_computed);

        // Sample: read the context back through the block table, append the model's token.
        std::vector<uint64_t> done;
        for (const auto &c : out.chunks) {
            if (!c.samples) continue;
            es::sched_request &r = *c.req;
            ids_t context;
            for (int32_t pos = 0; pos < r.n_tokens(); ++pos) context.push_back(kv_at(r, pos));
            if (context != r.tokens)
                return where + "request " + std::to_string(r.id) + " reads other tokens through its blocks";
            m_sched.append_token(r, next_token(context));
            if (r.n_tokens() - r.n_prompt >= m_specs[r.id].n_output) done.push_back(r.id);
        }
        for (uint64_t id : done) {
            std::string e;
            auto r = finish(id, e);
            if (!e.empty()) return where + e;
            m_finished[id] = r->tokens;
            m_finished_at[id] = m_step;
            forget(id);
        }
        if (std::string e = check_state(); !e.empty()) return where + e;
        if (m_dev.step > 0 && m_dev.trim_between_steps)
            if (std::string e = trim(m_step % 4 != 0); !e.empty()) return where + e;
        return {};
    }

    // Steps until nothing is left or max_steps; adds each spec at its arrival step.
    std::string run(std::vector<req_spec> specs, int max_steps = 20000) {
        std::stable_sort(specs.begin(), specs.end(), [](const req_spec &a, const req_spec &b) {
            return a.arrival_step < b.arrival_step;
        });
        size_t next = 0;
        while (next < specs.size() || m_sched.has_work()) {
            while (next < specs.size() && specs[next].arrival_step <= m_step)
                if (std::string e = add(specs[next++]); !e.empty()) return "add refused: " + e;
            if (m_step >= max_steps) return "not done after " + std::to_string(max_steps) + " steps";
            if (std::string e = step(); !e.empty()) return e;
        }
        return check_pool();
    }

    std::string check_pool() const {
        const es::block_pool &pool = m_sched.pool();
        if (std::string e = pool.check(); !e.empty()) return "pool.check(): " + e;
        // Every reference is held by exactly one block-table entry of a live request.
        std::vector<int32_t> refs(size_t(pool.n_blocks()), 0);
        for (const auto &[id, s] : m_specs) {
            const es::sched_request *r = const_cast<es::scheduler &>(m_sched).find(id);
            if (!r) return "request " + std::to_string(id) + " lost by the scheduler";
            for (int32_t b : r->blocks) ++refs[size_t(b)];
        }
        int32_t used = 0;
        for (int32_t b = 0; b < pool.n_blocks(); ++b) {
            if (pool.ref_cnt(b) != refs[size_t(b)])
                return "block " + std::to_string(b) + " has ref_cnt " + std::to_string(pool.ref_cnt(b)) +
                       " but " + std::to_string(refs[size_t(b)]) + " block-table entries";
            used += refs[size_t(b)] > 0;
        }
        if (pool.n_used() != used) return "n_used disagrees with the block tables";
        return {};
    }

private:
    // finish(id), checking that the blocks it frees that hold a cached prefix join the back of the
    // free queue (evicted last), tail first.
    std::unique_ptr<es::sched_request> finish(uint64_t id, std::string &e) {
        const es::sched_request *live = m_sched.find(id);
        const ids_t blocks = live ? live->blocks : ids_t{};
        auto r = m_sched.finish(id);
        if (!r) {
            e = "finish(" + std::to_string(id) + ") found no request";
            return r;
        }
        ids_t freed; // cached ones whose last reference this was, tail first
        for (auto it = blocks.rbegin(); it != blocks.rend(); ++it)
            if (m_sched.pool().ref_cnt(*it) == 0 && m_sched.pool().hash_of(*it)) freed.push_back(*it);
        const ids_t queue = m_sched.pool().free_queue();
        if (queue.size() < freed.size() ||
            !std::equal(freed.begin(), freed.end(), queue.end() - long(freed.size())))
            e = "request " + std::to_string(id) +
                ": freed cached blocks are not at the back of the free queue, tail first";
        return r;
    }

    std::string check_schedule(const es::scheduler_output &out, const std::vector<uint64_t> &running_before,
                               const std::map<uint64_t, int32_t> &pre_computed,
                               const std::map<uint64_t, int32_t> &pre_n_tokens) {
        const int32_t bs = m_p.block_size;
        int32_t total = 0;
        std::set<uint64_t> ids;
        int last_phase = 0;
        std::vector<uint64_t> admitted;
        if (int32_t(out.chunks.size()) > m_p.max_num_seqs)
            return std::to_string(out.chunks.size()) + " chunks > max_num_seqs";
        if (m_sched.n_running() > m_p.max_num_seqs) return "more running than max_num_seqs";

        // Preemption victims: the newest running requests, newest first.
        const es::block_pool &pool = m_sched.pool();
        if (m_dev.step > 0 && pool.n_mapped() > std::max(m_dev.limit, 0))
            return "the pool has memory for " + std::to_string(pool.n_mapped()) + " blocks; the device has " +
                   std::to_string(m_dev.limit);
        for (size_t i = 0; i < out.preempted.size(); ++i) {
            const uint64_t id = out.preempted[i];
            if (i >= running_before.size() || running_before[running_before.size() - 1 - i] != id)
                return "preempted " + std::to_string(id) + " is not the newest running request";
            const es::sched_request *r = m_sched.find(id);
            if (!r) return "a preempted request was dropped";
            if (r->running || r->n_computed != 0 || !r->blocks.empty() || !r->hashes.empty())
                return "preempted request " + std::to_string(id) + " keeps state (n_computed " +
                       std::to_string(r->n_computed) + ", " + std::to_string(r->blocks.size()) + " blocks)";
            m_running.pop_back();
            m_waiting.push_front(id); // recomputed before anything newer
            m_ever_preempted.insert(id);
            ++m_n_preemptions;
        }

        // Failed: the front of the waiting queue, only while nothing ran, naming the KV pool.
        for (const auto &[id, why] : out.failed) {
            if (!out.preempted.empty() || !running_before.empty())
                return "request " + std::to_string(id) + " failed while others ran or were preempted";
            if (m_waiting.empty() || m_waiting.front() != id)
                return "failed request " + std::to_string(id) + " is not the front of the waiting queue";
            if (m_sched.find(id)) return "failed request " + std::to_string(id) + " is still in the scheduler";
            if (why.find("KV pool") == std::string::npos) return "a failure that does not name the KV pool: " + why;
            m_failed[id] = why;
            m_waiting.pop_front();
            m_specs.erase(id);
        }
        for (const auto &c : out.chunks) {
            const es::sched_request *r = c.req;
            if (!r) return "chunk without a request";
            const std::string rid = "request " + std::to_string(r->id) + ": ";
            for (int32_t b : r->blocks)
                if (b >= pool.n_mapped())
                    return rid + "block " + std::to_string(b) + " has no memory (the pool maps " +
                           std::to_string(pool.n_mapped()) + ")";
            if (!ids.insert(r->id).second) return rid + "scheduled twice";
            if (std::find(out.preempted.begin(), out.preempted.end(), r->id) != out.preempted.end())
                return rid + "preempted and scheduled";
            if (c.n_new < 1) return rid + "chunk of " + std::to_string(c.n_new) + " tokens";
            if (c.start != r->n_computed) return rid + "chunk start != n_computed";
            if (c.start + c.n_new > r->n_tokens()) return rid + "chunk past the known tokens";
            if (c.samples != (c.start + c.n_new == r->n_tokens())) return rid + "wrong samples flag";
            if (!r->running) return rid + "scheduled but not running";
            // Blocks cover what will be computed, and no more.
            if (int32_t(r->blocks.size()) != blocks_for(c.start + c.n_new, bs))
                return rid + std::to_string(r->blocks.size()) + " blocks for " +
                       std::to_string(c.start + c.n_new) + " tokens";
            total += c.n_new;

            const bool was_running = pre_computed.count(r->id) > 0;
            int phase = 2;
            if (was_running) {
                if (c.start != pre_computed.at(r->id)) return rid + "n_computed moved during schedule()";
                phase = pre_n_tokens.at(r->id) - c.start == 1 ? 0 : 1;
            } else {
                admitted.push_back(r->id);
                // Prefix-cache statistics: one query per admission (not per attempt).
                if (m_p.enable_prefix_caching) {
                    m_queries += uint64_t((r->n_tokens() - 1) / bs);
                    m_hits += uint64_t(c.start / bs);
                }
                if (r->n_preemptions == 0 && r->n_cached_tokens != std::min(c.start, r->n_prompt))
                    return rid + "n_cached_tokens " + std::to_string(r->n_cached_tokens) + " but start " +
                           std::to_string(c.start);
            }
            if (phase < last_phase) return rid + "scheduled out of order (decodes, prefills, then waiting)";
            last_phase = phase;
        }
        if (total > m_p.max_batched_tokens)
            return std::to_string(total) + " tokens > max_batched_tokens " +
                   std::to_string(m_p.max_batched_tokens);
        if (!out.preempted.empty() && !admitted.empty()) return "admitted a request in a step that preempted";

        // FCFS: the newly admitted are the front of the waiting queue, in order.
        for (size_t i = 0; i < admitted.size(); ++i) {
            if (m_waiting.empty() || m_waiting.front() != admitted[i])
                return "admitted " + std::to_string(admitted[i]) + " ahead of " +
                       (m_waiting.empty() ? std::string("nothing") : std::to_string(m_waiting.front()));
            m_waiting.pop_front();
            m_running.push_back(admitted[i]);
            if (m_ever_admitted.insert(admitted[i]).second) m_first_admissions.push_back(admitted[i]);
        }
        // Work conservation: with budget left, every running request (each has a token to
        // compute) that was not preempted is in the batch.
        if (total < m_p.max_batched_tokens)
            for (uint64_t id : running_before)
                if (!ids.count(id) &&
                    std::find(out.preempted.begin(), out.preempted.end(), id) == out.preempted.end())
                    return "request " + std::to_string(id) + " left out with " +
                           std::to_string(m_p.max_batched_tokens - total) + " tokens of budget unused";
        int32_t n_prefill = 0, n_decode = 0;
        for (const auto &c : out.chunks)
            (c.n_new == 1 && c.start >= c.req->n_prompt ? n_decode : n_prefill) += c.n_new;
        if (out.n_prefill_tokens != n_prefill || out.n_decode_tokens != n_decode) return "wrong token counts";
        if (pool.queries() != m_queries || pool.hits() != m_hits)
            return "prefix-cache statistics " + std::to_string(pool.hits()) + "/" +
                   std::to_string(pool.queries()) + " hits/queries, admissions say " +
                   std::to_string(m_hits) + "/" + std::to_string(m_queries);
        return {};
    }

    int32_t &kv_slot(const es::sched_request &r, int32_t pos) {
        return m_kv[size_t(r.blocks[size_t(pos / m_p.block_size)])][size_t(pos % m_p.block_size)];
    }
    int32_t kv_at(es::sched_request &r, int32_t pos) { return kv_slot(r, pos); }

    // The forward pass: positions before the chunk must already be in the KV store (computed
    // earlier or served by the prefix cache); the chunk writes its tokens into private blocks.
    std::string forward(const es::scheduler_output &out) {
        const es::block_pool &pool = m_sched.pool();
        for (const auto &c : out.chunks) {
            const es::sched_request &r = *c.req;
            const std::string rid = "request " + std::to_string(r.id) + ": ";
            for (int32_t pos = 0; pos < c.start; ++pos)
                if (kv_slot(r, pos) != r.tokens[size_t(pos)])
                    return rid + "KV of position " + std::to_string(pos) + " is not its token";
            for (int32_t pos = c.start; pos < c.start + c.n_new; ++pos) {
                const int32_t b = r.blocks[size_t(pos / m_p.block_size)];
                if (pool.ref_cnt(b) != 1 || pool.hash_of(b))
                    return rid + "writes into shared or cached block " + std::to_string(b);
                kv_slot(r, pos) = r.tokens[size_t(pos)];
            }
        }
        return {};
    }

    std::string check_state() {
        if (m_sched.n_running() != int32_t(m_running.size()) ||
            m_sched.n_waiting() != int32_t(m_waiting.size()))
            return "running/waiting counts disagree with FCFS bookkeeping";
        int64_t stored = 0;
        for (uint64_t id : m_running) {
            const es::sched_request *r = m_sched.find(id);
            if (!r || !r->running) return "request " + std::to_string(id) + " should be running";
            if (int32_t(r->blocks.size()) != blocks_for(r->n_computed, m_p.block_size))
                return "request " + std::to_string(id) + " has " + std::to_string(r->blocks.size()) +
                       " blocks for " + std::to_string(r->n_computed) + " computed tokens";
            stored += r->n_computed;
        }
        for (uint64_t id : m_waiting) {
            const es::sched_request *r = m_sched.find(id);
            if (!r || r->running) return "request " + std::to_string(id) + " should be waiting";
            if (!r->blocks.empty() || r->n_computed != 0)
                return "waiting request " + std::to_string(id) + " holds blocks or computed tokens";
        }
        if (m_sched.kv_tokens_stored() != stored) return "kv_tokens_stored is off";
        return check_pool();
    }

    void forget(uint64_t id) {
        m_specs.erase(id);
        m_running.erase(std::remove(m_running.begin(), m_running.end(), id), m_running.end());
        m_waiting.erase(std::remove(m_waiting.begin(), m_waiting.end(), id), m_waiting.end());
    }

    // The device's grow function in the scheduler's parameters (the pool starts without memory).
    es::scheduler_params with_device(es::scheduler_params p) {
        if (m_dev.step <= 0) return p;
        p.n_mapped = 0;
        p.grow = [this](int32_t want, std::string &error) {
            const int32_t have = m_sched.pool().n_mapped();
            const int32_t stepped = std::min(m_p.n_blocks, (want + m_dev.step - 1) / m_dev.step * m_dev.step);
            const int32_t got = std::max(have, std::min(stepped, m_dev.limit));
            ++m_dev.grows;
            if (got < want) {
                ++m_dev.short_grows;
                error = "out of device memory: the KV pool has " + std::to_string(got) + " blocks mapped, " +
                        std::to_string(want) + " needed";
            }
            return got;
        };
        return p;
    }

    device_model m_dev;
    es::scheduler_params m_p;
    es::scheduler m_sched;
    std::vector<ids_t> m_kv; // [n_blocks][block_size] token whose K/V the slot holds
    int m_step = 0;
    std::map<uint64_t, req_spec> m_specs; // live requests
    std::vector<uint64_t> m_running;      // admission order, back = newest
    std::deque<uint64_t> m_waiting;       // FCFS order
    std::vector<step_log> m_log;
    std::map<uint64_t, ids_t> m_finished;
    std::map<uint64_t, std::string> m_failed;
    std::map<uint64_t, int> m_added_at, m_finished_at;
    std::set<uint64_t> m_ever_preempted, m_ever_admitted;
    std::vector<uint64_t> m_first_admissions;
    int m_n_preemptions = 0;
    uint64_t m_queries = 0, m_hits = 0;
};

es::scheduler_params make_params(int bs, int n_blocks, int max_seqs, int budget, bool caching = true,
                                 int64_t max_model_len = 0) {
    es::scheduler_params p;
    p.block_size = bs;
    p.n_blocks = n_blocks;
    p.max_num_seqs = max_seqs;
    p.max_batched_tokens = budget;
    p.enable_prefix_caching = caching;
    p.max_model_len = max_model_len;
    return p;
}

// n requests with random prompt/output lengths in the given ranges, one every `spacing` steps,
// the first `shared` tokens of every prompt the same.
std::vector<req_spec> random_specs(int n, int prompt_min, int prompt_max, int out_min, int out_max,
                                   int spacing, int shared, uint32_t seed) {
    std::mt19937 rng(seed);
    const ids_t prefix = make_prompt(999999, shared);
    std::vector<req_spec> specs;
    for (int i = 0; i < n; ++i) {
        req_spec s;
        s.id = uint64_t(i + 1);
        s.arrival_step = i * spacing;
        const int len = std::uniform_int_distribution<int>(prompt_min, prompt_max)(rng);
        s.prompt = make_prompt(s.id, len, prefix);
        s.n_output = std::uniform_int_distribution<int>(out_min, out_max)(rng);
        specs.push_back(s);
    }
    return specs;
}

QString q(const std::string &s) { return QString::fromStdString(s); }

} // namespace

class TestScheduler : public QObject {
    Q_OBJECT

private slots:
    void invariants_data();
    void invariants();
    void noStarvation_data();
    void noStarvation();
    void chunkedPrefill_data();
    void chunkedPrefill();
    void preemptsNewest();
    void wholePool_data();
    void wholePool();
    void preemptionRecompute_data();
    void preemptionRecompute();
    void prefixCaching_data();
    void prefixCaching();
    void addRefuses_data();
    void addRefuses();
    void finishAnyStateFreesBlocks();
    void randomConfigurations_data();
    void randomConfigurations();
    void growingPoolGivesSameTokens_data();
    void growingPoolGivesSameTokens();
    void deviceLimitPreemptsLikeASmallerPool();
    void requestThePoolCannotHoldFails();
    void randomFinishMix_data();
    void randomFinishMix();
};

void TestScheduler::invariants_data() {
    QTest::addColumn<int>("block_size");
    QTest::addColumn<int>("n_blocks");
    QTest::addColumn<int>("max_seqs");
    QTest::addColumn<int>("budget");
    QTest::addColumn<int>("n_requests");
    QTest::addColumn<int>("prompt_min");
    QTest::addColumn<int>("prompt_max");
    QTest::addColumn<int>("out_min");
    QTest::addColumn<int>("out_max");
    QTest::addColumn<int>("spacing");
    QTest::addColumn<int>("shared");
    QTest::addColumn<bool>("caching");
    // Columns: block_size, n_blocks, max_seqs, budget, n_requests, prompt min..max, output
    // min..max, arrival spacing in steps, shared prefix tokens, prefix caching.
    QTest::newRow("bs16_typical") << 16 << 64 << 8 << 128 << 24 << 1 << 120 << 1 << 30 << 1 << 0 << true;
    QTest::newRow("bs16_shared_prefix")
        << 16 << 64 << 8 << 128 << 24 << 20 << 120 << 1 << 30 << 1 << 40 << true;
    QTest::newRow("bs16_shared_no_caching")
        << 16 << 64 << 8 << 128 << 24 << 20 << 120 << 1 << 30 << 1 << 40 << false;
    QTest::newRow("bs1") << 1 << 400 << 6 << 40 << 16 << 1 << 40 << 1 << 20 << 1 << 8 << true;
    QTest::newRow("bs1_tiny_pool") << 1 << 45 << 6 << 40 << 16 << 1 << 30 << 1 << 14 << 0 << 8 << true;
    QTest::newRow("one_token_prompts") << 16 << 16 << 4 << 64 << 12 << 1 << 1 << 1 << 20 << 1 << 0 << true;
    QTest::newRow("one_block_prompts") << 16 << 32 << 4 << 64 << 12 << 16 << 16 << 1 << 20 << 1 << 16 << true;
    QTest::newRow("single_output_token") << 16 << 32 << 4 << 64 << 12 << 1 << 50 << 1 << 1 << 0 << 0 << true;
    // Budget == max_num_seqs: with every sequence decoding nothing is left for prefills.
    QTest::newRow("zero_budget_remainder")
        << 16 << 64 << 4 << 4 << 12 << 10 << 40 << 5 << 20 << 0 << 0 << true;
    QTest::newRow("budget_1") << 16 << 32 << 4 << 1 << 6 << 1 << 20 << 1 << 5 << 0 << 0 << true;
    QTest::newRow("one_seq_at_a_time") << 16 << 32 << 1 << 64 << 8 << 1 << 60 << 1 << 10 << 0 << 0 << true;
    QTest::newRow("odd_block_size_5") << 5 << 60 << 5 << 23 << 16 << 1 << 37 << 1 << 17 << 1 << 12 << true;
    QTest::newRow("tiny_pool_preempting") << 4 << 14 << 8 << 64 << 20 << 3 << 20 << 5 << 30 << 0 << 0 << true;
    QTest::newRow("tiny_pool_shared") << 4 << 14 << 8 << 64 << 20 << 9 << 20 << 5 << 30 << 0 << 8 << true;
    QTest::newRow("all_at_once_big_budget")
        << 16 << 128 << 16 << 2048 << 40 << 1 << 100 << 1 << 40 << 0 << 32 << true;
}

// Random workloads run to completion with the harness checking every step; every request ends
// with the tokens it gets alone, and the pool ends empty.
void TestScheduler::invariants() {
    QFETCH(int, block_size);
    QFETCH(int, n_blocks);
    QFETCH(int, max_seqs);
    QFETCH(int, budget);
    QFETCH(int, n_requests);
    QFETCH(int, prompt_min);
    QFETCH(int, prompt_max);
    QFETCH(int, out_min);
    QFETCH(int, out_max);
    QFETCH(int, spacing);
    QFETCH(int, shared);
    QFETCH(bool, caching);
    for (uint32_t seed = 1; seed <= 3; ++seed) {
        const auto specs =
            random_specs(n_requests, prompt_min, prompt_max, out_min, out_max, spacing, shared, seed);
        sim s(make_params(block_size, n_blocks, max_seqs, budget, caching));
        const std::string e = s.run(specs);
        QVERIFY2(e.empty(), qPrintable(QString("seed %1, %2").arg(seed).arg(q(e))));
        QCOMPARE(int(s.finished().size()), n_requests);
        for (const req_spec &r : specs) QCOMPARE(s.finished().at(r.id), reference_tokens(r));
        QCOMPARE(s.sched().pool().n_free(), n_blocks);
        QVERIFY(!s.sched().has_work());
        // FCFS: first admissions in arrival order.
        std::vector<uint64_t> ids;
        for (const req_spec &r : specs) ids.push_back(r.id);
        QCOMPARE(s.first_admissions(), ids);
        if (!caching) QCOMPARE(s.sched().pool().n_cached(), 0);
        if (caching && shared >= 2 * block_size) QVERIFY(s.sched().pool().hits() > 0);
    }
}

void TestScheduler::noStarvation_data() {
    QTest::addColumn<int>("block_size");
    QTest::addColumn<int>("n_blocks");
    QTest::addColumn<int>("bound"); // steps from arrival to finish
    QTest::newRow("big_pool") << 16 << 256 << 40;
    QTest::newRow("tight_pool_preempting") << 16 << 8 << 120;
    QTest::newRow("bs1_tight_pool") << 1 << 160 << 120;
}

// Continuous arrivals (one every 3 steps, some long prompts that need many chunks) under a small
// budget: every request finishes within a bound of steps after it arrives, late ones included.
void TestScheduler::noStarvation() {
    QFETCH(int, block_size);
    QFETCH(int, n_blocks);
    QFETCH(int, bound);
    std::vector<req_spec> specs = random_specs(150, 4, 24, 2, 12, 3, 0, 7);
    for (size_t i = 0; i < specs.size(); i += 10)
        specs[i].prompt = make_prompt(specs[i].id, 100); // long ones
    sim s(make_params(block_size, n_blocks, 4, 32));
    const std::string e = s.run(specs);
    QVERIFY2(e.empty(), qPrintable(q(e)));
    QCOMPARE(int(s.finished().size()), int(specs.size()));
    int worst = 0;
    uint64_t worst_id = 0;
    for (const req_spec &r : specs) {
        const int latency = s.finished_at().at(r.id) - s.added_at().at(r.id);
        if (latency > worst) worst = latency, worst_id = r.id;
        QCOMPARE(s.finished().at(r.id), reference_tokens(r));
    }
    QVERIFY2(worst <= bound, qPrintable(QString("request %1 took %2 steps").arg(worst_id).arg(worst)));
    if (n_blocks < 20) QVERIFY(s.n_preemptions() > 0);
}

void TestScheduler::chunkedPrefill_data() {
    QTest::addColumn<int>("block_size");
    QTest::addColumn<int>("budget");
    QTest::addColumn<int>("n_decoders");
    QTest::addColumn<int>("long_prompt");
    QTest::newRow("bs16_budget_32") << 16 << 32 << 2 << 200;
    QTest::newRow("bs16_budget_17_one_decoder") << 16 << 17 << 1 << 64; // 16-token chunks: block aligned
    QTest::newRow("bs1_budget_8") << 1 << 8 << 3 << 50;
    QTest::newRow("prompt_one_chunk_exactly") << 16 << 34 << 2 << 32;
    QTest::newRow("zero_budget_remainder") << 16 << 3 << 3 << 40; // decodes take the whole budget
}

// A long prompt under a small budget is split over several steps while the requests already
// decoding keep decoding every step, scheduled first; the chunks tile the prompt exactly.
void TestScheduler::chunkedPrefill() {
    QFETCH(int, block_size);
    QFETCH(int, budget);
    QFETCH(int, n_decoders);
    QFETCH(int, long_prompt);
    const int decode_len = 40;
    sim s(make_params(block_size, 512, 8, budget));
    std::vector<req_spec> decoders;
    for (int i = 0; i < n_decoders; ++i) {
        decoders.push_back({uint64_t(i + 1), 0, make_prompt(uint64_t(i + 1), 1), decode_len});
        QCOMPARE(q(s.add(decoders.back())), QString());
    }
    QCOMPARE(q(s.step()), QString()); // the one-token prompts: now all decoding
    QCOMPARE(s.sched().n_running(), n_decoders);

    const req_spec lng{100, 0, make_prompt(100, long_prompt), 3};
    QCOMPARE(q(s.add(lng)), QString());
    int32_t covered = 0;
    int prefill_steps = 0, decode_steps = 0;
    while (s.sched().has_work()) {
        QCOMPARE(q(s.step()), QString());
        const step_log &l = s.log().back();
        int n_dec = 0;
        for (const chunk_log &c : l.chunks) {
            if (c.id != lng.id) {
                QCOMPARE(c.n_new, 1); // decoders decode
                QVERIFY2(n_dec++ == int(&c - l.chunks.data()), "decodes come first");
            } else if (c.start < long_prompt) {
                QCOMPARE(c.start, covered); // chunks tile the prompt
                covered += c.n_new;
                ++prefill_steps;
            }
        }
        // While the decoders live, every step decodes each of them.
        const bool decoders_alive = s.step_no() <= decode_len;
        if (decoders_alive) {
            QCOMPARE(n_dec, n_decoders);
            ++decode_steps;
            if (covered < long_prompt) QCOMPARE(l.n_tokens, std::min(budget, n_decoders + long_prompt));
        }
        QVERIFY(s.step_no() < 1000);
    }
    QCOMPARE(covered, long_prompt);
    QCOMPARE(decode_steps, decode_len - 1);
    const int per_step = budget - n_decoders;
    if (per_step > 0) {
        const int expected_steps = (long_prompt + per_step - 1) / per_step;
        QCOMPARE(prefill_steps, expected_steps);
        QVERIFY(long_prompt <= per_step || prefill_steps > 1);
    } else {
        // Nothing left for the prefill while all decode: it starts once they are done.
        QVERIFY(s.finished_at().at(lng.id) > decode_len);
    }
    for (const req_spec &r : decoders) QCOMPARE(s.finished().at(r.id), reference_tokens(r));
    QCOMPARE(s.finished().at(lng.id), reference_tokens(lng));
    QCOMPARE(s.sched().pool().n_free(), 512);
}

// A scripted preemption: two requests fill a tiny pool; when the older one needs a block, the
// newer one is preempted (its blocks freed, n_computed 0), later resumes and completes with the
// tokens it gets alone.
void TestScheduler::preemptsNewest() {
    const int bs = 4;
    sim s(make_params(bs, 4, 4, 64, /*caching*/ false));
    const req_spec a{1, 0, make_prompt(1, 6), 6}, b{2, 0, make_prompt(2, 6), 5};
    QCOMPARE(q(s.add(a)), QString());
    QCOMPARE(q(s.add(b)), QString());
    QCOMPARE(q(s.step()), QString()); // both prefill: 2 blocks each, the pool is full
    QCOMPARE(s.sched().pool().n_free(), 0);
    QCOMPARE(s.sched().n_running(), 2);
    // Both decode positions 6 and 7, still in their second block.
    for (int i = 0; i < 2; ++i) {
        QCOMPARE(q(s.step()), QString());
        QVERIFY(s.log().back().preempted.empty());
        QCOMPARE(s.log().back().chunks.size(), size_t(2));
    }
    // Position 8 needs a third block: B, the newest, gives way to A.
    QCOMPARE(q(s.step()), QString());
    QCOMPARE(s.log().back().preempted, std::vector<uint64_t>{2});
    es::sched_request *rb = s.sched().find(2);
    QVERIFY(rb);
    QCOMPARE(rb->n_computed, 0);
    QVERIFY(rb->blocks.empty());
    QVERIFY(!rb->running);
    QCOMPARE(rb->n_preemptions, 1);
    QCOMPARE(rb->n_tokens(), 6 + 3); // its output so far is kept
    QCOMPARE(s.sched().n_waiting(), 1);
    QCOMPARE(s.log().back().chunks.size(), size_t(1));
    QCOMPARE(s.log().back().chunks[0].id, uint64_t(1));
    QCOMPARE(q(s.run({})), QString());
    QCOMPARE(s.finished().at(1), reference_tokens(a));
    QCOMPARE(s.finished().at(2), reference_tokens(b));
    QVERIFY(s.finished_at().at(2) > s.finished_at().at(1)); // resumed after A freed the pool
    QCOMPARE(s.sched().pool().n_free(), 4);
}

void TestScheduler::wholePool_data() {
    QTest::addColumn<int>("block_size");
    QTest::addColumn<int>("n_blocks");
    QTest::addColumn<int>("prompt_len");
    QTest::newRow("bs16_one_token_prompt") << 16 << 4 << 1;
    QTest::newRow("bs16_one_block_prompt") << 16 << 4 << 16;
    QTest::newRow("bs16_prompt_fills_pool_but_one") << 16 << 4 << 63;
    QTest::newRow("bs1_one_token_prompt") << 1 << 6 << 1;
    QTest::newRow("bs1_prompt_fills_pool_but_one") << 1 << 6 << 5;
    QTest::newRow("bs4_single_block_pool") << 4 << 1 << 2;
}

// A request that ends with exactly as many tokens as the pool holds (the engine's limit: its
// last sampled token is never computed), alone and then against a newer request that arrives
// while it runs and must give way.
void TestScheduler::wholePool() {
    QFETCH(int, block_size);
    QFETCH(int, n_blocks);
    QFETCH(int, prompt_len);
    const int capacity = block_size * n_blocks;
    const req_spec big{1, 0, make_prompt(1, prompt_len), capacity - prompt_len};
    {
        sim s(make_params(block_size, n_blocks, 4, 8));
        QCOMPARE(q(s.run({big})), QString());
        QCOMPARE(s.finished().at(1), reference_tokens(big));
        QCOMPARE(int(s.finished().at(1).size()), capacity);
        QCOMPARE(s.n_preemptions(), 0);
    }
    sim s(make_params(block_size, n_blocks, 4, 8));
    const req_spec small{2, 1, make_prompt(2, 1), std::max(1, capacity / 2)};
    QCOMPARE(q(s.run({big, small})), QString());
    QCOMPARE(s.finished().at(1), reference_tokens(big));
    QCOMPARE(s.finished().at(2), reference_tokens(small));
    QCOMPARE(s.sched().pool().n_free(), n_blocks);
}

void TestScheduler::preemptionRecompute_data() {
    QTest::addColumn<int>("block_size");
    QTest::addColumn<int>("small_pool");
    QTest::addColumn<int>("budget");
    QTest::addColumn<int>("shared");
    QTest::addColumn<bool>("caching");
    QTest::newRow("bs16") << 16 << 8 << 64 << 0 << true;
    QTest::newRow("bs16_no_caching") << 16 << 8 << 64 << 0 << false;
    QTest::newRow("bs16_shared_prefix") << 16 << 8 << 64 << 32 << true;
    QTest::newRow("bs4_chunked") << 4 << 20 << 10 << 0 << true;
    QTest::newRow("bs1") << 1 << 70 << 16 << 6 << true;
    QTest::newRow("bs1_no_caching") << 1 << 70 << 16 << 0 << false;
}

// The same requests with a big pool (no preemption) and a tiny one (many): the tiny run preempts,
// every preempted request completes, and each request's tokens are identical in both runs.
void TestScheduler::preemptionRecompute() {
    QFETCH(int, block_size);
    QFETCH(int, small_pool);
    QFETCH(int, budget);
    QFETCH(int, shared);
    QFETCH(bool, caching);
    const int max_tokens = small_pool * block_size - 1;
    auto specs = random_specs(16, std::min(shared + 1, max_tokens / 2), max_tokens / 2, 1, max_tokens / 2, 1,
                              shared, 3);
    sim big(make_params(block_size, 4096, 8, budget, caching));
    sim small(make_params(block_size, small_pool, 8, budget, caching));
    QCOMPARE(q(big.run(specs)), QString());
    QCOMPARE(q(small.run(specs)), QString());
    QCOMPARE(big.n_preemptions(), 0);
    QVERIFY(small.n_preemptions() > 0);
    int n_preempted = 0;
    for (const req_spec &r : specs) {
        QCOMPARE(small.finished().at(r.id), big.finished().at(r.id));
        QCOMPARE(small.finished().at(r.id), reference_tokens(r));
        n_preempted += small.ever_preempted(r.id);
    }
    QVERIFY(n_preempted > 0);
    QCOMPARE(small.sched().pool().n_free(), small_pool);
    QCOMPARE(big.sched().pool().n_free(), 4096);
}

void TestScheduler::prefixCaching_data() {
    QTest::addColumn<int>("block_size");
    QTest::addColumn<int>("a_len");
    QTest::addColumn<int>("b_len");
    QTest::addColumn<int>("b_shared");   // leading tokens of B equal to A's (prompt and output)
    QTest::addColumn<bool>("a_running"); // A still running (decoding) when B arrives
    QTest::addColumn<bool>("caching");
    QTest::addColumn<int>("expected"); // B's n_computed at admission
    QTest::newRow("two_blocks_a_finished") << 16 << 40 << 45 << 32 << false << true << 32;
    QTest::newRow("two_blocks_a_running") << 16 << 40 << 45 << 32 << true << true << 32;
    QTest::newRow("two_and_a_half_blocks") << 16 << 40 << 60 << 40 << false << true << 32;
    QTest::newRow("one_block_shared") << 16 << 40 << 45 << 31 << false << true << 16;
    QTest::newRow("first_token_differs") << 16 << 40 << 45 << 0 << false << true << 0;
    // The whole prompt cached: one token is left to compute, so the last full block is not used.
    QTest::newRow("whole_prompt_two_blocks") << 16 << 40 << 32 << 32 << false << true << 16;
    QTest::newRow("whole_prompt_plus_one") << 16 << 40 << 33 << 33 << true << true << 32;
    QTest::newRow("same_prompt_exactly") << 16 << 40 << 40 << 40 << false << true << 32;
    QTest::newRow("one_token_prompt") << 16 << 40 << 1 << 1 << false << true << 0;
    QTest::newRow("one_block_prompt") << 16 << 16 << 16 << 16 << false << true << 0;
    QTest::newRow("caching_disabled") << 16 << 40 << 45 << 32 << false << false << 0;
    QTest::newRow("caching_disabled_running") << 16 << 40 << 45 << 32 << true << false << 0;
    QTest::newRow("block_size_1") << 1 << 10 << 12 << 6 << false << true << 6;
    QTest::newRow("block_size_1_whole_prompt") << 1 << 10 << 10 << 10 << true << true << 9;
    // A chat's next turn: B = A's prompt and output, then more. A computed 40 + 19 tokens (its
    // last sampled token never is), so 3 full blocks: output blocks are cached too.
    QTest::newRow("next_turn_over_a_output") << 16 << 40 << 70 << 60 << false << true << 48;
    QTest::newRow("next_turn_a_running") << 16 << 40 << 70 << 45 << true << true << 32;
}

// A second request sharing A's leading full blocks starts with them computed: n_computed at
// admission, n_cached_tokens and pool.hits() say so; the KV it reads through the shared blocks
// is its own tokens (the harness checks), and its output is the one it gets alone.
void TestScheduler::prefixCaching() {
    QFETCH(int, block_size);
    QFETCH(int, a_len);
    QFETCH(int, b_len);
    QFETCH(int, b_shared);
    QFETCH(bool, a_running);
    QFETCH(bool, caching);
    QFETCH(int, expected);
    sim s(make_params(block_size, 64, 8, 256, caching));
    const req_spec a{1, 0, make_prompt(1, a_len), 20};
    const ids_t a_all = reference_tokens(a);
    ids_t bp(a_all.begin(), a_all.begin() + b_shared);
    for (int i = b_shared; i < b_len; ++i) bp.push_back(70000 + i); // never in A
    const req_spec b{2, 0, bp, 4};
    QCOMPARE(q(s.add(a)), QString());
    QCOMPARE(q(s.step()), QString()); // A's prompt
    if (!a_running)
        while (s.sched().has_work()) QCOMPARE(q(s.step()), QString());
    QCOMPARE(s.sched().n_running(), a_running ? 1 : 0);

    const uint64_t hits = s.sched().pool().hits(), queries = s.sched().pool().queries();
    QCOMPARE(q(s.add(b)), QString());
    QCOMPARE(q(s.step()), QString());
    const step_log &l = s.log().back();
    const auto it =
        std::find_if(l.chunks.begin(), l.chunks.end(), [](const chunk_log &c) { return c.id == 2; });
    QVERIFY(it != l.chunks.end());
    QCOMPARE(it->start, expected);
    QVERIFY(it->n_new >= 1);
    QCOMPARE(it->start + it->n_new, b_len); // the rest in one chunk (big budget)
    const es::sched_request *rb = s.sched().find(2);
    QVERIFY(rb);
    QCOMPARE(rb->n_cached_tokens, expected);
    QCOMPARE(s.sched().pool().hits() - hits, uint64_t(expected / block_size));
    QCOMPARE(s.sched().pool().queries() - queries,
             caching ? uint64_t((b_len - 1) / block_size) : uint64_t(0));
    if (a_running && expected > 0) {
        const es::sched_request *ra = s.sched().find(1);
        for (int i = 0; i < expected / block_size; ++i) {
            QCOMPARE(rb->blocks[size_t(i)], ra->blocks[size_t(i)]); // shared, not copied
            QCOMPARE(s.sched().pool().ref_cnt(rb->blocks[size_t(i)]), 2);
        }
    }
    QCOMPARE(q(s.run({})), QString());
    QCOMPARE(s.finished().at(1), reference_tokens(a));
    QCOMPARE(s.finished().at(2), reference_tokens(b));
    QCOMPARE(s.sched().pool().n_free(), 64);
    if (!caching) QCOMPARE(s.sched().pool().n_cached(), 0);
}

void TestScheduler::addRefuses_data() {
    QTest::addColumn<int>("block_size");
    QTest::addColumn<int>("n_blocks");
    QTest::addColumn<int>("max_model_len");
    QTest::addColumn<int>("prompt_len");
    QTest::addColumn<QStringList>("words"); // the message must name these; empty: accepted
    QTest::newRow("empty_prompt") << 16 << 8 << 64 << 0 << QStringList{"empty"};
    QTest::newRow("equal_to_context") << 16 << 8 << 64 << 64 << QStringList{"64 tokens", "context"};
    QTest::newRow("longer_than_context") << 16 << 8 << 64 << 100 << QStringList{"100", "64"};
    QTest::newRow("one_below_context") << 16 << 8 << 64 << 63 << QStringList{};
    QTest::newRow("one_token") << 16 << 8 << 64 << 1 << QStringList{};
    QTest::newRow("no_context_limit") << 16 << 8 << 0 << 100 << QStringList{};
    // The prompt and one new token: 64 + 1 tokens need 5 blocks of 16.
    QTest::newRow("more_blocks_than_pool") << 16 << 4 << 1000 << 64 << QStringList{"5", "4", "blocks"};
    QTest::newRow("exactly_the_pool") << 16 << 4 << 1000 << 63 << QStringList{};
    QTest::newRow("bs1_more_blocks") << 1 << 10 << 1000 << 10 << QStringList{"11", "10", "blocks"};
    QTest::newRow("bs1_fits") << 1 << 10 << 1000 << 9 << QStringList{};
    QTest::newRow("empty_pool") << 16 << 0 << 1000 << 1 << QStringList{"1", "0", "blocks"};
}

void TestScheduler::addRefuses() {
    QFETCH(int, block_size);
    QFETCH(int, n_blocks);
    QFETCH(int, max_model_len);
    QFETCH(int, prompt_len);
    QFETCH(QStringList, words);
    sim s(make_params(block_size, n_blocks, 4, 64, true, max_model_len));
    const req_spec r{1, 0, make_prompt(1, prompt_len), 1};
    const QString msg = q(s.add(r));
    if (words.isEmpty()) {
        QCOMPARE(msg, QString());
        QCOMPARE(s.sched().n_waiting(), 1);
        QCOMPARE(q(s.run({})), QString());
        QCOMPARE(s.finished().at(1), reference_tokens(r));
    } else {
        QVERIFY(!msg.isEmpty());
        for (const QString &w : words) QVERIFY2(msg.contains(w), qPrintable(msg + " lacks " + w));
        QCOMPARE(s.sched().n_waiting(), 0);
        QVERIFY(!s.sched().has_work());
    }
    QCOMPARE(s.sched().pool().n_free(), n_blocks);
}

// Finishing requests in every state — waiting and never admitted, preempted and waiting to be
// recomputed, running mid-prefill, running and decoding, holding shared prefix blocks — frees
// every block; unknown or already finished ids are refused.
void TestScheduler::finishAnyStateFreesBlocks() {
    const int bs = 4;
    sim s(make_params(bs, 12, 3, 12));
    const ids_t prefix = make_prompt(50, 8);
    const req_spec dec{1, 0, make_prompt(1, 9, prefix), 100};  // shares 2 blocks with 2
    const req_spec shr{2, 0, make_prompt(2, 10, prefix), 100}; // newest of the running: preempted
    const req_spec pre{3, 0, make_prompt(3, 30), 100};         // long: still prefilling
    const req_spec wait{4, 0, make_prompt(4, 5), 100};         // max_num_seqs reached: waits
    QCOMPARE(q(s.add(dec)), QString());
    QCOMPARE(q(s.step()), QString());
    QCOMPARE(q(s.add(shr)), QString());
    QCOMPARE(q(s.add(pre)), QString());
    QCOMPARE(q(s.add(wait)), QString());
    QCOMPARE(q(s.step()), QString());
    const es::sched_request *r2 = s.sched().find(2);
    QCOMPARE(r2->n_cached_tokens, 8);
    QCOMPARE(s.sched().pool().ref_cnt(r2->blocks[0]), 2);
    // Step until request 3 is preempted or finished prefilling; 4 never gets a seat.
    bool preempted = false;
    for (int i = 0; i < 40 && !preempted; ++i) {
        QCOMPARE(q(s.step()), QString());
        preempted = !s.log().back().preempted.empty();
    }
    QVERIFY2(preempted, "the pool never ran out");
    const uint64_t victim = s.log().back().preempted.front();
    QVERIFY(s.ever_preempted(victim));
    QVERIFY(!s.sched().find(victim)->running);
    QVERIFY(!s.ever_admitted(4));
    QCOMPARE(s.sched().n_waiting(), 2);

    // Finish the preempted one, then the never-admitted one, then whatever runs.
    QCOMPARE(q(s.cancel(victim)), QString());
    QVERIFY(!s.sched().finish(victim)); // twice: nothing
    QCOMPARE(q(s.cancel(4)), QString());
    QCOMPARE(q(s.step()), QString());
    QVERIFY(!s.sched().finish(12345));
    for (uint64_t id : {uint64_t(3), uint64_t(2), uint64_t(1)})
        if (s.sched().find(id)) QCOMPARE(q(s.cancel(id)), QString());
    QVERIFY(!s.sched().has_work());
    QCOMPARE(s.sched().pool().n_free(), s.sched().pool().n_blocks());
    QCOMPARE(q(s.sched().pool().check()), QString());
    QCOMPARE(s.sched().kv_tokens_stored(), int64_t(0));
}

void TestScheduler::randomFinishMix_data() {
    QTest::addColumn<int>("block_size");
    QTest::addColumn<int>("n_blocks");
    QTest::addColumn<int>("budget");
    QTest::addColumn<uint>("seed");
    QTest::newRow("bs16_tight") << 16 << 10 << 48 << 1u;
    QTest::newRow("bs16_tight_2") << 16 << 10 << 48 << 2u;
    QTest::newRow("bs4_tiny") << 4 << 14 << 16 << 3u;
    QTest::newRow("bs1") << 1 << 60 << 12 << 4u;
}

// Random cancels of requests in every state (tracked) during a preempting workload with shared
// prefixes; every step is checked, and at the end every block is free.
void TestScheduler::randomFinishMix() {
    QFETCH(int, block_size);
    QFETCH(int, n_blocks);
    QFETCH(int, budget);
    QFETCH(uint, seed);
    const int max_tokens = n_blocks * block_size - 1;
    auto specs = random_specs(120, 1, max_tokens / 2, 1, max_tokens / 2, 1, 2 * block_size, seed);
    sim s(make_params(block_size, n_blocks, 6, budget));
    std::mt19937 rng(seed);
    std::map<std::string, int> cancelled; // by state
    size_t next = 0;
    while (next < specs.size() || s.sched().has_work()) {
        while (next < specs.size() && specs[next].arrival_step <= s.step_no())
            QCOMPARE(q(s.add(specs[next++])), QString());
        QCOMPARE(q(s.step()), QString());
        QVERIFY(s.step_no() < 20000);
        for (const req_spec &r : specs) {
            es::sched_request *sr = s.sched().find(r.id);
            if (!sr || rng() % 12 != 0) continue;
            std::string state = !sr->running ? (s.ever_preempted(r.id) ? "preempted" : "waiting")
                                : sr->n_computed < sr->n_prompt ? "prefilling"
                                                                : "decoding";
            if (!sr->running && s.ever_admitted(r.id) && !s.ever_preempted(r.id)) state = "?";
            if (sr->running && sr->n_cached_tokens > 0) state += "+shared";
            ++cancelled[state];
            QCOMPARE(q(s.cancel(r.id)), QString());
        }
    }
    QCOMPARE(cancelled.count("?"), size_t(0));
    for (const char *state : {"waiting", "preempted", "decoding"})
        QVERIFY2(cancelled[state] + cancelled[std::string(state) + "+shared"] > 0,
                 qPrintable(QString("no request cancelled while ") + state));
    QVERIFY(s.n_preemptions() > 0);
    QCOMPARE(s.sched().pool().n_free(), n_blocks);
    QCOMPARE(q(s.sched().pool().check()), QString());
    // Those that were not cancelled have the tokens they get alone.
    for (const req_spec &r : specs)
        if (s.finished().count(r.id)) QCOMPARE(s.finished().at(r.id), reference_tokens(r));
}

void TestScheduler::randomConfigurations_data() {
    QTest::addColumn<uint>("first_seed");
    for (uint i = 0; i < 4; ++i)
        QTest::newRow(qPrintable(QString("seeds_%1_to_%2").arg(i * 100 + 1).arg(i * 100 + 100)))
            << i * 100 + 1;
}

// Many small random configurations (block size, pool, budget, max_num_seqs, prefix sharing),
// mostly tight, each run to completion under the harness' checks.
void TestScheduler::randomConfigurations() {
    QFETCH(uint, first_seed);
    int n_preempting = 0;
    for (uint32_t seed = first_seed; seed < first_seed + 100; ++seed) {
        std::mt19937 rng(seed);
        auto uni = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
        const int bs = std::array{1, 2, 3, 4, 16}[size_t(uni(0, 4))];
        const int n_blocks = uni(2, 40 / bs + 4);
        const int max_tokens = n_blocks * bs - 1;
        if (max_tokens < 2) continue;
        const auto specs = random_specs(uni(1, 12), 1, std::max(1, max_tokens / 2), 1,
                                        std::max(1, max_tokens / 2), uni(0, 2), uni(0, 3) * bs, seed);
        // Half the configurations on a pool whose memory grows and shrinks in random steps.
        device_model dev;
        if (seed % 2) dev.step = uni(1, n_blocks);
        sim s(make_params(bs, n_blocks, uni(1, 6), uni(1, 40), uni(0, 3) != 0), dev);
        const std::string e = s.run(specs);
        QVERIFY2(e.empty(), qPrintable(QString("seed %1: %2").arg(seed).arg(q(e))));
        for (const req_spec &r : specs) QCOMPARE(s.finished().at(r.id), reference_tokens(r));
        QCOMPARE(s.sched().pool().n_free(), n_blocks);
        n_preempting += s.n_preemptions() > 0;
    }
    QVERIFY(n_preempting > 10);
}

void TestScheduler::growingPoolGivesSameTokens_data() {
    QTest::addColumn<int>("block_size");
    QTest::addColumn<int>("n_blocks");
    QTest::addColumn<int>("step");
    QTest::addColumn<int>("budget");
    QTest::addColumn<uint>("seed");
    QTest::newRow("bs16_step4") << 16 << 64 << 4 << 64 << 1u;
    QTest::newRow("bs16_step1") << 16 << 40 << 1 << 48 << 2u;
    QTest::newRow("bs4_step7_tight") << 4 << 30 << 7 << 16 << 3u;
    QTest::newRow("bs1_step16") << 1 << 200 << 16 << 24 << 4u;
}

// A pool that starts without memory, grows as requests need blocks and is trimmed to its floor
// between steps (cached blocks kept on most steps, dropped on some): every step uses only blocks
// with memory, every request gets the tokens it gets alone, and once everything finished the
// pool gives all of its memory back.
void TestScheduler::growingPoolGivesSameTokens() {
    QFETCH(int, block_size);
    QFETCH(int, n_blocks);
    QFETCH(int, step);
    QFETCH(int, budget);
    QFETCH(uint, seed);
    const int max_tokens = n_blocks * block_size - 1;
    const auto specs = random_specs(60, 1, max_tokens / 3, 1, max_tokens / 3, 3, 2 * block_size, seed);
    device_model dev;
    dev.step = step;
    sim s(make_params(block_size, n_blocks, 5, budget), dev);
    QCOMPARE(s.sched().pool().n_mapped(), 0);
    QCOMPARE(q(s.run(specs)), QString());
    for (const req_spec &r : specs) QCOMPARE(s.finished().at(r.id), reference_tokens(r));
    QVERIFY(s.device().grows > 0);
    QVERIFY(s.device().trims > 0);
    QCOMPARE(s.device().short_grows, 0);
    QVERIFY(s.failed().empty());
    QCOMPARE(q(s.trim(false)), QString());
    QCOMPARE(s.sched().pool().n_mapped(), 0);
    QCOMPARE(s.sched().pool().n_cached(), 0);
}

// A device with memory for only part of the pool: the pool stops growing there, and the requests
// run as on a pool of that size (preempted and recomputed), with the tokens they get alone.
void TestScheduler::deviceLimitPreemptsLikeASmallerPool() {
    const int bs = 4;
    device_model dev;
    dev.step = 3;
    dev.limit = 12; // of 40 blocks
    sim s(make_params(bs, 40, 6, 32), dev);
    const auto specs = random_specs(30, 1, 20, 1, 20, 1, 2 * bs, 7);
    QCOMPARE(q(s.run(specs)), QString());
    for (const req_spec &r : specs) QCOMPARE(s.finished().at(r.id), reference_tokens(r));
    QVERIFY(s.n_preemptions() > 0);
    QVERIFY(s.device().short_grows > 0);
    QVERIFY(s.failed().empty());
    QVERIFY(s.sched().pool().n_mapped() <= 12);
}

// A request the pool cannot grow to hold while nothing runs fails at once, its message naming the
// KV pool and what the grow said, and changes nothing for the smaller request behind it; a
// preempted request that then cannot be resumed alone fails the same way.
void TestScheduler::requestThePoolCannotHoldFails() {
    const int bs = 4;
    device_model dev;
    dev.step = 2;
    dev.limit = 4; // 16 tokens of the pool's 64
    sim s(make_params(bs, 16, 4, 64), dev);
    const req_spec big{1, 0, make_prompt(1, 20), 3}, small{2, 0, make_prompt(2, 5), 3};
    QCOMPARE(q(s.add(big)), QString()); // the pool's capacity holds it
    QCOMPARE(q(s.add(small)), QString());
    QCOMPARE(q(s.step()), QString());
    QCOMPARE(s.failed().count(1), size_t(1));
    const QString why = q(s.failed().at(1));
    QVERIFY2(why.contains("KV pool cannot hold") && why.contains("out of device memory"), qPrintable(why));
    QVERIFY(!s.sched().find(1));
    QCOMPARE(q(s.run({})), QString());
    QCOMPARE(s.finished().at(2), reference_tokens(small));

    // Growing in the middle of a decode: the only request outgrows the device, is preempted, and
    // fails when it cannot be resumed.
    const req_spec grows{3, 0, make_prompt(3, 14), 10};
    QCOMPARE(q(s.add(grows)), QString());
    QCOMPARE(q(s.run({})), QString());
    QCOMPARE(s.failed().count(3), size_t(1));
    QVERIFY(s.ever_preempted(3));
    QCOMPARE(s.sched().pool().n_free(), 16);
}

QTEST_APPLESS_MAIN(TestScheduler)
#include "test_scheduler.moc"
