// Request flow: authenticate → parse and validate (openai_protocol) → tokenize here (the
// engine's own chat template and tokenizer, so the prompt length can be refused with a 400
// before anything is queued) → engine.submit(prompt_ids) → stream events out as SSE chunks, or
// collect them for one JSON answer. A stream whose client has gone (a failed write, or the
// server stopping) cancels its request, which frees its KV blocks.
#include "api_server.h"

#include "engine/model/tokenizer.h"
#include "engine/runtime/engine.h"
#include "openai_protocol.h"
#include "server_metrics.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

namespace es::server {

using nlohmann::json;

namespace {

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response &res, const api_error &e) {
    res.status = e.status;
    res.set_content(dump(error_json(e)), "application/json");
}

backend_kind to_kind(const std::string &s) {
    return s == "cuda" ? backend_kind::cuda : s == "auto" ? backend_kind::automatic : backend_kind::cpu;
}

// Per-request state shared by the content provider and its releaser.
struct stream_state {
    completion_request req;
    std::shared_ptr<request_stream> stream;
    std::string id;
    int64_t created = 0;
    int64_t n_prompt = 0;
    bool sent_role = false, finished = false, sent_done = false;
    std::string text, finish, error; // a non-streaming request's answer so far
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

} // namespace

struct api_server::impl {
    server_options opt;
    std::unique_ptr<engine> eng;
    std::unique_ptr<tokenizer> tok;
    model_limits limits;
    int32_t block_size = 16;
    std::unique_ptr<server_metrics> metrics;
    httplib::Server http;
    std::atomic<bool> stopping{false};
    std::thread poller;
    std::mutex open_mutex;
    std::set<request_id> open;  // submitted and not yet ended
    std::atomic<uint64_t> next_id{1};
    uint64_t id_salt = 0;

    std::string new_id(api_kind k) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s-%016llx%08llx", k == api_kind::chat ? "chatcmpl" : "cmpl",
                      (unsigned long long)id_salt, (unsigned long long)next_id.fetch_add(1));
        return buf;
    }

    bool authorized(const httplib::Request &req, httplib::Response &res) {
        if (opt.api_key.empty()) return true;
        const std::string h = req.get_header_value("Authorization");
        if (h == "Bearer " + opt.api_key) return true;
        api_error e;
        e.status = 401;
        e.code = "invalid_api_key";
        e.message = h.empty() ? "Missing API key: send 'Authorization: Bearer <key>'" : "Incorrect API key provided";
        send_error(res, e);
        return false;
    }

    void track(request_id id, bool add) {
        std::lock_guard lock(open_mutex);
        if (add) open.insert(id);
        else open.erase(id);
    }

    // The request ended with `reason` (stop | length | cancelled): metrics, bookkeeping.
    void ended(const std::shared_ptr<request_stream> &st, const std::string &reason) {
        track(st->id(), false);
        metrics->record_request(st->metrics(), reason, eng->now_us());
    }

    void handle_completion(const httplib::Request &req, httplib::Response &res, api_kind kind);
    // Non-streaming: drains the request's events into s (waiting up to `wait` for the first);
    // true once it ended, which is then recorded (metrics, bookkeeping) exactly once.
    bool collect(stream_state &s, std::chrono::milliseconds wait) {
        if (s.finished) return true;
        request_event ev;
        bool got = s.stream->wait_pop(ev, wait);
        while (got) {
            if (ev.kind == event_kind::token)
                s.text += token_text(ev);
            else if (ev.kind == event_kind::finished)
                s.finish = ev.finish_reason;
            else
                s.error = ev.error.empty() ? "the request failed" : ev.error;
            if (!s.finish.empty() || !s.error.empty()) {
                s.finished = true;
                ended(s.stream, s.error.empty() ? s.finish : "cancelled");
                return true;
            }
            got = s.stream->try_pop(ev);
        }
        return false;
    }
    struct api_error_or_body {
        int status = 200;
        std::string body;
    };
    // The answer of an ended non-streaming request: the completion, or an OpenAI error body.
    api_error_or_body final_body(const stream_state &s) {
        api_error e;
        if (!s.error.empty())
            e = api_error{400, s.error, "invalid_request_error", "", ""};
        else if (s.finish == "cancelled")
            e = api_error{503, "the request was cancelled (server shutting down)", "server_error", "", ""};
        else {
            const request_metrics rm = s.stream->metrics();
            const usage_counts u{s.n_prompt, int64_t(rm.token_times_us.size())};
            return {200, dump(full_response(s.req, s.id, s.created, s.text, s.finish, u))};
        }
        return {e.status, dump(error_json(e))};
    }
    // A token event's text; without a tokenizer (random weights) each id as "[id]".
    std::string token_text(const request_event &ev) const {
        if (tok) return ev.text;
        std::string t;
        for (int32_t id : ev.token_ids) t += "[" + std::to_string(id) + "]";
        return t;
    }
    void handle_models(httplib::Response &res);
};

api_server::api_server(server_options o) : m(std::make_unique<impl>()) {
    m->opt = std::move(o);
    std::random_device rd;
    m->id_salt = (uint64_t(rd()) << 32) ^ rd();
}

api_server::~api_server() {
    stop();
    if (m->poller.joinable()) m->poller.join();
    m->eng.reset();  // finishes open streams, joins the engine thread
}

std::string api_server::load() {
    engine_params ep;
    ep.load.kind = to_kind(m->opt.backend);
    ep.load.n_threads = m->opt.threads;
    ep.load.precision = m->opt.precision == "fp8" ? weight_precision::fp8 : weight_precision::bf16;
    ep.load.kv_cache = m->opt.kv_cache == "fp8" ? kv_cache_dtype::fp8 : kv_cache_dtype::bf16;
    ep.load.fp8.scales = m->opt.fp8_scales == "block128" ? scale_layout::block128 : scale_layout::channel;
    ep.load.need_tokenizer = !m->opt.random_shape;
    ep.max_num_seqs = m->opt.max_num_seqs;
    ep.kv_cache_bytes = m->opt.kv_cache_bytes;
    ep.gpu_memory_utilization = m->opt.gpu_memory_utilization;
    m->eng = std::make_unique<engine>(ep);
    status st = m->opt.random_shape ? m->eng->load_random_model(*m->opt.random_shape, 42).get()
                                    : m->eng->load_model(m->opt.model_dir).get();
    if (!st) return st.message();
    if (!m->opt.random_shape) {
        // The server's own tokenizer instance: prompts are tokenized on the HTTP threads so that a
        // too-long prompt is refused before it is queued.
        auto tk = tokenizer::load(m->opt.model_dir);
        if (!tk) return tk.message();
        m->tok = std::move(*tk);
    }
    const auto info = *m->eng->info();
    std::string name = m->opt.served_model_name;
    if (name.empty() && m->opt.random_shape) name = m->opt.model_dir + "-random";
    if (name.empty()) {
        name = std::filesystem::path(m->opt.model_dir).lexically_normal().filename().string();
        if (name.empty()) name = std::filesystem::path(m->opt.model_dir).lexically_normal().parent_path().filename().string();
    }
    m->limits.served_name = name;
    m->limits.n_ctx = info.config.n_ctx_train;
    m->limits.n_vocab = info.config.n_vocab;
    m->limits.max_prompt_tokens = m->opt.max_prompt_tokens;
    m->limits.defaults = m->eng->model_defaults();
    m->block_size = info.block_size;
    m->metrics = std::make_unique<server_metrics>(name);
    std::fprintf(
        stderr, "serve: %s as '%s' on %s, context %lld, %d KV blocks of %d tokens, max %d sequences%s\n",
        m->opt.random_shape ? ("random weights of " + m->opt.model_dir).c_str() : m->opt.model_dir.c_str(),
        name.c_str(), info.backend_name.c_str(), (long long)m->limits.n_ctx, info.n_kv_blocks,
        info.block_size, m->opt.max_num_seqs,
        m->tok ? "" : " (no tokenizer: token-id prompts, tokens written as [id])");
    if (!info.backend_note.empty()) std::fprintf(stderr, "serve: note: %s\n", info.backend_note.c_str());
    return {};
}

void api_server::impl::handle_models(httplib::Response &res) {
    json model = {{"id", limits.served_name},
                  {"object", "model"},
                  {"created", unix_now()},
                  {"owned_by", "expertscope"},
                  {"root", opt.model_dir},
                  {"max_model_len", limits.n_ctx}};
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({model})}}), "application/json");
}

void api_server::impl::handle_completion(const httplib::Request &req, httplib::Response &res, api_kind kind) {
    if (!authorized(req, res)) return;
    if (stopping) {
        send_error(res, api_error{503, "the server is shutting down", "server_error", "", ""});
        return;
    }
    auto state = std::make_shared<stream_state>();
    if (auto e = parse_request(req.body, kind, limits, state->req)) return send_error(res, *e);
    completion_request &r = state->req;

    request_params rp;
    if (!tok && (kind == api_kind::chat || !r.prompt_is_ids))
        return send_error(
            res, api_error{400,
                           "this server runs random weights of a model shape and has no tokenizer: send "
                           "a token-id prompt to /v1/completions",
                           "invalid_request_error", kind == api_kind::chat ? "messages" : "prompt", ""});
    if (kind == api_kind::chat) rp.prompt_ids = tok->encode(render_chat(r.messages, true));
    else if (r.prompt_is_ids) rp.prompt_ids = r.prompt_ids;
    else rp.prompt_ids = tok->encode(r.prompt_text);
    if (auto e = check_prompt_length(int64_t(rp.prompt_ids.size()), limits, r)) return send_error(res, *e);
    state->n_prompt = int64_t(rp.prompt_ids.size());
    rp.sampling = r.sampling;
    state->id = new_id(kind);
    state->created = unix_now();

    state->stream = eng->submit(std::move(rp));
    track(state->stream->id(), true);

    if (!r.stream) {
        // A short request is answered as one JSON body with its true status. One still running
        // after a second is answered with chunked transfer encoding: a newline every second while
        // it runs (JSON allows leading whitespace) probes the connection, so a client that hangs
        // up is noticed and its request cancelled, as for streams; the JSON follows at the end.
        // Cost: an error after that second (only a server shutdown) comes with status 200.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        bool done = false;
        while (!done && std::chrono::steady_clock::now() < deadline) {
            if (stopping) eng->cancel(state->stream->id());
            done = collect(*state, std::chrono::milliseconds(100));
        }
        if (done) {
            const api_error_or_body out = final_body(*state);
            res.status = out.status;
            res.set_content(out.body, "application/json");
            return;
        }
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "application/json",
            [this, state](size_t, httplib::DataSink &sink) {
                stream_state &s = *state;
                if (s.sent_done) {
                    sink.done();
                    return true;
                }
                const bool done = collect(s, std::chrono::milliseconds(200));
                std::string out;
                const auto now = std::chrono::steady_clock::now();
                if (done) {
                    out = final_body(s).body;
                    s.sent_done = true;
                } else if (now - s.last_write > std::chrono::seconds(1)) {
                    out = "\n";
                }
                if (!out.empty()) {
                    if (!sink.write(out.data(), out.size())) return false; // client gone
                    s.last_write = now;
                }
                if (s.sent_done) sink.done();
                if (stopping && !s.finished) eng->cancel(s.stream->id());
                return true;
            },
            [this, state](bool) {
                if (!state->finished) {
                    state->finished = true;
                    eng->cancel(state->stream->id());
                    ended(state->stream, "cancelled");
                }
            });
        return;
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, state](size_t, httplib::DataSink &sink) {
            stream_state &s = *state;
            if (s.sent_done) {
                sink.done();
                return true;
            }
            std::string out;
            if (!s.sent_role && s.req.kind == api_kind::chat) {
                out += sse(stream_chunk(s.req, s.id, s.created, "", "", true));
                s.sent_role = true;
            }
            request_event ev;
            bool got = s.stream->wait_pop(ev, std::chrono::milliseconds(50));
            std::string text, finish, error;
            while (got) {
                if (ev.kind == event_kind::token)
                    text += token_text(ev);
                else if (ev.kind == event_kind::finished) finish = ev.finish_reason;
                else error = ev.error.empty() ? "the request failed" : ev.error;
                if (!finish.empty() || !error.empty()) break;
                got = s.stream->try_pop(ev);
            }
            if (!text.empty()) out += sse(stream_chunk(s.req, s.id, s.created, text, ""));
            if (!finish.empty() || !error.empty()) {
                s.finished = true;
                ended(s.stream, error.empty() ? finish : "cancelled");
                if (!error.empty()) {
                    out += sse(error_json(api_error{400, error, "invalid_request_error", "", ""}));
                } else {
                    out += sse(stream_chunk(s.req, s.id, s.created, "", finish == "cancelled" ? "abort" : finish));
                    if (s.req.include_usage) {
                        const request_metrics rm = s.stream->metrics();
                        out += sse(usage_chunk(s.req, s.id, s.created, {s.n_prompt, int64_t(rm.token_times_us.size())}));
                    }
                }
                out += "data: [DONE]\n\n";
                s.sent_done = true;
            }
            // While a request waits in the queue nothing is written, and a client that hung up
            // would go unnoticed: an SSE comment (ignored by clients) every second probes it.
            const auto now = std::chrono::steady_clock::now();
            if (out.empty() && now - s.last_write > std::chrono::seconds(1)) out = ": keep-alive\n\n";
            if (!out.empty()) {
                if (!sink.write(out.data(), out.size())) return false;  // client gone
                s.last_write = now;
            }
            if (s.sent_done) sink.done();
            if (stopping && !s.finished) eng->cancel(s.stream->id());
            return true;
        },
        [this, state](bool success) {
            // Client disconnected, a write failed, or the server stopped: free the request.
            if (!state->finished) {
                state->finished = true;
                eng->cancel(state->stream->id());
                ended(state->stream, "cancelled");
            }
        });
}

std::string api_server::listen() {
    impl &I = *m;
    const int n_http = I.opt.http_threads > 0 ? I.opt.http_threads : std::max(64, 2 * I.opt.max_num_seqs + 16);
    I.http.new_task_queue = [n_http] { return new httplib::ThreadPool(size_t(n_http)); };
    I.http.set_payload_max_length(I.opt.max_body_bytes);
    I.http.set_read_timeout(30, 0);
    I.http.set_write_timeout(30, 0);
    I.http.set_error_handler([&I](const httplib::Request &req, httplib::Response &res) {
        if (!res.body.empty()) return;  // a handler already wrote an OpenAI error
        api_error e;
        e.status = res.status;
        if (res.status == 413) {
            e.code = "request_too_large";
            e.message = "the request body exceeds " + std::to_string(I.opt.max_body_bytes) + " bytes";
        } else if (res.status == 404) {
            e.code = "not_found";
            e.message = "no route for " + req.method + " " + req.path;
        } else {
            e.message = "HTTP error " + std::to_string(res.status);
        }
        send_error(res, e);
    });
    I.http.set_exception_handler([](const httplib::Request &, httplib::Response &res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception &ex) {
            what += std::string(": ") + ex.what();
        } catch (...) {
        }
        send_error(res, api_error{500, what, "server_error", "", ""});
    });

    I.http.Get("/health", [](const httplib::Request &, httplib::Response &res) { res.set_content("", "text/plain"); });
    I.http.Get("/v1/models", [&I](const httplib::Request &req, httplib::Response &res) {
        if (I.authorized(req, res)) I.handle_models(res);
    });
    I.http.Post("/v1/chat/completions", [&I](const httplib::Request &req, httplib::Response &res) {
        I.handle_completion(req, res, api_kind::chat);
    });
    I.http.Post("/v1/completions", [&I](const httplib::Request &req, httplib::Response &res) {
        I.handle_completion(req, res, api_kind::completion);
    });
    I.http.Get("/metrics", [&I](const httplib::Request &, httplib::Response &res) {
        auto snap = I.eng->telemetry();
        if (snap) I.metrics->record_steps(*snap);
        res.set_content(I.metrics->render(snap.get(), I.block_size), "text/plain; version=0.0.4; charset=utf-8");
    });

    int port = I.opt.port;
    if (port == 0) {
        port = I.http.bind_to_any_port(I.opt.host);
        if (port < 0) return "cannot bind " + I.opt.host + " (any port)";
    } else if (!I.http.bind_to_port(I.opt.host, port)) {
        return "cannot bind " + I.opt.host + ":" + std::to_string(port) + " (in use, or not an address of this machine)";
    }
    // The batch-size histograms read the engine's step ring; poll it often enough not to miss steps.
    I.poller = std::thread([&I] {
        while (!I.stopping) {
            if (auto snap = I.eng->telemetry()) I.metrics->record_steps(*snap);
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    });
    std::printf("listening on http://%s:%d\n", I.opt.host.c_str(), port);
    std::fflush(stdout);
    if (I.stopping) return {};
    I.http.listen_after_bind();
    return {};
}

void api_server::stop() {
    if (m->stopping.exchange(true)) return;
    if (m->eng) {
        std::set<request_id> ids;
        {
            std::lock_guard lock(m->open_mutex);
            ids = m->open;
        }
        for (request_id id : ids) m->eng->cancel(id);
    }
    // listen() may be between bind and accept: wait (bounded) until it runs, then stop it.
    for (int i = 0; i < 200 && !m->http.is_running() && m->poller.joinable(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    m->http.stop();
}

} // namespace es::server
