// Invariants: only the gate thread touches the connection table, the per-address counts and the
// sockets of connections that are not being served; a connection being served belongs to its
// worker until the worker gives it back through `returned` (and the eventfd wakes the gate).
// Every connection the gate holds has a deadline: idle (waiting for a request), head, body, or
// closing (an answer written, the rest of the client's bytes drained so the answer is not lost
// to a reset), and the poll timeout is the nearest one. Sockets are non-blocking throughout.
#include "http_gate.h"

#include "openai_protocol.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace es::server {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr size_t k_read_chunk = 64 * 1024;
constexpr size_t k_read_per_round = 256 * 1024;   // per connection and poll round, for fairness
constexpr size_t k_max_drain = 16 << 20;          // a closing connection's bytes drained at most
constexpr milliseconds k_linger{2000};            // a closing connection waits this long for the client to go
constexpr milliseconds k_refused_linger{1000};
constexpr size_t k_max_refusing = 64;             // refused connections lingering at once; beyond, closed at once
constexpr milliseconds k_accept_pause{100};       // after running out of file descriptors

const char *status_text(int status) {
    switch (status) {
    case 100: return "Continue";
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

const char *error_code(int status) {
    switch (status) {
    case 408: return "request_timeout";
    case 413: return "request_too_large";
    case 414:
    case 431: return "request_head_too_large";
    case 503: return "too_many_connections";
    default: return "bad_request";
    }
}

// A complete answer the gate writes itself: an OpenAI-style error, then the connection closes.
std::string error_response(int status, const std::string &message) {
    api_error e{status, message, status >= 500 ? "server_error" : "invalid_request_error", "", error_code(status)};
    const std::string body = error_json(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + status_text(status) +
                      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\nConnection: close\r\n";
    if (status == 503) out += "Retry-After: 1\r\n";
    return out + "\r\n" + body;
}

std::string seconds_text(milliseconds d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g s", double(d.count()) / 1000.0);
    return buf;
}

// The address as text (IPv4-mapped IPv6 as plain IPv4, so one client counts once) and port.
std::pair<std::string, int> address_of(const sockaddr_storage &ss) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) {
        const auto &a = reinterpret_cast<const sockaddr_in &>(ss);
        inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
        return {buf, ntohs(a.sin_port)};
    }
    if (ss.ss_family == AF_INET6) {
        const auto &a = reinterpret_cast<const sockaddr_in6 &>(ss);
        if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) inet_ntop(AF_INET, &a.sin6_addr.s6_addr[12], buf, sizeof buf);
        else inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf);
        return {buf, ntohs(a.sin6_port)};
    }
    return {"unknown", 0};
}

bool is_loopback_address(const sockaddr_storage &ss) {
    if (ss.ss_family == AF_INET)
        return (ntohl(reinterpret_cast<const sockaddr_in &>(ss).sin_addr.s_addr) >> 24) == 127;
    if (ss.ss_family == AF_INET6) {
        const in6_addr &a = reinterpret_cast<const sockaddr_in6 &>(ss).sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
    }
    return false;
}

} // namespace

struct http_gate::impl {
    enum class phase { reading, busy, closing };
    enum class waiting { idle, head, body }; // what a reading connection's deadline is for

    struct conn {
        explicit conn(const framing_limits &l) : framer(l) {}
        gate_connection view;
        phase ph = phase::reading;
        waiting wait = waiting::idle;
        request_framer framer;
        std::string in, out;  // unread input (a pipelined request too); answers not yet sent
        clock_type::time_point deadline;
        bool counted = true;  // counts toward the caps (false: refused, lingering)
        bool sent_continue = false, shut_wr = false;
        size_t served = 0, drained = 0;
    };

    gate_options opt;
    int lfd = -1, wake_fd = -1, bound_port = 0;
    bool loopback = false;
    std::atomic<bool> stop_requested{false}, stopping{false};
    gate_counters counters;

    std::unordered_map<int, std::unique_ptr<conn>> conns;
    std::unordered_map<std::string, size_t> per_client;
    size_t n_counted = 0, n_refusing = 0, n_busy = 0;
    clock_type::time_point accept_paused_until{};
    std::vector<char> buf = std::vector<char>(k_read_chunk);

    std::mutex returned_mutex;
    std::vector<std::pair<conn *, bool>> returned;  // served connections, and whether to keep them
    std::unique_ptr<httplib::ThreadPool> pool;
    gate_handler handler;

    void wake() {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof one);
    }

    void close_conn(conn &c) {
        ::close(c.view.fd);
        if (c.counted) {
            auto it = per_client.find(c.view.peer_ip);
            if (it != per_client.end() && --it->second == 0) per_client.erase(it);
            --n_counted;
            counters.open.fetch_sub(1);
        } else {
            --n_refusing;
        }
        conns.erase(c.view.fd); // destroys c
    }

    // Sends what is pending; false when the connection failed and was closed.
    bool flush(conn &c) {
        while (!c.out.empty()) {
            const ssize_t n = ::send(c.view.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                c.out.erase(0, size_t(n));
            } else if (n < 0 && errno == EINTR) {
                continue;
            } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                return true;
            } else {
                close_conn(c);
                return false;
            }
        }
        if (c.ph == phase::closing && !c.shut_wr) {
            ::shutdown(c.view.fd, SHUT_WR); // the answer is out: the client sees it end
            c.shut_wr = true;
        }
        return true;
    }

    // Answers with an error and closes: the client's remaining bytes are drained meanwhile.
    void refuse(conn &c, int status, const std::string &message, clock_type::time_point now) {
        c.out += error_response(status, message);
        c.ph = phase::closing;
        c.in.clear();
        c.deadline = now + (c.counted ? k_linger : k_refused_linger);
        flush(c);
    }

    void set_idle(conn &c, clock_type::time_point now, milliseconds timeout) {
        c.ph = phase::reading;
        c.wait = waiting::idle;
        c.deadline = now + timeout;
        c.sent_continue = false;
    }

    void accept_all(clock_type::time_point now) {
        for (int i = 0; i < 64; ++i) {
            sockaddr_storage ss{};
            socklen_t len = sizeof ss;
            const int fd = ::accept4(lfd, reinterpret_cast<sockaddr *>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                    accept_paused_until = now + k_accept_pause; // retry once something has closed
                return;
            }
            counters.accepted.fetch_add(1);
            auto c = std::make_unique<conn>(opt.framing);
            c->view.fd = fd;
            std::tie(c->view.peer_ip, c->view.peer_port) = address_of(ss);
            sockaddr_storage local{};
            socklen_t llen = sizeof local;
            if (::getsockname(fd, reinterpret_cast<sockaddr *>(&local), &llen) == 0)
                std::tie(c->view.local_ip, c->view.local_port) = address_of(local);
            const auto pc = per_client.find(c->view.peer_ip);
            const size_t from_client = pc == per_client.end() ? 0 : pc->second;
            std::string why;
            if (n_counted >= opt.max_connections)
                why = "the server has " + std::to_string(opt.max_connections) + " connections open, its limit; retry later";
            else if (from_client >= opt.max_connections_per_client)
                why = "this address has " + std::to_string(from_client) + " connections open, the limit per client; close one first";
            else if (fd >= FD_SETSIZE) // the HTTP library refuses such descriptors
                why = "the server has no room for another connection; retry later";
            conn &ref = *c;
            conns[fd] = std::move(c);
            if (!why.empty()) {
                counters.refused.fetch_add(1);
                ref.counted = false;
                ++n_refusing;
                refuse(ref, 503, why, now);
                if (n_refusing > k_max_refusing && conns.count(fd)) close_conn(ref); // under a flood: no lingering
                continue;
            }
            ++n_counted;
            ++per_client[ref.view.peer_ip];
            counters.open.fetch_add(1);
            const int one = 1;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); // stream chunks go out at once
            set_idle(ref, now, opt.header_timeout);
        }
    }

    // Frames what has arrived; dispatches a complete request, answers a malformed one.
    void advance(conn &c, clock_type::time_point now) {
        const request_framer::state st = c.framer.feed(c.in);
        if (st == request_framer::state::failed) {
            counters.rejected.fetch_add(1);
            refuse(c, c.framer.error_status(), c.framer.error_message(), now);
            return;
        }
        if (st == request_framer::state::complete) {
            dispatch(c);
            return;
        }
        if (!c.framer.started()) return;
        if (!c.framer.head_done()) {
            if (c.wait == waiting::idle) {
                c.wait = waiting::head;
                if (c.served > 0) c.deadline = now + opt.header_timeout; // a new connection's runs from accept
            }
            return;
        }
        if (c.wait != waiting::body) {
            c.wait = waiting::body;
            c.deadline = now + opt.body_timeout;
        }
        if (c.framer.wants_continue() && !c.sent_continue) {
            c.sent_continue = true;
            c.out += "HTTP/1.1 100 Continue\r\n\r\n";
            flush(c);
        }
    }

    void dispatch(conn &c) {
        c.ph = phase::busy;
        ++n_busy;
        const bool last = c.served + 1 >= opt.keep_alive_max_requests;
        conn *cp = &c;
        pool->enqueue([this, cp, request = c.framer.take(), last]() mutable {
            bool keep = false;
            if (!stopping) {
                try {
                    keep = handler(cp->view, request, last);
                } catch (...) {
                    keep = false;
                }
            }
            {
                std::lock_guard lock(returned_mutex);
                returned.emplace_back(cp, keep && !last);
            }
            wake();
        });
    }

    void take_returned(clock_type::time_point now) {
        std::vector<std::pair<conn *, bool>> back;
        {
            std::lock_guard lock(returned_mutex);
            back.swap(returned);
        }
        for (auto [cp, keep] : back) {
            --n_busy;
            ++cp->served;
            counters.served.fetch_add(1);
            if (!keep || stopping) {
                close_conn(*cp);
                continue;
            }
            set_idle(*cp, now, opt.idle_timeout);
            if (!cp->in.empty()) advance(*cp, now); // a pipelined request
        }
    }

    void on_ready(conn &c, short revents, clock_type::time_point now) {
        if ((revents & POLLOUT) && !flush(c)) return;
        if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
        size_t got = 0;
        bool eof = false;
        while (got < k_read_per_round) {
            const ssize_t n = ::recv(c.view.fd, buf.data(), buf.size(), 0);
            if (n > 0) {
                got += size_t(n);
                if (c.ph == phase::closing) {
                    c.drained += size_t(n);
                    if (c.drained > k_max_drain) return close_conn(c);
                } else {
                    c.in.append(buf.data(), size_t(n));
                }
                continue;
            }
            if (n == 0) {
                eof = true;
            } else if (errno == EINTR) {
                continue;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                return close_conn(c); // reset
            }
            break;
        }
        if (c.ph == phase::closing) {
            if (eof) close_conn(c);
            return;
        }
        if (got > 0) {
            const int fd = c.view.fd;
            advance(c, now);
            if (!conns.count(fd)) return;
        }
        // The client closed its side: a request it finished is served (the worker notices the
        // close if it streams); anything else has no one to answer.
        if (eof && c.ph == phase::reading) close_conn(c);
    }

    void expire(clock_type::time_point now) {
        for (auto it = conns.begin(); it != conns.end();) {
            conn &c = *it->second;
            ++it; // close_conn erases c only
            if (c.ph == phase::busy || now < c.deadline) continue;
            if (c.ph == phase::closing || c.wait == waiting::idle) {
                close_conn(c); // an idle connection ends quietly
                continue;
            }
            counters.timed_out.fetch_add(1);
            refuse(c, 408,
                   c.wait == waiting::head
                       ? "the request line and headers did not arrive within " + seconds_text(opt.header_timeout)
                       : "the request body did not arrive within " + seconds_text(opt.body_timeout) + " of its headers",
                   now);
        }
    }
};

http_gate::http_gate(gate_options o) : m(std::make_unique<impl>()) {
    m->opt = o;
    m->opt.workers = std::max<size_t>(1, m->opt.workers);
    m->opt.keep_alive_max_requests = std::max<size_t>(1, m->opt.keep_alive_max_requests);
    m->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

http_gate::~http_gate() {
    if (m->pool) m->pool->shutdown();
    for (auto &[fd, c] : m->conns) ::close(fd);
    if (m->lfd >= 0) ::close(m->lfd);
    if (m->wake_fd >= 0) ::close(m->wake_fd);
}

std::string http_gate::bind(const std::string &host, int port) {
    if (m->wake_fd < 0) return std::string("cannot create an eventfd: ") + std::strerror(errno);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo *res = nullptr;
    const std::string where = host + ":" + std::to_string(port);
    if (const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
        return "cannot resolve " + host + " (" + gai_strerror(rc) + ")";
    std::string err = "cannot bind " + where + " (in use, or not an address of this machine)";
    for (addrinfo *a = res; a; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        const int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
            sockaddr_storage ss{};
            socklen_t len = sizeof ss;
            ::getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &len);
            m->lfd = fd;
            m->bound_port = address_of(ss).second;
            m->loopback = is_loopback_address(ss);
            err.clear();
            break;
        }
        if (errno == EADDRINUSE) err = "cannot bind " + where + " (the port is in use)";
        ::close(fd);
    }
    ::freeaddrinfo(res);
    return err;
}

int http_gate::port() const { return m->bound_port; }
int http_gate::listening_socket() const { return m->lfd; }
bool http_gate::bound_to_loopback() const { return m->loopback; }
bool http_gate::stopping() const { return m->stopping; }
const gate_counters &http_gate::counters() const { return m->counters; }
const gate_options &http_gate::options() const { return m->opt; }

void http_gate::stop() {
    m->stop_requested = true;
    if (m->wake_fd >= 0) m->wake();
}

void http_gate::run(gate_handler handler, std::function<void()> on_stop) {
    impl &I = *m;
    I.handler = std::move(handler);
    I.pool = std::make_unique<httplib::ThreadPool>(I.opt.workers);
    std::vector<pollfd> fds;
    std::vector<impl::conn *> polled;
    for (;;) {
        auto now = clock_type::now();
        I.take_returned(now);
        if (I.stop_requested && !I.stopping) {
            I.stopping = true;
            if (on_stop) on_stop();
            if (I.lfd >= 0) ::close(I.lfd);
            I.lfd = -1;
            for (auto it = I.conns.begin(); it != I.conns.end();) {
                impl::conn &c = *it->second;
                ++it;
                if (c.ph != impl::phase::busy) I.close_conn(c);
            }
        }
        if (I.stopping && I.n_busy == 0) break;

        fds.clear();
        polled.clear();
        fds.push_back({I.wake_fd, POLLIN, 0});
        auto next = now + std::chrono::seconds(1);
        const bool accepting = I.lfd >= 0 && now >= I.accept_paused_until;
        if (accepting) fds.push_back({I.lfd, POLLIN, 0});
        else if (I.lfd >= 0) next = std::min(next, I.accept_paused_until);
        for (auto &[fd, c] : I.conns) {
            if (c->ph == impl::phase::busy) continue;
            fds.push_back({fd, short(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
            polled.push_back(c.get());
            next = std::min(next, c->deadline);
        }
        const auto wait_ms = std::chrono::ceil<milliseconds>(next - now).count();
        const int rc = ::poll(fds.data(), fds.size(), int(std::clamp<int64_t>(wait_ms, 0, 1000)));
        if (rc < 0 && errno != EINTR) {
            std::fprintf(stderr, "serve: poll failed (%s); stopping\n", std::strerror(errno));
            I.stop_requested = true;
            continue;
        }
        now = clock_type::now();
        size_t k = 0;
        if (rc > 0 && fds[k].revents) {
            uint64_t v = 0;
            [[maybe_unused]] ssize_t n = ::read(I.wake_fd, &v, sizeof v);
        }
        ++k;
        if (accepting) {
            if (rc > 0 && (fds[k].revents & POLLIN) && !I.stop_requested) I.accept_all(now);
            ++k;
        }
        if (rc > 0)
            for (size_t i = 0; i < polled.size(); ++i)
                if (fds[k + i].revents) I.on_ready(*polled[i], fds[k + i].revents, now);
        I.expire(clock_type::now());
    }
    I.pool->shutdown(); // every job has given its connection back: n_busy is 0
    I.pool.reset();
    I.take_returned(clock_type::now());
    while (!I.conns.empty()) I.close_conn(*I.conns.begin()->second);
}

// ---- gate_stream --------------------------------------------------------------------------------

gate_stream::gate_stream(const gate_connection &c, const std::string &request, milliseconds write_timeout,
                         const std::atomic<bool> &stopping)
    : m_conn(c), m_request(request), m_write_timeout(write_timeout), m_stopping(stopping) {}

bool gate_stream::wait_writable(clock_type::time_point deadline) const {
    for (;;) {
        if (m_stopping) return false;
        const auto left = std::chrono::ceil<milliseconds>(deadline - clock_type::now()).count();
        if (left <= 0) return false;
        pollfd p{m_conn.fd, POLLOUT, 0};
        const int rc = ::poll(&p, 1, int(std::min<int64_t>(left, 100)));
        if (rc < 0 && errno != EINTR) return false;
        if (rc > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
        if (rc > 0 && (p.revents & POLLOUT)) return true;
    }
}

bool gate_stream::is_writable() const {
    if (m_failed) return false;
    if (!wait_writable(clock_type::now() + m_write_timeout)) return (m_failed = true, false);
    // A client that closed its side has gone (as proxies treat it): nothing it asked for is
    // worth generating. Bytes it pipelined (a peek > 0) mean it is still there.
    char b;
    const ssize_t n = ::recv(m_conn.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return (m_failed = true, false);
    return true;
}

ssize_t gate_stream::read(char *ptr, size_t size) {
    const size_t n = std::min(size, m_request.size() - m_pos);
    std::memcpy(ptr, m_request.data() + m_pos, n);
    m_pos += n;
    return ssize_t(n);
}

ssize_t gate_stream::write(const char *ptr, size_t size) {
    if (m_failed) return -1;
    const auto deadline = clock_type::now() + m_write_timeout;
    size_t done = 0;
    while (done < size) {
        const ssize_t n = ::send(m_conn.fd, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += size_t(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_writable(deadline)) continue;
        m_failed = true; // reset, gone, or too slow a reader
        return -1;
    }
    return ssize_t(size);
}

void gate_stream::get_remote_ip_and_port(std::string &ip, int &port) const {
    ip = m_conn.peer_ip;
    port = m_conn.peer_port;
}

void gate_stream::get_local_ip_and_port(std::string &ip, int &port) const {
    ip = m_conn.local_ip;
    port = m_conn.local_port;
}

} // namespace es::server
