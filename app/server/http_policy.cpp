#include "http_policy.h"

#include <arpa/inet.h>

#include <algorithm>

namespace es::server {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    for (char &c : out)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return out;
}

bool all_digits(std::string_view s) {
    return !s.empty() && s.size() <= 5 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

} // namespace

bool is_loopback_host(std::string_view host) {
    std::string_view name = host, port;
    if (!host.empty() && host.front() == '[') {
        const size_t close = host.find(']');
        if (close == std::string_view::npos) return false;
        name = host.substr(1, close - 1);
        const std::string_view rest = host.substr(close + 1);
        if (!rest.empty() && (rest.front() != ':' || !all_digits(rest.substr(1)))) return false;
        in6_addr a6{};
        return inet_pton(AF_INET6, std::string(name).c_str(), &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
    }
    if (const size_t colon = host.rfind(':'); colon != std::string_view::npos) {
        name = host.substr(0, colon);
        port = host.substr(colon + 1);
        if (!all_digits(port)) return false;
    }
    if (lower(name) == "localhost") return true;
    in_addr a4{};
    return inet_pton(AF_INET, std::string(name).c_str(), &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

bool is_json_media_type(std::string_view content_type) {
    std::string_view type = content_type.substr(0, content_type.find(';'));
    while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.remove_prefix(1);
    while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
    return lower(type) == "application/json";
}

bool same_secret(std::string_view given, std::string_view expected) {
    // Every byte of `expected` is compared, whatever `given` holds; the lengths enter the
    // result, not the loop. volatile keeps the compiler from ending the loop early.
    volatile unsigned char diff = given.size() == expected.size() ? 0 : 1;
    for (size_t i = 0; i < expected.size(); ++i) {
        const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
        diff = diff | (g ^ static_cast<unsigned char>(expected[i]));
    }
    return diff == 0;
}

std::string normalize_origin(std::string_view origin) {
    std::string o = lower(origin);
    while (!o.empty() && o.back() == '/') o.pop_back();
    return o;
}

origin_verdict check_origin(std::string_view origin, std::string_view host, const origin_rules &rules) {
    if (origin.empty()) return origin_verdict::absent;
    const std::string o = normalize_origin(origin);
    for (const std::string &a : rules.allowed)
        if (a == "*" || a == o) return origin_verdict::allowed;
    const std::string h = lower(host);
    if (!h.empty() && (o == "http://" + h || o == "https://" + h) && (!rules.loopback_bound || is_loopback_host(h)))
        return origin_verdict::same;
    return origin_verdict::foreign;
}

} // namespace es::server
