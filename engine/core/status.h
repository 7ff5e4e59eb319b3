// Error values returned across the engine's public API. The engine never aborts or exits:
// every failure (bad file, bad config, out of memory) becomes an es::error with a message that
// names the file, tensor or key and what was expected. Inside a translation unit code may throw
// es::load_error; public functions catch it and return result<T>.
#pragma once

#include <stdexcept>
#include <type_traits>
#include <string>
#include <utility>
#include <variant>

namespace es {

struct error {
    std::string message;
};

// Thrown inside the engine only; converted to es::error at the public API.
class load_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

template <typename T>
class result {
public:
    result(T value) : m_v(std::move(value)) {}        // NOLINT: implicit by design
    result(error err) : m_v(std::move(err)) {}        // NOLINT: implicit by design

    bool ok() const { return std::holds_alternative<T>(m_v); }
    explicit operator bool() const { return ok(); }

    T &value() & { return std::get<T>(m_v); }
    const T &value() const & { return std::get<T>(m_v); }
    T &&value() && { return std::get<T>(std::move(m_v)); }
    T *operator->() { return &std::get<T>(m_v); }
    const T *operator->() const { return &std::get<T>(m_v); }
    T &operator*() & { return value(); }
    const T &operator*() const & { return value(); }

    const std::string &message() const { return std::get<error>(m_v).message; }
    const error &err() const { return std::get<error>(m_v); }

private:
    std::variant<T, error> m_v;
};

// result<void>
struct ok_t {};
using status = result<ok_t>;
inline status ok_status() { return ok_t{}; }

template <typename T>
struct is_result : std::false_type {};
template <typename T>
struct is_result<result<T>> : std::true_type {};

// Runs f (which may throw load_error or std::bad_alloc) and converts failures into es::error.
// f may return a plain T (wrapped into result<T>) or a result<T> (passed through).
template <typename F, typename R = decltype(std::declval<F>()())>
auto catch_errors(F &&f) -> std::conditional_t<is_result<R>::value, R, result<R>> {
    try {
        return f();
    } catch (const load_error &e) {
        return error{e.what()};
    } catch (const std::bad_alloc &) {
        return error{"out of memory"};
    } catch (const std::exception &e) {
        return error{std::string("internal error: ") + e.what()};
    }
}

} // namespace es
