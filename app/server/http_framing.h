// http_framing: where one HTTP/1.x request ends in a stream of bytes, for the gate in front of
// the worker pool (http_gate). It parses only what framing needs — the request line, the header
// lines, Content-Length, Transfer-Encoding: chunked, Expect, Host — and refuses what it cannot
// frame with the status to answer, before reading further. A complete request comes out
// normalized: its request line and header lines as they came, except that Transfer-Encoding,
// Content-Length and Expect are replaced by the decoded body's Content-Length, so the worker's
// parser (cpp-httplib) reads exactly the request this one framed, and nothing after it.
#pragma once

#include <cstddef>
#include <string>

namespace es::server {

struct framing_limits {
    size_t max_head_bytes = 16 * 1024; // the request line and the headers (and a chunked body's trailers)
    size_t max_line_bytes = 8190;      // any one line of them, without its CRLF (cpp-httplib's limit is 8192 with it)
    size_t max_body_bytes = 1 << 20;   // the body as the handler receives it (chunks decoded)
};

class request_framer {
public:
    enum class state { need_more, complete, failed };

    explicit request_framer(framing_limits limits) : m_limits(limits) {}

    // Takes from the front of `in` what belongs to the current request (bytes after a complete
    // request stay in `in`: the next, pipelined request). Call again when more bytes arrive.
    state feed(std::string &in);

    bool started() const { return m_started; }       // a byte of this request has been taken
    bool head_done() const { return m_phase != phase::head; }
    // The head asked for "100 Continue" and the body has not begun: the gate answers it once.
    bool wants_continue() const { return m_expect_continue && m_phase != phase::head && m_body_taken == 0; }
    int error_status() const { return m_status; }
    const std::string &error_message() const { return m_message; }

    // The complete request, normalized; the framer then waits for the next one.
    std::string take();

private:
    enum class phase { head, length_body, chunk_size, chunk_data, chunk_data_end, trailers, done, failed };

    state fail(int status, std::string message);
    state line_too_long();
    state parse_head(std::string_view head);
    state feed_chunked(std::string &in);

    framing_limits m_limits;
    phase m_phase = phase::head;
    bool m_started = false, m_expect_continue = false, m_body_framed = false;
    size_t m_scanned = 0;       // bytes of `in` already scanned for the end of the head
    size_t m_line_start = 0;    // where the head line being read begins in `in`
    size_t m_lines = 0;         // head lines ended so far
    std::string m_out;          // the normalized head (without Content-Length and the blank line)
    std::string m_body;
    size_t m_remaining = 0;     // of the current Content-Length body or chunk
    size_t m_body_taken = 0;    // body bytes taken (raw, chunk framing included)
    size_t m_trailer_bytes = 0;
    int m_status = 0;
    std::string m_message;
};

} // namespace es::server
