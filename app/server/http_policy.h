// http_policy: the checks that keep web pages from driving a local server, and the key check.
// A browser lets any page send "simple" cross-site requests (text/plain POSTs) and, through DNS
// rebinding, read answers from a name that now points at 127.0.0.1: the server therefore wants
// JSON on requests that change state (a JSON POST from another site needs a CORS preflight,
// which it refuses), refuses a foreign Origin unless listed, and — on a loopback address without
// a key — refuses a Host that is not a loopback name. Pure functions; api_server applies them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace es::server {

// "localhost", an IPv4 literal in 127.0.0.0/8 or "[::1]", each with an optional ":port".
bool is_loopback_host(std::string_view host);

// The media type of a Content-Type value is application/json (parameters such as charset ignored).
bool is_json_media_type(std::string_view content_type);

// given == expected, in time that depends on expected's length only (not on where they differ).
bool same_secret(std::string_view given, std::string_view expected);

// An origin as browsers send it, for comparison: scheme and host lower-case, no trailing '/'.
std::string normalize_origin(std::string_view origin);

struct origin_rules {
    std::vector<std::string> allowed; // normalized origins; "*" allows every origin
    bool loopback_bound = true;       // the server listens on a loopback address
};

enum class origin_verdict {
    absent,  // no Origin header (curl, SDKs, the app): not a browser's cross-site request
    same,    // the page's own origin: http(s)://<Host>, where Host is acceptable
    allowed, // listed in --allowed-origins: answered with CORS headers
    foreign, // refused (403)
};
// `host` is the request's Host header. On a loopback-bound server the same-origin form counts
// only with a loopback Host (a rebound name is foreign).
origin_verdict check_origin(std::string_view origin, std::string_view host, const origin_rules &rules);

} // namespace es::server
