// Request flow: the gate frames the request (http_gate) → a worker runs cpp-httplib's
// processing on it → the browser checks (Host, Origin, Content-Type; http_policy) → authenticate
// → parse and validate (openai_protocol) → bound the prompt by its bytes, then tokenize here (the
// engine's own chat template and tokenizer, so a prompt that is too long is refused with a 400
// before anything is queued, and mostly before it is tokenized) → engine.submit(prompt_ids) →
// stream events out as SSE chunks, or collect them for one JSON answer. A stream whose client has
// gone (it closed the connection, a write failed, or the server is stopping) cancels its request,
// which frees its KV blocks. No response names a file: errors that come from inside say what
// failed in words, and the details go to stderr.
#include "api_server.h"

#include "engine/model/tokenizer.h"
#include "engine/runtime/engine.h"
#include "http_gate.h"
#include "http_policy.h"
#include "openai_protocol.h"
#include "server_metrics.h"

#include <httplib.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>
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

// Text at least this long is encoded with the arena trimmed afterwards (below).
constexpr size_t k_trim_after_bytes = 64 * 1024;

// Gives freed heap memory back to the system. SentencePiece's scratch for a long text (and the
// body, the parsed JSON and the prompt copies of a large request) are freed into malloc's arena,
// where glibc keeps them; in the one arena `serve` runs with (cli_serve.cpp), malloc_trim hands
// all of it back. Without it, a worker that once served a large request would hold its peak.
void release_freed_memory() { malloc_trim(0); }

// cpp-httplib's request processing — request line, headers, routing, handlers, the response —
// on a stream the gate provides; the library's own accept loop is not used.
class worker_http : public httplib::Server {
public:
    bool serve(httplib::Stream &s, bool close_connection, bool &connection_closed) {
        return process_request(s, close_connection, connection_closed, nullptr);
    }
    // Chunked responses run while the server socket is valid (the library's is_shutting_down()).
    void set_listening(socket_t s) { svr_sock_ = s; }
};

std::string quote(const std::string &s) { return s.size() > 80 ? "'" + s.substr(0, 80) + "…'" : "'" + s + "'"; }

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

// The log entry of the request the calling worker is serving. A worker serves one request per
// call of the gate's handler, and every handler, provider and releaser of that request runs inside
// that call on the same thread, so the entry needs no lock; null outside a request.
thread_local request_log_entry *t_entry = nullptr;

std::string peer_text(const gate_connection &c) {
    const bool v6 = c.peer_ip.find(':') != std::string::npos;
    return (v6 ? "[" + c.peer_ip + "]" : c.peer_ip) + ":" + std::to_string(c.peer_port);
}

// The method and path of a request's first line ("POST /v1/chat/completions?x HTTP/1.1" →
// POST, /v1/chat/completions); the gate has framed it, so the line is there.
void request_line(const std::string &request, std::string &method, std::string &path) {
    const size_t eol = request.find("\r\n");
    const std::string_view line(request.data(), eol == std::string::npos ? std::min<size_t>(request.size(), 8192) : eol);
    const size_t sp1 = line.find(' ');
    if (sp1 == std::string_view::npos) return;
    const size_t sp2 = line.find(' ', sp1 + 1);
    method = std::string(line.substr(0, sp1));
    std::string_view target = line.substr(sp1 + 1, sp2 == std::string_view::npos ? std::string_view::npos : sp2 - sp1 - 1);
    target = target.substr(0, std::min(target.find('?'), size_t(512)));
    path = std::string(target);
}

} // namespace

struct api_server::impl {
    server_options opt;
    std::shared_ptr<engine> eng;
    bool shared_engine = false; // eng belongs to someone else, who loaded its model
    std::shared_ptr<const tokenizer> tok;
    model_limits limits;
    int32_t block_size = 16;
    std::unique_ptr<server_metrics> metrics;
    worker_http http;
    std::unique_ptr<http_gate> gate;
    origin_rules origins;
    bool host_check = false; // loopback-bound without a key: Host must be a loopback name
    std::atomic<bool> stopping{false};
    std::thread poller;
    std::mutex open_mutex;
    std::set<request_id> open;  // submitted and not yet ended
    std::atomic<uint64_t> next_id{1};
    uint64_t id_salt = 0;
    request_logger logger;            // set before bind(); called on the workers
    std::atomic<uint64_t> active{0};  // requests a worker is answering now
    std::atomic<uint64_t> tokens_out{0}; // tokens taken from the engine's streams
    bool bound = false;

    std::string new_id(api_kind k) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s-%016llx%08llx", k == api_kind::chat ? "chatcmpl" : "cmpl",
                      (unsigned long long)id_salt, (unsigned long long)next_id.fetch_add(1));
        return buf;
    }

    bool authorized(const httplib::Request &req, httplib::Response &res) {
        if (opt.api_key.empty()) return true;
        const std::string h = req.get_header_value("Authorization");
        if (same_secret(h, "Bearer " + opt.api_key)) return true;
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

    // The request ended with `reason` (stop | length | cancelled): metrics, bookkeeping, and the
    // log entry of the request being served on this thread.
    void ended(const std::shared_ptr<request_stream> &st, const std::string &reason) {
        track(st->id(), false);
        auto m = std::make_shared<const request_metrics>(st->metrics());
        metrics->record_request(*m, reason, eng->now_us());
        if (request_log_entry *e = t_entry) {
            e->request_id = st->id();
            e->prompt_tokens = m->n_prompt_tokens;
            e->completion_tokens = int64_t(m->token_times_us.size());
            e->finish_reason = reason;
            if (e->stream && m->t_first_token_us >= 0) e->ttft_ms = (m->t_first_token_us - m->t_submit_us) / 1000.0;
            e->metrics = std::move(m);
        }
    }

    void handle_completion(const httplib::Request &req, httplib::Response &res, api_kind kind);
    std::optional<api_error> tokenize(std::string_view text, completion_request &r, std::vector<int32_t> &ids);
    // The browser checks, before routing: Handled with the answer when the request is refused
    // (or is a CORS preflight).
    httplib::Server::HandlerResponse check_browser_rules(const httplib::Request &req, httplib::Response &res);
    // Non-streaming: drains the request's events into s (waiting up to `wait` for the first);
    // true once it ended, which is then recorded (metrics, bookkeeping) exactly once.
    bool collect(stream_state &s, std::chrono::milliseconds wait) {
        if (s.finished) return true;
        request_event ev;
        bool got = s.stream->wait_pop(ev, wait);
        while (got) {
            if (ev.kind == event_kind::token) {
                s.text += token_text(ev);
                tokens_out += ev.token_ids.size();
            } else if (ev.kind == event_kind::finished)
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
    // load() on a shared engine: the loaded model's facts and tokenizer.
    std::string take_loaded_model();
    // The served name: the option, else the model folder's name.
    std::string served_name(const std::string &dir) const {
        if (!opt.served_model_name.empty()) return opt.served_model_name;
        std::string name = std::filesystem::path(dir).lexically_normal().filename().string();
        if (name.empty()) name = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
        return name;
    }
    // The limits and metrics of the model served as `name`.
    void set_model(const model_info &info, const std::string &name) {
        limits.served_name = name;
        limits.n_ctx = info.config.n_ctx_train;
        limits.n_vocab = info.config.n_vocab;
        limits.max_prompt_tokens = opt.max_prompt_tokens;
        limits.defaults = eng->model_defaults();
        block_size = info.block_size;
        metrics = std::make_unique<server_metrics>(name);
    }
};

namespace {

std::chrono::milliseconds to_ms(double s) { return std::chrono::milliseconds(int64_t(std::llround(s * 1000.0))); }

std::string exposure_refusal(const std::string &host) {
    return "refusing to serve on " + (host.empty() ? std::string("every address") : host) +
           " without an API key: anyone who can reach it could use the model. Set --api-key KEY (or "
           "EXPERTSCOPE_API_KEY), bind 127.0.0.1, or pass --insecure-no-api-key to do it anyway";
}

} // namespace

api_server::api_server(server_options o, std::shared_ptr<engine> shared) : api_server(std::move(o)) {
    m->eng = std::move(shared);
    m->shared_engine = true;
}

api_server::api_server(server_options o) : m(std::make_unique<impl>()) {
    m->opt = std::move(o);
    std::random_device rd;
    m->id_salt = (uint64_t(rd()) << 32) ^ rd();
    const server_options &opt = m->opt;
    gate_options g;
    g.framing.max_body_bytes = opt.max_body_bytes;
    g.header_timeout = to_ms(opt.header_timeout_s);
    g.body_timeout = to_ms(opt.body_timeout_s);
    g.idle_timeout = to_ms(opt.idle_timeout_s);
    g.write_timeout = to_ms(opt.write_timeout_s);
    g.max_connections = opt.max_connections;
    g.max_connections_per_client = opt.max_connections_per_client;
    g.workers = size_t(opt.http_threads > 0 ? opt.http_threads : std::max(64, 2 * opt.max_num_seqs + 16));
    m->gate = std::make_unique<http_gate>(g);
    for (const std::string &origin : opt.allowed_origins) m->origins.allowed.push_back(normalize_origin(origin));
}

host_exposure resolve_exposure(const std::string &host) {
    host_exposure out;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo *res = nullptr;
    if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), "0", &hints, &res); rc != 0) {
        out.resolve_error = gai_strerror(rc);
        return out;
    }
    bool loopback = true;
    for (addrinfo *a = res; a; a = a->ai_next) {
        if (a->ai_family == AF_INET)
            loopback &= (ntohl(reinterpret_cast<const sockaddr_in *>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
        else if (a->ai_family == AF_INET6)
            loopback &= bool(IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6 *>(a->ai_addr)->sin6_addr));
    }
    freeaddrinfo(res);
    out.loopback = loopback;
    return out;
}

std::string check_exposure(const server_options &o) {
    if (!o.api_key.empty()) return {};
    const host_exposure x = resolve_exposure(o.host);
    if (!x.resolve_error.empty()) return "cannot resolve --host " + o.host + " (" + x.resolve_error + ")";
    if (x.loopback || o.insecure_no_api_key) return {};
    return exposure_refusal(o.host);
}

api_server::~api_server() {
    stop();
    if (m->poller.joinable()) m->poller.join();
    m->eng.reset();  // its own engine: finishes open streams, joins the engine thread
}

std::string api_server::load() {
    if (std::string e = check_exposure(m->opt); !e.empty()) return e;
    if (m->shared_engine) return m->take_loaded_model();
    engine_params ep;
    ep.load.kind = to_kind(m->opt.backend);
    ep.load.n_threads = m->opt.threads;
    ep.load.precision = m->opt.precision == "fp8" ? weight_precision::fp8 : weight_precision::bf16;
    ep.load.kv_cache = m->opt.kv_cache == "fp8" ? kv_cache_dtype::fp8 : kv_cache_dtype::bf16;
    ep.load.fp8.scales = m->opt.fp8_scales == "block128" ? scale_layout::block128 : scale_layout::channel;
    ep.load.need_tokenizer = !m->opt.random_shape;
    ep.max_num_seqs = m->opt.max_num_seqs;
    ep.kv_cache_bytes = m->opt.kv_cache_bytes;
    ep.kv_cache_min_bytes = m->opt.kv_cache_min_bytes;
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
    if (name.empty()) name = m->served_name(m->opt.model_dir);
    m->set_model(info, name);
    std::fprintf(
        stderr, "serve: %s as '%s' on %s, context %lld, %d KV blocks of %d tokens, max %d sequences%s\n",
        m->opt.random_shape ? ("random weights of " + m->opt.model_dir).c_str() : m->opt.model_dir.c_str(),
        name.c_str(), info.backend_name.c_str(), (long long)m->limits.n_ctx, info.n_kv_blocks,
        info.block_size, m->opt.max_num_seqs,
        m->tok ? "" : " (no tokenizer: token-id prompts, tokens written as [id])");
    if (!info.backend_note.empty()) std::fprintf(stderr, "serve: note: %s\n", info.backend_note.c_str());
    if (!info.kv_note.empty()) std::fprintf(stderr, "serve: KV pool: %s\n", info.kv_note.c_str());
    return {};
}

std::string api_server::impl::take_loaded_model() {
    const std::optional<model_info> info = eng ? eng->info() : std::nullopt;
    if (!info) return "no model is loaded";
    // The engine's tokenizer (encode is thread-safe): the HTTP threads tokenize with it.
    if (!info->tok) return "the loaded model has no tokenizer, so chat and text prompts cannot be served";
    tok = info->tok;
    set_model(*info, served_name(info->dir.string()));
    return {};
}

void api_server::impl::handle_models(httplib::Response &res) {
    // "root" is the served name, not the folder: no answer names a path on this machine.
    json model = {{"id", limits.served_name},
                  {"object", "model"},
                  {"created", unix_now()},
                  {"owned_by", "expertscope"},
                  {"root", limits.served_name},
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
    if (t_entry) {
        t_entry->model = r.model;
        t_entry->stream = r.stream;
    }

    request_params rp;
    if (!tok && (kind == api_kind::chat || !r.prompt_is_ids))
        return send_error(
            res, api_error{400,
                           "this server runs random weights of a model shape and has no tokenizer: send "
                           "a token-id prompt to /v1/completions",
                           "invalid_request_error", kind == api_kind::chat ? "messages" : "prompt", ""});
    if (kind == api_kind::chat) {
        if (auto e = tokenize(render_chat(r.messages, true), r, rp.prompt_ids)) return send_error(res, *e);
    } else if (r.prompt_is_ids) {
        rp.prompt_ids = std::move(r.prompt_ids);
    } else if (auto e = tokenize(r.prompt_text, r, rp.prompt_ids)) {
        return send_error(res, *e);
    }
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
                if (!sink.is_writable()) return false; // the client has gone
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
            if (!sink.is_writable()) return false; // the client has gone: the releaser cancels
            std::string out;
            if (!s.sent_role && s.req.kind == api_kind::chat) {
                out += sse(stream_chunk(s.req, s.id, s.created, "", "", true));
                s.sent_role = true;
            }
            request_event ev;
            bool got = s.stream->wait_pop(ev, std::chrono::milliseconds(50));
            std::string text, finish, error;
            while (got) {
                if (ev.kind == event_kind::token) {
                    text += token_text(ev);
                    tokens_out += ev.token_ids.size();
                } else if (ev.kind == event_kind::finished) finish = ev.finish_reason;
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

// A text whose byte length alone proves it longer than the limits allow is refused before it is
// tokenized (a token stands for at most max_token_bytes() bytes); any other is encoded with a
// stop just past the longest prompt allowed, so an encoding that runs over ends early.
std::optional<api_error> api_server::impl::tokenize(std::string_view text, completion_request &r,
                                                    std::vector<int32_t> &ids) {
    const int64_t allowed = max_prompt_length(limits);
    if (const size_t per_token = tok->max_token_bytes(); per_token > 0) {
        const int64_t at_least = int64_t((text.size() + per_token - 1) / per_token);
        if (at_least > allowed) return check_prompt_length(at_least, limits, r, true);
    }
    ids = tok->encode(text, size_t(allowed));
    if (text.size() >= k_trim_after_bytes) release_freed_memory();
    if (int64_t(ids.size()) > allowed) return check_prompt_length(int64_t(ids.size()), limits, r, true);
    return std::nullopt;
}

httplib::Server::HandlerResponse api_server::impl::check_browser_rules(const httplib::Request &req,
                                                                       httplib::Response &res) {
    using HR = httplib::Server::HandlerResponse;
    const std::string host = req.get_header_value("Host");
    if (host_check && !host.empty() && !is_loopback_host(host)) {
        send_error(res, api_error{421,
                                  "this server listens on a loopback address without an API key and answers only "
                                  "to localhost, 127.0.0.1 or [::1]; the Host " + quote(host) + " is refused",
                                  "invalid_request_error", "", "misdirected_request"});
        return HR::Handled;
    }
    const std::string origin = req.get_header_value("Origin");
    switch (check_origin(origin, host, origins)) {
    case origin_verdict::foreign:
        send_error(res, api_error{403,
                                  "requests from the web origin " + quote(origin) +
                                      " are refused; start the server with --allowed-origins " + quote(origin) +
                                      " to allow that site",
                                  "invalid_request_error", "", "origin_not_allowed"});
        return HR::Handled;
    case origin_verdict::allowed:
        res.set_header("Access-Control-Allow-Origin", origin);
        res.set_header("Vary", "Origin");
        break;
    default:
        break;
    }
    if (req.method == "OPTIONS") { // a CORS preflight (or a plain OPTIONS): what the routes take
        res.status = 204;
        res.set_header("Allow", "GET, POST, OPTIONS");
        if (!origin.empty()) {
            res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
            res.set_header("Access-Control-Max-Age", "600");
        }
        return HR::Handled;
    }
    const bool changes_state = req.method == "POST" || req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE";
    if (changes_state && !is_json_media_type(req.get_header_value("Content-Type"))) {
        const std::string ct = req.get_header_value("Content-Type");
        send_error(res, api_error{415,
                                  "the body must be sent as 'Content-Type: application/json'" +
                                      (ct.empty() ? std::string(" (none was given)") : " (not " + quote(ct) + ")"),
                                  "invalid_request_error", "", "unsupported_media_type"});
        return HR::Handled;
    }
    return HR::Unhandled;
}

std::string api_server::listen() {
    if (std::string err = bind(); !err.empty()) return err;
    const bool v6 = m->opt.host.find(':') != std::string::npos;
    std::printf("listening on http://%s%s%s:%d\n", v6 ? "[" : "", m->opt.host.c_str(), v6 ? "]" : "", port());
    std::fflush(stdout);
    serve();
    return {};
}

int api_server::port() const { return m->bound ? m->gate->port() : 0; }
std::string api_server::served_model_name() const { return m->limits.served_name; }
void api_server::set_request_logger(request_logger logger) { m->logger = std::move(logger); }

server_totals api_server::totals() const {
    server_totals t;
    t.active = m->active.load();
    t.tokens_out = m->tokens_out.load();
    if (!m->metrics) return t;
    const server_metrics::totals c = m->metrics->current_totals();
    t.requests = c.answers;
    t.errors = c.errors;
    t.prompt_tokens = c.prompt_tokens;
    t.generation_tokens = c.generation_tokens;
    return t;
}

std::string api_server::bind() {
    impl &I = *m;
    http_gate &gate = *I.gate;
    if (I.bound) return {};
    if (!I.metrics) return "no model is loaded (load() first)";
    I.http.set_keep_alive_max_count(gate.options().keep_alive_max_requests);
    I.http.set_keep_alive_timeout(std::max<time_t>(1, time_t(I.opt.idle_timeout_s)));
    I.http.set_payload_max_length(I.opt.max_body_bytes); // the gate enforces it first
    I.http.set_pre_routing_handler(
        [&I](const httplib::Request &req, httplib::Response &res) { return I.check_browser_rules(req, res); });
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
    // After each response: the route's status (the totals), and the request's log entry.
    I.http.set_logger([&I](const httplib::Request &, const httplib::Response &res) {
        I.metrics->record_answer(res.status);
        if (request_log_entry *e = t_entry) e->status = res.status;
    });
    I.http.set_exception_handler([](const httplib::Request &req, httplib::Response &res, std::exception_ptr ep) {
        // The exception's text may name files; it goes to stderr, the client gets words.
        std::string what = "unknown exception";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception &ex) {
            what = ex.what();
        } catch (...) {
        }
        std::fprintf(stderr, "serve: %s %s failed: %s\n", req.method.c_str(), req.path.c_str(), what.c_str());
        send_error(res, api_error{500, "internal error while serving the request", "server_error", "", ""});
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
        std::string text = I.metrics->render(snap.get(), I.block_size);
        const gate_counters &c = I.gate->counters();
        std::ostringstream os;
        os << "# HELP expertscope:http_connections_open Connections the server holds open.\n"
              "# TYPE expertscope:http_connections_open gauge\n"
           << "expertscope:http_connections_open " << c.open.load() << "\n"
           << "# HELP expertscope:http_connections_refused_total Connections answered 503 at once (over a connection limit).\n"
              "# TYPE expertscope:http_connections_refused_total counter\n"
           << "expertscope:http_connections_refused_total " << c.refused.load() << "\n"
           << "# HELP expertscope:http_requests_timed_out_total Requests answered 408 (head or body past its deadline).\n"
              "# TYPE expertscope:http_requests_timed_out_total counter\n"
           << "expertscope:http_requests_timed_out_total " << c.timed_out.load() << "\n"
           << "# HELP expertscope:http_requests_rejected_total Requests the gate refused as malformed or too large.\n"
              "# TYPE expertscope:http_requests_rejected_total counter\n"
           << "expertscope:http_requests_rejected_total " << c.rejected.load() << "\n";
        text += os.str();
        res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
    });

    if (std::string err = gate.bind(I.opt.host, I.opt.port); !err.empty()) return err;
    I.origins.loopback_bound = gate.bound_to_loopback();
    I.host_check = gate.bound_to_loopback() && I.opt.api_key.empty();
    if (!gate.bound_to_loopback() && I.opt.api_key.empty()) {
        if (!I.opt.insecure_no_api_key) return exposure_refusal(I.opt.host);
        std::fprintf(stderr,
                     "serve: WARNING: listening on %s without an API key (%s): anyone who can reach this address "
                     "can use the model\n",
                     I.opt.host.c_str(), I.shared_engine ? "allowed explicitly" : "--insecure-no-api-key");
    }
    I.http.set_listening(gate.listening_socket());
    I.bound = true;
    return {};
}

void api_server::serve() {
    impl &I = *m;
    http_gate &gate = *I.gate;
    if (!I.bound) return;
    // The batch-size histograms read the engine's step ring; poll it often enough not to miss steps.
    I.poller = std::thread([&I] {
        while (!I.stopping) {
            if (auto snap = I.eng->telemetry()) I.metrics->record_steps(*snap);
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    });
    gate.run(
        [&I](const gate_connection &c, std::string &request, bool last) {
            ++I.active;
            const auto t0 = std::chrono::steady_clock::now();
            request_log_entry entry;
            if (I.logger) {
                entry.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count();
                entry.client = peer_text(c);
                request_line(request, entry.method, entry.path);
                t_entry = &entry;
            }
            gate_stream s(c, request, I.gate->options().write_timeout, I.stopping);
            bool closed = false;
            const bool ok = I.http.serve(s, last || I.stopping, closed);
            t_entry = nullptr;
            if (request.size() >= k_trim_after_bytes) {
                std::string().swap(request); // freed first, so that it is given back too
                release_freed_memory();
            }
            if (I.logger) {
                entry.duration_ms =
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                I.logger(entry);
            }
            --I.active;
            return ok && !closed && !s.failed();
        },
        [&I] { I.http.set_listening(INVALID_SOCKET); });
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
    m->gate->stop(); // before or during listen(): it returns once every request has ended
}

} // namespace es::server
