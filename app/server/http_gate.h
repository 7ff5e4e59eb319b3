// http_gate: the front of the HTTP server, which bounds every client before a worker thread is
// spent on it. One thread (the caller of run()) owns the listening socket and polls every
// connection that is not being served: it accepts, counts connections per client address and in
// all (the excess is answered 503 at once and closed), reads each request with whole-request
// deadlines — one for the request line and headers, one for the body — frames it
// (http_framing: Content-Length checked before a body byte is read, chunked bodies counted
// against the same limit), answers 400/408/413/431/… itself, and hands only complete requests to
// the worker pool. A worker serves the request on a gate_stream (reads from the buffered request,
// writes to the socket under a write deadline) and gives the connection back: it then waits, idle
// and bounded, for its next request; bytes pipelined after a request are kept for the next.
// Threads: run() blocks its caller; stop() may be called from any thread (a signal thread).
#pragma once

#include "http_framing.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace es::server {

struct gate_options {
    framing_limits framing;
    std::chrono::milliseconds header_timeout{10'000}; // accept (or a kept-alive request's first byte) → end of headers
    std::chrono::milliseconds body_timeout{30'000};   // end of headers → end of body
    std::chrono::milliseconds idle_timeout{5'000};    // a kept-alive connection waiting for its next request
    std::chrono::milliseconds write_timeout{30'000};  // one write of a response, start to end
    size_t max_connections = 512;                     // open connections in all
    size_t max_connections_per_client = 128;          // open connections from one address
    size_t workers = 64;                              // threads that serve complete requests
    size_t keep_alive_max_requests = 100;             // then the connection is closed
};

// An accepted connection, as a worker sees it while it serves one of its requests.
struct gate_connection {
    int fd = -1;
    std::string peer_ip, local_ip;
    int peer_port = 0, local_port = 0;
};

// Counters, readable from any thread.
struct gate_counters {
    std::atomic<uint64_t> accepted{0}, refused{0}, timed_out{0}, rejected{0}, served{0};
    std::atomic<uint64_t> open{0}; // connections open now (refused ones not counted)
};

// A complete request's bytes served on the connection: returns whether the connection may carry
// another request. `last`: this is the connection's last request (answer with Connection: close).
// The request is the handler's to consume (it may free it before it returns).
using gate_handler = std::function<bool(const gate_connection &c, std::string &request, bool last)>;

class http_gate {
public:
    explicit http_gate(gate_options o);
    ~http_gate();
    http_gate(const http_gate &) = delete;
    http_gate &operator=(const http_gate &) = delete;

    // Binds host:port (port 0: any free port). Returns an error message, empty on success.
    std::string bind(const std::string &host, int port);
    int port() const;
    int listening_socket() const;
    // Whether the bound address is a loopback one (127.0.0.0/8, ::1).
    bool bound_to_loopback() const;

    // Serves until stop(): `handler` runs on the worker threads. `on_stop` runs on this thread
    // once stopping begins, before the gate waits for the requests being served to end.
    void run(gate_handler handler, std::function<void()> on_stop = {});
    void stop();
    bool stopping() const;
    const gate_counters &counters() const;
    const gate_options &options() const;

private:
    struct impl;
    std::unique_ptr<impl> m;
};

// A request a worker serves: reads come from the request's buffered bytes, writes go to the
// socket, each write bounded by the write deadline (and given up when the gate stops).
// is_writable() also says false once the client has closed the connection, so a streaming
// response notices a client that has gone before it writes.
class gate_stream final : public httplib::Stream {
public:
    gate_stream(const gate_connection &c, const std::string &request, std::chrono::milliseconds write_timeout,
                const std::atomic<bool> &stopping);

    bool is_readable() const override { return m_pos < m_request.size(); }
    bool is_writable() const override;
    ssize_t read(char *ptr, size_t size) override;
    ssize_t write(const char *ptr, size_t size) override;
    using httplib::Stream::write;
    void get_remote_ip_and_port(std::string &ip, int &port) const override;
    void get_local_ip_and_port(std::string &ip, int &port) const override;
    socket_t socket() const override { return m_conn.fd; }
    // A write failed or timed out: the connection is not to be used again.
    bool failed() const { return m_failed; }

private:
    bool wait_writable(std::chrono::steady_clock::time_point deadline) const;

    const gate_connection &m_conn;
    const std::string &m_request;
    size_t m_pos = 0;
    std::chrono::milliseconds m_write_timeout;
    const std::atomic<bool> &m_stopping;
    mutable bool m_failed = false;
};

} // namespace es::server
