// Bytes a client sends, framed by the gate's request framer (app/server/http_framing.cpp) as they
// would arrive: whole, and in pieces of 1–16 bytes. Either way the same requests come out (the
// same normalized bytes, in order, pipelined ones too) and the input fails or not alike. A
// refusal has a 4xx/5xx status and a message. A framed request is what the worker's parser
// needs: one head ending in CRLF CRLF with CRLF lines only, no Transfer-Encoding or Expect, one
// Content-Length equal to its body's size (within the limit) when it has a body, and framing it
// again gives it back unchanged.
#include "fuzz_support.h"
#include "http_framing.h"

#include <algorithm>
#include <string>
#include <vector>

namespace {

using es::server::framing_limits;
using es::server::request_framer;

const framing_limits k_limits{512, 128, 256};

struct outcome {
    std::vector<std::string> requests;
    bool failed = false;
};

outcome frame(std::string_view input, size_t piece) {
    request_framer f(k_limits);
    std::string in;
    outcome o;
    size_t pos = 0;
    for (;;) {
        const size_t n = std::min(piece, input.size() - pos);
        in.append(input.substr(pos, n));
        pos += n;
        request_framer::state st = f.feed(in);
        while (st == request_framer::state::complete) {
            o.requests.push_back(f.take());
            if (o.requests.size() == 8) return o; // enough: what follows is not compared
            st = f.feed(in);
        }
        if (st == request_framer::state::failed) {
            ES_FUZZ_CHECK(f.error_status() >= 400 && f.error_status() < 600);
            ES_FUZZ_CHECK(!f.error_message().empty());
            o.failed = true;
            return o;
        }
        if (pos >= input.size()) return o;
    }
}

std::string lower(std::string s) {
    for (char &c : s)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return s;
}

void check_request(const std::string &r) {
    const size_t end = r.find("\r\n\r\n");
    ES_FUZZ_CHECK(end != std::string::npos);
    const std::string head = r.substr(0, end + 2), body = r.substr(end + 4);
    ES_FUZZ_CHECK(body.size() <= k_limits.max_body_bytes);
    int lengths = 0;
    for (size_t pos = 0; pos < head.size();) {
        const size_t eol = head.find("\r\n", pos);
        ES_FUZZ_CHECK(eol != std::string::npos);
        const std::string line = head.substr(pos, eol - pos);
        ES_FUZZ_CHECK(line.find('\n') == std::string::npos && line.find('\r') == std::string::npos);
        const std::string l = lower(line);
        ES_FUZZ_CHECK(l.rfind("transfer-encoding:", 0) != 0 && l.rfind("expect:", 0) != 0);
        if (l.rfind("content-length:", 0) == 0) {
            ++lengths;
            ES_FUZZ_CHECK(line == "Content-Length: " + std::to_string(body.size()));
        }
        pos = eol + 2;
    }
    ES_FUZZ_CHECK(lengths <= 1 && (lengths == 1 || body.empty()));
    // Again (the normalized Content-Length line may be a byte longer than the one it replaced):
    request_framer again(framing_limits{k_limits.max_head_bytes + 64, k_limits.max_line_bytes, k_limits.max_body_bytes});
    std::string in = r;
    ES_FUZZ_CHECK(again.feed(in) == request_framer::state::complete && in.empty());
    ES_FUZZ_CHECK(again.take() == r);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const size_t piece = 1 + data[0] % 16;
    const std::string_view input = es::fuzz::as_text(data + 1, size - 1);
    const outcome whole = frame(input, input.size() + 1);
    const outcome pieces = frame(input, piece);
    ES_FUZZ_CHECK(whole.requests == pieces.requests);
    ES_FUZZ_CHECK(whole.failed == pieces.failed);
    for (const std::string &r : whole.requests) check_request(r);
    return 0;
}
