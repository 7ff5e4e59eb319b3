// The CUDA backend's resources as RAII types, and CUDA errors as es::load_error: one cudaMalloc
// (device_buffer), pinned host memory (pinned_buffer), a block of the workspace's caching
// allocator (workspace_buffer) and that allocator's memory source. Out of memory becomes a
// message with the sizes involved; an error that leaves the context unusable says so. Shared by
// the backend and its self-test.
#pragma once

#include "engine/core/status.h"
#include "engine/cuda/device_allocator.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

namespace es {

std::string mib(size_t b);

// Errors after which the CUDA context is unusable (every later call fails).
bool is_sticky(cudaError_t e);
[[noreturn]] void throw_cuda(cudaError_t e, const std::string &what);
inline void ck(cudaError_t e, const char *what) {
    if (e != cudaSuccess) throw_cuda(e, what);
}
inline void ck(cudaError_t e, const std::string &what) {
    if (e != cudaSuccess) throw_cuda(e, what);
}

// One cudaMalloc; out of memory becomes a message with the sizes involved.
class device_buffer {
public:
    device_buffer() = default;
    ~device_buffer() { reset(); }
    device_buffer(const device_buffer &) = delete;
    device_buffer &operator=(const device_buffer &) = delete;

    void alloc(size_t bytes, const std::string &what) {
        reset();
        if (bytes == 0) return;
        const cudaError_t e = cudaMalloc(&m_p, bytes);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError(); // not sticky: clear it
            m_p = nullptr;
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            throw load_error("out of GPU memory: " + what + " needs " + mib(bytes) + " but only " + mib(free_b) +
                             " of " + mib(total_b) + " are free");
        }
        ck(e, ("cudaMalloc for " + what).c_str());
        m_bytes = bytes;
    }
    void reset() {
        if (m_p) cudaFree(m_p);
        m_p = nullptr;
        m_bytes = 0;
    }
    void swap(device_buffer &o) noexcept {
        std::swap(m_p, o.m_p);
        std::swap(m_bytes, o.m_bytes);
    }
    template <typename T = unsigned char>
    T *at(size_t offset = 0) const {
        return reinterpret_cast<T *>(static_cast<unsigned char *>(m_p) + offset);
    }
    size_t bytes() const { return m_bytes; }

private:
    void *m_p = nullptr;
    size_t m_bytes = 0;
};

class pinned_buffer {
public:
    pinned_buffer() = default;
    ~pinned_buffer() { reset(); }
    pinned_buffer(const pinned_buffer &) = delete;
    pinned_buffer &operator=(const pinned_buffer &) = delete;
    void alloc(size_t bytes, const char *what) {
        reset();
        if (bytes == 0) return;
        ck(cudaMallocHost(&m_p, bytes), what);
        m_bytes = bytes;
    }
    void reset() {
        if (m_p) cudaFreeHost(m_p);
        m_p = nullptr;
        m_bytes = 0;
    }
    template <typename T = unsigned char>
    T *at(size_t offset = 0) const {
        return reinterpret_cast<T *>(static_cast<unsigned char *>(m_p) + offset);
    }
    size_t bytes() const { return m_bytes; }

private:
    void *m_p = nullptr;
    size_t m_bytes = 0;
};

// The workspace allocator's segments: plain cudaMalloc on the current device (never managed
// memory). Out of memory is nullptr, so the allocator can give its cache back and ask again; any
// other CUDA error is thrown.
device_memory_source cuda_memory_source();

// A block of the workspace allocator with device_buffer's interface, for per-step scratch (the
// forward pass's workspace, the batch inputs, the FP8 dequantize and staging buffers). Out of
// memory is an es::load_error naming the request and the allocator's state; so is reset() of a
// block a live CUDA graph uses (it stays allocated: the graph still reads it).
class workspace_buffer {
public:
    explicit workspace_buffer(device_allocator &a) : m_alloc(a) {}
    ~workspace_buffer() {
        if (m_p) (void)m_alloc.free(m_p); // the backend's destructor destroyed the graphs first
    }
    workspace_buffer(const workspace_buffer &) = delete;
    workspace_buffer &operator=(const workspace_buffer &) = delete;

    void alloc(size_t bytes, const std::string &what) {
        reset();
        if (bytes == 0) return;
        result<void *> r = m_alloc.allocate(bytes, what);
        if (!r) throw load_error(r.message());
        m_p = *r;
        m_bytes = bytes;
    }
    void reset() {
        if (!m_p) return;
        if (const status st = m_alloc.free(m_p); !st) throw load_error(st.message());
        m_p = nullptr;
        m_bytes = 0;
    }
    template <typename T = unsigned char>
    T *at(size_t offset = 0) const {
        return reinterpret_cast<T *>(static_cast<unsigned char *>(m_p) + offset);
    }
    size_t bytes() const { return m_bytes; }

private:
    device_allocator &m_alloc;
    void *m_p = nullptr;
    size_t m_bytes = 0;
};

} // namespace es
