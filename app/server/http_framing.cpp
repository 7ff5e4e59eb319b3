// The grammar is RFC 9112's, strictly where a lenient reading could frame a request differently
// from the worker's parser: lines end in CRLF (a bare LF is refused), no whitespace before a
// header's colon, no line folding, one Host, Content-Length only as digits and never beside
// Transfer-Encoding. Limits are checked as bytes arrive, so an oversized head or body is refused
// before the rest of it is read.
#include "http_framing.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string_view>
#include <vector>

namespace es::server {

namespace {

bool is_tchar(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= '0' && u <= '9') return true;
    if ((u | 0x20) >= 'a' && (u | 0x20) <= 'z') return true;
    return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool all_tchar(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar); }

// A field value's bytes: visible ASCII, space, tab and obs-text; no other control byte.
bool is_field_byte(char c) {
    const auto u = static_cast<unsigned char>(c);
    return u == '\t' || (u >= 0x20 && u != 0x7F);
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char &c : out)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return out;
}

std::string_view trim_ows(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// A client's value quoted in an error message: at most 40 bytes, control bytes as '?'.
std::string quoted(std::string_view v) {
    std::string out = "'";
    for (char c : v.substr(0, 40)) out += static_cast<unsigned char>(c) < 0x20 || c == 0x7F ? '?' : c;
    return out + (v.size() > 40 ? "…'" : "'");
}

// The first bare LF (an LF not after a CR) in s[from, end), or npos.
size_t bare_lf(std::string_view s, size_t from) {
    for (size_t i = s.find('\n', from); i != std::string_view::npos; i = s.find('\n', i + 1))
        if (i == 0 || s[i - 1] != '\r') return i;
    return std::string_view::npos;
}

} // namespace

request_framer::state request_framer::fail(int status, std::string message) {
    m_phase = phase::failed;
    m_status = status;
    m_message = std::move(message);
    return state::failed;
}

request_framer::state request_framer::line_too_long() {
    return m_lines == 0 ? fail(414, "the request line is longer than " + std::to_string(m_limits.max_line_bytes) + " bytes")
                        : fail(431, "a header line is longer than " + std::to_string(m_limits.max_line_bytes) + " bytes");
}

request_framer::state request_framer::feed(std::string &in) {
    if (m_phase == phase::failed) return state::failed;
    if (m_phase == phase::done) return state::complete;
    if (m_phase == phase::head) {
        // Empty lines before a request line are ignored (RFC 9112 §2.2): some clients end a
        // body with an extra CRLF.
        if (!m_started) {
            size_t skip = 0;
            while (in.size() - skip >= 2 && in[skip] == '\r' && in[skip + 1] == '\n') skip += 2;
            in.erase(0, skip);
            if (in.empty() || in == "\r") return state::need_more;
            m_started = true;
        }
        // Scan the new bytes line by line: each line is checked as soon as it ends, and the
        // line still arriving as soon as it is too long, so the verdict never depends on how
        // the bytes were split into reads.
        size_t head_end = std::string::npos;
        for (size_t i = m_scanned; i < in.size(); ++i) {
            if (in[i] != '\n') continue;
            if (i == 0 || in[i - 1] != '\r')
                return fail(400, "a line of the request head ends in a bare LF; HTTP lines end in CRLF");
            const size_t len = i - 1 - m_line_start;
            if (len > m_limits.max_line_bytes) return line_too_long();
            if (len == 0) { // the empty line: the head ends here
                head_end = i + 1;
                break;
            }
            ++m_lines;
            m_line_start = i + 1;
        }
        if (head_end == std::string::npos) {
            m_scanned = in.size();
            const size_t arriving = in.size() - m_line_start - (!in.empty() && in.back() == '\r' ? 1 : 0);
            if (arriving > m_limits.max_line_bytes) return line_too_long();
            if (in.size() > m_limits.max_head_bytes)
                return fail(431, "the request head is longer than " + std::to_string(m_limits.max_head_bytes) + " bytes");
            return state::need_more;
        }
        if (head_end > m_limits.max_head_bytes)
            return fail(431, "the request head is longer than " + std::to_string(m_limits.max_head_bytes) + " bytes");
        const std::string head = in.substr(0, head_end - 2); // every line with its CRLF
        in.erase(0, head_end);
        m_scanned = m_line_start = 0;
        if (state st = parse_head(head); st == state::failed) return st;
    }
    if (m_phase == phase::length_body) {
        const size_t n = std::min(m_remaining, in.size());
        m_body.append(in, 0, n);
        in.erase(0, n);
        m_remaining -= n;
        m_body_taken += n;
        if (m_remaining == 0) m_phase = phase::done;
    } else if (m_phase != phase::done) {
        if (state st = feed_chunked(in); st == state::failed) return st;
    }
    return m_phase == phase::done ? state::complete : state::need_more;
}

request_framer::state request_framer::parse_head(std::string_view head) {
    std::vector<std::string_view> lines;
    for (size_t pos = 0; pos < head.size();) {
        const size_t eol = head.find("\r\n", pos);
        lines.push_back(head.substr(pos, eol - pos));
        pos = eol + 2;
    }
    // The request line: METHOD SP TARGET SP HTTP/1.x, single spaces.
    const std::string_view rl = lines.front();
    if (rl.size() > m_limits.max_line_bytes)
        return fail(414, "the request line is longer than " + std::to_string(m_limits.max_line_bytes) + " bytes");
    const size_t sp1 = rl.find(' '), sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos)
        return fail(400, "the request line is not 'METHOD TARGET HTTP/1.1': " + quoted(rl));
    const std::string_view method = rl.substr(0, sp1), target = rl.substr(sp1 + 1, sp2 - sp1 - 1),
                           version = rl.substr(sp2 + 1);
    if (!all_tchar(method)) return fail(400, "the request method " + quoted(method) + " is not a token");
    if (target.empty() || !std::all_of(target.begin(), target.end(), [](char c) { return c > 0x20 && c < 0x7F; }))
        return fail(400, "the request target " + quoted(target) + " is empty or has bytes a URI cannot have");
    const bool http10 = version == "HTTP/1.0";
    if (!http10 && version != "HTTP/1.1") {
        const bool looks_http = version.size() == 8 && version.substr(0, 5) == "HTTP/" && version[6] == '.';
        return fail(looks_http ? 505 : 400, "the protocol " + quoted(version) + " is not HTTP/1.1 or HTTP/1.0");
    }

    m_out.assign(rl);
    m_out += "\r\n";
    std::vector<std::string_view> lengths;
    std::string te, expect;
    int hosts = 0;
    for (size_t i = 1; i < lines.size(); ++i) {
        const std::string_view line = lines[i];
        if (line.size() > m_limits.max_line_bytes)
            return fail(431, "a header line is longer than " + std::to_string(m_limits.max_line_bytes) + " bytes");
        if (line.front() == ' ' || line.front() == '\t')
            return fail(400, "a header line begins with whitespace (obsolete line folding is not accepted)");
        const size_t colon = line.find(':');
        const std::string_view name = line.substr(0, colon);
        if (colon == std::string_view::npos || !all_tchar(name))
            return fail(400, "the header line " + quoted(line) + " is not 'Name: value'");
        const std::string_view value = trim_ows(line.substr(colon + 1));
        if (!std::all_of(value.begin(), value.end(), is_field_byte))
            return fail(400, "the header " + std::string(name) + " has a control byte in its value");
        const std::string key = lower(name);
        if (key == "content-length") {
            lengths.push_back(value);
        } else if (key == "transfer-encoding") {
            te += (te.empty() ? "" : ",") + lower(value);
        } else if (key == "expect") {
            expect = lower(value);
        } else {
            hosts += key == "host";
            m_out.append(line).append("\r\n"); // as it came: the worker's parser reads what this one checked
        }
    }
    if (hosts > 1) return fail(400, "the request has more than one Host header");
    if (hosts == 0 && !http10) return fail(400, "an HTTP/1.1 request needs a Host header");

    bool body = false;
    if (!te.empty()) {
        if (!lengths.empty()) return fail(400, "the request has both Content-Length and Transfer-Encoding");
        if (http10) return fail(400, "Transfer-Encoding is not defined for HTTP/1.0");
        if (trim_ows(te) != "chunked")
            return fail(501, "Transfer-Encoding " + quoted(te) + " is not supported (only chunked)");
        m_phase = phase::chunk_size;
        body = true;
    } else if (!lengths.empty()) {
        const std::string_view v = lengths.front();
        for (std::string_view other : lengths)
            if (other != v) return fail(400, "the request has Content-Length headers that differ");
        if (v.empty() || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
            return fail(400, "Content-Length " + quoted(v) + " is not a number of bytes");
        const std::string_view digits = v.substr(std::min(v.find_first_not_of('0'), v.size()));
        uint64_t n = 0;
        for (char c : digits.substr(0, 20)) n = n * 10 + uint64_t(c - '0');
        if (digits.size() > 19 || n > m_limits.max_body_bytes)
            return fail(413, "the request body (Content-Length " + std::string(digits.size() > 19 ? "over 10^19" : digits) +
                                 ") exceeds " + std::to_string(m_limits.max_body_bytes) + " bytes");
        m_remaining = size_t(n);
        m_phase = n > 0 ? phase::length_body : phase::done;
        body = true;
    } else {
        m_phase = phase::done;
    }
    if (!expect.empty()) {
        if (expect != "100-continue") return fail(417, "the expectation " + quoted(expect) + " is not supported");
        m_expect_continue = m_phase != phase::done;
    }
    m_body_framed = body;
    return state::need_more;
}

request_framer::state request_framer::feed_chunked(std::string &in) {
    // `pos` walks `in`; what it passed is erased once at the end (erasing chunk by chunk would
    // cost quadratic time on a body of many tiny chunks).
    size_t pos = 0;
    const auto result = [&](state st) {
        in.erase(0, pos);
        return st;
    };
    for (;;) {
        switch (m_phase) {
        case phase::chunk_size:
        case phase::trailers: {
            const size_t eol = in.find("\r\n", pos);
            const size_t scan_end = eol == std::string::npos ? std::min(in.size(), pos + m_limits.max_line_bytes + 1) : eol;
            if (bare_lf(std::string_view(in).substr(0, scan_end), pos) != std::string::npos)
                return result(fail(400, "a line of the chunked body ends in a bare LF"));
            if (eol == std::string::npos) { // the line still arriving (a CR at its end may begin its CRLF)
                if (in.size() - pos - (in.size() > pos && in.back() == '\r' ? 1 : 0) > m_limits.max_line_bytes)
                    return result(fail(400, "a line of the chunked body is too long"));
                return result(state::need_more);
            }
            const std::string_view line(in.data() + pos, eol - pos);
            if (line.size() > m_limits.max_line_bytes) return result(fail(400, "a line of the chunked body is too long"));
            pos = eol + 2;
            m_body_taken += line.size() + 2;
            if (m_phase == phase::trailers) {
                m_trailer_bytes += line.size() + 2;
                if (m_trailer_bytes > m_limits.max_head_bytes)
                    return result(fail(431, "the chunked body's trailers are longer than " + std::to_string(m_limits.max_head_bytes) + " bytes"));
                if (!std::all_of(line.begin(), line.end(), is_field_byte))
                    return result(fail(400, "a trailer line has a control byte"));
                if (line.empty()) {
                    m_phase = phase::done;
                    return result(state::complete);
                }
                continue;
            }
            size_t digits = 0;
            uint64_t size = 0;
            while (digits < line.size() && std::isxdigit(static_cast<unsigned char>(line[digits]))) {
                const char c = line[digits];
                size = size * 16 + uint64_t(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
                if (++digits > 15) return result(fail(413, "a chunk is larger than the request body may be"));
            }
            const std::string_view ext = line.substr(digits);
            if (digits == 0 || (!ext.empty() && ext[0] != ';' && ext[0] != ' ' && ext[0] != '\t') ||
                !std::all_of(ext.begin(), ext.end(), is_field_byte))
                return result(fail(400, "the chunk-size line " + quoted(line) + " is not a hexadecimal size"));
            if (size > m_limits.max_body_bytes - m_body.size())
                return result(fail(413, "the chunked request body exceeds " + std::to_string(m_limits.max_body_bytes) + " bytes"));
            m_remaining = size_t(size);
            m_phase = size == 0 ? phase::trailers : phase::chunk_data;
            continue;
        }
        case phase::chunk_data: {
            const size_t n = std::min(m_remaining, in.size() - pos);
            m_body.append(in, pos, n);
            pos += n;
            m_remaining -= n;
            m_body_taken += n;
            if (m_remaining > 0) return result(state::need_more);
            m_phase = phase::chunk_data_end;
            continue;
        }
        case phase::chunk_data_end:
            if (in.size() - pos < 2) return result(state::need_more);
            if (in[pos] != '\r' || in[pos + 1] != '\n') return result(fail(400, "a chunk's data does not end in CRLF"));
            pos += 2;
            m_body_taken += 2;
            m_phase = phase::chunk_size;
            continue;
        default:
            return result(state::need_more);
        }
    }
}

std::string request_framer::take() {
    std::string out = std::move(m_out);
    if (m_body_framed) out += "Content-Length: " + std::to_string(m_body.size()) + "\r\n";
    out += "\r\n";
    out += m_body;
    const framing_limits limits = m_limits;
    *this = request_framer(limits);
    return out;
}

} // namespace es::server
